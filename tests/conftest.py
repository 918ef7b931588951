"""Fixtures shared by the test modules (helpers live in harness.py)."""

from __future__ import annotations

import os
import tempfile

import pytest

# The exporter's default state folder (platformdirs: $XDG_STATE_HOME/coding-agent-exporter) holds the
# hook secret and a pointer to a running exporter's state_dir: tests never touch the real one.
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="cae-test-xdg-state-")

from harness import Exporter, Receiver


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
