"""Claude Code transcripts: file layout and record projection.

Format facts (from the files in ``shared/transcripts/claude_code``, Claude
Code 1.0.98 … 2.1.233):

- Root ``$CLAUDE_CONFIG_DIR/projects`` (default ``~/.claude/projects``), one
  folder per working directory, ``<sessionId>.jsonl`` per session.
- Subagents: ``<sessionId>/subagents/agent-<id>.jsonl`` (2.1.2+), sibling
  ``agent-<id>.jsonl`` files carrying the parent's ``sessionId`` (2.0.x), or
  inline lines with ``isSidechain: true`` (1.0.x).
- Record fields used: ``type``, ``subtype``, ``uuid``, ``timestamp``,
  ``sessionId``, ``cwd``, ``version``, ``isSidechain``, ``isMeta``,
  ``isCompactSummary``, ``isApiErrorMessage``, ``error``, ``apiErrorStatus``,
  ``durationMs``, ``data.type``, ``toolUseResult``,
  ``message.{role,content,stop_reason,model,id}``.
- ``message.stop_reason`` is null on almost every assistant line of 2.1.x
  before ~2.1.98, and set on nearly every line after (``tool_use`` on thinking
  and text lines too).
- ``system/turn_duration``: 2.1.x before ~2.1.126 writes it only for turns
  over about 30 s; the CLI (``entrypoint: cli``) from ~2.1.119–2.1.126 writes
  it for every turn, even 23 ms and error turns (2.1.123, 2.1.143, 2.1.148,
  2.1.156 files), after its Stop hooks ran; ``entrypoint: sdk-cli`` sessions
  write none (2.1.233). So for those CLI versions the turn ends at
  ``turn_duration`` (or a ``stop_hook_summary`` that no hook feedback
  follows), not at ``end_turn``.
- A Stop hook that blocks the stop (loop hooks, ``/goal``; 2.1.143) writes
  ``stop_hook_summary`` with ``hasOutput: true``, an ``attachment``
  ``hook_blocking_error`` and an ``isMeta`` user line "Stop hook feedback:
  …", in either order after the ``end_turn`` line; the turn goes on.
- ``turn_duration.pendingBackgroundAgentCount`` > 0 (2.1.156): background
  ``Agent`` tasks still run; their ``<task-notification>`` user records
  (``origin.kind: task-notification``) start the agent again on its own.
- ``system/api_error`` (2.1.143): a retried API error with ``retryAttempt``,
  ``maxRetries``, ``retryInMs`` and ``error.status`` (429 …); when retries
  stop, the file ends there.
- Resumed sessions start a new file with copies of the earlier session's
  records, which still name that session in ``sessionId``.
- Background ``Agent`` launches (2.1.156 CLI, 2.1.260 Desktop): a tool result
  with ``toolUseResult.status: async_launched`` (``isAsync``, ``agentId``,
  ``outputFile``); each one's end is a ``<task-notification>`` user prompt
  (``origin.kind: task-notification``) naming ``<task-id>`` = ``agentId``.
  Launched and not yet notified is pending work: the agent resumes by itself.
- Desktop (``entrypoint: claude-desktop``, 2.1.260) writes no
  ``turn_duration``: a turn ends at ``stop_reason: end_turn`` (on every block
  line, thinking included) or at ``stop_hook_summary``.
- Stop hooks run in parallel; each writes a ``progress`` record
  (``data.type: hook_progress``, ``hookEvent: Stop``, ``command``) before
  ``stop_hook_summary``. A hook that returns ``additionalContext`` resumes
  the turn: ``hookAdditionalContext`` on the summary and an ``isMeta`` user
  line "Stop hook additional context: …" (2.1.257, anthropics/claude-code#85547).
- ``ScheduleWakeup`` (``/loop``, 2.1.143): its result
  ``toolUseResult.scheduledFor`` (ms) is when the harness re-invokes the agent,
  ``clampedDelaySeconds`` the delay from that result record.
- Agent teams (2.1.240): teammates write top-level files in the project folder
  (first record ``type: agent-name``; ``agentName`` and ``teamName`` on every
  record; ``<teammate-message>`` prompts; ``SendMessage``). The lead's records
  carry ``teamName`` only. The team's ``$CLAUDE_CONFIG_DIR/teams/<team>/config.json``
  names ``leadSessionId``.
- After a shutdown mid-turn (2.1.238): "[Request interrupted by user]" with
  ``interruptedByShutdown: true``; on resume an ``isMeta`` "Continue from where
  you left off." and a ``<synthetic>`` "No response requested." answering it
  (anthropics/claude-code#89265): bookkeeping, not an error.
- After a usage limit (2.1.240): an ``isMeta`` user record with
  ``origin.kind: auto-continuation`` starts the work again.
- What the agent states about pending work (2.1.332, issue 29):
  ``turn_duration`` carries ``pendingBackgroundAgentCount`` and
  ``pendingWorkflowCount`` only when > 0; the ``Stop`` hook's
  ``background_tasks`` lists each task with a ``type`` label (``subagent``,
  ``workflow``, ``shell``, ``monitor``, ``MCP task``, …). A workflow's launch
  result is ``{status: async_launched, taskId, taskType: local_workflow}`` (no
  ``agentId``); ``TaskStop``'s result is ``{message, task_id, task_type}``
  and no ``<task-notification>`` user record follows (a ``queue-operation``
  record may).
- A prompt a UserPromptSubmit hook blocked (2.1.332): no user record, a
  ``system/informational`` record with ``promptSubmitEnding.ending.kind:
  blocked_by_hook`` instead.
- ``!`` bash mode (2.1.332): ``<bash-input>``/``<bash-stdout>`` user records,
  then the model's answer, a Stop hook and ``turn_duration``; the answer's
  line may reach the disk after the Stop hook ran.
"""

from __future__ import annotations

import functools
import hashlib
import operator
import os
import re
from pathlib import Path

import orjson

from ..decode import parse_timestamp
from ..names import STOP_FAILURE_KINDS
from . import claude_settings
from ..events import ACTIVITY, COMPLETE, END, ERROR, INTERRUPT, META, OUTPUT, START, WAIT, WORK, Event
from ..usage import BAD

NAME = "claude_code"
LABEL = "Claude Code"
#: The command that resumes a session in its working directory: `claude --resume <session id>` (Claude Code CLI reference, `-r`/`--resume`).
RESUME = "claude --resume {id}"
#: Every record names its session (``sessionId``, ``cwd``): a file followed
#: from its end needs nothing from its beginning.
SESSION_IN_FIRST_RECORD = False

#: Turns longer than this get a ``system/turn_duration`` record (2.1.x
#: before ``EVERY_TURN_DURATION``).
TURN_DURATION_THRESHOLD_SECONDS = 30.0
#: From this version the CLI writes ``system/turn_duration`` for every turn.
EVERY_TURN_DURATION = (2, 1, 126)
#: From this version ``turn_duration`` states the pending background work itself
#: (``pendingBackgroundAgentCount``, ``pendingWorkflowCount``; a count of 0 is left
#: out: 2.1.332 writes ``{…, pendingBackgroundAgentCount: n, pendingWorkflowCount: m}``
#: with ``undefined`` for none). 2.1.156 is the oldest file seen with the count.
STATES_PENDING = (2, 1, 156)
#: ``background_tasks[].type`` of a ``Stop`` hook (2.1.332: a label, else the raw task
#: type) that resumes the agent by itself when it ends, as ``turn_duration`` counts
#: them (backgrounded ``local_agent`` tasks and ``local_workflow``s). A shell
#: (``local_bash``), a monitor or an MCP task is not pending work: a server may never exit.
_PENDING_TASKS = {"subagent": "agent", "local_agent": "agent", "workflow": "workflow",
                  "local_workflow": "workflow"}


def pending_detail(agents: int, workflows: int = 0) -> str:
    """The state detail for pending background work (``""`` for none):
    ``background_agents_pending:N``, ``background_workflows_pending:M``, joined by ``;``."""
    parts = [f"background_agents_pending:{agents}"] if agents else []
    if workflows:
        parts.append(f"background_workflows_pending:{workflows}")
    return ";".join(parts)
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")

_SESSION_FILE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._-]*\.jsonl$")
# User-typed local commands, ``!`` shell escapes and their outputs: metadata.
_META_PREFIXES = (
    "<command-name>",
    "<command-message>",
    "<command-args>",
    "<local-command-",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
    "Caveat: The messages below",
)
_INTERRUPT_PREFIX = "[Request interrupted by user"
_STOP_HOOK_FEEDBACK = "Stop hook feedback:"
_STOP_HOOK_CONTEXT = "Stop hook additional context:"
_TASK_NOTIFICATION = "<task-notification>"
_TASK_ID = re.compile(r"<task-id>([^<]{1,128})</task-id>")
#: ``ScheduleWakeup``'s result text (2.1.332): "Next wakeup scheduled for HH:MM:SS (in Ns)".
_WAKEUP_IN = re.compile(r"^Next wakeup scheduled for [^(]{0,40}\(in (\d{1,7})s\)")
#: A Stop hook command that is the exporter's own (``hooks install``: an
#: HTTP hook to ``/hooks/claude_code`` or ``… hook --agent claude_code``).
_OWN_HOOK = claude_settings.OWN_HOOK
#: At most this many background agents / running hooks are tracked per file.
_MAX_PENDING = 256
_END_STOP_REASONS = ("end_turn", "stop_sequence")
_EXCERPT_CHARS = 2000
#: Tools whose call waits for the user's answer (the result is the answer):
#: ``AskUserQuestion`` (2.0.x+) asks a question, ``ExitPlanMode`` asks to
#: approve a plan (plan mode; see v2.1.149_plan_mode_exitplanmode_pending).
_WAIT_TOOLS = {"AskUserQuestion": "question", "ExitPlanMode": "plan"}


#: Team name → the lead's session id, learnt from the lead's records
#: (``teamName`` without ``agentName``) or the team's config file; bounded.
_TEAM_LEADS: dict[str, str] = {}
_MAX_TEAMS = 256


def _lead_of(team: str) -> str | None:
    """The lead session of agent team ``team``: as the lead's own records
    said, else ``leadSessionId`` of ``$CLAUDE_CONFIG_DIR/teams/<team>/config.json``
    (read once per team; ``None`` when neither tells)."""
    if team in _TEAM_LEADS:
        return _TEAM_LEADS[team] or None
    lead = ""
    if team.isprintable() and os.sep not in team and team not in (".", ".."):
        try:
            with open(default_roots()[0].parent / "teams" / team / "config.json", "rb") as f:
                conf = orjson.loads(f.read(1 << 20))
            got = conf.get("leadSessionId") if isinstance(conf, dict) else None
            lead = got if isinstance(got, str) and _UUID.match(got) else ""
        except (OSError, ValueError):
            pass
    _remember_lead(team, lead)
    return lead or None


def _team_key(team: str) -> str:
    """The hidden placeholder session of a team whose lead is not known yet
    (a digest: the team name is transcript content)."""
    return "team:" + hashlib.blake2b(team.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def _remember_lead(team: str, sid: str) -> None:
    if len(_TEAM_LEADS) >= _MAX_TEAMS and team not in _TEAM_LEADS:
        _TEAM_LEADS.pop(next(iter(_TEAM_LEADS)))
    _TEAM_LEADS[team] = sid


def default_roots() -> list[Path]:
    """``$CLAUDE_CONFIG_DIR/projects``, else ``~/.claude/projects``: the home folder is
    ``Path.home()``, which is ``%USERPROFILE%`` on Windows, where the agent
    keeps the same layout (``%USERPROFILE%\\.claude\\projects``)."""
    base = os.environ.get("CLAUDE_CONFIG_DIR")
    return [Path(base) / "projects" if base else Path.home() / ".claude" / "projects"]


def classify_path(root: Path, path: Path) -> tuple[str | None, bool] | None:
    """Where a file under a Claude root belongs.

    Returns ``(session_id, sidechain)`` or ``None`` when the file is not a
    transcript. ``session_id`` is ``None`` when only the records can tell
    (2.0.x sibling ``agent-*.jsonl`` files carry the parent's ``sessionId``).
    ``root`` and ``path`` are ``str`` or ``Path`` (strings are cheaper: this
    runs once per file of a history).
    """
    path, root = os.fspath(path), os.fspath(root)
    name = os.path.basename(path)
    if not name.endswith(".jsonl"):
        return None
    prefix = root.rstrip(os.sep) + os.sep
    parts = path[len(prefix):].split(os.sep) if path.startswith(prefix) else path.split(os.sep)[-4:]
    if name.startswith("agent-"):
        # <project>/<sessionId>/subagents/agent-<id>.jsonl (2.1.2+)
        if len(parts) >= 3 and parts[-2] == "subagents":
            return parts[-3], True
        return None, True  # sibling file (2.0.x): sessionId from the records
    if not _SESSION_FILE.match(name):
        return None
    return name[: -len(".jsonl")], False


def group_hint(path: str) -> str:
    """Files that may share a session (for splitting a scan over workers):
    the project folder (``<project>/<sid>.jsonl``,
    ``<project>/<sid>/subagents/agent-*.jsonl``, 2.0.x ``<project>/agent-*``)."""
    parts = path.split(os.sep)
    if len(parts) >= 3 and parts[-2] == "subagents":
        return os.sep.join(parts[:-3])
    return os.sep.join(parts[:-1])


def related_paths(path: str) -> list[str]:
    """Where other files of ``path``'s session lie, by the layout (2.1.2+):
    for ``<project>/<sid>.jsonl`` the folder ``<project>/<sid>`` (its
    ``subagents/agent-*.jsonl``); for a subagent file
    ``<project>/<sid>/subagents/agent-*.jsonl`` the main file
    ``<project>/<sid>.jsonl`` and that folder. Paths that may not exist;
    2.0.x sibling ``agent-*.jsonl`` files name their session only in their
    records, so none for them."""
    parts = path.split(os.sep)
    if len(parts) >= 3 and parts[-2] == "subagents" and parts[-1].startswith("agent-"):
        folder = os.sep.join(parts[:-2])
        return [folder + ".jsonl", folder]
    name = parts[-1]
    if name.startswith("agent-") or not name.endswith(".jsonl"):
        return []
    return [path[: -len(".jsonl")]]


def sniff(obj: dict) -> bool:
    """True when a decoded record looks like a Claude Code transcript line."""
    return "sessionId" in obj or "uuid" in obj or obj.get("type") in ("summary", "file-history-snapshot")


def _text_of(content) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                text = block.get("text")
                if isinstance(text, str):
                    return text
    return None


def _error_kind(obj: dict) -> str:
    err = obj.get("error")
    status = obj.get("apiErrorStatus")
    if isinstance(err, dict):  # system/api_error: {"status": 429, "error": {"type": …}}
        status = err.get("status")
        inner = err.get("error")
        inner = inner.get("error") if isinstance(inner, dict) and isinstance(inner.get("error"), dict) else inner
        err = inner.get("type") if isinstance(inner, dict) else None
    err = err if isinstance(err, str) else ""
    if "rate_limit" in err or status == 429:
        return "rate_limit"
    if "overloaded" in err or status == 529:
        return "overloaded"
    if "auth" in err or status in (401, 403):
        return "auth"
    if "billing" in err or "credit" in err:
        return "billing"
    return "api_error"


_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


@functools.lru_cache(maxsize=256)
def _version_tuple(version: str) -> tuple[int, int, int] | None:
    m = _VERSION.match(version)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def _version_at_least(version, *least: int) -> bool:
    if not isinstance(version, str):
        return False
    v = _version_tuple(version)  # a handful of distinct versions: cached
    return v is not None and v >= least


def _every_turn_marked(obj: dict) -> bool:
    """The record's Claude Code ends every turn with ``turn_duration``: the
    CLI entry point from ``EVERY_TURN_DURATION`` on (not ``sdk-cli``)."""
    return obj.get("entrypoint") == "cli" and _version_at_least(obj.get("version"), *EVERY_TURN_DURATION)


def _blocked_prompt(obj: dict) -> bool:
    """A ``system/informational`` record saying a UserPromptSubmit hook blocked
    the prompt (2.1.332: ``promptSubmitEnding.ending.kind: blocked_by_hook``,
    content "UserPromptSubmit operation blocked by hook: …")."""
    end = obj.get("promptSubmitEnding")
    end = end.get("ending") if isinstance(end, dict) else None
    if isinstance(end, dict) and end.get("kind") == "blocked_by_hook":
        return True
    content = obj.get("content")
    return isinstance(content, str) and content.startswith("UserPromptSubmit operation blocked by hook")


def _number(v) -> float | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


class FileDecoder:
    """Projects the records of one Claude Code file into events.

    ``sidechain_file`` marks every record of a subagent file as sidechain. ``file_session``: the session
    the file is named for; records of a main file that name another (UUID) session are marked ``foreign``
    (a resumed session's copies, or a file after ``/clear`` still carrying the old id; ``exporter.identity``
    tells which from their time). Keeps the start time of the current main-thread turn so that an
    assistant text line can say whether a ``turn_duration`` record will still follow."""

    def __init__(self, sidechain_file: bool = False, file_session: str | None = None):
        self.sidechain_file = sidechain_file
        self._file_session = file_session if file_session and _UUID.match(file_session) else None
        self._turn_start: float | None = None
        #: background work launched, not yet notified or stopped (ordered): task id → ``agent`` or ``workflow``
        self._agents: dict[str, str] = {}
        self._stop_hooks: dict[str, None] = {}  # Stop hook commands in progress (not the exporter's)
        self._wakes_at: float | None = None  # an armed ScheduleWakeup (Unix seconds)
        self._meta_uuid: str | None = None  # the last isMeta prompt (a synthetic reply to it is bookkeeping)
        self._wakeup_calls: dict[str, None] = {}  # ScheduleWakeup tool_use ids whose result is not read yet
        #: The API responses of the records projected since ingest took them (exporter.usage).
        self.usage: list = []
        self._response_id = self._response_request = None  # the last one handed on (usage())

    def _pending(self) -> str:
        """What resumes the agent by itself now, as an event detail ("" for nothing)."""
        parts = []
        if self._agents:
            workflows = sum(1 for k in self._agents.values() if k == "workflow")
            parts.append(pending_detail(len(self._agents) - workflows, workflows))
        if self._stop_hooks:  # the exporter's own Stop hook is not among them: its delivery is not the end
            parts.append(f"stop_hooks_running:{len(self._stop_hooks)}")
        return ";".join(parts)

    def project(self, obj: dict) -> Event | None:
        """One decoded record to an :class:`Event` (``None`` to ignore it)."""
        get = obj.get
        rtype = get("type")
        if rtype == "agent-name":
            return None  # a name only; a teammate file binds at its first record with a team
        ts = parse_timestamp(get("timestamp"))
        ident, sid, cwd = get("uuid"), get("sessionId"), get("cwd")
        ev = Event(META, ts, ident if isinstance(ident, str) else None,  # kind, ts, ident, sidechain
                   self.sidechain_file or get("isSidechain") is True,
                   session_id=sid if isinstance(sid, str) else None, cwd=cwd if isinstance(cwd, str) else None)
        team = get("teamName")
        if isinstance(team, str) and team and not ev.sidechain:
            if isinstance(get("agentName"), str):
                # a teammate's file: work inside the lead's session, never a session of its own
                ev.sidechain = True
                ev.session_id = _lead_of(team) or _team_key(team)
            elif ev.session_id and _UUID.match(ev.session_id) and _TEAM_LEADS.get(team) != ev.session_id:
                _remember_lead(team, ev.session_id)
        if (self._file_session and ev.session_id and ev.session_id != self._file_session
                and not self.sidechain_file and not ev.sidechain):
            ev.foreign = True  # a resumed session's copy, or a new file under the old id
        if rtype == "assistant":
            self._assistant(obj, ev)
        elif rtype == "progress":
            data = get("data")
            if not (isinstance(data, dict) and data.get("type") == "hook_progress"):
                ev.kind = ACTIVITY
            elif data.get("hookEvent") == "Stop" and not ev.sidechain:
                cmd = data.get("command")
                cmd = cmd if isinstance(cmd, str) else f"#{len(self._stop_hooks)}"
                if not _OWN_HOOK.search(cmd) and len(self._stop_hooks) < _MAX_PENDING:
                    self._stop_hooks[cmd] = None
                if self._pending():
                    ev.kind, ev.cont, ev.detail = WORK, True, "stop_hooks_running"  # not the end yet
        elif rtype == "user":
            self._user(obj, ev)
        elif rtype == "system":
            self._system(obj, ev)
        elif rtype == "attachment":
            att = get("attachment")
            if isinstance(att, dict) and att.get("type") == "hook_blocking_error" and att.get("hookEvent") == "Stop":
                ev.kind, ev.cont, ev.detail = WORK, True, "stop_hook_blocked"  # the stop was refused: the turn goes on
        if ev.sidechain and ev.kind != META:
            ev.kind = ACTIVITY
            return ev
        if self._stop_hooks and (ev.kind == START or rtype == "assistant"):
            self._stop_hooks.clear()  # a new prompt or response: the Stop hooks are done (a summary may be missing)
        if ev.kind == START:
            self._wakes_at = None
            if ts is not None:
                self._turn_start = ts
        pending = ev.pending = self._pending() if self._agents or self._stop_hooks else ""
        if ev.told is not None:
            pending = ev.pending = ev.told  # what the agent states decides (the reducer holds a COMPLETE on it)
        elif pending and ev.cont and ev.kind == WORK and ev.detail == "stop_hooks_running":
            ev.detail = pending
        if self._wakes_at is not None:
            ev.wakes_at = self._wakes_at
        return ev

    def _system(self, obj: dict, ev: Event) -> None:
        sub = obj.get("subtype")
        if sub == "turn_duration":
            self._stop_hooks.clear()  # written after the Stop hooks ran
            agents, workflows = (_number(obj.get(k)) for k in ("pendingBackgroundAgentCount", "pendingWorkflowCount"))
            if agents is not None or workflows is not None or _version_at_least(obj.get("version"), *STATES_PENDING):
                # the agent's own count decides (2.1.332 leaves a count of 0 out); its tasks that
                # the transcript never saw end (TaskStop, a lost notification) end here
                agents, workflows = max(0, int(agents or 0)), max(0, int(workflows or 0))
                if not agents and not workflows:
                    self._agents.clear()
                ev.told = pending_detail(agents, workflows)
            ev.kind, ev.detail = COMPLETE, sub
            dur = _number(obj.get("durationMs"))
            ev.duration = dur / 1000.0 if dur is not None else None
        elif sub == "stop_hook_summary":
            self._stop_hooks.clear()
            if obj.get("hookAdditionalContext"):
                ev.kind, ev.cont, ev.detail = WORK, True, "stop_hook_context"  # a hook resumed the turn
            elif _every_turn_marked(obj) and obj.get("hasOutput") is True and obj.get("preventedContinuation") is not True:
                # hook output may be a blocked stop ("Stop hook feedback"); turn_duration still comes
                ev.kind, ev.cont, ev.detail = WORK, True, "stop_hook_output"
            else:
                ev.kind, ev.detail = COMPLETE, sub
        elif sub == "informational" and _blocked_prompt(obj):
            # a UserPromptSubmit hook refused the prompt (2.1.332): the model is never called, so the
            # start the exporter's own UserPromptSubmit hook reported was not a turn
            ev.detail, ev.undo = "prompt_blocked", True
        elif sub == "api_error":
            ev.kind, ev.detail = ERROR, "api_error"
            ev.error_kind = _error_kind(obj)
            attempt, most, wait = (_number(obj.get(k)) for k in ("retryAttempt", "maxRetries", "retryInMs"))
            if not (attempt is not None and most is not None and attempt >= most):
                ev.retry_in = (wait or 0.0) / 1000.0  # Claude Code retries: working until overdue

    def _user(self, obj: dict, ev: Event) -> None:
        origin = obj.get("origin")
        origin = origin.get("kind") if isinstance(origin, dict) else None
        if obj.get("isMeta") is True:
            text = _text_of((obj.get("message") or {}).get("content") if isinstance(obj.get("message"), dict) else None)
            text = text.lstrip() if text is not None else ""
            if text.startswith("<system-reminder>"):
                text = text[len("<system-reminder>"):].lstrip()
            if text.startswith(_STOP_HOOK_FEEDBACK):
                ev.kind, ev.cont, ev.detail = WORK, True, "stop_hook_feedback"  # a Stop hook blocked: the turn goes on
            elif text.startswith(_STOP_HOOK_CONTEXT):
                ev.kind, ev.cont, ev.detail = WORK, True, "stop_hook_context"  # a Stop hook resumed the turn
            elif origin == "auto-continuation":
                ev.kind, ev.detail = START, "auto_continuation"  # a usage limit reset: the agent goes on by itself
            else:
                self._meta_uuid = ev.ident  # Claude Code's own prompt ("Continue from where you left off.")
            return
        if obj.get("isCompactSummary") is True:
            return
        msg = obj.get("message")
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, list):
            kinds = {t for b in content if isinstance(b, dict) and isinstance(t := b.get("type"), str)}
            text = _text_of(content)
            if text is not None and text.startswith(_INTERRUPT_PREFIX):
                ev.kind = INTERRUPT
                ev.detail = "shutdown" if obj.get("interruptedByShutdown") is True else "interrupt"
            elif "tool_result" in kinds or "toolUseResult" in obj:
                ev.kind = WORK
                ev.detail = "tool_result"
                self._tool_result(obj.get("toolUseResult"), ev.ts)
                if self._wakeup_calls and self._wakes_at is None:
                    self._wakeup_text(content, ev.ts)
            elif text is not None and (origin == "task-notification" or text.lstrip().startswith(_TASK_NOTIFICATION)):
                self._notified(text)
                ev.kind, ev.detail = START, "task_notification"
            elif text is not None and text.lstrip().startswith(_META_PREFIXES):
                return
            elif kinds:
                ev.kind = START
                ev.detail = "prompt"
        elif isinstance(content, str):
            if content.startswith(_INTERRUPT_PREFIX):
                ev.kind = INTERRUPT
                ev.detail = "shutdown" if obj.get("interruptedByShutdown") is True else "interrupt"
            elif origin == "task-notification" or content.lstrip().startswith(_TASK_NOTIFICATION):
                self._notified(content)
                ev.kind, ev.detail = START, "task_notification"
            elif content.lstrip().startswith(_META_PREFIXES):
                return
            else:
                ev.kind = START
                ev.detail = "prompt"

    def _tool_result(self, result, ts: float | None) -> None:
        """Note what a tool result arms: a background agent launch, a wakeup."""
        if not isinstance(result, dict):
            return
        if result.get("status") == "async_launched" and "error" not in result:
            # an Agent (``agentId``) or a workflow (``taskId``, ``taskType: local_workflow``; 2.1.332)
            task = result.get("agentId") or result.get("taskId")
            task = task if isinstance(task, str) and len(task) <= 128 else f"#{len(self._agents)}"
            kind = "workflow" if result.get("taskType") == "local_workflow" else "agent"
            if len(self._agents) < _MAX_PENDING:
                self._agents[task] = kind
        stopped = result.get("task_id")
        if isinstance(stopped, str) and isinstance(result.get("message"), str) and "task_type" in result:
            self._agents.pop(stopped, None)  # TaskStop (2.1.332): no notification follows
        delay = _number(result.get("clampedDelaySeconds"))
        when = _number(result.get("scheduledFor"))
        if delay is not None and ts is not None and 0 <= delay < 1e7:
            self._wakes_at = ts + delay  # ScheduleWakeup: delay from its own result record
        elif when is not None and 1e11 < when < 1e14:  # ms since the epoch
            self._wakes_at = when / 1000.0

    def _wakeup_text(self, content: list, ts: float | None) -> None:
        """A ``ScheduleWakeup`` result that gives only its text ("Next wakeup
        scheduled for 10:20:00 (in 1200s). …", 2.1.332's tool result block;
        no ``toolUseResult.scheduledFor``): armed ``N`` s after the record."""
        for block in content:
            if not (isinstance(block, dict) and block.get("type") == "tool_result"):
                continue
            if self._wakeup_calls.pop(block.get("tool_use_id"), 0) is None:
                text = _text_of(block.get("content"))
                m = _WAKEUP_IN.search(text[:1024]) if isinstance(text, str) else None
                if m and ts is not None and int(m.group(1)) < 1e7:
                    self._wakes_at = ts + int(m.group(1))

    def _notified(self, text: str) -> None:
        """A ``<task-notification>``: the background task it names has ended."""
        ids = _TASK_ID.findall(text[:8192])
        for task in ids:
            self._agents.pop(task.strip(), None)
        if not ids and self._agents:
            self._agents.pop(next(iter(self._agents)))

    def _assistant(self, obj: dict, ev: Event) -> None:
        msg = obj.get("message")
        msg = msg if isinstance(msg, dict) else {}
        mid = msg.get("id")
        if (u := msg.get("usage")) is not None:
            rid = obj.get("requestId")
            if mid != self._response_id or rid != self._response_request or mid is None:  # not the next line of it
                usage(self, obj, msg, u, mid, rid)
        ev.message_id = mid if isinstance(mid, str) else None
        content = msg.get("content")
        if ev.message_id is not None and not ev.sidechain:
            # Identity of an API response row: its message id and content.
            # Rows of one response split per block differ in content; a row
            # Claude Code wrote twice (new uuid, same block) is a duplicate.
            try:
                digest = hashlib.blake2b(orjson.dumps(content), digest_size=8).hexdigest()
                ev.ident = f"{ev.message_id}:{digest}"
            except TypeError:
                pass
        if obj.get("isApiErrorMessage") is True:
            ev.kind = ERROR
            ev.error_kind = _error_kind(obj)
            ev.detail = "api_error_message"
            return
        if msg.get("model") == "<synthetic>":
            if self._meta_uuid is not None and obj.get("parentUuid") == self._meta_uuid:
                ev.detail = "bookkeeping"  # the answer to Claude Code's own meta prompt (a resume)
                return
            # Synthetic records Claude Code writes in place of a reply
            # (e.g. "No response requested."): not a normal success.
            ev.kind = ERROR
            ev.error_kind = "no_response"
            ev.detail = "synthetic"
            return
        kinds = set()
        if isinstance(content, list):
            kinds = {t for b in content if isinstance(b, dict) and isinstance(t := b.get("type"), str)}
        elif isinstance(content, str) and content:
            kinds = {"text"}
        if "tool_use" in kinds or "server_tool_use" in kinds:
            ev.kind = WORK
            ev.detail = "tool_use"
            self._wakes_at = None  # work after an armed wakeup: the wakeup was not the turn's end
            for block in content if isinstance(content, list) else ():
                name = block.get("name") if isinstance(block, dict) and block.get("type") == "tool_use" else None
                if name == "ScheduleWakeup" and isinstance(block.get("id"), str) and len(self._wakeup_calls) < 64:
                    self._wakeup_calls[block["id"]] = None
                if isinstance(name, str) and name in _WAIT_TOOLS:
                    ev.kind, ev.reason, ev.tool = WAIT, _WAIT_TOOLS[name], name
                    ev.detail = "tool_use"
            return
        if "text" not in kinds:
            ev.kind = WORK
            ev.detail = "thinking"
            return
        text = _text_of(content)
        ev.text = text[:_EXCERPT_CHARS] if text else None
        if _every_turn_marked(obj):
            ev.kind, ev.marker_certain = OUTPUT, True  # the turn ends at turn_duration, not end_turn
            ev.detail = "end_turn" if msg.get("stop_reason") in _END_STOP_REASONS else "assistant_text"
            return
        if msg.get("stop_reason") in _END_STOP_REASONS:
            ev.kind = COMPLETE
            ev.detail = "end_turn"
            return
        ev.kind = OUTPUT
        ev.detail = "assistant_text"
        if (
            self._turn_start is not None
            and ev.ts is not None
            and ev.ts - self._turn_start > TURN_DURATION_THRESHOLD_SECONDS
            and _version_at_least(obj.get("version"), 2, 1, 0)
        ):
            ev.expects_marker = True


# -- hooks -------------------------------------------------------------------
#: ``StopFailure`` ``error`` values (Claude Code hooks reference) → error kinds.
_STOP_FAILURE_KINDS = STOP_FAILURE_KINDS
#: ``Notification`` ``notification_type`` values that mean the user must act
#: (``agent_needs_input``, 2.1.198: a background agent needs the user).
_NOTIFICATION_WAITS = {"permission_prompt": "permission", "elicitation_dialog": "elicitation",
                       "agent_needs_input": "question"}
#: ``Notification`` ``notification_type`` values that end an elicitation wait.
_NOTIFICATION_ENDS = ("elicitation_response", "elicitation_complete")


def project_hook(name: str, obj: dict, ts: float) -> Event | None:
    """One Claude Code hook input (the JSON a hook receives on stdin or as an
    HTTP hook's body) to an :class:`Event` at ``ts`` (arrival, Unix seconds),
    or ``None`` when the event says nothing about the session's state.

    ``name`` is ``hook_event_name``. Fields used (Claude Code hooks
    reference, 2.1.x): ``tool_name`` (PermissionRequest), ``notification_type``
    (Notification: ``permission_prompt``, ``elicitation_dialog`` and
    ``agent_needs_input`` are waits; ``elicitation_response`` and
    ``elicitation_complete`` end a wait; ``idle_prompt`` adds nothing: the
    turn end was already seen; ``agent_completed`` is a background agent's
    end, not the main thread's), ``error`` (StopFailure),
    ``background_tasks`` (Stop, 2.1.332: each task's ``type``; agents and
    workflows still in flight are not the user's turn, a shell is; the list,
    empty or not, is the agent's own word and decides over the transcript's
    bookkeeping: ``Event.told``). A subagent's hook carries ``agent_id``; its permission
    prompt still blocks the whole session, so it is the session's wait.
    """
    ev = Event(META, ts=ts, detail=name)
    if name == "PermissionRequest":
        tool = obj.get("tool_name")
        tool = tool if isinstance(tool, str) and tool.isprintable() and len(tool) <= 64 else None
        ev.kind, ev.tool = WAIT, tool
        ev.reason = _WAIT_TOOLS.get(tool or "", "permission")
    elif name == "Notification":
        ntype = obj.get("notification_type")
        ntype = ntype if isinstance(ntype, str) else ""
        if ntype in _NOTIFICATION_ENDS:
            ev.kind, ev.ends_wait, ev.detail = WORK, True, ntype
            return ev
        reason = _NOTIFICATION_WAITS.get(ntype)
        if reason is None:
            return None
        ev.kind, ev.reason, ev.detail = WAIT, reason, ntype
    elif name in ("PostToolUse", "PostToolUseFailure", "PermissionDenied"):
        ev.kind = WORK
    elif name == "UserPromptSubmit":
        ev.kind = START
    elif name == "Stop":
        ev.kind, ev.final = COMPLETE, True
        # Stop hooks of the user's own run beside this one; only stop_hook_summary tells when
        # they are done (2.1.332 writes no hook_progress), and one may still block the stop
        path, cwd = obj.get("transcript_path"), obj.get("cwd")
        ev.stop_hooks = min(_MAX_PENDING, claude_settings.other_hooks(
            "Stop", path if isinstance(path, str) else None, cwd if isinstance(cwd, str) else None))
        tasks = obj.get("background_tasks")
        if isinstance(tasks, list):
            # the agent's own word on what will wake it again (2.1.332): agents and workflows
            # still in flight; a shell or a monitor is not pending work
            kinds = [_PENDING_TASKS.get(t.get("type")) for t in tasks[:_MAX_PENDING]
                     if isinstance(t, dict) and isinstance(t.get("type"), str)]
            ev.told = pending_detail(kinds.count("agent"), kinds.count("workflow"))
    elif name == "StopFailure":
        err = obj.get("error")
        ev.kind, ev.error_kind = ERROR, _STOP_FAILURE_KINDS.get(err if isinstance(err, str) else "", "api_error")
    elif name == "SessionEnd":
        ev.kind = END
    else:
        return None
    return ev


# -- usage -------------------------------------------------------------------
def usage(dec: FileDecoder, obj: dict, msg: dict, u, mid, rid) -> None:
    """Hand ``dec`` (its ``usage`` list) the API response of an assistant
    record (see :mod:`exporter.usage`; ``msg`` its ``message``, ``u`` that
    message's ``usage``, not None, ``mid`` its ``id``, ``rid`` the record's
    ``requestId``), and remember it as the last (its next lines, one per
    content block with the same usage, are not read again). The response:
    ``input_tokens``, ``output_tokens``, ``cache_read_input_tokens``,
    ``cache_creation_input_tokens`` (its
    ``cache_creation.ephemeral_1h_input_tokens`` part priced on its own),
    keyed by ``message.id:requestId`` (every content-block line of one
    response repeats them: counted once, as ccusage does), or ``BAD``
    (``usage`` is not an object), or nothing. ``model`` gets ``-fast`` for
    ``usage.speed: fast`` (as ccusage names it). Synthetic replies
    (``<synthetic>``) and API-error envelopes (``isApiErrorMessage``) count
    nothing (None). Claude reports no reasoning tokens of their own
    (thinking is in ``output_tokens``)."""
    model = msg.get("model")
    if model == "<synthetic>" or obj.get("isApiErrorMessage") is True:
        return
    if type(u) is not dict:
        dec.usage.append(BAD)
        return
    key = f"{mid}:{rid}" if type(mid) is str and mid and type(rid) is str and rid else None
    if type(model) is not str or not model:
        model = "unknown"
    elif u.get("speed") == "fast":
        model += "-fast"
    try:  # one C call where all four are there (Claude Code 2.x writes them all)
        a, b, c, d = _COUNTS(u)
    except KeyError:
        a, b, c, d = (u.get("input_tokens"), u.get("output_tokens"), u.get("cache_read_input_tokens"),
                      u.get("cache_creation_input_tokens"))
    cc = u.get("cache_creation")
    dec.usage.append((key, model, (a, b, c or 0, d or 0, 0,
                                   (cc.get("ephemeral_1h_input_tokens") or 0) if type(cc) is dict else 0)))
    if key is not None:
        dec._response_id, dec._response_request = mid, rid


_COUNTS = operator.itemgetter("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
