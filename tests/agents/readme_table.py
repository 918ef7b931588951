"""Write the "Agents and versions" table of docs/agents.md from the real-agent suite's last run.

usage: ``python3 tests/agents/readme_table.py [--check]``

Reads ``tests/agents/last_run.json`` (written by tests/test_real_agents.py:
``{line: {"at", "scenarios": {name: {"agent", "version", "what", "result"}}}}``)
and replaces what stands between ``<!-- agents-table:begin -->`` and
``<!-- agents-table:end -->`` in docs/agents.md with one row per scenario and one
column per version line (the agent's version and pass, fail or skipped). ``--check`` changes nothing and exits 1 when docs/agents.md differs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BEGIN, END = "<!-- agents-table:begin -->", "<!-- agents-table:end -->"
#: The file the table lives in (README.md links it).
TARGET = ROOT / "docs" / "agents.md"
LABELS = {"claude_code": "Claude Code", "codex": "Codex CLI", "copilot_cli": "Copilot CLI", "pi": "Pi",
          "gemini_cli": "Gemini CLI"}


def table(data: dict) -> str:
    """The Markdown table: one row per scenario, one column per version line (``version: result``),
    and a line saying when each line last ran."""
    lines = sorted(data, key=lambda n: (n != "pinned", n))
    names = sorted({n for ln in lines for n in data[ln]["scenarios"]},
                   key=lambda n: (next(data[ln]["scenarios"][n]["agent"] for ln in lines
                                       if n in data[ln]["scenarios"]), n))
    def when(ln: str) -> str:
        ats = sorted(r.get("at") or data[ln].get("at", "?") for r in data[ln]["scenarios"].values())
        return ats[-1] if ats[0] == ats[-1] else f"{ats[0]} to {ats[-1]}"

    out = ["Last run: " + ", ".join(f"`{ln}` {when(ln)}" for ln in lines) + ".", "",
           "| agent | scenario | what | " + " | ".join(f"`{ln}`" for ln in lines) + " |",
           "|---|---|---|" + "---|" * len(lines)]
    for name in names:
        first = next(data[ln]["scenarios"][name] for ln in lines if name in data[ln]["scenarios"])
        cells = []
        for ln in lines:
            r = data[ln]["scenarios"].get(name)
            cells.append(f"{r.get('version') or '?'}: {r['result']}" if r else "not run")
        out.append(f"| {LABELS.get(first['agent'], first['agent'])} | `{name}` | {first.get('what', '')} | "
                   + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def render(readme: str, data: dict) -> str:
    """``readme`` (the text of docs/agents.md) with the table between the markers replaced. Raises ValueError without the markers."""
    try:
        head, rest = readme.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
    except ValueError:
        raise ValueError(f"{TARGET.name} has no {BEGIN} … {END} markers") from None
    return f"{head}{BEGIN}\n{table(data)}{END}{tail}"


def main(argv: list[str]) -> int:
    data = json.loads((HERE / "last_run.json").read_text())
    path = TARGET
    old = path.read_text()
    new = render(old, data)
    if "--check" in argv:
        return 0 if new == old else 1
    path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
