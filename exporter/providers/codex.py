"""OpenAI Codex CLI rollouts: file layout and record projection.

Format facts (from the files in ``shared/transcripts/codex``, Codex ~0.2x …
0.160):

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
  A rollout that writes ``task_started`` ends every turn with
  ``task_complete`` or ``turn_aborted``. From 0.160 a failed turn is a
  ``task_complete`` with an ``error`` object (``codex_error_info``, e.g.
  ``internal_server_error``) and no separate ``error`` event.
- ``agent_message`` / assistant ``message`` items carry ``phase``
  (``commentary`` mid-turn, ``final_answer``) in newer builds (0.144).
- ``session_meta.payload.source`` is ``cli``/``vscode``/``exec``/``mcp`` or an
  object with a ``subagent`` key; forks set ``forked_from_id`` and replay the
  parent's history after their own ``session_meta``: the parent's
  ``session_meta`` and its turns, whose envelope timestamps are the fork's
  (0.131) or the parent's own, and whose ``turn_id`` (UUIDv7) predates the
  fork's id.
- No per-line id: identity is a digest of the line bytes.
- A user's ``!cmd`` (0.152) runs as a task of its own: ``task_started``, an
  ``exec_command_end`` with ``source: user_shell``, a user message
  ``<user_shell_command>…``, ``task_complete`` with ``last_agent_message:
  null`` (openai/codex#2471, #26393). A manual ``/compact`` is a task whose
  only work is the compaction (``compacted``, ``context_compacted``,
  ``item_completed`` of a ``ContextCompaction`` item). Neither is a turn.
- ``turn_context.approvals_reviewer`` (0.171: ``user``; ``auto_review`` when
  Codex's own reviewer approves requests first).
- ``/goal`` (0.146 file): ``event_msg`` ``thread_goal_updated`` with
  ``goal.status`` (``active``, ``paused``, ``blocked``, ``usage_limited``,
  ``budget_limited``, ``complete``: strings in the 0.171 binary). While a goal
  is ``active`` Codex starts the next turn by itself, so a ``task_complete``
  is not the user's turn yet; the update that ends the goal is.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..decode import LineError, decode_line, parse_timestamp
from ..names import STOP_FAILURE_KINDS
from ..events import ACTIVITY, COMPLETE, END, ERROR, INTERRUPT, META, OUTPUT, SESSION, START, WAIT, WORK, Event
from ..usage import BAD

NAME = "codex"
LABEL = "Codex"
#: The command that resumes a session in its working directory: `codex resume [SESSION_ID]` (Codex CLI: the top-level `resume` subcommand, not `codex exec resume`).
RESUME = "codex resume {id}"
#: The first record names the session (``session_meta``: id, cwd, subagent
#: parent, fork point); a file followed from its end still needs it.
SESSION_IN_FIRST_RECORD = True

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
    """``$CODEX_HOME/sessions``, else ``~/.codex/sessions``: the home folder is
    ``Path.home()``, which is ``%USERPROFILE%`` on Windows, where the agent
    keeps the same layout (``%USERPROFILE%\\.codex\\sessions``)."""
    base = os.environ.get("CODEX_HOME")
    return [Path(base) / "sessions" if base else Path.home() / ".codex" / "sessions"]


def classify_path(root: Path, path: Path) -> tuple[str | None, bool] | None:
    """``(session_id from the file name or None, False)`` for a rollout file,
    ``None`` for anything else. The first ``session_meta`` id overrides."""
    name = os.path.basename(path)
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
    if ev is None or ev.kind != SESSION:
        return None
    return ev.parent_id or ev.session_id


def related_paths(path: str) -> list[str]:
    """Where other files of ``path``'s session lie, by the layout: none (a
    rollout is one session; a subagent's or a fork's rollout is a session
    of its own, tied to its parent by its ``session_meta``)."""
    return []


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
    """``error`` event payload or ``task_complete.error`` → error kind."""
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
    if "server_error" in info:
        return "server_error"
    return "api_error"


def _is_compaction(item) -> bool:
    """An ``item_completed`` item that is a context compaction (``type``
    ``ContextCompaction`` / ``context_compaction``)."""
    kind = item.get("type") if isinstance(item, dict) else None
    return isinstance(kind, str) and kind.replace("_", "").lower() == "contextcompaction"


def _v7_ms(uuid: str | None) -> int | None:
    """Milliseconds since the epoch in a UUIDv7 (Codex session and turn ids
    in current versions), else ``None``."""
    if not isinstance(uuid, str) or len(uuid) != 36 or uuid[14] != "7":
        return None
    try:
        return int(uuid[:8] + uuid[9:13], 16)
    except ValueError:
        return None


class FileDecoder:
    """Projects the records of one rollout file into events.

    Remembers the file's first ``session_meta`` (identity, fork point): a
    forked rollout's replayed parent history is metadata, not new work. The
    replay is recognised from the file itself: it follows a fork's own
    ``session_meta`` (and the parent's, replayed after it) and lasts until a turn
    starts whose ``turn_id`` does not predate the fork (UUIDv7 time; for
    ids without time, a record newer than the fork); records older than the
    fork are replayed too. Once the rollout has written ``task_started``,
    assistant text is never an inferred end (the marker always comes).
    ``file_session`` is unused (the ``session_meta`` names the session).
    """

    def __init__(self, sidechain_file: bool = False, file_session: str | None = None):
        self.sidechain_file = sidechain_file
        self._have_meta = False
        self._fork_ts: float | None = None
        self._fork_ms: int | None = None
        self._replaying = False
        self._subagent = False
        self._marked = False  # task_started seen: every turn ends with a marker
        self._task: str | None = None  # the open task: "open" (undecided), "turn", "shell", "compact"
        self._task_turn: str | None = None  # its turn_id
        self._review = False  # the turn's approvals go to Codex's reviewer first
        self._goal_active = False  # a /goal is active: Codex continues by itself
        self._held_turn: str | None = None  # a task_complete held for the goal (its turn id)
        #: The API responses of the records projected since ingest took them (exporter.usage).
        self.usage: list = []
        self._ustate: dict = {}  # usage(): the turn's model, the last token_count's totals

    def project(self, obj: dict) -> Event | None:
        """One decoded record to an :class:`Event` (``None`` to ignore it)."""
        ts = parse_timestamp(obj.get("timestamp"))
        payload = obj.get("payload")
        if isinstance(payload, dict):
            ev = self._envelope(obj, payload, ts)
        elif "payload" in obj:
            ev = Event(META, ts=ts)
        else:
            ev = self._bare(obj, ts)
        if ev.kind == SESSION:
            return ev
        if self._replaying and ev.detail in ("turn_context", "task_started", "turn_started") and ev.turn_id:
            self._replaying = self._predates_fork(ev.turn_id, ts)
        if self._replaying or (self._fork_ts is not None and ts is not None and ts < self._fork_ts):
            ev.kind = META  # replayed parent history in a fork
        else:
            self._in_task(ev)
        if self._subagent or self.sidechain_file:
            ev.undo = False  # a subagent's tasks never take back the parent's turn
            if ev.kind != META:
                ev.sidechain = True
                ev.kind = ACTIVITY
        ev.pending = ""  # a transcript record (what resumes the agent by itself, as the rollout says)
        if ev.kind == COMPLETE and self._goal_active and not ev.sidechain:
            ev.kind, ev.cont, ev.detail = WORK, True, "goal_active"  # Codex starts the next goal turn itself
            self._held_turn = ev.turn_id
        elif ev.kind == START:
            self._held_turn = None
        if self._goal_active:
            ev.pending = "goal_active"
        ev.review = self._review
        ev.marker_only = self._marked and self._task is not None
        return ev

    def _in_task(self, ev: Event) -> None:
        """Tasks (``task_started`` … ``task_complete``): a task is a turn
        unless its first work (an assistant message aside) is a user's shell
        command or a compaction (a manual ``/compact``; 0.171 first writes an
        assistant ``message``, then ``compacted``); then
        that record takes the task's start back (``undo``) and the rest of the
        task is ``META`` (no page, the state stays what it was)."""
        detail = ev.detail
        if ev.kind == START and detail in ("task_started", "turn_started"):
            self._marked = True
            self._task, self._task_turn = "open", ev.turn_id
            return
        task = self._task
        if task is None:
            if ev.kind == OUTPUT and self._marked:
                ev.marker_certain = True
            return
        if ev.turn_id is None:
            ev.turn_id = self._task_turn  # the turn keeps its id, whatever record follows
        ends = detail in ("task_complete", "turn_complete", "turn_aborted")
        if task == "open" and detail in ("user_shell", "compaction"):
            self._task = "shell" if detail == "user_shell" else "compact"
            ev.kind, ev.undo, ev.detail = META, True, f"{self._task}_task"
        elif task in ("shell", "compact"):
            ev.kind, ev.detail = META, f"{task}_{detail}"  # not a turn of the agent
        elif task == "open" and ev.kind not in (META, ACTIVITY, SESSION, OUTPUT):
            # (an assistant message alone does not make the task a turn yet: a manual
            # /compact writes the summary request's answer before ``compacted``, 0.171)
            self._task = "turn"
        if ev.kind == OUTPUT:
            ev.marker_certain = True
        if ends:
            self._task = None

    def _predates_fork(self, turn_id: str, ts: float | None) -> bool:
        turn_ms = _v7_ms(turn_id)
        if turn_ms is not None and self._fork_ms is not None:
            return turn_ms < self._fork_ms
        return ts is None or self._fork_ts is None or ts <= self._fork_ts

    def _session_meta(self, payload: dict, ts: float | None) -> Event:
        if self._have_meta:
            if self._fork_ms is not None or self._fork_ts is not None:
                self._replaying = True  # in a fork, the parent's session_meta: its history follows
            return Event(META, ts=ts)  # a replayed or nested session_meta
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
        sid = payload.get("id")
        if isinstance(payload.get("forked_from_id"), str):
            self._fork_ts = parse_timestamp(payload.get("timestamp")) or ts
            self._fork_ms = _v7_ms(sid) if _v7_ms(sid) is not None else (
                int(self._fork_ts * 1000) if self._fork_ts is not None else None)
            self._replaying = True
        cwd = payload.get("cwd")
        return Event(SESSION, ts=ts, session_id=sid if isinstance(sid, str) else None,
                     cwd=cwd if isinstance(cwd, str) else None, subagent=sub, parent_id=parent)

    def _envelope(self, obj: dict, payload: dict, ts: float | None) -> Event:
        rtype, ptype = obj.get("type"), payload.get("type")
        turn_id = payload.get("turn_id")
        ev = Event(META, ts, turn_id=turn_id if isinstance(turn_id, str) else None)
        if rtype == "session_meta":
            return self._session_meta(payload, ts)
        if rtype == "turn_context":
            cwd = payload.get("cwd")
            ev.cwd = cwd if isinstance(cwd, str) else None
            ev.detail = "turn_context"
            reviewer = payload.get("approvals_reviewer")
            self._review = isinstance(reviewer, str) and reviewer != "user"
            model = payload.get("model")
            if type(model) is str and model.strip():
                self._ustate["model"] = model.strip()  # the model of the token_counts that follow
            return ev
        if rtype == "compacted":
            ev.detail = "compaction"
            return ev
        if rtype == "event_msg":
            if ptype == "token_count":
                got = usage(obj, payload, self._ustate)
                if got is not None:
                    self.usage.append(got)
            elif ptype in ("task_started", "turn_started"):
                ev.kind, ev.detail = START, ptype
            elif ptype in ("task_complete", "turn_complete") and isinstance(payload.get("error"), dict):
                ev.kind, ev.detail = ERROR, ptype  # a failed turn reported as complete (0.160)
                ev.error_kind = _error_kind(payload["error"])
            elif ptype in ("task_complete", "turn_complete"):
                ev.kind, ev.detail = COMPLETE, ptype
                dur = payload.get("duration_ms")
                if isinstance(dur, (int, float)) and not isinstance(dur, bool):
                    ev.duration = dur / 1000.0
                last = payload.get("last_agent_message")
                ev.text = last[:_EXCERPT_CHARS] if isinstance(last, str) else None
            elif ptype == "turn_aborted":
                if payload.get("reason") in ("interrupted", None):
                    ev.kind, ev.detail = INTERRUPT, "turn_aborted"
            elif ptype == "error":
                ev.kind, ev.detail = ERROR, "error"
                ev.error_kind = _error_kind(payload)
            elif ptype == "user_message":
                ev.kind, ev.detail = START, "user_message"
            elif ptype == "agent_message" and payload.get("phase") == "commentary":
                ev.kind, ev.detail = WORK, "commentary"  # a mid-turn note, not a final answer
            elif ptype == "agent_message":
                msg = payload.get("message")
                ev.kind, ev.detail = OUTPUT, "agent_message"
                ev.text = msg[:_EXCERPT_CHARS] if isinstance(msg, str) else None
            elif ptype == "exec_command_end" and payload.get("source") == "user_shell":
                ev.detail = "user_shell"  # the user's own `!cmd`
            elif ptype == "context_compacted" or (ptype == "item_completed" and _is_compaction(payload.get("item"))):
                ev.detail = "compaction"

            elif ptype in _WORK_EVENTS:
                ev.kind, ev.detail = WORK, ptype
            elif ptype == "stream_error":
                ev.kind, ev.detail = ACTIVITY, "stream_error_retry"
            elif ptype == "thread_goal_updated":
                self._goal(payload.get("goal"), ev)
            return ev
        if rtype == "response_item":
            return self._item(payload, ev)
        return ev

    def _goal(self, goal, ev: Event) -> None:
        """A ``thread_goal_updated``: note whether the goal keeps Codex going;
        the update that ends it after a held ``task_complete`` is that turn's end."""
        status = goal.get("status") if isinstance(goal, dict) else None
        if not isinstance(status, str):
            return
        was, self._goal_active = self._goal_active, status == "active"
        if was and not self._goal_active and self._held_turn is not None:
            ev.kind, ev.detail, ev.turn_id = COMPLETE, "goal_" + status[:32], self._held_turn
            self._held_turn = None

    def _item(self, item: dict, ev: Event) -> Event:
        itype = item.get("type")
        if itype == "message":
            role = item.get("role")
            text = _text_of(item.get("content"))
            if role == "assistant" and item.get("phase") == "commentary":
                ev.kind, ev.detail = WORK, "commentary"
            elif role == "assistant":
                ev.kind, ev.detail = OUTPUT, "assistant_message"
                ev.text = text[:_EXCERPT_CHARS] if text else None
            elif role == "user" and text is not None and text.lstrip().startswith("<turn_aborted>"):
                ev.kind, ev.detail = INTERRUPT, "turn_aborted_marker"
            elif role == "user" and text is not None and text.lstrip().startswith("<user_shell_command>"):
                ev.detail = "user_shell"

        elif itype in _TOOL_CALLS or (isinstance(itype, str) and itype.endswith("_output")):
            ev.kind, ev.detail = WORK, itype
            name = item.get("name")
            if itype in _TOOL_CALLS and isinstance(name, str) and name in _WAIT_TOOLS:
                ev.kind, ev.reason, ev.tool = WAIT, _WAIT_TOOLS[name], name
        elif itype == "reasoning":
            ev.kind, ev.detail = WORK, "reasoning"
        return ev

    def _bare(self, obj: dict, ts: float | None) -> Event:
        # Pre-envelope rollouts (mid-2025): header line, then bare items.
        if "instructions" in obj and "id" in obj and not self._have_meta:
            return self._session_meta({"id": obj.get("id"), "timestamp": obj.get("timestamp")}, ts)
        if "record_type" in obj:
            return Event(META, ts=ts)
        ev = Event(META, ts=ts)
        ev = self._item(obj, ev)
        if ev.kind == META and obj.get("type") == "message" and obj.get("role") == "user":
            ev.kind, ev.detail = START, "user_message"
        return ev


# -- hooks -------------------------------------------------------------------
def project_hook(name: str, obj: dict, ts: float) -> Event | None:
    """One Codex command-hook input (``~/.codex/hooks.json``; the JSON on the
    hook's stdin) to an :class:`Event` at ``ts`` (arrival, Unix seconds), or
    ``None`` when the event says nothing about the session's state.

    ``name`` is ``hook_event_name``; ``turn_id`` names the turn (the
    rollout's ``turn_id``). Codex does not persist approval requests in its
    rollouts: ``PermissionRequest`` (``tool_name``, ``tool_input``) is the
    only evidence of a permission prompt; it fires before Codex routes the
    request, also when its own reviewer then approves it (openai/codex#28833;
    the reducer holds it while the rollout says ``approvals_reviewer`` is not
    ``user``). ``Interrupt`` (0.152, main thread only) is the user stopping
    the turn. A ``Stop`` hook ends nothing in a rollout that writes
    ``task_started`` (it can run mid-turn, 0.150): the reducer waits for
    ``task_complete``.
    """
    turn_id = obj.get("turn_id")
    ev = Event(META, ts=ts, detail=name, turn_id=turn_id if isinstance(turn_id, str) else None)
    if name == "PermissionRequest":
        tool = obj.get("tool_name")
        ev.kind, ev.reason = WAIT, "permission"
        ev.tool = tool if isinstance(tool, str) and tool.isprintable() and len(tool) <= 64 else None
        if ev.tool in _WAIT_TOOLS:
            ev.reason = _WAIT_TOOLS[ev.tool]
    elif name in ("PostToolUse", "PostToolUseFailure", "PermissionDenied"):
        ev.kind = WORK
    elif name == "UserPromptSubmit":
        ev.kind = START
    elif name == "Stop":
        ev.kind, ev.final = COMPLETE, True
    elif name == "Interrupt":  # 0.152, main thread only: the user stopped the turn (a prompt open or not)
        ev.kind = INTERRUPT
    elif name == "StopFailure":  # in Codex's generated hook schemas, not yet in its docs
        err = obj.get("error")
        err = err if isinstance(err, str) else ""
        ev.kind, ev.detail = ERROR, name
        ev.error_kind = STOP_FAILURE_KINDS.get(err, "api_error")
    elif name == "SessionEnd":
        ev.kind = END
    else:
        return None
    return ev


# -- usage -------------------------------------------------------------------
def _token_model(payload: dict, info: dict):
    """The model a ``token_count`` names itself (``info.model``,
    ``info.model_name``, ``payload.model``; as @ccusage/codex reads it)."""
    v = info.get("model") or info.get("model_name") or payload.get("model")
    if v is None:
        return None  # (the common case: no model on the record)
    for v in (info.get("model"), info.get("model_name"), payload.get("model")):
        if type(v) is str and v.strip():
            return v.strip()
    return None


def usage(obj: dict, p: dict, state: dict):
    """The API response of an ``event_msg`` ``token_count`` (``p``, its
    payload; see :mod:`exporter.usage`; Codex 0.5x–0.171):
    ``info.last_token_usage`` (else the growth of ``info.total_token_usage``)
    ``input_tokens`` (cached ones included: reported as input without them,
    and ``cached_input_tokens`` as cache reads), ``output_tokens``
    (``reasoning_output_tokens`` included: reported as reasoning too, priced
    once as output), or ``BAD``, or None (no usage: rate limits only). A
    ``token_count`` whose totals equal the previous one's (Codex writes one
    again with new rate limits) is no new usage. Model: the record's own,
    else the last ``turn_context``'s ``model`` (the decoder keeps it in
    ``state["model"]``), else ``unknown`` (no price: never guessed). Key: the
    record's time and totals (a fork's copy of its parent's records is
    counted once). ``state`` (per file) keeps ``model`` and ``totals``."""
    info = p.get("info")
    if info is None:
        return None  # rate limits only
    if type(info) is not dict:
        return BAD
    total, last = info.get("total_token_usage"), info.get("last_token_usage")
    if (total is not None and type(total) is not dict) or (last is not None and type(last) is not dict):
        return BAD
    key = None
    if total is not None:
        seen = (total.get("input_tokens"), total.get("cached_input_tokens"), total.get("output_tokens"),
                total.get("reasoning_output_tokens"))
        prev = state.get("totals")
        state["totals"] = seen
        if seen == prev:
            return None  # the same totals again: no new response
        key = f"codex:{obj.get('timestamp')}:{seen[0]}:{seen[1]}:{seen[2]}:{seen[3]}"
    if last is not None:
        inp, cached = last.get("input_tokens"), last.get("cached_input_tokens") or 0
        out, reasoning = last.get("output_tokens"), last.get("reasoning_output_tokens") or 0
    elif total is None:
        return None
    else:  # the growth of the totals
        if prev is None:
            prev = (0, 0, 0, 0)
        try:
            inp, cached = seen[0] - (prev[0] or 0), (seen[1] or 0) - (prev[1] or 0)
            out, reasoning = seen[2] - (prev[2] or 0), (seen[3] or 0) - (prev[3] or 0)
        except TypeError:
            return BAD
    model = _token_model(p, info)
    if model is not None:
        state["model"] = model
    model = model or state.get("model") or "unknown"
    if type(inp) in (int, float) and type(cached) in (int, float):
        cached = min(cached, inp)
        inp = inp - cached
    return (key, model, (inp, out, cached, 0, reasoning, 0))
