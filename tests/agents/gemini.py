"""Gemini CLI in the real-agent suite (runner.py calls these for ``agent == "gemini_cli"``).

The CLI runs offline as in shared/live-agents/gemini-cli-0.61.0: API-key auth with a fake key, the base
URL (``GOOGLE_GEMINI_BASE_URL``) on the stand-in ``fake_gemini.py`` (127.0.0.1:8767), usage statistics,
the update check, telemetry and the IDE integration off, the work folder trusted in
``~/.gemini/trustedFolders.json`` (Gemini CLI runs hooks only in trusted folders), and the hooks
from ``coding-agent-exporter hooks install --agent gemini_cli`` in ``~/.gemini/settings.json``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = "gemini"
READY = r"Type your message"
MODEL_PORT = 8767
FAKE_KEY = "fake-gemini-key-0000000000000000"
SETTINGS = {"security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": True}},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
            "ide": {"enabled": False, "hasSeenNudge": True}}


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def setup(run, exporter_config: dict, harness) -> None:
    """Fresh HOME with Gemini CLI's settings, the stand-in model, the receiver, the exporter (its
    ``gemini_cli`` root on ``~/.gemini/tmp``) and, unless the scenario says otherwise, the hooks."""
    gdir = run.home / ".gemini"
    (gdir / "tmp").mkdir(parents=True)
    (run.home / ".tmp").mkdir()
    (gdir / "settings.json").write_text(json.dumps(_merge(SETTINGS, run.scn.settings.get("user", {})), indent=2)
                                        + "\n")
    (gdir / "trustedFolders.json").write_text(json.dumps({str(run.work): "TRUST_FOLDER"}) + "\n")
    cfg = dict(exporter_config)
    cfg["sources"] = {**cfg["sources"], "gemini_cli": {"paths": [str(gdir / "tmp")]}}
    run.start_stand_ins(HERE / "fake_gemini.py", MODEL_PORT, harness.merge(cfg, run.scn.config))
    if run.scn.hooks:
        r = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "hooks", "install", "--agent", "gemini_cli",
                            "--url", f"http://127.0.0.1:{run.exporter.port}", "--config.file",
                            str(run.exporter.config_path), "--file", str(gdir / "settings.json")],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"hooks install failed: {r.stderr}")


def env(run) -> dict:
    return {"HOME": str(run.home), "PATH": f"{run.bindir}:/usr/local/bin:/usr/bin:/bin", "TERM": "xterm-256color",
            "COLORTERM": "truecolor", "LANG": "C.UTF-8", "USER": "agent", "SHELL": "/bin/bash",
            "TMPDIR": str(run.home / ".tmp"), "GEMINI_API_KEY": FAKE_KEY,
            "GOOGLE_GEMINI_BASE_URL": f"http://127.0.0.1:{MODEL_PORT}",
            **{k: str(v) for k, v in run.scn.env.items()}}


def argv(run, extra: list[str] | None = None) -> list[str]:
    a = run.scn
    return [BIN, *a.args, *(extra or []), *(["-p", a.prompt] if a.mode == "print" else [])]


def resume(run, *extra: str) -> None:
    """Start the CLI again in the same tmux session (after ``/quit``), e.g. ``--resume latest``."""
    run.tmuxc("kill-session", "-t", "s")
    envargs = ["env", "-i", *(f"{k}={v}" for k, v in env(run).items())]
    for _ in range(5):  # (the last session's tmux server may still be exiting: its socket refuses the new one)
        time.sleep(0.5)
        run.tmuxc("-f", "/dev/null", "new-session", "-d", "-s", "s", "-x", "160", "-y", "50", "-c", str(run.work),
                  *envargs, *argv(run, list(extra)))
        if run.tmuxc("list-panes", "-t", "s", "-F", "#{pane_pid}").strip():
            break
    run.tmuxc("set-option", "-t", "s", "remain-on-exit", "on")


def next_minute(run) -> None:
    """Wait until a new UTC minute has begun (a resume then starts in a later minute than the session
    file's name: Gemini CLI writes a stub file with the same sessionId)."""
    now = time.time()
    time.sleep(60 - now % 60 + 1)


def _submitted(run, text: str) -> int:
    """How often ``text`` was submitted: ``~/.gemini/tmp/<project>/logs.json`` lists every input the CLI
    took (slash commands too), before the prompt reaches the session file."""
    n = 0
    for p in (run.home / ".gemini" / "tmp").glob("*/logs.json"):
        try:
            n += sum(1 for e in json.loads(p.read_text()) if isinstance(e, dict) and e.get("message") == text)
        except (OSError, ValueError):
            pass
    return n


def type_(run, text: str) -> None:
    """Type ``text`` and Enter; Enter again while the CLI has not taken it (it drops an Enter while it
    is still loading a session or settling after Esc). Taken means listed in its ``logs.json``: the
    screen cannot say (a dialog may replace the input box at once, and a second Enter would answer
    it)."""
    before = _submitted(run, text)
    run.tmuxc("send-keys", "-t", "s", "-l", text)
    time.sleep(0.4)
    for _ in range(1 if text.startswith("/") else 4):  # (/quit: the CLI is gone after it)
        run.tmuxc("send-keys", "-t", "s", "Enter")
        deadline = time.time() + 5
        while time.time() < deadline:
            if _submitted(run, text) > before:
                return
            time.sleep(0.2)
