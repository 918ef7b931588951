"""Normalized events: what the provider decoders hand to the reducer.

Everything after the decoder sees only these shapes; Claude Code and Codex
field names stay inside ``exporter.providers``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Kind(enum.IntEnum):
    """What a transcript record means for the state of its session.

    - ``START``: a user prompt or an explicit turn start; begins a turn.
    - ``WORK``: main-thread work that is not a final answer (tool call, tool
      result, thinking/reasoning). Supersedes a completion.
    - ``OUTPUT``: main-thread assistant text. Supersedes a completion and is
      the candidate for an *inferred* completion once the transcript is quiet.
    - ``COMPLETE``: an explicit end-of-turn marker.
    - ``ERROR``: the provider stopped the turn on an error (API error, rate
      limit, usage limit).
    - ``INTERRUPT``: the user interrupted the turn.
    - ``ACTIVITY``: sidechain work (subagents), progress lines, retried API
      errors: keeps a working session alive, never completes it and never
      supersedes a completion.
    - ``META``: metadata (titles, snapshots, local commands, compaction,
      replayed history): changes no state.
    - ``SESSION``: session metadata (Codex ``session_meta``); carries identity.
    - ``WAIT``: the agent is blocked mid-turn until the user acts: a question
      or plan approval pending in the transcript (Claude ``AskUserQuestion``/
      ``ExitPlanMode`` tool_use, Codex ``request_user_input`` function_call)
      or a permission prompt/elicitation reported by a hook
      (``PermissionRequest``, ``Notification``) or by Claude Code's session
      registry (``status: waiting``). ``reason`` and ``tool`` say
      what it waits for. The turn's next main-thread record ends it.
    - ``END``: the agent's session ended (Claude ``SessionEnd`` hook): ends a
      wait or an unfinished turn as ``interrupted``; changes nothing else.
    """

    START = 1
    WORK = 2
    OUTPUT = 3
    COMPLETE = 4
    ERROR = 5
    INTERRUPT = 6
    ACTIVITY = 7
    META = 8
    SESSION = 9
    WAIT = 10
    END = 11


#: The members as module names, for the per-line reading path: on Python
#: 3.11 each ``Kind.X`` goes through ``EnumType.__getattr__`` (about 0.1 µs,
#: ten times per transcript line), a module name costs a dict lookup.
START, WORK, OUTPUT, COMPLETE, ERROR, INTERRUPT, ACTIVITY, META, SESSION, WAIT, END = Kind

#: Kinds that move the main thread's state (ordered by semantic time).
SIGNIFICANT = frozenset({START, WORK, OUTPUT, COMPLETE, ERROR, INTERRUPT, WAIT, END})

#: The prefix of the ``Event.pending`` parts that name background work
#: (``background_agents_pending:N``, ``background_workflows_pending:N``): the
#: parts an agent's own statement (``Event.told``) replaces.
BACKGROUND = "background_"

#: Reasons a ``WAIT`` gives (``coding_agent_user_wait_seconds{reason}`` adds
#: ``your_turn`` for the wait after a completion). ``worker_request``,
#: ``sandbox_request`` and ``goal_proposal`` come from Claude Code's session
#: registry (``waitingFor``).
WAIT_REASONS = ("permission", "question", "plan", "elicitation", "worker_request", "sandbox_request",
                "goal_proposal")


@dataclass(slots=True)
class Event:
    """One normalized transcript record.

    Attributes:
        kind: what the record means (see :class:`Kind`).
        ts: the record's own timestamp in Unix seconds, or ``None`` when the
            record has none (the tailer then carries the file's last one).
        ident: identity used for deduplication (Claude ``uuid``, or an
            assistant row's message id and content digest), or ``None``: the
            store then identifies the record by its line's bytes (Codex).
        sidechain: written by a subagent (Claude ``isSidechain``, subagent
            files, Codex subagent rollouts). Sidechain events never complete
            the main thread.
        turn_id: provider turn id where the record names one (Codex
            ``payload.turn_id``).
        message_id: the API response id (Claude ``message.id``); one response
            split over several lines is one message.
        detail: which record produced it (``turn_duration``, ``end_turn``,
            ``task_complete`` …); used as the completion's evidence detail.
        error_kind: for ``ERROR``: ``rate_limit``, ``overloaded``, ``auth``,
            ``api_error``, ``usage_limit``, ``no_response``, …
        duration: turn duration in seconds when the record states one
            (Claude ``durationMs``, Codex ``duration_ms``).
        expects_marker: for ``OUTPUT``: the agent version will probably still
            write an explicit end marker for this turn (Claude 2.1.x before
            ~2.1.126 writes ``turn_duration`` for turns over ~30 s), so
            inference waits longer.
        marker_certain: for ``OUTPUT``: the agent version always ends a turn
            with an explicit marker (Codex rollouts that write
            ``task_started``; Claude CLI ≥~2.1.126 ``turn_duration``), so the
            turn is never inferred complete (a turn that never gets its
            marker becomes ``stalled``).
        retry_in: for ``ERROR``: the agent will retry in this many seconds
            (Claude ``system/api_error`` ``retryInMs``); the error stands only
            once the retry is overdue.
        session_id: session id stated by the record (Claude ``sessionId``,
            Codex ``session_meta.payload.id``).
        cwd: working directory stated by the record (for the project label).
        subagent: for ``SESSION``: the rollout is a subagent's.
        parent_id: for ``SESSION``: the parent thread of a subagent rollout.
        text: assistant text excerpt (bounded), kept only for opt-in alert
            bodies.
        reason: for ``WAIT``: one of :data:`WAIT_REASONS`.
        tool: for ``WAIT``: the tool the agent waits to run or asks through
            (``Bash``, ``AskUserQuestion`` …), when known.
        final: for ``COMPLETE``: the agent itself reported that it stopped
            (a ``Stop`` hook). Assistant output of the same turn that is
            flushed to the transcript after it does not reopen the turn;
            only a new prompt, tool work or a wait does.
        foreign: the record names a session other than the one its file is
            named for (Claude ``sessionId`` in a ``<uuid>.jsonl`` main file):
            a resumed session's copy of earlier records, or a new file after
            ``/clear`` that still carries the old id. :mod:`exporter.identity`
            tells the two apart by the record's time.
        replayed: never news, whatever the batch: a copy the provider
            recognises itself (a Pi fork's copied parent entries) or a
            registry record found so at start-up. It moves the state.
        source: the evidence source, when not the transcript: ``hook`` or
            ``registry`` (Claude Code's session registry); shown as the
            ``source`` that decided a session's state.
        pending: what will resume the agent by itself, as the transcript
            shows it after this record: ``""`` for nothing, else a detail
            such as ``background_agents_pending:2`` or
            ``stop_hooks_running:1`` (no transcript content). ``None``: the
            record cannot tell (hook events); the reducer keeps what the
            transcript last said.
        stop_hooks: for a ``COMPLETE`` from a ``Stop`` hook: how many Stop hooks
            of the user's own run beside it (Claude Code settings); the turn
            ends at the agent's word that they are done (a later transcript
            marker), or ``stop_hook_wait`` seconds after the hook.
        told: what the agent itself states is pending after this record, in
            ``pending``'s terms (Claude ``turn_duration`` counts, the ``Stop``
            hook's ``background_tasks``), or ``None`` when it states nothing:
            the exporter's own bookkeeping (``pending``) then fills the gap.
            A statement decides over the bookkeeping's background parts
            (:data:`BACKGROUND`) for the rest of the turn's end; Stop hooks
            still running stay pending.
        cont: the record continues the turn in progress even after an end
            marker (a Stop hook running, blocking or adding context;
            background agents still running): it never starts a turn of its
            own, so the turn keeps its key (one page per turn).
        wakes_at: the agent armed a wakeup in this turn (Claude
            ``ScheduleWakeup`` ``toolUseResult.scheduledFor``) and will be
            invoked again at this time (Unix seconds); set on every record
            from the arming to the next prompt or tool call.
        review: the turn's approval requests go to the agent's own reviewer
            first (Codex ``turn_context.approvals_reviewer`` other than
            ``user``, 0.171): a permission prompt a hook reports is the
            user's only once nothing follows it for ``inferred_settle``.
        marker_only: the turn ends only at the agent's own end marker,
            whatever a hook says (Codex rollouts that wrote ``task_started``:
            Codex 0.150 can run its ``Stop`` hook mid-turn).
        undo: for ``META``: the turn this record's task started (``turn_id``)
            was not a turn of the agent (Codex: a user's ``!cmd``, a manual
            ``/compact``): the state from before its start comes back.
        open_only: applies only to a turn still open (its last main-thread
            event a start, work, output or wait): a hook that tells a turn
            end the transcript may already have told otherwise (Gemini CLI
            ``AfterAgent`` after Esc or an API error).
        ends_wait: for ``WORK``: only ends a wait (Claude ``Notification``
            ``elicitation_response``/``elicitation_complete``); changes
            nothing when no wait is open.
    """

    kind: Kind
    ts: float | None = None
    ident: object = None
    sidechain: bool = False
    turn_id: str | None = None
    message_id: str | None = None
    detail: str | None = None
    error_kind: str | None = None
    duration: float | None = None
    expects_marker: bool = False
    marker_certain: bool = False
    retry_in: float | None = None
    session_id: str | None = None
    cwd: str | None = None
    subagent: bool = False
    parent_id: str | None = None
    text: str | None = None
    reason: str | None = None
    tool: str | None = None
    final: bool = False
    foreign: bool = False
    replayed: bool = False
    source: str | None = None
    pending: str | None = None
    told: str | None = None
    stop_hooks: int = 0
    cont: bool = False
    wakes_at: float | None = None
    review: bool = False
    marker_only: bool = False
    ends_wait: bool = False
    undo: bool = False
    open_only: bool = False
