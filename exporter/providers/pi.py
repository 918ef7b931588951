"""Pi coding agent (``@mariozechner/pi-coding-agent``) sessions: file layout
and record projection.

Format facts (from the files in ``shared/transcripts/pi``, Pi 0.70 … 0.83;
see SOURCES.md there):

- Path ``~/.pi/agent/sessions/--<cwd, "/" as "-">--/<start time>_<session
  id>.jsonl``. ``PI_CODING_AGENT_SESSION_DIR`` names the sessions folder
  itself, ``PI_CODING_AGENT_DIR`` moves the agent folder (sessions under
  it); values that are not absolute are ignored.
- The first line is a ``session`` header (``version`` 3 is the format,
  ``id``, ``timestamp``, ``cwd``; a fork's header names its
  ``parentSession`` and the fork copies the parent's entries, which keep
  their own older timestamps). No CLI version is written anywhere.
- Entries: ``message`` (``message.role``: ``user``, ``assistant``,
  ``toolResult``, ``bashExecution``), ``model_change``,
  ``thinking_level_change``, ``compaction``, ``custom``, ``branch_summary``,
  ``session_info``. Each has an 8-hex ``id`` and the ``parentId`` of the entry
  it follows: a tree, where a branch (``/tree``) shares parents. Entries are
  only ever appended, so file order is the order things happened.
- A turn starts at a ``user`` message and ends at an ``assistant`` message
  with ``stopReason: "stop"``; ``toolUse`` means it goes on (a
  ``toolResult`` follows); ``error`` (with ``errorMessage``) is an error;
  ``aborted`` is the user's Esc. A ``toolResult`` with ``isError: true`` is a
  failed tool, not a failed turn. ``bashExecution`` (a user ``!`` command) and
  ``compaction`` are not turns.
- Pi writes no permission or question records and has no subagents: a Pi
  session is never ``waiting``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..decode import parse_timestamp
from ..events import COMPLETE, ERROR, INTERRUPT, META, OUTPUT, SESSION, START, WORK, Event

NAME = "pi"
LABEL = "Pi"
#: The command that resumes a session in its working directory: `pi --session <path|id>` (@mariozechner/pi-coding-agent 0.73.1 README, Options).
RESUME = "pi --session {id}"
#: The ``session`` header names the session, its cwd and (for a fork) when
#: the copied history ends; a file followed from its end still needs it.
SESSION_IN_FIRST_RECORD = True

_SESSION_FILE = re.compile(r"^.*_([0-9A-Za-z][0-9A-Za-z-]{7,127})\.jsonl$")
_EXCERPT_CHARS = 2000


def default_roots() -> list[Path]:
    """``$PI_CODING_AGENT_SESSION_DIR``, else ``$PI_CODING_AGENT_DIR/sessions``,
    else ``~/.pi/agent/sessions`` (a relative value is ignored, as Pi does)."""
    sessions = os.environ.get("PI_CODING_AGENT_SESSION_DIR", "")
    if os.path.isabs(sessions):
        return [Path(sessions)]
    agent = os.environ.get("PI_CODING_AGENT_DIR", "")
    if os.path.isabs(agent):
        return [Path(agent) / "sessions"]
    return [Path.home() / ".pi" / "agent" / "sessions"]


def classify_path(root: Path, path: Path) -> tuple[str | None, bool] | None:
    """``(session id from the file name or None, False)`` for a ``.jsonl``
    file, ``None`` for anything else. The header's ``id`` overrides."""
    name = os.path.basename(path)
    if not name.endswith(".jsonl"):
        return None
    m = _SESSION_FILE.match(name)
    return (m.group(1) if m else None), False


def group_hint(path: str) -> str:
    """Files that may share a session: one file per session."""
    return path


def related_paths(path: str) -> list[str]:
    """None: a session is one file."""
    return []


def sniff(obj: dict) -> bool:
    """True when a decoded record looks like a Pi session line."""
    rtype = obj.get("type")
    if rtype == "session":
        return "cwd" in obj and "version" in obj
    return rtype in ("message", "model_change", "thinking_level_change", "compaction", "branch_summary") \
        and "parentId" in obj and "sessionId" not in obj and "payload" not in obj


def _error_kind(message) -> str:
    """``errorMessage`` (the provider's error text) → error kind."""
    text = message.lower() if isinstance(message, str) else ""
    if "rate limit" in text or "rate_limit" in text or "429" in text or "too many requests" in text:
        return "rate_limit"
    if "usage limit" in text or "quota" in text or "insufficient" in text:
        return "usage_limit"
    if "overloaded" in text or "529" in text:
        return "overloaded"
    if "unauthorized" in text or "401" in text or "403" in text or "api key" in text:
        return "auth"
    return "api_error"


def _text_of(content) -> str | None:
    if isinstance(content, str):
        return content or None
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                return block["text"]
    return None


class FileDecoder:
    """Projects the entries of one Pi session file into events.

    Remembers the header: in a fork (``parentSession``) the entries older
    than the header are the parent's, copied: they set the state but are
    never news (``replayed``). ``sidechain_file`` and ``file_session`` are
    unused (Pi has no subagents).
    """

    def __init__(self, sidechain_file: bool = False, file_session: str | None = None):
        self.sidechain_file = sidechain_file
        self._have_header = False
        self._fork_ts: float | None = None

    def project(self, obj: dict) -> Event | None:
        """One decoded entry to an :class:`Event` (``None`` to ignore it)."""
        rtype = obj.get("type")
        ts = parse_timestamp(obj.get("timestamp"))
        ident = obj.get("id")
        ev = Event(META, ts, ident if isinstance(ident, str) else None)
        if rtype == "session":
            if self._have_header:
                return ev
            self._have_header = True
            cwd = obj.get("cwd")
            ev.kind, ev.ident = SESSION, None
            ev.session_id = ident if isinstance(ident, str) else None
            ev.cwd = cwd if isinstance(cwd, str) else None
            if obj.get("parentSession") is not None:
                self._fork_ts = ts
            return ev
        if self._fork_ts is not None and ts is not None and ts < self._fork_ts:
            ev.replayed = True  # the parent's history, copied into a fork
        msg = obj.get("message")
        if rtype != "message" or not isinstance(msg, dict):
            return ev  # model/thinking changes, compaction, custom, branch summaries: no state
        role = msg.get("role")
        ev.detail = role if isinstance(role, str) and len(role) <= 32 else None
        if role == "user":
            ev.kind = START
        elif role == "toolResult":
            ev.kind = WORK  # isError: a failed tool; the turn goes on
        elif role == "assistant":
            self._assistant(msg, ev)
        return ev  # bashExecution (the user's ! command) and other roles: not turns

    @staticmethod
    def _assistant(msg: dict, ev: Event) -> None:
        stop = msg.get("stopReason")
        ev.detail = stop if isinstance(stop, str) and len(stop) <= 32 else "assistant"
        if stop in ("stop", "length"):
            text = _text_of(msg.get("content"))
            ev.kind = COMPLETE
            ev.text = text[:_EXCERPT_CHARS] if text else None
        elif stop == "toolUse":
            ev.kind = WORK
        elif stop == "error":
            ev.kind, ev.error_kind = ERROR, _error_kind(msg.get("errorMessage"))
        elif stop == "aborted":
            ev.kind = INTERRUPT
        else:
            text = _text_of(msg.get("content"))
            ev.kind, ev.text = OUTPUT, (text[:_EXCERPT_CHARS] if text else None)

# Pi has no hooks: no ``project_hook``, so ``/hooks/pi`` and ``hook --agent pi`` do not exist.


# -- usage -------------------------------------------------------------------
#: Record ``type`` values :func:`usage` reads (the others carry no usage: not asked).
USAGE_TYPES = frozenset({"message"})


def usage(obj: dict, state: dict):
    """The usage of an assistant ``message`` entry (see :mod:`exporter.usage`;
    Pi 0.70): ``message.usage`` ``input`` (not cached), ``output``,
    ``cacheRead``, ``cacheWrite``, model ``message.model``, keyed by the
    entry ``id`` and ``timestamp`` (a fork copies its parent's entries with their ids: counted
    once). Pi records no reasoning count of its own, and its own ``cost``
    figures are not used (the same price data prices every agent)."""
    if obj.get("type") != "message":
        return None
    msg = obj.get("message")
    if type(msg) is not dict or msg.get("role") != "assistant":
        return None
    u = msg.get("usage")
    if u is None:
        return None
    if type(u) is not dict:
        return "bad"
    eid, model = obj.get("id"), msg.get("model")
    key = f"pi:{eid}:{obj.get('timestamp')}" if type(eid) is str and eid else None
    model = model if type(model) is str and model else "unknown"
    return [(key, model, (u.get("input"), u.get("output"), u.get("cacheRead") or 0, u.get("cacheWrite") or 0, 0), 0)]
