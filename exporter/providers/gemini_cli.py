"""Google Gemini CLI (``@google/gemini-cli``) sessions: file layout, the
projection of its record log, and its hooks.

Format facts (Gemini CLI 0.61.0, ``packages/core/src/services/
chatRecordingService.ts`` and ``utils/paths.ts`` in its bundle; the recorded
runs in ``shared/live-agents/gemini-cli-0.61.0``):

- Path ``<home>/.gemini/tmp/<project id>/chats/session-<UTC minute
  YYYY-MM-DDTHH-MM>-<first 8 of the sessionId>.jsonl``; ``<home>`` is
  ``$GEMINI_CLI_HOME`` when set, else the user's home (the CLI's own
  ``homedir()``). ``<project id>`` is a slug of the project folder
  (``projects.json``). A subagent writes ``chats/<parent sessionId>/<its
  sessionId>.jsonl``. ``tmp/<id>/logs/session-<id>.jsonl`` and other files
  outside ``chats`` are not sessions.
- The file is a log of *updates*, not of events (the CLI's reader
  ``loadConversationRecord``): a metadata line (``sessionId`` and
  ``projectHash``, ``kind`` ``main``/``subagent``), ``{"$set": {...}}``
  merges (``messages`` replaces the whole message list: at the start, as a
  rollback after an error or a cancel, on resume), ``{"$rewindTo": id}``
  drops that message and all after it, and message records (a string
  ``id``; ``type`` ``user``/``gemini``/``info``/``error``/``warning``). The
  same ``id`` is written again when the message changes, the last one wins:
  a ``gemini`` message first without ``toolCalls``, then with them once the
  tools finished or were cancelled.
- Nothing marks a turn end; one ``gemini`` message per API response, written
  once its stream completed; nothing while a tool runs, a dialog is open or
  a request is retried. The ``AfterAgent`` hook is the turn end,
  ``Notification`` ``ToolPermission`` a dialog.
- ``info`` "Request cancelled." is Esc (after a denied dialog, or while
  streaming or retrying). An interactive API error writes a rollback, then
  ``error`` "[API Error: <json>]"; ``-p`` writes only the rollback (and exits
  1). On resume the file gets ``$set sessionId`` and the restored ``$set
  messages`` (in the same minute as its name, after a second metadata line;
  in a later minute the CLI also writes a stub file with the same
  ``sessionId`` and nothing else). At exit the
  CLI deletes a file in which no prompt survived.
- Each ``gemini`` message carries ``tokens`` (``input``, ``output``,
  ``cached``, ``thoughts``, ``tool``, ``total``: that one API response) and
  ``model``: :func:`usage` reads them.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from pathlib import Path

from ..decode import parse_timestamp
from ..events import COMPLETE, END, ERROR, INTERRUPT, META, OUTPUT, SESSION, START, WAIT, WORK, Event
from ..usage import BAD

NAME = "gemini_cli"
LABEL = "Gemini CLI"
#: The command that resumes a session (``gemini --resume <id>`` in the project folder: 0.61.0 matches the
#: argument against the saved sessions' ``id``, or takes ``latest`` or an index).
RESUME = "gemini --resume {id}"
#: The metadata line names the session (and a subagent's kind); a file
#: followed from its end still needs it.
SESSION_IN_FIRST_RECORD = True

_SESSION_FILE = re.compile(r"^session-\d{4}-\d\d-\d\dT\d\d-\d\d-([0-9A-Za-z_-]{1,64})\.jsonl$")
_CHATS = "chats"
_EXCERPT_CHARS = 2000
#: The ``info`` text Esc writes (``packages/cli``: the cancel handler).
CANCELLED = "Request cancelled."
#: User text the CLI itself does not count as a prompt (``isIgnoredUserContent``,
#: ``packages/core/src/utils/sessionUtils.ts``): injected context, slash commands, help.
_IGNORED_PREFIXES = ("/", "?", "<session_context>", "<hook_context>")
#: Message ids remembered per file (rewrites come within one turn; a rollback
#: names the turn's prompt): bounded, so memory does not grow with a session.
_MAX_IDS = 512
_WORKSPACE = re.compile(r"\*\*Workspace Directories:\*\*\s*\n\s*- ([^\n]{1,4096})")
_STATUS = re.compile(r'"code"\s*:\s*(\d{3})')


def default_roots() -> list[Path]:
    """``$GEMINI_CLI_HOME/.gemini/tmp``, else ``~/.gemini/tmp`` (the CLI's
    ``Storage.getGlobalTempDir``; a macOS ``sandbox-exec`` sandbox moves it to
    ``~/.cache/.gemini/tmp``: configure that path)."""
    home = os.environ.get("GEMINI_CLI_HOME")
    return [(Path(home) if home else Path.home()) / ".gemini" / "tmp"]


def classify_path(root: Path, path: Path) -> tuple[str | None, bool] | None:
    """``(None, False)`` for a main session file ``…/chats/session-<minute>-<8>.jsonl``
    (the metadata line names the session: the file name has only its first 8
    characters), ``(parent sessionId, True)`` for a subagent's
    ``…/chats/<parent sessionId>/<id>.jsonl``, ``None`` for anything else."""
    path = os.fspath(path)
    name = os.path.basename(path)
    if not name.endswith(".jsonl"):
        return None
    folder = os.path.dirname(path)
    if os.path.basename(folder) == _CHATS:
        return (None, False) if _SESSION_FILE.match(name) else None
    if os.path.basename(os.path.dirname(folder)) == _CHATS:
        return os.path.basename(folder) or None, True
    return None


def group_hint(path: str) -> str:
    """Files that may share a session: one ``chats`` folder (a resumed
    session's stub file, subagents in ``chats/<sessionId>/``)."""
    folder = os.path.dirname(path)
    return folder if os.path.basename(folder) == _CHATS else os.path.dirname(folder)


def related_paths(path: str) -> list[str]:
    """None by the layout alone (a subagent folder is named by the full
    sessionId, the main file by its first 8 characters)."""
    return []


def transcript_names(session_id: str, path: str) -> bool:
    """A hook's ``transcript_path`` names its ``session_id``: a main file
    carries the id's first 8 characters, a subagent file the whole id."""
    name = os.path.basename(path)
    m = _SESSION_FILE.match(name)
    if m:
        return session_id[:8] == m.group(1)
    return name == session_id + ".jsonl"


def sniff(obj: dict) -> bool:
    """True when a decoded record looks like a Gemini CLI session line."""
    if isinstance(obj.get("sessionId"), str) and isinstance(obj.get("projectHash"), str):
        return True
    if isinstance(obj.get("$set"), dict) or isinstance(obj.get("$rewindTo"), str):
        return len(obj) == 1
    return isinstance(obj.get("id"), str) and obj.get("type") in ("user", "gemini", "info", "error", "warning") \
        and "uuid" not in obj and "parentId" not in obj


def error_kind(text) -> str:
    """An ``error`` record's text (``[API Error: <the API's JSON error>]``) →
    error kind, by the HTTP status it names (the CLI's own classification,
    ``utils/googleQuotaErrors.ts``: 429 quota, 5xx retried, 400 not)."""
    text = text if isinstance(text, str) else ""
    m = _STATUS.search(text)
    code = int(m.group(1)) if m else 0
    low = text.lower()
    if code == 429 or "resource_exhausted" in low:
        return "usage_limit" if ("daily" in low or "limit: 0" in low or "quota exceeded" in low) else "rate_limit"
    if code in (401, 403) or "api key" in low or "permission_denied" in low or "unauthenticated" in low:
        return "auth"
    if code in (503, 529) or "overloaded" in low or "high demand" in low:
        return "overloaded"
    if 500 <= code < 600:
        return "server_error"
    return "api_error"


def _text(content) -> str:
    """The text of a message's ``content`` (a string, or a list of parts;
    ``functionResponse`` parts have none)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _tool_results(content) -> bool:
    return isinstance(content, list) and any(isinstance(p, dict) and "functionResponse" in p for p in content)


class FileDecoder:
    """Applies one session file's update log and projects it into events.

    Keeps, per file, the ids of the messages in the current list (bounded:
    :data:`_MAX_IDS`, with whether a ``gemini`` one already had its
    ``toolCalls``), the id of the open turn's prompt and the kind of the
    last main-thread event it gave, so that:

    - a message ``id`` written again is news only when a ``gemini`` message
      gains its finished ``toolCalls`` (``WORK``: the tools ran);
    - a ``$set messages`` that drops the open turn's prompt (a rollback)
      with no cancel or error record before it is the turn's failure
      (``-p`` writes nothing else): ``ERROR`` with ``retry_in`` 0, so it
      stands only once the file stayed (the CLI deletes a session file in
      which no prompt survived: that pages nothing);
    - a resume (a second metadata line, ``$set sessionId``) ends what the
      previous process left: an answer as the turn's end, an unfinished
      turn as interrupted.

    ``sidechain_file``: a subagent's file (every event is sidechain);
    ``file_session``: its parent's sessionId (the folder's name).
    """

    __slots__ = ("sidechain_file", "file_session", "_have_meta", "_ids", "_prompt", "_last", "usage")

    def __init__(self, sidechain_file: bool = False, file_session: str | None = None):
        self.sidechain_file = sidechain_file
        self.file_session = file_session
        self._have_meta = False
        self._ids: OrderedDict[str, bool] = OrderedDict()  # message id -> a gemini message with toolCalls
        self._prompt: str | None = None  # the open turn's prompt id
        self._last = None  # kind of the last main-thread event given
        #: The API responses of the records projected since ingest took them (exporter.usage).
        self.usage: list = []

    def project(self, obj: dict) -> Event | None:
        """One decoded record to an :class:`Event` (``None`` to ignore it: the ``$set lastUpdated``
        written after every message, half of the lines, says nothing)."""
        upd = obj.get("$set")
        if type(upd) is dict and len(upd) == 1 and "lastUpdated" in upd:
            return None
        if obj.get("type") == "gemini" and "tokens" in obj:
            got = usage(obj)
            if got is not None:
                self.usage.append(got)
        mid = obj.get("id")
        if isinstance(mid, str):
            ev = self._message(obj, mid)
        elif isinstance(obj.get("sessionId"), str) and isinstance(obj.get("projectHash"), str):
            ev = self._metadata(obj)
        else:
            ev = Event(META)
            if isinstance(upd, dict) and isinstance(upd.get("sessionId"), str):
                self._resumed(ev)  # (a resume in a later minute writes no second metadata line here)
            if isinstance(upd, dict) and isinstance(upd.get("messages"), list) and ev.kind == META:
                self._replace(upd["messages"], ev)
            elif isinstance(obj.get("$rewindTo"), str):
                self._rewind(obj["$rewindTo"])
                ev.detail = "rewind"
        if self.sidechain_file and ev.kind != SESSION:
            ev.sidechain = True
        elif ev.kind not in (META, SESSION):
            self._last = ev.kind
        return ev

    # -- records -------------------------------------------------------------------
    def _metadata(self, obj: dict) -> Event:
        ts = parse_timestamp(obj.get("startTime"))
        if not self._have_meta:
            self._have_meta = True
            subagent = obj.get("kind") == "subagent" or self.sidechain_file
            ev = Event(SESSION, ts, session_id=obj["sessionId"], subagent=subagent,
                       parent_id=self.file_session if subagent else None)
            dirs = obj.get("directories")
            if isinstance(dirs, list) and dirs and isinstance(dirs[0], str):
                ev.cwd = dirs[0]
            return ev
        ev = Event(META, ts)
        self._resumed(ev)
        return ev

    def _resumed(self, ev: Event) -> None:
        """The CLI started again on this file (``--resume``: a second metadata
        line, or ``$set sessionId``): what the previous process left is over."""
        ev.detail = "resume"
        if self._last == OUTPUT:
            ev.kind = COMPLETE  # it answered, then exited: that answer ended its turn
        elif self._last in (START, WORK, WAIT):
            ev.kind = END
        self._prompt = None

    def _message(self, obj: dict, mid: str) -> Event:
        mtype = obj.get("type")
        ts = parse_timestamp(obj.get("timestamp"))
        ev = Event(META, ts, mid, detail=mtype if isinstance(mtype, str) and len(mtype) <= 16 else None)
        calls = obj.get("toolCalls")
        has_calls = isinstance(calls, list) and len(calls) > 0
        if mid in self._ids:  # the same message written again: last wins
            had = self._ids[mid]
            self._ids[mid] = had or has_calls
            if mtype == "gemini" and has_calls and not had:
                ev.ident = mid + "#toolCalls"
                if not any(isinstance(c, dict) and c.get("status") == "cancelled" for c in calls):
                    ev.kind, ev.detail = WORK, "tool_calls"  # the tools ran (a cancel's record decides otherwise)
            return ev
        self._remember(mid, has_calls)
        content = obj.get("content")
        if mtype == "user":
            if _tool_results(content):
                ev.kind, ev.detail = WORK, "function_response"
            else:
                text = _text(content).strip()
                if text and not text.startswith(_IGNORED_PREFIXES):
                    ev.kind, ev.detail = START, "prompt"
                    self._prompt = mid
                elif text.startswith("<session_context>"):
                    ev.cwd = self._workspace(text)
        elif mtype == "gemini":
            text = content if isinstance(content, str) else _text(content)
            if has_calls or not text.strip():
                ev.kind = WORK  # a tool call (or thoughts only): the turn goes on
            else:
                ev.kind, ev.text = OUTPUT, text[:_EXCERPT_CHARS]
        elif mtype == "info":
            if _text(content).strip() == CANCELLED:
                ev.kind, ev.detail = INTERRUPT, "request_cancelled"
        elif mtype == "error":
            ev.kind, ev.error_kind = ERROR, error_kind(_text(content))
        return ev

    @staticmethod
    def _workspace(text: str) -> str | None:
        m = _WORKSPACE.search(text[:65536])
        return m.group(1).strip() if m else None

    def _remember(self, mid: str, has_calls: bool) -> None:
        ids = self._ids
        ids[mid] = has_calls
        if len(ids) > _MAX_IDS:
            ids.popitem(last=False)

    def _replace(self, messages: list, ev: Event) -> None:
        """``$set messages``: the list is the file's history from now on (never
        news); a rollback of the open turn is its failure when nothing else
        said so."""
        ids = OrderedDict()
        cwd = None
        for m in messages[-_MAX_IDS:]:
            if isinstance(m, dict) and isinstance(m.get("id"), str):
                calls = m.get("toolCalls")
                ids[m["id"]] = isinstance(calls, list) and len(calls) > 0
        for m in messages[:1]:
            if isinstance(m, dict) and m.get("type") == "user":
                text = _text(m.get("content"))
                if text.startswith("<session_context>"):
                    cwd = self._workspace(text)
        ev.cwd, ev.detail = cwd, "messages"
        dropped = self._prompt is not None and self._prompt not in ids
        self._ids = ids
        if not dropped:
            return
        self._prompt = None
        if self._last in (START, WORK, OUTPUT) and not self.sidechain_file:
            # the turn's prompt was rolled back with no cancel or error record before it: -p's API error
            ev.kind, ev.detail, ev.error_kind, ev.retry_in = ERROR, "rollback", "api_error", 0.0

    def _rewind(self, mid: str) -> None:
        """``$rewindTo``: that message and every later one are gone (all of
        them when the id is unknown, as the CLI's reader does)."""
        if mid not in self._ids:
            self._ids.clear()
        else:
            keys = list(self._ids)
            for k in keys[keys.index(mid):]:
                del self._ids[k]
        if self._prompt is not None and self._prompt not in self._ids:
            self._prompt = None


# -- hooks -------------------------------------------------------------------
#: ``Notification`` ``details.type`` of a ``ToolPermission`` → (wait reason, tool).
_PERMISSION_TYPES = {"exec": ("permission", "run_shell_command"), "edit": ("permission", "edit"),
                     "mcp": ("permission", "mcp"), "info": ("permission", "web_fetch"),
                     "ask_user": ("question", "ask_user"), "exit_plan_mode": ("plan", "exit_plan_mode")}


def project_hook(name: str, obj: dict, ts: float) -> Event | None:
    """One Gemini CLI command-hook input (``~/.gemini/settings.json``
    ``hooks``; the JSON on the hook's stdin, 0.61.0) to an :class:`Event` at
    ``ts`` (arrival, Unix seconds), or ``None`` when it says nothing of the
    state.

    - ``BeforeAgent`` (a prompt submitted) starts a turn; ``AfterAgent`` ends
      it (also after Esc while streaming and after an API error, with
      ``prompt_response`` "[no response text]": it applies only to a turn
      still open, so the file's cancel or error record stands).
    - ``Notification`` ``notification_type: "ToolPermission"`` is a dialog
      (``details.type`` ``exec``/``edit``/``mcp``/``info``: an approval;
      ``ask_user``: a question); the tool's ``AfterTool`` ends it (a denied
      one ends at the file's "Request cancelled.").
    - ``BeforeTool`` (also for auto-approved and subagent tools) and
      ``AfterTool`` are work.
    - ``SessionEnd`` (three times on ``/quit``) ends an unfinished turn.
    - ``BeforeModel`` (one per request, retries included), ``AfterModel``,
      ``BeforeToolSelection``, ``PreCompress`` (every turn) and
      ``SessionStart`` change nothing: a request retried for ever stays
      ``working`` and, with nothing written for ``reducer.stall_after_seconds``,
      becomes ``stalled``.
    """
    ev = Event(META, ts=ts, detail=name)
    if name == "AfterAgent":
        ev.kind, ev.final, ev.open_only = COMPLETE, True, True
    elif name == "Notification":
        if obj.get("notification_type") != "ToolPermission":
            return None
        details = obj.get("details")
        dtype = details.get("type") if isinstance(details, dict) else None
        ev.kind = WAIT
        ev.reason, ev.tool = _PERMISSION_TYPES.get(dtype, ("permission", None)) if isinstance(dtype, str) \
            else ("permission", None)
    elif name in ("BeforeTool", "AfterTool"):
        ev.kind = WORK
    elif name == "BeforeAgent":
        ev.kind = START
    elif name == "SessionEnd":
        ev.kind = END
    else:
        return None
    return ev



# -- usage -------------------------------------------------------------------
def usage(obj: dict):
    """The API response of one ``gemini`` message (see :mod:`exporter.usage`:
    ``(key, model, counts)``, ``BAD`` or None; Gemini CLI 0.61.0): ``tokens`` ``input`` (the API's ``promptTokenCount``: the
    whole prompt, cached part included), ``output`` (``candidatesTokenCount``),
    ``cached`` (``cachedContentTokenCount``), ``thoughts``
    (``thoughtsTokenCount``, billed as output but not in it), ``tool``
    (``toolUsePromptTokenCount``, billed as input), model ``model``, keyed by
    the message ``id``: the CLI writes a message again with its ``toolCalls``
    (the same tokens), and a resume's ``$set messages`` repeats history inside
    one record (not asked). Counted: input not cached (input − cached + tool),
    output with the thoughts, cache reads, reasoning = the thoughts."""
    t = obj.get("tokens")
    if t is None:
        return None
    if type(t) is not dict:
        return BAD
    mid, model = obj.get("id"), obj.get("model")
    key = f"gemini:{mid}" if type(mid) is str and mid else None
    model = model if type(model) is str and model else "unknown"
    inp, out = t.get("input"), t.get("output")
    cached, thoughts, tool = t.get("cached") or 0, t.get("thoughts") or 0, t.get("tool") or 0
    if all(type(v) is int for v in (inp, out, cached, thoughts, tool)):
        inp, out = inp - min(cached, inp) + tool, out + thoughts
    return (key, model, (inp, out, cached, 0, thoughts, 0))
