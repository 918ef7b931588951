"""Fixtures shared by the test modules (helpers live in harness.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# -- a home of its own: no test reads or writes the real HOME --------------------------------------
# Every folder an agent, the exporter or a library finds through the environment points into a
# temporary home: the agents' transcript folders (Claude Code, Codex, Copilot CLI, Pi, Gemini CLI),
# the exporter's default state_dir (platformdirs: $XDG_STATE_HOME), the files `hooks install` edits.
# Set here, at import, for collection and module fixtures; each test then gets a fresh one
# (_own_home). Subprocesses inherit it, and the guard (tests/guard/sitecustomize.py) records every
# path under the real HOME that any of them reads or changes: the test fails.
AGENT_HOME_VARS = {  # variable -> where it points in the temporary home (each agent's own default)
    "CLAUDE_CONFIG_DIR": ".claude", "CODEX_HOME": ".codex", "COPILOT_HOME": ".copilot",
    "PI_CODING_AGENT_DIR": ".pi/agent", "GEMINI_CLI_HOME": ".",
    "XDG_CONFIG_HOME": ".config", "XDG_DATA_HOME": ".local/share", "XDG_STATE_HOME": ".local/state",
    "XDG_CACHE_HOME": ".cache", "XDG_RUNTIME_DIR": ".run",
}
#: Variables that would point an agent or the exporter elsewhere: unset.
UNSET_VARS = ("PI_CODING_AGENT_SESSION_DIR", "CODING_AGENT_EXPORTER_APPRISE_URLS")
GUARD_DIR = Path(__file__).resolve().parent / "guard"
_spec = importlib.util.spec_from_file_location("cae_test_guard", GUARD_DIR / "sitecustomize.py")
guard = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(guard)


def home_env(home: Path) -> dict[str, str]:
    """The environment of a test whose home is ``home`` (the folders made, mode 0700)."""
    env = {"HOME": str(home)}
    for var, rel in AGENT_HOME_VARS.items():
        env[var] = str(home / rel) if rel != "." else str(home)
    (home / ".run").mkdir(mode=0o700, exist_ok=True)  # XDG_RUNTIME_DIR must exist and be private
    return env


def _guard_spec() -> dict:
    """What the guard forbids: the real HOME and the folders the environment
    named before it was replaced. Computed by the first process of a run (an
    xdist worker or a test's inner pytest inherits it in CAE_TEST_GUARD)."""
    if os.environ.get("CAE_TEST_GUARD"):
        return json.loads(os.environ["CAE_TEST_GUARD"])
    home = os.path.expanduser("~")
    forbidden = [home] if os.path.isabs(home) and os.path.dirname(home) != home else []
    forbidden += [os.environ[v] for v in (*AGENT_HOME_VARS, "PI_CODING_AGENT_SESSION_DIR")
                  if os.path.isabs(os.environ.get(v, "")) and os.path.dirname(os.environ[v]) != os.environ[v]]
    allowed = [str(Path(__file__).resolve().parent.parent), tempfile.gettempdir()]
    return {"forbidden": forbidden, "allowed": allowed}


GUARD_SPEC = _guard_spec()
os.environ["CAE_TEST_GUARD"] = json.dumps(GUARD_SPEC)
_SESSION_HOME = Path(tempfile.mkdtemp(prefix="cae-test-home-"))
os.environ.update(home_env(_SESSION_HOME))
for _var in UNSET_VARS:
    os.environ.pop(_var, None)
_GUARD_LOGS = Path(tempfile.mkdtemp(prefix="cae-test-guard-"))
#: Where processes started outside any test (module fixtures) write what the guard saw.
SESSION_GUARD_LOG = _GUARD_LOGS / "session.log"
os.environ["CAE_TEST_GUARD_LOG"] = str(SESSION_GUARD_LOG)
os.environ["PYTHONPATH"] = os.pathsep.join([str(GUARD_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])
guard.install(GUARD_SPEC)
# A used machine runs the suite many times: each process takes its session folders away at its end
# (pytest's own tmp_path folders are kept only for failed tests, pyproject's tmp_path_retention_policy).
def pytest_unconfigure(config):
    """Every pytest process (the controller, each xdist worker, an inner run) takes its session
    folders away; xdist's workers leave without running atexit."""
    for made in (_SESSION_HOME, _GUARD_LOGS):
        shutil.rmtree(made, ignore_errors=True)

from harness import Exporter, Receiver


@pytest.fixture(autouse=True)
def _own_home(tmp_path_factory, monkeypatch, request):
    """Each test runs with a fresh temporary HOME (and the agents' and XDG
    folders in it, :func:`home_env`); it fails when it, or a process it
    started, read or changed anything under the real HOME (the guard's log)."""
    home = tmp_path_factory.mktemp("home")
    for var, value in home_env(home).items():
        monkeypatch.setenv(var, value)
    for var in UNSET_VARS:
        monkeypatch.delenv(var, raising=False)
    log = _GUARD_LOGS / f"{os.getpid()}-{home.name}.log"
    monkeypatch.setenv("CAE_TEST_GUARD_LOG", str(log))
    before = SESSION_GUARD_LOG.stat().st_size if SESSION_GUARD_LOG.exists() else 0
    yield home
    seen = log.read_text().splitlines() if log.exists() else []
    if SESSION_GUARD_LOG.exists():
        with open(SESSION_GUARD_LOG) as f:
            f.seek(before)
            seen += f.read().splitlines()
    if seen:
        pytest.fail(f"{request.node.nodeid} read or changed the real HOME ({len(seen)} time(s); pid event path):\n  "
                    + "\n  ".join(seen[:20]), pytrace=False)


@pytest.fixture
def exporter(tmp_path):
    """A running exporter on its own tmp roots, port and state_dir, paging
    to a loopback Apprise receiver (``exporter.receiver``); stopped after."""
    receiver = Receiver()
    exp = Exporter(tmp_path, receiver=receiver).start()
    exp.receiver = receiver
    yield exp
    exp.stop()
    receiver.close()


# -- progress: with -q the suite prints only dots for minutes; say which file it is in, and since when ---
_progress = {"module": None, "started": None, "config": None, "seen": set()}


def pytest_sessionstart(session):
    import time

    _progress["started"] = time.monotonic()
    _progress["config"] = session.config


def pytest_runtest_logstart(nodeid, location):
    import time

    module = nodeid.split("::")[0]
    config = _progress["config"]
    reporter = config.pluginmanager.get_plugin("terminalreporter") if config is not None else None
    if module in _progress["seen"]:  # under xdist the workers' modules interleave: each is named once
        return
    if module != _progress["module"] and reporter is not None and reporter.verbosity < 0:  # -q: only dots else
        if _progress["module"] is not None:
            reporter.write("\n")  # after the previous file's dots
        _progress["module"] = module
        _progress["seen"].add(module)
        reporter.write_line(f"[{time.monotonic() - _progress['started']:6.0f} s] {module}")
