"""GitHub Copilot CLI session events: file layout and record projection.

Format facts (from the files in ``shared/transcripts/copilot_cli``, Copilot
CLI 1.0.77 and 1.0.78, and the real 1.0.102 runs of ``tests/agents``; see
SOURCES.md there):

- Path ``$COPILOT_HOME/session-state/<sessionId>/events.jsonl`` (default
  ``~/.copilot``); an older flat layout ``session-state/<sessionId>.jsonl``.
  The folder appears at launch (``workspace.yaml`` only), ``events.jsonl``
  with the first prompt.
- Envelope ``{"type","data","id","timestamp","parentId"}``; ``id`` a UUID;
  lines of a subagent carry a top-level ``agentId`` (the ``task`` call's
  ``toolCallId``), and the subagent's own lifecycle is ``subagent.*``.
  ``session.start.data`` has ``sessionId``, ``copilotVersion`` and
  ``context.cwd``.
- A prompt is ``user.message`` (``interactionId``), then
  ``assistant.turn_start {turnId, interactionId}``. Copilot closes an
  ``assistant.turn_end`` after *every* tool round and opens the next
  ``turn_start`` a few ms later with no user message; ``turnId`` counts
  "0", "1", … within one interaction and restarts at "0" for the next
  prompt and after ``session.resume``. So the turn key here is the
  ``interactionId`` and the end of the user's turn is a ``turn_end`` whose
  turn's last ``assistant.message`` had ``toolRequests: []``.
- Autopilot (``user.message.agentMode: autopilot``): Copilot answers its own
  turn ends with ``user.message`` ``isAutopilotContinuation: true`` about a
  second later, and ends the run with ``session.task_complete``.
- ``permission.requested`` (``permissionRequest.toolCallId``, written after
  that call's ``tool.execution_start``) waits for the user until
  ``permission.completed``. ``ask_user`` questions are not written; only the
  open ``tool.execution_start`` of ``ask_user`` shows one.
- ``session.error`` (``errorType``, ``statusCode``) is written a few ms after
  the failed turn's ``turn_end``. Copilot retries a failed request by
  itself (1.0.102: 5 times on a 529, about 15 s) and writes nothing for a
  retry: the ``session.error`` is the give-up. ``abort`` (``reason``:
  ``user_initiated`` in 1.0.77, ``user_abort`` in 1.0.102; any reason
  halts) ends a turn; no ``turn_end`` follows it.
- 1.0.102 also writes ``system.message`` (the system prompt, after each
  ``user.message``) and ``session.usage_record``: no state.
- Not turns: ``session.compaction_*``, a user ``!`` command
  (``tool.user_requested`` and its ``tool.execution_complete`` with
  ``isUserRequested: true``), ``session.info``, ``hook.start``/``hook.end``,
  ``session.usage_checkpoint``. ``session.shutdown`` (also written when the
  process was killed mid-turn) and ``session.resume`` end an unfinished turn.
- A rewind rewrites the file in place and may shrink it; the tailer reads it
  again from the start and the per-line ``id`` keeps the old turns from being
  news again.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..decode import parse_timestamp
from ..events import ACTIVITY, COMPLETE, END, ERROR, INTERRUPT, META, OUTPUT, SESSION, START, WAIT, WORK, Event
from ..usage import BAD

NAME = "copilot_cli"
LABEL = "Copilot CLI"
#: The command that resumes a session in its working directory: `copilot --resume <sessionId>` (GitHub Copilot CLI; github/copilot-cli#4397).
RESUME = "copilot --resume {id}"
#: ``session.start`` names the working directory (``context.cwd``) and the
#: version; a file followed from its end still needs it.
SESSION_IN_FIRST_RECORD = True
#: Hook bodies name the session as ``session_id`` (``Stop``, Claude-shaped) or
#: ``sessionId`` (``Notification``).
HOOK_SESSION_KEYS = ("session_id", "sessionId")

_EVENTS_FILE = "events.jsonl"
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_EXCERPT_CHARS = 2000
#: A ``session.error`` this long after a turn end (seconds) is not that
#: turn's error (the failed turn's is written a few ms after its ``turn_end``).
ERROR_AFTER_TURN_END_SECONDS = 5.0
#: Tools whose open call waits for the user (``ask_user`` dialogs are not
#: written: the open call is all the file shows).
_WAIT_TOOLS = {"ask_user": "question"}
_WORK_TYPES = frozenset({"assistant.reasoning", "tool.execution_start", "tool.execution_complete",
                         "tool.execution_partial_result", "tool.execution_progress"})
_MAX_TRACKED_CALLS = 256


def default_roots() -> list[Path]:
    """``$COPILOT_HOME/session-state``, else ``~/.copilot/session-state``
    (``COPILOT_HOME`` replaces the whole ``~/.copilot`` folder)."""
    base = os.environ.get("COPILOT_HOME")
    return [Path(base) / "session-state" if base else Path.home() / ".copilot" / "session-state"]


def classify_path(root: Path, path: Path) -> tuple[str | None, bool] | None:
    """``(session_id, False)`` for ``<sessionId>/events.jsonl`` (the folder
    names the session) or a flat ``<sessionId>.jsonl`` (also a copy under
    another name, scanned); ``None`` for anything else, e.g. another
    ``.jsonl`` anywhere inside a session folder (a folder named by a UUID).
    ``session.start`` names the session where it is present."""
    path, root = os.fspath(path), os.fspath(root)
    name = os.path.basename(path)
    if name == _EVENTS_FILE:
        return os.path.basename(os.path.dirname(path)) or None, False
    if not name.endswith(".jsonl"):
        return None
    prefix = root.rstrip(os.sep) + os.sep
    folders = (path[len(prefix):] if path.startswith(prefix) else path).split(os.sep)[-4:-1]
    if any(_UUID.match(f) for f in folders):
        return None  # inside a session folder (<sessionId>/…): not its events file
    return name[: -len(".jsonl")], False


def group_hint(path: str) -> str:
    """Files that may share a session: one file per session (its folder)."""
    return os.path.dirname(path) if os.path.basename(path) == _EVENTS_FILE else path


def related_paths(path: str) -> list[str]:
    """None: a session is one file (subagents write into it)."""
    return []


def sniff(obj: dict) -> bool:
    """True when a decoded record looks like a Copilot CLI events line."""
    rtype = obj.get("type")
    return (isinstance(rtype, str) and isinstance(obj.get("data"), dict) and "sessionId" not in obj
            and "uuid" not in obj and ("." in rtype or rtype == "abort"))


def _error_kind(data: dict) -> str:
    """``session.error`` ``errorType``/``statusCode`` → error kind."""
    etype = data.get("errorType")
    etype = etype.lower() if isinstance(etype, str) else ""
    status = data.get("statusCode")
    if "rate" in etype or status == 429:
        return "rate_limit"
    if "quota" in etype or "usage" in etype:
        return "usage_limit"
    if "auth" in etype or status in (401, 403):
        return "auth"
    if "overload" in etype or status in (503, 529):
        return "overloaded"
    return "api_error"


def _name(v) -> str | None:
    return v if isinstance(v, str) and v.isprintable() and len(v) <= 64 else None


class FileDecoder:
    """Projects the lines of one ``events.jsonl`` into events.

    Keeps what the turn split needs: whether the current turn's last main
    ``assistant.message`` asked for tools, whether the interaction runs in
    autopilot, whether ``session.task_complete`` was written, the open tool
    calls (for the tool a permission prompt is for) and the user's ``!``
    calls. ``sidechain_file`` and ``file_session`` are unused (subagents
    write into the session's own file).
    """

    def __init__(self, sidechain_file: bool = False, file_session: str | None = None):
        self.sidechain_file = sidechain_file
        self._have_start = False
        self._interaction: str | None = None
        self._requests: bool | None = None  # the turn's last message asked for tools (None: no message yet)
        self._autopilot = False
        self._task_complete = False
        self._in_turn = False
        self._ended_at: float | None = None
        self._calls: dict[str, str] = {}  # open toolCallId -> toolName
        self._user_calls: dict[str, None] = {}  # toolCallIds of the user's ! commands
        self._requests_open: dict[str, None] = {}  # requestIds of permission prompts not answered yet
        #: The API responses of the records projected since ingest took them (exporter.usage).
        self.usage: list = []

    def project(self, obj: dict) -> Event | None:
        """One decoded line to an :class:`Event` (``None`` to ignore it)."""
        rtype = obj.get("type")
        data = obj.get("data")
        data = data if isinstance(data, dict) else {}
        ident = obj.get("id")
        ev = Event(META, parse_timestamp(obj.get("timestamp")), ident if isinstance(ident, str) else None,
                   detail=rtype if isinstance(rtype, str) and len(rtype) <= 64 else None)
        if not isinstance(rtype, str):
            return ev
        if rtype == "session.shutdown":
            got = usage(obj, data)
            if type(got) is list:
                self.usage.extend(got)
            elif got is not None:
                self.usage.append(got)  # BAD
        if rtype == "permission.requested":  # a subagent's prompt blocks the whole session too
            req = data.get("permissionRequest")
            req = req if isinstance(req, dict) else {}
            ev.kind, ev.reason = WAIT, "permission"
            call = req.get("toolCallId")
            ev.tool = _name(self._calls.get(call) if isinstance(call, str) else None) or _name(req.get("kind"))
            self._remember(self._requests_open, data.get("requestId"), None)
            return ev
        if rtype == "permission.completed":
            rid = data.get("requestId")
            if isinstance(rid, str) and rid in self._requests_open:
                del self._requests_open[rid]
                ev.kind = WORK  # answered: the turn goes on (a request we never saw opened changes nothing)
            return ev
        if obj.get("agentId") is not None or rtype.startswith("subagent."):
            ev.kind, ev.sidechain = ACTIVITY, True  # a subagent: never the session's own turn
            return ev
        if rtype == "user.message":
            self._user_message(data, ev)
        elif rtype == "assistant.turn_start":
            self._requests, ev.kind = None, WORK
            self._in_turn = True
            ev.turn_id = self._turn(data)
        elif rtype == "assistant.message":
            self._message(data, ev)
        elif rtype == "assistant.turn_end":
            self._turn_end(ev)
        elif rtype == "session.task_complete":
            self._task_complete, ev.kind = True, COMPLETE
            self._ended(ev)
        elif rtype == "tool.user_requested":
            self._remember(self._user_calls, data.get("toolCallId"), None)
        elif rtype in _WORK_TYPES:
            self._tool(rtype, data, ev)
        elif rtype == "abort":
            ev.kind, self._in_turn = INTERRUPT, False
        elif rtype == "session.error":
            recent = self._ended_at is not None and ev.ts is not None and \
                ev.ts - self._ended_at <= ERROR_AFTER_TURN_END_SECONDS
            if self._in_turn or recent:
                ev.kind, ev.error_kind = ERROR, _error_kind(data)
                self._in_turn, self._ended_at = False, None
        elif rtype in ("session.shutdown", "session.resume"):
            ev.kind, self._in_turn = END, False  # the process ended: an unfinished turn is over
            self._cwd(data, ev)
        elif rtype == "session.mode_changed":
            self._autopilot = data.get("newMode") == "autopilot"
        elif rtype == "session.start" and not self._have_start:
            self._have_start = True
            sid = data.get("sessionId")
            ev.kind = SESSION
            ev.session_id = sid if isinstance(sid, str) else None
            self._cwd(data, ev)
        return ev

    @staticmethod
    def _cwd(data: dict, ev: Event) -> None:
        ctx = data.get("context")
        cwd = ctx.get("cwd") if isinstance(ctx, dict) else None
        ev.cwd = cwd if isinstance(cwd, str) else None

    def _turn(self, data: dict) -> str | None:
        iid = data.get("interactionId")
        if isinstance(iid, str) and iid:
            self._interaction = iid
        return self._interaction

    @staticmethod
    def _remember(d: dict, key, value) -> None:
        if isinstance(key, str):
            d[key] = value
            if len(d) > _MAX_TRACKED_CALLS:
                del d[next(iter(d))]

    def _user_message(self, data: dict, ev: Event) -> None:
        ev.turn_id = self._turn(data)
        self._requests, self._task_complete, self._in_turn = None, False, True
        if data.get("agentMode") is not None:
            self._autopilot = data.get("agentMode") == "autopilot"
        if data.get("isAutopilotContinuation") is True:
            ev.kind, ev.detail = WORK, "autopilot_continuation"  # Copilot goes on by itself: the same turn
        else:
            ev.kind, ev.detail = START, "user_message"

    def _message(self, data: dict, ev: Event) -> None:
        reqs = data.get("toolRequests")
        self._requests = isinstance(reqs, list) and len(reqs) > 0
        if self._requests:
            ev.kind = WORK
            return
        text = data.get("content")
        ev.kind, ev.marker_certain = OUTPUT, True  # its turn_end always follows
        ev.text = text[:_EXCERPT_CHARS] if isinstance(text, str) and text else None

    def _turn_end(self, ev: Event) -> None:
        if self._task_complete:
            ev.kind, ev.detail = COMPLETE, "task_complete"
        elif self._requests is False and self._autopilot:
            # autopilot answers this itself within a second; if it does not, the end is inferred
            ev.kind = OUTPUT
            return
        elif self._requests is False:
            ev.kind = COMPLETE
        else:
            ev.kind = WORK  # a tool round (or a turn with no answer): the next turn_start follows
            return
        self._ended(ev)

    def _ended(self, ev: Event) -> None:
        self._in_turn, self._ended_at = False, ev.ts

    def _tool(self, rtype: str, data: dict, ev: Event) -> None:
        call = data.get("toolCallId")
        if data.get("isUserRequested") is True or (isinstance(call, str) and call in self._user_calls):
            return  # the user's ! command: not a turn
        ev.kind = WORK
        if rtype == "tool.execution_start":
            tool = _name(data.get("toolName"))
            self._remember(self._calls, call, tool or "")
            if tool in _WAIT_TOOLS:
                ev.kind, ev.reason, ev.tool = WAIT, _WAIT_TOOLS[tool], tool
        elif rtype == "tool.execution_complete" and isinstance(call, str):
            self._calls.pop(call, None)


# -- hooks -------------------------------------------------------------------
#: ``Notification`` ``notification_type`` values that mean the user must act.
#: 1.0.102 shows ``ask_user`` (its structured ``{message, requestedSchema}``
#: format) as the elicitation form ("Copilot needs information") and fires
#: ``elicitation_dialog`` for it, as soon as (or before) the call is on disk:
#: a question, whichever of the two is read first.
_NOTIFICATION_WAITS = {"permission_prompt": "permission", "elicitation_dialog": "question"}


def project_hook(name: str, obj: dict, ts: float) -> Event | None:
    """One Copilot CLI hook body (``$COPILOT_HOME/hooks/*.json``, events
    registered under their Claude names) to an :class:`Event` at ``ts``
    (arrival, Unix seconds), or ``None`` when it says nothing of the state.

    ``Stop`` arrives Claude-shaped (``session_id``, ``transcript_path``,
    ``stop_reason``); ``Notification`` as ``{sessionId, cwd, message, title,
    hook_event_name, notification_type}`` with ``permission_prompt`` and
    ``elicitation_dialog`` as the blocking types and no transcript path: it
    joins its session by ``sessionId`` (Irrlicht's Copilot adapter, verified
    on 1.0.78). Copilot fires no hook on a halt or a denied permission.
    """
    ev = Event(META, ts=ts, detail=name)
    if name == "Notification":
        ntype = obj.get("notification_type")
        reason = _NOTIFICATION_WAITS.get(ntype) if isinstance(ntype, str) else None
        if reason is None:
            return None
        ev.kind, ev.reason = WAIT, reason
    elif name == "Stop":
        ev.kind, ev.final = COMPLETE, True
    else:
        return None
    return ev


# -- usage -------------------------------------------------------------------
def usage(obj: dict, data: dict):
    """The API usage a ``session.shutdown`` record sums up (``data``, its
    ``data`` or ``{}``; see :mod:`exporter.usage`; Copilot CLI 1.0.77):
    ``data.modelMetrics.<model>.usage`` ``inputTokens`` (taken to include
    ``cacheReadTokens``, as OpenAI's prompt tokens do), ``outputTokens``,
    ``cacheReadTokens``, ``cacheWriteTokens``, ``reasoningTokens`` (part of
    the output), one response per model (a list), keyed by the record's
    ``id``; ``BAD`` when a model's ``usage`` (or ``modelMetrics``) is not
    an object, None when there is none. Copilot writes no usage per response:
    tokens appear when the CLI exits (its ``session.shutdown``), once per run
    of the CLI."""
    metrics = data.get("modelMetrics")
    if metrics is None:
        return None
    if type(metrics) is not dict:
        return BAD
    rid = obj.get("id")
    out = []
    for model, m in metrics.items():
        u = m.get("usage") if type(m) is dict else None
        if type(u) is not dict:
            return BAD
        inp, cached = u.get("inputTokens"), u.get("cacheReadTokens") or 0
        if type(inp) in (int, float) and type(cached) in (int, float):
            inp = inp - min(cached, inp)
        key = f"copilot:{rid}:{model}" if type(rid) is str and rid else None
        out.append((key, model or "unknown", (inp, u.get("outputTokens"), cached, u.get("cacheWriteTokens") or 0,
                                              u.get("reasoningTokens") or 0, 0)))
    return out
