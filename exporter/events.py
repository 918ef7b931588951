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


#: Kinds that move the main thread's state (ordered by semantic time).
SIGNIFICANT = frozenset({Kind.START, Kind.WORK, Kind.OUTPUT, Kind.COMPLETE, Kind.ERROR, Kind.INTERRUPT})


@dataclass(slots=True)
class Event:
    """One normalized transcript record.

    Attributes:
        kind: what the record means (see :class:`Kind`).
        ts: the record's own timestamp in Unix seconds, or ``None`` when the
            record has none (the tailer then carries the file's last one).
        ident: identity used for deduplication (Claude ``uuid``; for Codex a
            digest of the line), or ``None`` for records never deduplicated.
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
        expects_marker: for ``OUTPUT``: the agent version will still write an
            explicit end marker for this turn (Claude ≥2.1 writes
            ``turn_duration`` for turns over ~30 s), so inference waits longer.
        session_id: session id stated by the record (Claude ``sessionId``,
            Codex ``session_meta.payload.id``).
        cwd: working directory stated by the record (for the project label).
        subagent: for ``SESSION``: the rollout is a subagent's.
        parent_id: for ``SESSION``: the parent thread of a subagent rollout.
        text: assistant text excerpt (bounded), kept only for opt-in alert
            bodies.
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
    session_id: str | None = None
    cwd: str | None = None
    subagent: bool = False
    parent_id: str | None = None
    text: str | None = None
