"""The suite never reads the HOME of the person running it.

conftest gives every test a temporary HOME (and the agents' and XDG
folders) and a guard that fails a test which, in-process or in a process it
started, reads or changes anything under the real HOME
(``tests/guard/sitecustomize.py``). These tests plant a "real" HOME that
holds sessions of every agent (an empty Pi sessions folder among them, as
another program may leave one) and run an inner pytest from it:

- the suite's tests that use the default folders pass, the guard sees
  nothing, and nothing of the planted HOME changes;
- a test that does read it (in-process, or through the exporter's ``scan``)
  fails, naming the path: the guard is not a test that cannot fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness import ROOT, TRANSCRIPTS

from conftest import AGENT_HOME_VARS, GUARD_SPEC, UNSET_VARS

TESTS = Path(__file__).resolve().parent


def plant_real_home(home: Path) -> dict[str, Path]:
    """Sessions of Claude Code, Codex, Copilot CLI and Gemini CLI where each
    agent writes them by default, an empty Pi sessions folder, and a running
    exporter's state (hook secret); returns ``{agent: file}``."""
    files = {
        "claude_code": home / ".claude" / "projects" / "-home-me-proj" / "a0000000-0000-4000-8000-0000000000aa.jsonl",
        "codex": home / ".codex" / "sessions" / "2026" / "05" / "01"
                 / "rollout-2026-05-01T10-00-00-0196aaaa-0000-7000-8000-0000000000aa.jsonl",
        "copilot_cli": home / ".copilot" / "session-state" / "c0000000-0000-4000-8000-0000000000aa" / "events.jsonl",
        "gemini_cli": home / ".gemini" / "tmp" / "proj" / "chats" / "session-2026-05-01T10-00-aaaaaaaa.json",
    }
    sources = {"claude_code": TRANSCRIPTS / "claude_code" / "v1.0.98_complete_session.jsonl",
               "codex": TRANSCRIPTS / "codex" / "v0.135_exec_complete.jsonl",
               "copilot_cli": TRANSCRIPTS / "copilot_cli" / "v1.0.77_basic_turn_complete.jsonl"}
    for agent, path in files.items():
        path.parent.mkdir(parents=True)
        if agent in sources:
            shutil.copy(sources[agent], path)
        else:
            path.write_text('{"sessionId": "aaaaaaaa", "messages": []}\n')
    (home / ".pi" / "agent" / "sessions").mkdir(parents=True)  # empty
    state = home / ".local" / "state" / "coding-agent-exporter"
    state.mkdir(parents=True)
    (state / "hook-secret").write_text("f" * 64 + "\n")
    return files


def tree(home: Path) -> dict[str, tuple]:
    """Every path under ``home`` with its size and mtime (what a write would change)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(home):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(home))] = (st.st_size, st.st_mtime_ns)
    return out


def inner_pytest(home: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """pytest in one process, started the way a user starts it from a shell
    whose HOME is ``home``: none of the suite's own variables, the agents'
    variables unset (their defaults are under HOME). Its temporary folders
    go beside ``home`` (``--basetemp``), away with this test's own: the inner
    tests that fail on purpose would leave theirs in /tmp."""
    env = {k: v for k, v in os.environ.items()
           if k not in AGENT_HOME_VARS and k not in UNSET_VARS
           and not k.startswith(("CAE_TEST_", "PYTEST_", "PYTHONPATH"))}
    env["HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                           f"--basetemp={home.parent / 'inner-basetemp'}", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def test_the_temporary_home_is_what_the_exporter_reads_by_default(tmp_path):
    """With no paths configured, `check-config` and `scan` name only folders
    under this test's HOME (none of which exists yet) and no real one."""
    home = Path(os.environ["HOME"])
    assert not any(home == Path(f) or Path(f) in home.parents for f in GUARD_SPEC["forbidden"])
    out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "check-config"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    roots = [line for line in out.stdout.splitlines() if line.split(":")[0] in
             ("claude_code", "codex", "copilot_cli", "pi", "gemini_cli", "state_dir")
             or line.startswith("claude_code session registry")]
    assert len(roots) >= 6, out.stdout
    for line in roots:
        assert str(home) in line, line
    out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "scan"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == "", out
    assert "none of the configured transcript folders exists yet" in out.stderr


def test_tests_run_from_a_home_full_of_sessions_never_see_it(tmp_path):
    """The suite's tests that use the default folders, run from a HOME that
    holds every agent's sessions: they pass, the guard saw nothing, and the
    planted HOME is as it was."""
    home = tmp_path / "real-home"
    plant_real_home(home)
    before = tree(home)
    picked = ["tests/test_isolation.py::test_the_temporary_home_is_what_the_exporter_reads_by_default",
              "tests/test_first_minutes.py::test_scan_with_no_path_scans_the_configured_roots",
              "tests/test_first_minutes.py::test_check_config_prints_state_dir_and_disabled_providers",
              "tests/test_hooksetup.py::test_copilot_cli_command_hooks_in_their_own_file_under_copilot_home",
              "tests/test_registry.py::test_config_folders"]
    out = inner_pytest(home, picked, ROOT)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert f"{len(picked)} passed" in out.stdout, out.stdout[-2000:]
    assert tree(home) == before


def test_a_test_that_reads_the_real_home_fails(tmp_path):
    """The guard at work: a test that reads the planted HOME itself, and one
    whose exporter process reads it, both fail and name the path."""
    home = tmp_path / "real-home"
    files = plant_real_home(home)
    inner = tmp_path / "inner"
    inner.mkdir()
    for name in ("conftest.py", "harness.py"):  # the suite's conftest, guard and all
        (inner / name).symlink_to(TESTS / name)
    (inner / "test_reads_home.py").write_text(f"""
import subprocess, sys


def test_reads_a_transcript_in_process():
    open({str(files['claude_code'])!r}, "rb").read()


def test_an_exporter_it_starts_reads_a_folder():
    subprocess.run([sys.executable, "-m", "coding_agent_exporter", "scan", {str(files['codex'].parent)!r}],
                   capture_output=True, timeout=60)


def test_reads_nothing_of_it():
    pass
""")
    out = inner_pytest(home, [str(inner)], inner)
    assert out.returncode != 0
    assert "3 passed, 2 errors" in out.stdout, out.stdout[-3000:]
    assert f"open {files['claude_code']}" in out.stdout
    assert f"os.scandir {files['codex'].parent}" in out.stdout
    assert "read or changed the real HOME" in out.stdout


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-c", "safe.directory=*", "-C", str(ROOT), *args], capture_output=True, text=True,
                          timeout=60)


def test_nothing_run_writes_lands_in_the_checkout(tmp_path):
    """`run` started in the checkout with the default state_dir (and a hook
    event spooled by the `hook` command): every file it writes is in the
    platform's state folder, none in the checkout, and `git ls-files` holds
    none of them (a state/ folder with a hook secret was once committed)."""
    import json
    import urllib.request

    from harness import wait_for

    if shutil.which("git") is None or _git("rev-parse", "--git-dir").returncode != 0:
        import pytest

        pytest.skip("not a git checkout")
    cfg = tmp_path / "config.yml"
    cfg.write_text(json.dumps({"sources": {p: {"paths": [str(tmp_path / p)]}
                                           for p in ("claude_code", "codex", "copilot_cli", "pi")}}))
    state = Path(os.environ["XDG_STATE_HOME"]) / "coding-agent-exporter"
    before = _git("status", "--porcelain", "--untracked-files=all", "--ignored").stdout.splitlines()
    # the hook command with no exporter: the event is spooled in the state_dir
    hook = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "hook", "--agent", "claude_code",
                           "--url", "http://127.0.0.1:9", "--config.file", str(cfg)], cwd=ROOT,
                          input='{"hook_event_name": "Stop", "session_id": "s1"}', capture_output=True, text=True,
                          timeout=60)
    assert hook.returncode == 0, hook.stderr
    log = open(tmp_path / "run.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "coding_agent_exporter", "run", "--config.file", str(cfg),
                             "--web.listen-address", "127.0.0.1:0"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = wait_for(lambda: (state / "listen-url").exists() and (state / "listen-url").read_text().strip(),
                       timeout=60, what="listen-url")
        def ready():
            try:
                return urllib.request.urlopen(url + "/-/ready", timeout=2).status == 200
            except OSError:  # not serving yet, or still reading (503)
                return False
        wait_for(ready, timeout=60, what="ready")
        wait_for(lambda: (state / "checkpoint.json").exists(), what="the first checkpoint")
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0, (tmp_path / "run.log").read_text()
        log.close()
    written = {str(p.relative_to(state)) for p in state.rglob("*")}
    assert {"hook-secret", "lock", "checkpoint.json"} <= written, written
    names = {Path(w).name for w in written} | {Path(w).parts[0] for w in written}
    tracked = _git("ls-files").stdout.splitlines()
    assert not [t for t in tracked if Path(t).name in names or Path(t).parts[0] == "state"], \
        "git ls-files holds files an exporter writes in its state_dir"
    after = _git("status", "--porcelain", "--untracked-files=all", "--ignored").stdout.splitlines()
    new = [line for line in after if line not in before]
    assert not [line for line in new if Path(line[3:].strip('"')).name in names], new
