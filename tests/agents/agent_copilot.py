"""GitHub Copilot CLI (``@github/copilot``) in the real-agent suite: its
offline set-up, environment and command line (tests/agents/runner.py calls
these for scenarios whose agent is ``copilot_cli``).

Offline, no GitHub sign-in (BYOK): ``COPILOT_OFFLINE=true``,
``COPILOT_PROVIDER_BASE_URL`` (the model stand-in on 127.0.0.1),
``COPILOT_PROVIDER_TYPE=anthropic``, ``COPILOT_PROVIDER_API_KEY``,
``COPILOT_MODEL``. The work folder is trusted in ``~/.copilot/config.json``
(``trustedFolders``); ``hooks install`` gives it command hooks (the ``hook`` command);
``COPILOT_HOOK_ALLOW_LOCALHOST=1`` would let ``--http`` ones reach the exporter on loopback. Its first start unpacks about 235 MB into
``XDG_CACHE_HOME``: one cache folder beside the installed agents is shared
by every run.
"""

from __future__ import annotations

import json
from pathlib import Path

NAME = "copilot_cli"
BIN = "copilot"
READY = r"(?i)(type @ to mention|shift\+tab|ctrl\+c|›|❯)"
MODEL = "claude-sonnet-4.5"


def roots(home: Path) -> dict[str, Path]:
    """The exporter's roots for Copilot CLI under ``home``."""
    return {NAME: home / ".copilot" / "session-state"}


def setup(run, port: int) -> None:
    """Copilot's config under ``run.home``: the work folder trusted."""
    cdir = run.home / ".copilot"
    cdir.mkdir(parents=True, exist_ok=True)
    (cdir / "config.json").write_text(json.dumps({"trustedFolders": [str(run.work)], "banner": "never"}, indent=1))


def hook_file(home: Path) -> Path:
    return home / ".copilot" / "hooks" / "coding-agent-exporter.json"


def cache_dir(bindir: Path) -> Path:
    """The shared unpack cache (beside node_modules of the installed line)."""
    return bindir.parent.parent / "copilot-cache"


def env(run, port: int) -> dict[str, str]:
    cache = cache_dir(run.bindir)
    cache.mkdir(parents=True, exist_ok=True)
    return {"COPILOT_OFFLINE": "true", "COPILOT_PROVIDER_BASE_URL": f"http://127.0.0.1:{port}",
            "COPILOT_PROVIDER_TYPE": "anthropic", "COPILOT_PROVIDER_API_KEY": "sk-ant-fake-0000",
            "COPILOT_MODEL": MODEL, "COPILOT_HOOK_ALLOW_LOCALHOST": "1", "XDG_CACHE_HOME": str(cache)}


def argv(scn) -> list[str]:
    return [BIN, *scn.args, *(["-p", scn.prompt] if scn.mode == "print" else [])]
