"""Pi (``@earendil-works/pi-coding-agent``) in the real-agent suite: its
offline set-up, environment and command line (tests/agents/runner.py calls
these for scenarios whose agent is ``pi``).

Offline, no sign-in: ``~/.pi/agent/models.json`` declares a provider whose
``api`` is ``anthropic-messages`` and whose ``baseUrl`` is the model stand-in
on 127.0.0.1; ``settings.json`` makes it the default; ``PI_OFFLINE=1``
keeps Pi from fetching model lists or updates. Pi 1.6.0 needs Node >= 22.19
(the ``with`` package of versions.json puts it in the bin folder, first on
PATH). Pi has no hooks: the exporter reads its session files only.
"""

from __future__ import annotations

import json
from pathlib import Path

NAME = "pi"
BIN = "pi"
#: Pi's editor is ready (its footer names the model)
READY = r"(?i)(claude-fake|fake)"
MODEL = "claude-fake"


def roots(home: Path) -> dict[str, Path]:
    """The exporter's roots for Pi under ``home``."""
    return {NAME: home / ".pi" / "agent" / "sessions"}


def setup(run, port: int) -> None:
    """Pi's config under ``run.home``: the stand-in as the default model."""
    adir = run.home / ".pi" / "agent"
    adir.mkdir(parents=True, exist_ok=True)
    (adir / "models.json").write_text(json.dumps({"providers": {"fake": {
        "baseUrl": f"http://127.0.0.1:{port}", "api": "anthropic-messages", "apiKey": "sk-ant-fake-0000",
        "models": [{"id": MODEL, "name": "Fake", "contextWindow": 200000, "maxTokens": 8192}]}}}, indent=1))
    (adir / "settings.json").write_text(json.dumps({"defaultProvider": "fake", "defaultModel": MODEL,
                                                    "quietStartup": True, "collapseChangelog": True}, indent=1))


def hook_file(home: Path) -> Path | None:
    """Pi has no hooks."""
    return None


def env(run, port: int) -> dict[str, str]:
    return {"PI_OFFLINE": "1"}


def argv(scn) -> list[str]:
    return [BIN, *scn.args, *(["-p", scn.prompt] if scn.mode == "print" else [])]
