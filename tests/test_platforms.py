"""The start path without POSIX-only modules, as on Windows.

The exporter is started (``run``: config, state_dir lock, alerts, watcher,
start-up scan, HTTP server, signal handlers) in a Python where ``fcntl``,
``pwd``, ``grp``, ``termios``, ``resource``, ``tty``, ``pty`` and ``syslog``
cannot be imported; it must read a transcript, serve it, refuse a second
exporter on its state_dir, and stop cleanly. This does not make Linux a
Windows: the OS calls themselves are still POSIX ones (see docs/agents.md
"Platforms").
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from harness import ROOT, Exporter, claude_path

POSIX_ONLY = ("fcntl", "pwd", "grp", "termios", "resource", "tty", "pty", "syslog")

BLOCKER = textwrap.dedent(f"""
    import importlib.abc, sys
    BLOCKED = {POSIX_ONLY!r}
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}} (blocked: not on Windows)", name=name)
            return None
    for m in BLOCKED:
        sys.modules.pop(m, None)
    sys.meta_path.insert(0, Block())
    import fcntl  # noqa
""")


def test_blocker_blocks():
    out = subprocess.run([sys.executable, "-c", BLOCKER], capture_output=True, text=True)
    assert out.returncode == 1 and "blocked: not on Windows" in out.stderr


START = BLOCKER.replace("import fcntl  # noqa\n", "") + textwrap.dedent("""
    sys.argv[0] = "coding-agent-exporter"
    from coding_agent_exporter.cli import main
    rc = main(sys.argv[1:])
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    assert not loaded, loaded
    sys.exit(rc)
""")


def test_start_path_without_posix_only_modules(tmp_path):
    sid = "c0de0000-0000-4000-8000-00000000abcd"
    rec = {"type": "user", "sessionId": sid, "uuid": "c0de0000-0000-4000-8000-000000000001", "cwd": "/w/proj",
           "isSidechain": False, "timestamp": "2026-05-01T10:00:00Z", "version": "2.1.120",
           "message": {"role": "user", "content": "hi"}}
    path = claude_path(tmp_path, sid)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(rec) + "\n")
    exp = Exporter(tmp_path, python_args=["-c", START])
    try:
        exp.start()
        exp.wait_state(sid, "working")
        second = Exporter(tmp_path, python_args=["-c", START])
        second.start(wait_ready=False)
        assert second.proc.wait(timeout=30) == 1
        assert "is in use by another coding-agent-exporter (pid" in second.log()
    finally:
        rc = exp.stop()
    assert rc == 0, exp.log()[-3000:]
    assert "Traceback" not in exp.log()
