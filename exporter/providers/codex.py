"""OpenAI Codex CLI rollouts: file layout and record projection.

Format facts (from the files in ``shared/transcripts/codex``, Codex ~0.2x …
0.146):

- Path ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<local time>-<uuid>.jsonl``
  (default ``~/.codex``).
- Envelope ``{"timestamp","type","payload"}`` with ``type`` in
  ``session_meta``, ``response_item``, ``event_msg``, ``turn_context``,
  ``compacted`` (newer builds add more). Before the envelope (mid-2025) each
  line was a bare item (``{"type":"message",…}``), the first line a header
  with ``id``/``timestamp``/``instructions``, and ``{"record_type":"state"}``
  lines.
- ``event_msg`` ``task_started``/``task_complete`` (also ``turn_started``/
  ``turn_complete``) exist only from 0.100; older files need inference.
  ``turn_aborted`` carries ``reason`` (``interrupted``, ``replaced``,
  ``review_ended``). ``error`` events carry ``codex_error_info``
  (``usage_limit_exceeded``, …).
- ``session_meta.payload.source`` is ``cli``/``vscode``/``exec``/``mcp`` or an
  object with a ``subagent`` key; forks set ``forked_from_id`` and replay the
  parent's history (older timestamps) after their own ``session_meta``.
- No per-line id: identity is a digest of the line bytes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..decode import LineError, decode_line, parse_timestamp
from ..events import Event, Kind

NAME = "codex"
LABEL = "Codex"

_ROLLOUT = re.compile(r"^rollout-.*?([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl$")
_TOOL_CALLS = ("function_call", "custom_tool_call", "local_shell_call", "web_search_call",
               "tool_search_call", "image_generation_call", "mcp_tool_call")
_WORK_EVENTS = ("exec_command_end", "patch_apply_end", "mcp_tool_call_end", "web_search_end",
                "view_image_tool_call", "dynamic_tool_call_response", "image_generation_end",
                "agent_reasoning", "exec_command_begin", "patch_apply_begin", "mcp_tool_call_begin")
_EXCERPT_CHARS = 2000
#: Tool calls that wait for the user's answer (their ``*_output`` is the
#: answer): ``request_user_input`` asks the user a question (plan mode).
_WAIT_TOOLS = {"request_user_input": "question"}


def default_roots() -> list[Path]:
    """``$CODEX_HOME/sessions``, else ``~/.codex/sessions``."""
    base = os.environ.get("CODEX_HOME")
    return [Path(base) / "sessions" if base else Path.home() / ".codex" / "sessions"]


def classify_path(root: Path, path: Path) -> tuple[str | None, bool] | None:
    """``(session_id from the file name or None, False)`` for a rollout file,
    ``None`` for anything else. The first ``session_meta`` id overrides."""
    name = path.name
    if not name.endswith(".jsonl"):
        return None
    m = _ROLLOUT.match(name)
    return (m.group(1) if m else None), False


def group_hint(path: str) -> str | None:
    """Files that may share a session (for splitting a scan over workers):
    the session a rollout binds to, from its first record — its
    ``session_meta`` id, or a subagent's parent thread."""
    try:
        with open(path, "rb") as f:
            obj = decode_line(f.readline(1 << 24).rstrip(b"\n"))
    except (OSError, LineError):
        return None
    ev = FileDecoder().project(obj) if obj else None
    if ev is None or ev.kind != Kind.SESSION:
        return None
    return ev.parent_id or ev.session_id


def sniff(obj: dict) -> bool:
    """True when a decoded record looks like a Codex rollout line."""
    return "payload" in obj or "record_type" in obj or ("instructions" in obj and "id" in obj)


def _text_of(content) -> str | None:
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                return block["text"]
    if isinstance(content, str):
        return content
    return None


def _error_kind(payload: dict) -> str:
    info = payload.get("codex_error_info")
    info = info if isinstance(info, str) else (next(iter(info), "") if isinstance(info, dict) else "")
    message = payload.get("message")
    message = message.lower() if isinstance(message, str) else ""
    if "usage_limit" in info or "usage limit" in message:
        return "usage_limit"
    if "rate" in info or "rate limit" in message:
        return "rate_limit"
    if "overload" in info or "overloaded" in message:
        return "overloaded"
    if "unauthorized" in info or "auth" in info:
        return "auth"
    return "api_error"


class FileDecoder:
    """Projects the records of one rollout file into events.

    Remembers the file's first ``session_meta`` (identity, fork point): a
    forked rollout's replayed parent history (records older than the fork's
    own ``session_meta``) is metadata, not new work.
    """

    def __init__(self, sidechain_file: bool = False):
        self.sidechain_file = sidechain_file
        self._have_meta = False
        self._fork_ts: float | None = None
        self._subagent = False

    def project(self, obj: dict) -> Event | None:
        """One decoded record to an :class:`Event` (``None`` to ignore it)."""
        ts = parse_timestamp(obj.get("timestamp"))
        payload = obj.get("payload")
        if isinstance(payload, dict):
            ev = self._envelope(obj.get("type"), payload, ts)
        elif "payload" in obj:
            ev = Event(Kind.META, ts=ts)
        else:
            ev = self._bare(obj, ts)
        if ev.kind == Kind.SESSION:
            return ev
        if self._fork_ts is not None and ts is not None and ts < self._fork_ts:
            ev.kind = Kind.META  # replayed parent history in a fork
        if (self._subagent or self.sidechain_file) and ev.kind != Kind.META:
            ev.sidechain = True
            ev.kind = Kind.ACTIVITY
        return ev

    def _session_meta(self, payload: dict, ts: float | None) -> Event:
        if self._have_meta:
            return Event(Kind.META, ts=ts)  # a replayed or nested session_meta
        self._have_meta = True
        source = payload.get("source")
        sub = isinstance(source, dict) and "subagent" in source
        parent = None
        if sub:
            spec = source.get("subagent")
            if isinstance(spec, dict):
                for v in spec.values():
                    if isinstance(v, dict) and isinstance(v.get("parent_thread_id"), str):
                        parent = v["parent_thread_id"]
        self._subagent = sub
        if isinstance(payload.get("forked_from_id"), str):
            self._fork_ts = parse_timestamp(payload.get("timestamp")) or ts
        sid = payload.get("id")
        cwd = payload.get("cwd")
        return Event(Kind.SESSION, ts=ts, session_id=sid if isinstance(sid, str) else None,
                     cwd=cwd if isinstance(cwd, str) else None, subagent=sub, parent_id=parent)

    def _envelope(self, rtype, payload: dict, ts: float | None) -> Event:
        ptype = payload.get("type")
        turn_id = payload.get("turn_id")
        ev = Event(Kind.META, ts=ts, turn_id=turn_id if isinstance(turn_id, str) else None)
        if rtype == "session_meta":
            return self._session_meta(payload, ts)
        if rtype == "turn_context":
            cwd = payload.get("cwd")
            ev.cwd = cwd if isinstance(cwd, str) else None
            return ev
        if rtype == "event_msg":
            if ptype in ("task_started", "turn_started"):
                ev.kind, ev.detail = Kind.START, ptype
            elif ptype in ("task_complete", "turn_complete"):
                ev.kind, ev.detail = Kind.COMPLETE, ptype
                dur = payload.get("duration_ms")
                if isinstance(dur, (int, float)) and not isinstance(dur, bool):
                    ev.duration = dur / 1000.0
                last = payload.get("last_agent_message")
                ev.text = last[:_EXCERPT_CHARS] if isinstance(last, str) else None
            elif ptype == "turn_aborted":
                if payload.get("reason") in ("interrupted", None):
                    ev.kind, ev.detail = Kind.INTERRUPT, "turn_aborted"
            elif ptype == "error":
                ev.kind, ev.detail = Kind.ERROR, "error"
                ev.error_kind = _error_kind(payload)
            elif ptype == "user_message":
                ev.kind, ev.detail = Kind.START, "user_message"
            elif ptype == "agent_message":
                msg = payload.get("message")
                ev.kind, ev.detail = Kind.OUTPUT, "agent_message"
                ev.text = msg[:_EXCERPT_CHARS] if isinstance(msg, str) else None
            elif ptype in _WORK_EVENTS:
                ev.kind, ev.detail = Kind.WORK, ptype
            elif ptype == "stream_error":
                ev.kind, ev.detail = Kind.ACTIVITY, "stream_error_retry"
            return ev
        if rtype == "response_item":
            return self._item(payload, ev)
        return ev

    def _item(self, item: dict, ev: Event) -> Event:
        itype = item.get("type")
        if itype == "message":
            role = item.get("role")
            text = _text_of(item.get("content"))
            if role == "assistant":
                ev.kind, ev.detail = Kind.OUTPUT, "assistant_message"
                ev.text = text[:_EXCERPT_CHARS] if text else None
            elif role == "user" and text is not None and text.lstrip().startswith("<turn_aborted>"):
                ev.kind, ev.detail = Kind.INTERRUPT, "turn_aborted_marker"
        elif itype in _TOOL_CALLS or (isinstance(itype, str) and itype.endswith("_output")):
            ev.kind, ev.detail = Kind.WORK, itype
            name = item.get("name")
            if itype in _TOOL_CALLS and isinstance(name, str) and name in _WAIT_TOOLS:
                ev.kind, ev.reason, ev.tool = Kind.WAIT, _WAIT_TOOLS[name], name
        elif itype == "reasoning":
            ev.kind, ev.detail = Kind.WORK, "reasoning"
        return ev

    def _bare(self, obj: dict, ts: float | None) -> Event:
        # Pre-envelope rollouts (mid-2025): header line, then bare items.
        if "instructions" in obj and "id" in obj and not self._have_meta:
            return self._session_meta({"id": obj.get("id"), "timestamp": obj.get("timestamp")}, ts)
        if "record_type" in obj:
            return Event(Kind.META, ts=ts)
        ev = Event(Kind.META, ts=ts)
        ev = self._item(obj, ev)
        if ev.kind == Kind.META and obj.get("type") == "message" and obj.get("role") == "user":
            ev.kind, ev.detail = Kind.START, "user_message"
        return ev


# -- hooks -------------------------------------------------------------------
def project_hook(name: str, obj: dict, ts: float) -> Event | None:
    """One Codex command-hook input (``~/.codex/hooks.json``; the JSON on the
    hook's stdin) to an :class:`Event` at ``ts`` (arrival, Unix seconds), or
    ``None`` when the event says nothing about the session's state.

    ``name`` is ``hook_event_name``; ``turn_id`` names the turn (the
    rollout's ``turn_id``). Codex does not persist approval requests in its
    rollouts: ``PermissionRequest`` (``tool_name``, ``tool_input``) is the
    only evidence of a permission prompt.
    """
    turn_id = obj.get("turn_id")
    ev = Event(Kind.META, ts=ts, detail=name, turn_id=turn_id if isinstance(turn_id, str) else None)
    if name == "PermissionRequest":
        tool = obj.get("tool_name")
        ev.kind, ev.reason = Kind.WAIT, "permission"
        ev.tool = tool if isinstance(tool, str) and tool.isprintable() and len(tool) <= 64 else None
        if ev.tool in _WAIT_TOOLS:
            ev.reason = _WAIT_TOOLS[ev.tool]
    elif name in ("PostToolUse", "PostToolUseFailure", "PermissionDenied"):
        ev.kind = Kind.WORK
    elif name == "UserPromptSubmit":
        ev.kind = Kind.START
    elif name == "Stop":
        ev.kind, ev.final = Kind.COMPLETE, True
    elif name == "StopFailure":  # in Codex's generated hook schemas, not yet in its docs
        err = obj.get("error")
        err = err if isinstance(err, str) else ""
        ev.kind, ev.detail = Kind.ERROR, name
        ev.error_kind = {"rate_limit": "rate_limit", "overloaded": "overloaded", "authentication_failed": "auth",
                         "billing_error": "billing"}.get(err, "api_error")
    elif name == "SessionEnd":
        ev.kind = Kind.END
    else:
        return None
    return ev
