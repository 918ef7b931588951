"""Pi coding agent (``@earendil-works/pi-coding-agent``, before 0.74
``@mariozechner/pi-coding-agent``) sessions: file layout and record
projection.

Format facts (from the files in ``shared/transcripts/pi``, Pi 0.70 … 0.83,
the real Pi 1.6.0 runs of ``tests/agents`` and Pi 1.6.0's own source; see
SOURCES.md there):

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
- Pi retries by itself (1.6.0 ``AgentSession._handlePostAgentRun``,
  ``_prepareRetry``; pi-ai ``isRetryableAssistantError``; settings default
  ``retry: {enabled: true, maxRetries: 3, baseDelayMs: 2000}``): an
  assistant ``stopReason: "error"`` whose ``errorMessage`` matches Pi's
  retryable pattern (overloaded, rate limit, 429/5xx, network …; not a
  quota or billing limit, not a context overflow) is retried after
  ``baseDelayMs × 2^(attempt-1)`` ms (2, 4, 8 s; at most 60 s) while the
  attempt is at most ``maxRetries``; the count goes back to 0 at the next
  answer that is not an error. A context overflow ("prompt is too long" …)
  is compacted and the request replayed once per run
  (``_checkCompaction``); a second overflow in the run is final. Since
  0.87 each failed attempt Pi retries is omitted from the model's context
  by a ``context_edit`` entry (``targetId`` the error's ``id``,
  ``replacement: null``) written right after it: Pi's own word that it goes
  on (measured on 1.6.0: 429 twice then an answer; 529 four times, the
  last with no ``context_edit``: the give-up; an overflow whose compaction
  failed: the error, its ``context_edit``, nothing more). Only a give-up is
  an error; an error that Pi said it retries stands once nothing was
  written for its delay plus ``reducer.api_retry_grace_seconds``.
- 1.6.0 also writes the system prompt as a ``message`` of role ``system``
  (no state) and entries ``usage``, ``custom_message``, ``label``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..decode import parse_timestamp
from ..events import COMPLETE, ERROR, INTERRUPT, META, OUTPUT, SESSION, START, WORK, Event
from ..usage import BAD

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
    return rtype in ("message", "model_change", "thinking_level_change", "compaction", "branch_summary",
                     "context_edit", "custom_message", "custom", "label", "session_info", "usage") \
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


# Pi 1.6.0's classifiers (pi-ai RETRYABLE_PROVIDER_ERROR_PATTERN,
# NON_RETRYABLE_PROVIDER_LIMIT_ERROR_PATTERN, OVERFLOW_PATTERNS and
# NON_OVERFLOW_PATTERNS), abridged to the alternatives providers write.
_RETRYABLE = re.compile(
    r"overloaded|server_busy|servers are currently busy|currently experiencing high demand|model is at capacity"
    r"|rate.?limit|too many requests|(?<![a-z0-9])(?:429|500|502|503|504|520|524|529)(?![a-z0-9])"
    r"|service.?(?:is.?)?(?:temporarily.?)?unavailable|server.?error|internal.?error"
    r"|provider.?returned.?(?:an.?)?error|upstream|stream was interrupted|network.?error|connection.?(?:error"
    r"|refused|lost|closed|reset)|other side closed|fetch failed|getaddrinfo|econnreset|econnaborted|econnrefused"
    r"|etimedout|epipe|enotfound|eai_again|socket hang up|socket connection was closed|timed? out|timeout"
    r"|terminated|websocket.?(?:closed|error)|ended without|stream ended before|stream disconnected"
    r"|retry delay|retry your request|try your request again|resourceexhausted", re.I)
_NOT_RETRYABLE = re.compile(
    r"usagelimiterror|monthly usage limit reached|available balance|insufficient_quota|out of budget"
    r"|quota exceeded|billing|usage_limit_exceeded", re.I)
_OVERFLOW = re.compile(
    r"prompt (?:is )?too long|prompt exceeds max length|request_too_large|input is too long for requested model"
    r"|exceeds the context window|maximum context length|context window exceeded|exceeds the maximum"
    r"|maximum prompt length is|reduce the length of the messages|exceeds the limit of \d+"
    r"|exceeds the available context size|greater than the context length|context window exceeds limit"
    r"|exceeded model token limit|model_context_window_exceeded|context[_ ]length[_ ]exceeded|too many tokens"
    r"|token limit exceeded|^(?:[\w -]+ API error \(413\):|413(?:\s|:|$))", re.I)
_NOT_OVERFLOW = re.compile(r"^(?:Throttling error|Service unavailable):|rate limit|too many requests", re.I)
#: Pi 1.6.0's retry defaults (``settings-defaults.js``): attempts, first delay
#: and cap, in seconds.
MAX_RETRIES = 3
RETRY_BASE_SECONDS = 2.0
RETRY_MAX_SECONDS = 60.0
#: How long Pi's compaction after a context overflow may take before the
#: replayed request is written (a model call of its own), in seconds. A
#: compaction that fails writes nothing (1.6.0 with nothing to compact: the
#: error, its ``context_edit``, then silence): the error stands after this
#: and ``reducer.api_retry_grace_seconds``.
OVERFLOW_COMPACT_SECONDS = 60.0


def retry_in(error_message, attempt: int, overflow_tried: bool) -> tuple[float | None, bool]:
    """When Pi will try again after its ``attempt``-th failed answer in a
    row (1 = the first) with ``errorMessage`` ``error_message``:
    ``(seconds, overflow)``; ``seconds`` is ``None`` when Pi gives up
    (not retryable, the attempts spent, or a second overflow in the run
    when ``overflow_tried``). ``overflow``: the error is a context
    overflow (compacted, then replayed). From Pi 1.6.0's
    ``_isRetryableError``, ``_prepareRetry`` and ``_checkCompaction``."""
    text = error_message if isinstance(error_message, str) else ""
    if text and _OVERFLOW.search(text) and not _NOT_OVERFLOW.search(text):
        return (None if overflow_tried else OVERFLOW_COMPACT_SECONDS), True
    if not text or _NOT_RETRYABLE.search(text) or not _RETRYABLE.search(text) or attempt > MAX_RETRIES:
        return None, False
    return min(RETRY_BASE_SECONDS * 2 ** (attempt - 1), RETRY_MAX_SECONDS), False


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
    never news (``replayed``). Counts the failed answers in a row and
    whether the run already compacted for an overflow (Pi's own retry
    state, :func:`retry_in`), and the last error (a ``context_edit``
    omitting it is Pi's word that it retries). ``sidechain_file`` and
    ``file_session`` are unused (Pi has no subagents).
    """

    def __init__(self, sidechain_file: bool = False, file_session: str | None = None):
        self.sidechain_file = sidechain_file
        self._have_header = False
        self._fork_ts: float | None = None
        self._attempt = 0
        self._overflow_tried = False
        #: the last error answer: (its id, error kind, seconds until Pi retries or None)
        self._error: tuple | None = None
        #: The API responses of the records projected since ingest took them (exporter.usage).
        self.usage: list = []

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
        if rtype == "context_edit" and obj.get("replacement") is None and self._error is not None \
                and obj.get("targetId") == self._error[0]:
            # Pi omits from the context the failed attempt it is about to retry (0.87+): the
            # error, told again with Pi's own word that it goes on; it stands if nothing follows
            _eid, kind, wait = self._error
            ev.kind, ev.error_kind, ev.detail = ERROR, kind, "retry"
            ev.retry_in = wait if wait is not None else \
                min(RETRY_BASE_SECONDS * 2 ** max(0, self._attempt - 1), RETRY_MAX_SECONDS)
            self._error = None
            return ev
        if rtype != "message" or not isinstance(msg, dict):
            return ev  # model/thinking changes, compaction, custom, branch summaries: no state
        role = msg.get("role")
        ev.detail = role if isinstance(role, str) and len(role) <= 32 else None
        if role == "user":
            ev.kind = START
            self._attempt, self._overflow_tried = 0, False
        elif role == "toolResult":
            ev.kind = WORK  # isError: a failed tool; the turn goes on
        elif role == "assistant":
            self._assistant(msg, ev)
            if "usage" in msg:
                got = usage(obj, msg)
                if got is not None:
                    self.usage.append(got)
        return ev  # bashExecution (the user's ! command) and other roles: not turns

    def _assistant(self, msg: dict, ev: Event) -> None:
        stop = msg.get("stopReason")
        if stop != "error":
            self._error = None
            self._attempt, self._overflow_tried = 0, False
        ev.detail = stop if isinstance(stop, str) and len(stop) <= 32 else "assistant"
        if stop in ("stop", "length"):
            text = _text_of(msg.get("content"))
            ev.kind = COMPLETE
            ev.text = text[:_EXCERPT_CHARS] if text else None
        elif stop == "toolUse":
            ev.kind = WORK
        elif stop == "error":
            text = msg.get("errorMessage")
            ev.kind, ev.error_kind = ERROR, _error_kind(text)
            self._attempt += 1
            ev.retry_in, overflow = retry_in(text, self._attempt, self._overflow_tried)
            if overflow:
                self._attempt -= 1  # compaction, not a retry attempt
                self._overflow_tried = True
            self._error = (ev.ident, ev.error_kind, ev.retry_in) if ev.ident is not None else None
        elif stop == "aborted":
            ev.kind = INTERRUPT
        else:
            text = _text_of(msg.get("content"))
            ev.kind, ev.text = OUTPUT, (text[:_EXCERPT_CHARS] if text else None)

# Pi has no hooks: no ``project_hook``, so ``/hooks/pi`` and ``hook --agent pi`` do not exist.


# -- usage -------------------------------------------------------------------
def usage(obj: dict, msg: dict):
    """The API response of an assistant ``message`` entry (``msg``, its
    ``message``; see :mod:`exporter.usage`; Pi 0.70): ``message.usage``
    ``input`` (not cached), ``output``, ``cacheRead``, ``cacheWrite``, model
    ``message.model``, keyed by the entry ``id`` and ``timestamp`` (a fork
    copies its parent's entries with their ids: counted once); ``BAD``
    when ``usage`` is not an object, None when it is null. Pi records no
    reasoning count of its own, and its own ``cost`` figures are not used
    (the same price data prices every agent)."""
    u = msg.get("usage")
    if u is None:
        return None
    if type(u) is not dict:
        return BAD
    eid, model = obj.get("id"), msg.get("model")
    key = f"pi:{eid}:{obj.get('timestamp')}" if type(eid) is str and eid else None
    model = model if type(model) is str and model else "unknown"
    return (key, model, (u.get("input"), u.get("output"), u.get("cacheRead") or 0, u.get("cacheWrite") or 0, 0, 0))
