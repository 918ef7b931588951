"""The real Claude Code and Codex CLIs drive a running exporter, offline (issue 20).

Each scenario (tests/agents/scenarios.py) runs in its own loopback-only network
namespace (``unshare -n``): the model stand-in, a loopback Apprise receiver, the
exporter with its roots on a fresh HOME and the agent with hooks pointed at the
exporter, all inside it (tests/agents/runner.py). The runner checks the exporter's
state after each step and the exact pages; this module runs the scenarios in
parallel (``CAE_AGENTS_JOBS``, default 4), keeps each one's files (transcripts,
hooks, exporter log, screens) in ``test-artifacts/agents/<line>/<scenario>``
(``CAE_AGENTS_OUT``) and writes the outcomes to test-artifacts/agents/last_run.json; with
``CAE_AGENTS_RECORD=1`` to tests/agents/last_run.json, the record from which
tests/agents/readme_table.py writes the "Agents and versions" table of docs/agents.md.

Which agents: ``CAE_AGENTS_LINE`` ``pinned`` (default: the versions in
tests/agents/versions.json) or ``latest``; from ``CAE_AGENTS_DIR`` (an
``npm install --prefix`` folder), else ``.agents/<line>`` (what
``tests/agents/install.py`` installs), else ``/opt/agents`` for ``pinned``. The
agents' ``--version`` must name the line's versions. Without root/``unshare``,
tmux or the agents the suite skips, and fails when ``CI`` is set. Backoff
scenarios and the second-line ones (``scenarios.SECOND_LINE``) run with ``CAE_SLOW=1``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
AGENTS = HERE / "agents"
ROOT = HERE.parent
sys.path.insert(0, str(AGENTS))

from install import pinned  # noqa: E402
from scenarios import SCENARIOS, SECOND_LINE  # noqa: E402

LINE = os.environ.get("CAE_AGENTS_LINE", "pinned")
SLOW = os.environ.get("CAE_SLOW") == "1"
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
JOBS = int(os.environ.get("CAE_AGENTS_JOBS", "4"))
#: The run's outcomes: the committed record the README table is made from only with
#: ``CAE_AGENTS_RECORD=1`` (a run to publish); else beside the artifacts (no tracked file changes).
RESULTS = AGENTS / "last_run.json" if os.environ.get("CAE_AGENTS_RECORD") == "1" else \
    ROOT / "test-artifacts" / "agents" / "last_run.json"
SCENARIO_TIMEOUT_S = 300


def _agents_dir() -> tuple[Path | None, dict, str | None]:
    """(bin folder, {agent: version wanted}, why not) for this line."""
    cands = [Path(os.environ["CAE_AGENTS_DIR"])] if os.environ.get("CAE_AGENTS_DIR") else \
        [ROOT / ".agents" / LINE] + ([Path("/opt/agents")] if LINE == "pinned" else [])
    for d in cands:
        bindir = d / "node_modules" / ".bin"
        if not bindir.is_dir():
            continue
        if LINE == "pinned":
            want = {a: s["version"] for a, s in pinned().items()}
        else:
            try:
                want = {a: s["version"] for a, s in json.loads((d / "versions.json").read_text())["agents"].items()}
            except (OSError, ValueError, KeyError):
                return None, {}, f"{d} has no versions.json (install with tests/agents/install.py latest)"
        return bindir, want, None
    return None, {}, (f"no agents installed for the {LINE!r} line in {', '.join(map(str, cands))} "
                      f"(python3 tests/agents/install.py {LINE})")


def _why_not() -> str | None:
    """Why the suite cannot run here, or None."""
    if not sys.platform.startswith("linux"):
        return "needs Linux network namespaces"
    if not shutil.which("unshare") or subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode:
        return "cannot create a network namespace (unshare -n needs root)"
    if not shutil.which("ip"):
        return "needs ip (iproute2) to bring lo up"
    if not shutil.which("tmux"):
        return "needs tmux for the interactive sessions"
    bindir, want, why = _agents_dir()
    if why:
        return why
    for agent, version in want.items():
        exe = bindir / pinned()[agent]["bin"]
        try:
            out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60,
                                 env={"PATH": f"{bindir}:/usr/bin:/bin", "HOME": "/nonexistent",  # Pi: node 22 there
                                      "DISABLE_AUTOUPDATER": "1"})
        except OSError as e:
            return f"{exe}: {e}"
        if version not in out.stdout:
            return f"{exe} is {out.stdout.strip()!r}, the {LINE} line wants {version}"
    return None


WHY_NOT = _why_not()
BINDIR, WANT, _ = _agents_dir()


def _registry_support() -> bool:
    return importlib.util.find_spec("coding_agent_exporter.registry") is not None


def _skip_reason(name: str, short: bool = False) -> str | None:
    """Why scenario ``name`` does not run here (``short``: for the README table), or None."""
    s = SCENARIOS[name]
    if s.slow and not SLOW:
        return "slow (CAE_SLOW=1)" if short else "backoff retries: slow (CAE_SLOW=1)"
    if name in SECOND_LINE and not SLOW:
        return "second line (CAE_SLOW=1)" if short else \
            "a second scenario of a kind the default run covers: CAE_SLOW=1 runs it"
    if s.needs == "registry" and not _registry_support():
        return "needs the registry (issue 23)" if short else \
            "needs the exporter to read Claude Code's session registry (issue 23)"
    return None


class Runs:
    """Starts every selected scenario at once, ``JOBS`` at a time, each in its own namespace."""

    def __init__(self, names: list[str], base: Path):
        self.base = base
        self.pool = ThreadPoolExecutor(max_workers=max(1, JOBS))
        self.futures = {n: self.pool.submit(self._one, n) for n in names}

    def _one(self, name: str) -> dict:
        out = self.base / name
        cmd = ["timeout", "-k", "10", str(SCENARIO_TIMEOUT_S), "unshare", "-n", sys.executable,
               str(AGENTS / "runner.py"), name, str(out), str(BINDIR)]
        t = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True)
        try:
            res = json.loads((out / "result.json").read_text())
        except (OSError, ValueError):
            res = {"scenario": name, "ok": False, "checks": [], "pages": [],
                   "error": f"runner exited {p.returncode} after {time.time() - t:.0f}s without a result:\n"
                            f"{p.stdout[-2000:]}\n{p.stderr[-4000:]}"}
        res["outdir"] = str(out)
        return res


@pytest.fixture(scope="session")
def runs(request):
    if WHY_NOT:
        _ci_or_skip(WHY_NOT)
    selected = [item.callspec.params["name"] for item in request.session.items
                if item.originalname == "test_real_agent" and hasattr(item, "callspec")]
    names = [n for n in selected if _skip_reason(n) is None]
    base = Path(os.environ.get("CAE_AGENTS_OUT") or ROOT / "test-artifacts" / "agents" / LINE)
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    r = Runs(names, base)
    yield r
    r.pool.shutdown(wait=True)
    results = {n: f.result() for n, f in r.futures.items() if f.done() and not f.cancelled()}
    results.update({n: {"skipped": _skip_reason(n, short=True)} for n in selected if _skip_reason(n)})
    _write_results(results)


def _write_results(results: dict) -> None:
    """Merge this run's outcomes into last_run.json (by line, then scenario)."""
    try:
        data = json.loads(RESULTS.read_text())
    except (OSError, ValueError):
        data = {}
    line = data.setdefault(LINE, {"scenarios": {}})
    line["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for name, res in results.items():
        s = SCENARIOS[name]
        line["scenarios"][name] = {"agent": s.agent, "version": res.get("version") or WANT.get(s.agent),
                                   "what": s.what,
                                   "result": f"skipped: {res['skipped']}" if res.get("skipped")
                                   else "pass" if res.get("ok") else "fail",
                                   "seconds": res.get("duration_s"), "at": line["at"]}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def _ci_or_skip(reason: str):
    if CI:
        pytest.fail(f"CI: {reason}")
    pytest.skip(reason)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_real_agent(name, runs):
    reason = _skip_reason(name)
    if reason:
        pytest.skip(reason)
    res = runs.futures[name].result()
    if not res.get("ok"):
        lines = [f"{name} ({SCENARIOS[name].what}) failed: {res.get('error')}"]
        lines += [f"  +{c['t']}s {c['step']}: want {c['want']} got {c['got']}" for c in res.get("checks", [])]
        lines.append(f"  pages: {[p['title'] for p in res.get('pages', [])]}")
        lines.append(f"  files: {res.get('outdir')}")
        lines += ["  exporter: " + ln for ln in res.get("exporter_log_tail", [])]
        pytest.fail("\n".join(lines))


def test_suite_can_run():
    """Says why the real-agent suite cannot run here: a skip locally, a failure in CI."""
    if WHY_NOT:
        _ci_or_skip(WHY_NOT)


def test_runner_refuses_a_namespace_with_other_interfaces(tmp_path):
    """Outside ``unshare -n`` (any interface but ``lo``) the runner starts nothing and says why."""
    sys.path.insert(0, str(AGENTS))
    from runner import interfaces

    if interfaces() == ["lo"]:
        pytest.skip("this process's namespace has only lo already")
    p = subprocess.run([sys.executable, str(AGENTS / "runner.py"), "claude_text_two_turns", str(tmp_path),
                        "/nonexistent"], capture_output=True, text=True, timeout=120)
    res = json.loads((tmp_path / "result.json").read_text())
    assert p.returncode == 0 and res["ok"] is False and res["error"].startswith("refusing")
    assert not (tmp_path / "home").exists() and not (tmp_path / "requests.jsonl").exists()
