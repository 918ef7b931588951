"""Claude Code's hook settings: how many hooks of the user's own (not the
exporter's) Claude Code runs for an event, from the settings files it reads.

Format facts (Claude Code settings and hooks reference, 2.1.x; 2.1.332):

- Files, all merged: the user's ``$CLAUDE_CONFIG_DIR/settings.json`` (else
  ``~/.claude/settings.json``), the project's ``<project>/.claude/settings.json``
  and ``<project>/.claude/settings.local.json``, and the managed
  ``managed-settings.json`` (Linux ``/etc/claude-code``, macOS
  ``/Library/Application Support/ClaudeCode``).
- ``hooks``: ``{event: [{"matcher"?, "hooks": [{"type": "command"|"http"|"prompt"|"agent",
  "command"|"url"|…, "timeout"?}]}]}``; ``disableAllHooks: true`` turns every hook off.
- Hooks of one event run in parallel; for ``Stop`` Claude Code writes
  ``system/stop_hook_summary`` when all of them are done (2.1.332 writes no
  ``hook_progress`` lines before it).

The config folder is the one the transcript lies under
(``<config>/projects/<project>/<sessionId>.jsonl``), so an agent run with
another ``CLAUDE_CONFIG_DIR`` is read where it writes (``$CLAUDE_CONFIG_DIR``
of the exporter when the path has another shape); the project is the hook's
``cwd``. Files are read at most 1 MiB, and again only when their size
or modification time changed (a stat per file per lookup).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import orjson

#: A hook of the exporter's own (``hooks install``: an HTTP hook to
#: ``/hooks/claude_code`` or ``… hook --agent claude_code``).
OWN_HOOK = re.compile(r"/hooks/claude_code\b|\shook --agent claude_code\b")
_MAX_BYTES = 1 << 20
_MAX_CACHED = 256
#: path → ((mtime_ns, size), parsed settings or None)
_CACHE: dict[str, tuple[tuple[int, int], dict | None]] = {}


def _managed() -> Path:
    if sys.platform == "darwin":
        return Path("/Library/Application Support/ClaudeCode/managed-settings.json")
    return Path("/etc/claude-code/managed-settings.json")


def config_dir(transcript_path: str | None) -> Path | None:
    """The Claude Code config folder of a transcript
    (``<config>/projects/<project>/<sessionId>.jsonl``), else
    ``$CLAUDE_CONFIG_DIR`` when set, else None."""
    if transcript_path:
        p = Path(transcript_path)
        if len(p.parts) >= 4 and p.parent.parent.name == "projects":
            return p.parent.parent.parent
    base = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(base) if base else None


def settings_files(transcript_path: str | None, cwd: str | None) -> list[Path]:
    """The settings files Claude Code reads for a session (user, project,
    local, managed), whether they exist or not."""
    user = config_dir(transcript_path)
    files = [user / "settings.json"] if user is not None else []
    if cwd and os.path.isabs(cwd):
        files += [Path(cwd) / ".claude" / "settings.json", Path(cwd) / ".claude" / "settings.local.json"]
    files.append(_managed())
    return files


def _read(path: Path) -> dict | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (st.st_mtime_ns, st.st_size)
    got = _CACHE.get(str(path))
    if got is not None and got[0] == key:
        return got[1]
    conf = None
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_BYTES + 1)
        if len(data) <= _MAX_BYTES:
            conf = orjson.loads(data)
            conf = conf if isinstance(conf, dict) else None
    except (OSError, ValueError):
        conf = None
    if len(_CACHE) >= _MAX_CACHED and str(path) not in _CACHE:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[str(path)] = (key, conf)
    return conf


def other_hooks(event: str, transcript_path: str | None, cwd: str | None) -> int:
    """How many hooks of ``event`` (``Stop``, …) the user's Claude Code settings
    run besides the exporter's own; 0 when ``disableAllHooks`` is set in any
    file. Unreadable or malformed files count as none."""
    n = 0
    for path in settings_files(transcript_path, cwd):
        conf = _read(path)
        if conf is None:
            continue
        if conf.get("disableAllHooks") is True:
            return 0
        hooks = conf.get("hooks")
        groups = hooks.get(event) if isinstance(hooks, dict) else None
        for group in groups if isinstance(groups, list) else ():
            inner = group.get("hooks") if isinstance(group, dict) else None
            for h in inner if isinstance(inner, list) else ():
                if not isinstance(h, dict):
                    continue
                target = h.get("command") or h.get("url") or ""
                if not (isinstance(target, str) and OWN_HOOK.search(" " + target)):
                    n += 1
    return n
