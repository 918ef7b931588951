"""The Codex, Copilot CLI and Pi field cases played live (see tests/test_cases.py)."""

import pytest

from test_cases import live_params, play_live


@pytest.mark.parametrize("name", live_params("codex", "copilot", "pi"))
def test_case_live(name, tmp_path):
    play_live(name, tmp_path)
