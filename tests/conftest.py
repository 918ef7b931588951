"""Fixtures shared by the test modules (helpers live in harness.py)."""

from __future__ import annotations

import pytest

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
