"""Write the README's "Agents and versions" table from the real-agent suite's last run.

usage: ``python3 tests/agents/readme_table.py [--check]``

Reads ``tests/agents/last_run.json`` (written by tests/test_real_agents.py:
``{line: {"at", "scenarios": {name: {"agent", "version", "what", "result"}}}}``)
and replaces what stands between ``<!-- agents-table:begin -->`` and
``<!-- agents-table:end -->`` in README.md with one row per line, agent version
and scenario. ``--check`` changes nothing and exits 1 when the README differs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BEGIN, END = "<!-- agents-table:begin -->", "<!-- agents-table:end -->"
LABELS = {"claude_code": "Claude Code", "codex": "Codex CLI"}


def table(data: dict) -> str:
    """The Markdown table (with a line saying when each version line last ran)."""
    out = []
    for line in sorted(data, key=lambda n: (n != "pinned", n)):
        out.append(f"`{line}` line, last run {data[line].get('at', '?')}:")
        out.append("")
        out.append("| agent | version | scenario | what | result |")
        out.append("|---|---|---|---|---|")
        rows = sorted(data[line]["scenarios"].items(), key=lambda kv: (kv[1]["agent"], kv[0]))
        for name, r in rows:
            out.append(f"| {LABELS.get(r['agent'], r['agent'])} | {r.get('version') or '?'} | `{name}` | "
                       f"{r.get('what', '')} | {r['result']} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def render(readme: str, data: dict) -> str:
    """``readme`` with the table between the markers replaced. Raises ValueError without the markers."""
    try:
        head, rest = readme.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
    except ValueError:
        raise ValueError(f"README.md has no {BEGIN} … {END} markers") from None
    return f"{head}{BEGIN}\n{table(data)}{END}{tail}"


def main(argv: list[str]) -> int:
    data = json.loads((HERE / "last_run.json").read_text())
    path = ROOT / "README.md"
    old = path.read_text()
    new = render(old, data)
    if "--check" in argv:
        return 0 if new == old else 1
    path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
