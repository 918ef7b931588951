"""Reducer: ordered evidence of one session to its state.

Rules, in order (see docs/states.md). The question behind
them: whose move is it? A turn end is "your turn" only when nothing will
resume the agent by itself; what is pending is named in the state's detail.

1. Malformed records never reach here; the reducer keeps going regardless.
2. Significant main-thread events are ordered by their own timestamps, file
   order breaking ties; the latest one decides the state. Duplicates are
   filtered before (by identity, per session) in the session store;
   a Codex fork's replayed prefix is ``META`` from the provider; copies of
   earlier history (``exporter.identity``) move the state but are applied as
   history (never news, never a page). Records the agent did
   not work on (a user's ``!`` shell task, a manual compaction, a synthetic
   reply to the agent's own meta prompt) are ``META`` from the provider; the
   record that shows a task was such takes the task's start back (``undo``:
   the state from before that start returns, when nothing else happened
   since; a start older than the ``undo`` that arrives after it is dropped:
   a Claude UserPromptSubmit hook read after the record saying another hook
   blocked that prompt). A turn's first record that arrives after the
   ``Stop`` hook that ended it, when that hook came right after an earlier
   turn's end (the record newer than that end by ``LATE_START_SECONDS``:
   Claude Code 2.1.332 flushes the answer to a ``!`` command late), starts
   that turn, and the hook ends it.
3. Sidechain events are ``ACTIVITY``: they keep a session alive (its last
   write time) but never complete it and never supersede a completion
   (subagents, agent-team teammates).
4. A provider error ends the turn as ``error``; an explicit completion that
   follows an error in the same turn (Codex writes ``task_complete`` after a
   usage-limit ``error``) stays ``error``. An error the agent will retry
   (``retry_in``) reads ``working`` until the retry is overdue by
   ``retry_grace`` with nothing written since, then ``error``; anything but
   an error after it means the retry answered, and the turn is not an error
   (Claude Code 2.1.332 ``-p``). The same failure told again in general
   terms (``api_error``: a Claude ``StopFailure`` hook) keeps the kind it
   already had, and an error older than the one that decided (the
   transcript's envelope read after that hook) still names its kind.
5. Pending work that resumes the agent by itself. What the agent itself
   states (``told``: Claude ``turn_duration``'s pending counts, the ``Stop``
   hook's ``background_tasks``) decides, from the statement until the next
   start or tool work; the provider's own bookkeeping on each transcript
   event (``pending``: background agents launched and not yet reported
   back, Stop hooks other than the exporter's still running, an active
   Codex ``/goal``) fills the gap when the agent stated nothing. A
   completion (a transcript marker or a ``Stop`` hook, ``final``) while
   something is pending is ``WORK`` that continues the turn (``cont``:
   same turn key, so one page per turn). In a turn that ends only at the
   agent's own marker (``marker_only``: Codex ``task_started``) a ``Stop``
   hook ends nothing.
6. A completion with a wakeup armed (``wakes_at``) due within
   ``wakeup_hold`` seconds of the turn end reads ``working`` until
   ``retry_grace`` past the wakeup time; a later wakeup completes at once
   and its detail names the time. A ``Stop`` hook's completion while Stop
   hooks of the user's own run beside it (``stop_hooks``) reads ``working``
   (``stop_hooks_running:N``) until the agent's next record decides (its
   ``stop_hook_summary``: done, or blocked), at most ``stop_hook_wait``
   seconds.
7. A completion stands only while no later main-thread start, work or output
   exists. An ``OUTPUT`` (assistant text) that stays last becomes an
   *inferred* completion once every file of the session has been quiet for
   ``inferred_settle`` seconds (``marker_wait`` when the agent version will
   probably still write an explicit marker for this turn) — never when the
   version always writes one (``marker_certain``).
8. A ``WAIT`` (a question or plan approval pending in the transcript, a
   permission prompt or input request reported by a hook) makes the
   session ``waiting`` until the turn's next main-thread record (or a hook
   that ends it: ``ends_wait``); a ``WAIT`` while already waiting is the
   same wait (one page). A permission prompt in a turn whose approvals go
   to the agent's own reviewer first (``review``) reads ``working`` until
   nothing followed it for ``inferred_settle``. A waiting session is never
   ``stalled``. A session ``END`` turns a wait or an unfinished turn into
   ``interrupted``, and lets an error the agent would have retried stand
   at once. An end told by a hook that applies only to an open turn
   (``open_only``: Gemini CLI ``AfterAgent``) changes nothing after a
   cancel or an error.
9. A completion the agent itself reported (``final``: a ``Stop`` hook) is
   not reopened by assistant output flushed after it; a prompt, tool work or
   a wait does.
10. A working session with nothing written for ``stall_after`` seconds is
   ``stalled``.
11. A turn end that news passes over before the state is looked at (a
   later turn in the same read) is kept in ``passed``, with the state that
   superseded it, so that each turn end is counted and judged for a page.
12. Quiet time is measured at ``now`` on the last write time the caller
   passes; the store passes the last record time at or before ``now`` when
   the files were modified after ``now`` (``scan --at`` in the past).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone

from .names import EVIDENCE, STATES  # noqa: F401  (re-exported)
from .events import BACKGROUND, COMPLETE, END, ERROR, INTERRUPT, OUTPUT, SIGNIFICANT, START, WAIT, WORK, Event, Kind

#: The kinds that are not :data:`~.events.SIGNIFICANT`, as a tuple: a set
#: lookup hashes the member (``Enum.__hash__``, Python code).
_QUIET = tuple(k for k in Kind if k not in SIGNIFICANT)
#: A wait told by another source this close before the wait in progress is
#: the same wait told late (seconds): Claude Code 2.1.332 sets its registry
#: record to a permission prompt before the transcript's ``ExitPlanMode``
#: line (stamped earlier) reaches the disk.
SAME_WAIT_SECONDS = 5.0
#: A record older than the ``Stop`` hook that ended its turn starts that turn
#: (:meth:`SessionReducer._late_start`) only when it is at least this much
#: newer than the turn end before the hook (seconds): lines of one response are
#: milliseconds apart, a user's next command and its answer take longer.
LATE_START_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Timing:
    """Time-based rules, all in seconds (``retry_grace``: how long past an
    announced retry time an agent's retry may be late before the error
    stands, or an armed wakeup before the turn end stands; ``wakeup_hold``:
    the longest wakeup delay that holds the page; ``stop_hook_wait``: how
    long a ``Stop`` hook waits for the agent's word that the user's own Stop
    hooks are done)."""

    inferred_settle: float = 30.0
    marker_wait: float = 300.0
    stall_after: float = 600.0
    retry_grace: float = 30.0
    wakeup_hold: float = 900.0
    stop_hook_wait: float = 600.0


@dataclass(frozen=True, slots=True)
class Status:
    """A session's state at one instant.

    ``turn`` is the turn's stable key, unique within its session (record
    ids are not unique across sessions in practice: field case 30);
    ``evidence`` is ``explicit``/``inferred`` for ``completed``;
    ``error_kind`` is set for ``error``; ``since`` is the semantic time (Unix
    seconds) the state began; ``live`` is False when the deciding record was
    read during the start-up backfill. For ``waiting``: ``reason`` (see
    :data:`~.events.WAIT_REASONS`), ``tool`` (or None) and ``wait``, the
    wait's stable key (one page per wait).
    """

    state: str
    turn: str | None = None
    evidence: str | None = None
    detail: str | None = None
    error_kind: str | None = None
    since: float | None = None
    live: bool = False
    duration: float | None = None
    reason: str | None = None
    tool: str | None = None
    wait: str | None = None


def _key(ident_key) -> str | None:
    """``ident_key`` of :meth:`SessionReducer.apply`: the string, or what its function returns."""
    return ident_key() if callable(ident_key) else ident_key


class SessionReducer:
    """Folds one session's events into its state.

    ``apply(event, seq, live)`` takes events in arrival order; ``seq`` is the
    session-wide arrival number used to break timestamp ties. ``status(now,
    last_write)`` evaluates the time-based rules at ``now`` given the last
    time any file of the session was written (both Unix seconds).
    """

    __slots__ = ("timing", "_last", "_last_key", "_last_live", "turn", "_turn_start",
                 "_turn_error", "last_event_ts", "last_text", "_turn_auto", "_wait", "passed", "owed",
                 "_pending", "_review", "_marker_only", "_wait_review", "_wakes_at", "_before", "_told",
                 "_undone_at", "_end_before")

    def __init__(self, timing: Timing):
        self.timing = timing
        self._last: Event | None = None
        self._last_key: tuple[float, int] = (float("-inf"), -1)
        self._last_live = False
        self.turn: str | None = None
        self._turn_auto = True  # the turn key was derived, not a provider turn id
        self._turn_start: float | None = None
        self._turn_error: str | None = None
        self.last_event_ts: float | None = None
        self.last_text: str | None = None
        self._wait: tuple[str | None, str | None, str | None] | None = None  # (key, reason, tool)
        #: Turn ends that news passed through before the caller looked: an
        #: explicit completion or error a later turn superseded within one
        #: read (turns written while the exporter was down, a file copied in
        #: at once). The caller takes them (``SessionStore.evaluate``).
        self.passed: list[Status] = []
        #: Turn keys whose end still owes a page (the ledger said "pending" at
        #: start-up): kept in ``passed`` even when read as backfill, so that a
        #: crash between the page's decision and its delivery loses nothing.
        self.owed: frozenset = frozenset()
        #: What the transcript last said will resume the agent by itself
        #: (:attr:`~.events.Event.pending`), and its turn facts.
        self._pending = ""
        self._review = False
        self._marker_only = False
        self._wait_review = False
        self._wakes_at: float | None = None
        self._before: tuple | None = None  # the state before the current turn's start (for ``undo``)
        #: What the agent itself last stated is pending (:attr:`~.events.Event.told`) in this
        #: turn's end; None: it stated nothing since the turn's last start or tool work.
        self._told: str | None = None
        #: Record time of an ``undo`` that found no start to take back (the start may come later).
        self._undone_at: float | None = None
        #: Record time of the turn end before a ``Stop`` hook that continued it (for a late start).
        self._end_before: float | None = None

    @property
    def decided_at(self) -> float | None:
        """Record time (Unix seconds) of the event that decides the state."""
        return self._last.ts if self._last is not None else None

    @property
    def decided_by(self) -> str | None:
        """Which source's evidence decides the state: ``transcript``,
        ``hook`` or ``registry`` (Claude Code's session registry); None
        before any."""
        return None if self._last is None else self._last.source or "transcript"

    def apply(self, ev: Event, seq: int, live: bool, ident_key=None) -> None:
        """Apply one event. ``ident_key`` is a stable string unique within the
        session for the record (used to name the turn or wait it starts), or
        a function returning it (called only then: a digest costs more than
        the rest of the record's reduction)."""
        if ev.ts is not None and (self.last_event_ts is None or ev.ts > self.last_event_ts):
            self.last_event_ts = ev.ts
        kind = ev.kind
        if ev.undo:
            self._undo(ev)
            return
        if kind in _QUIET or ev.sidechain:
            return
        hook = ev.pending is None  # a hook event: the transcript's facts stand
        if not hook:
            self._pending, self._review, self._marker_only = ev.pending, ev.review, ev.marker_only
            self._wakes_at = ev.wakes_at
        if kind == COMPLETE and ev.wakes_at is None:
            ev.wakes_at = self._wakes_at  # a Stop hook at the end of a turn that armed a wakeup
        key = (ev.ts if ev.ts is not None else self._last_key[0], seq)
        prev = self._last.kind if self._last is not None else None
        if kind == START and self._undone_at is not None and ev.ts is not None and ev.ts <= self._undone_at:
            self._undone_at = None
            return  # the start an earlier ``undo`` took back, told late (a hook read after the record)
        if key < self._last_key and self._late_start(ev, prev, ident_key, live):
            return
        if key < self._last_key and kind in (ERROR, INTERRUPT) and prev == COMPLETE and self._last.open_only \
                and self._last.ts is not None and ev.ts is not None and self._last.ts - ev.ts <= SAME_WAIT_SECONDS:
            # the end a hook told (Gemini CLI AfterAgent, also after Esc or an API error) was this cancel or
            # error, read from the transcript after it (the two come within ~0.1 s, in either order)
            key = self._last_key
        if key < self._last_key:
            if kind == WAIT and prev == WAIT and ev.reason and self._wait[1] == "permission" \
                    and self._last.ts is not None and ev.ts is not None and self._last.ts - ev.ts <= SAME_WAIT_SECONDS:
                self._wait = (self._wait[0], ev.reason, self._wait[2] or ev.tool)  # the same wait, its reason told late
            if kind == ERROR and prev == ERROR and self._turn_error == "api_error" and ev.error_kind:
                # the transcript's error envelope, read after the hook that told the same failure in
                # general terms (Claude Code 2.1.332: StopFailure ``server_error`` for a 529), names its kind
                self._turn_error = ev.error_kind
            return  # older than what already decided the state
        if ev.ends_wait and prev != WAIT:
            return  # nothing to end
        if ev.open_only and prev not in (START, WORK, OUTPUT, WAIT):
            return  # the turn already ended otherwise (cancelled, failed): this end is not news
        if ev.told is not None:
            self._told = ev.told  # the agent's own word: it decides over the bookkeeping for this turn's end
        elif kind == START or kind == WORK and not ev.cont:
            self._told = None  # a new start or new tool work: what was stated before no longer covers it
        if kind == COMPLETE:
            if ev.final and self._marker_only:
                return  # the turn ends at the agent's own marker (Codex task_complete), whatever a hook says
            pending = self._pending
            if self._told is not None:  # the statement is about background work; other pending stays
                pending = ";".join([self._told] * bool(self._told) + [
                    p for p in pending.split(";") if p and not p.startswith(BACKGROUND)])
            if pending:  # the turn's end was written, but something resumes the agent by itself
                ev.kind, kind, ev.cont, ev.detail, ev.final = WORK, WORK, True, pending, False
        if kind == END:
            if prev == ERROR and self._last.retry_in is not None:
                self._last = replace(self._last, retry_in=None)  # the agent's process ended: no retry comes
                return
            if prev not in (START, WORK, OUTPUT, WAIT):
                return  # the turn had already ended: nothing to change
            ev.kind, kind = INTERRUPT, INTERRUPT
        if kind == OUTPUT and prev == COMPLETE and self._last.final:
            # the agent reported its stop; this is its answer, flushed late (the first record of the turn
            # the hook ended, when it came right after an earlier turn's end: a ``!`` command's answer)
            self._late_start(ev, prev, ident_key, live)
            return
        if kind == WAIT:
            if prev == WAIT:  # the same wait, told again (transcript and hook, or two hooks)
                key0, reason, tool = self._wait
                self._wait = (key0, reason if reason != "permission" or not ev.reason else ev.reason,
                              tool or ev.tool)
                return
            self._wait = (_key(ident_key), ev.reason, ev.tool)
            self._wait_review = hook and self._review and ev.reason == "permission"
        # a turn ended (an error the agent will retry has not ended it)
        terminal = prev is None or (prev in (COMPLETE, ERROR, INTERRUPT) and self._last.retry_in is None)
        if kind == START:
            if prev != START:
                self._before = (self._last, self._last_key, self._last_live, self.turn, self._turn_auto,
                                self._turn_start, self._turn_error, self._wait, len(self.passed))
                self._new_turn(ev, ident_key, live)
            elif ev.turn_id and self._turn_auto:
                self.turn, self._turn_auto = ev.turn_id, False
        elif kind in (WORK, OUTPUT, WAIT) and terminal and not ev.cont:
            self._new_turn(ev, ident_key, live)
        elif self.turn is None:
            self._new_turn(ev, ident_key)
        if kind == ERROR:
            if not (prev == ERROR and self._turn_error and (ev.error_kind or "api_error") == "api_error"):
                # (the same failure told again in general terms keeps its kind: Claude Code 2.1.332's
                # StopFailure hook says ``server_error`` after the envelope of a 529 said overloaded)
                self._turn_error = ev.error_kind or "api_error"
        elif kind in (START, WORK, OUTPUT, WAIT) or prev == ERROR and self._last.retry_in is not None:
            # a retried request that answered (Claude Code 2.1.332 ``-p``: ``system/api_error``
            # attempts 1 and 2, then ``end_turn`` and ``stop_hook_summary``) did not fail the turn
            self._turn_error = None
        if ev.text is not None and kind in (OUTPUT, COMPLETE):
            self.last_text = ev.text
        self._end_before = self._last.ts if (kind == COMPLETE and ev.final and terminal and prev is not None
                                             and self._last is not None) else None
        self._undone_at = None
        self._last, self._last_key, self._last_live = ev, key, live

    def _late_start(self, ev: Event, prev, ident_key, live: bool) -> bool:
        """A turn's first record read after the ``Stop`` hook that ended it
        (Claude Code 2.1.332 may flush the answer to a ``!`` command after its
        Stop hook ran, and nothing else starts that turn): the hook came right
        after an earlier turn's end, and ``ev`` is newer than that end (older
        than the hook, or assistant output flushed after it) and not a
        continuation.
        The hook's completion then ends a turn of its own, begun at ``ev``.
        True when so (``ev`` applied)."""
        if (self._end_before is None or prev != COMPLETE or not self._last.final or ev.cont or ev.ts is None
                or ev.ts < self._end_before + LATE_START_SECONDS or ev.kind not in (START, WORK, OUTPUT)):
            return False
        end, end_key, end_live = self._last, self._last_key, self._last_live
        self._new_turn(ev, ident_key, live)
        self._turn_error = None
        self._end_before = None
        self._last, self._last_key, self._last_live = end, end_key, end_live
        return True

    def _undo(self, ev: Event) -> None:
        """The turn just started was not one (``undo``): back to the state
        before its start, when nothing but that start (and, within the same
        ``turn_id``, assistant output) has happened since."""
        b, last = self._before, self._last
        if last is None or last.kind != START:
            self._undone_at = ev.ts  # its start may still come (a hook read after the record)
        if b is None or last is None or (ev.turn_id and self.turn != ev.turn_id):
            return
        if last.kind != START and not (last.kind == OUTPUT and ev.turn_id):
            return  # (an answer of the same task may stand between: Codex 0.171 /compact)
        (self._last, self._last_key, self._last_live, self.turn, self._turn_auto, self._turn_start,
         self._turn_error, self._wait, n) = b
        del self.passed[n:]
        self._before = None

    def _new_turn(self, ev: Event, ident_key, live: bool = False) -> None:
        last = self._last
        ended = last is not None and (self._last_live or self.turn in self.owed) and (
            last.kind == COMPLETE or last.kind == ERROR and last.retry_in is None)
        if ended:
            self.passed.append(self.status(last.ts or 0.0, 0.0))  # (the time rules do not apply to these)
        if ev.turn_id:
            self.turn, self._turn_auto = ev.turn_id, False
        else:
            self.turn, self._turn_auto = _key(ident_key), True
        self._turn_start = ev.ts
        if ended:  # and what superseded it, from its record time (a wait met in passing pages nothing)
            self.passed.append(Status("working", turn=self.turn, since=ev.ts if ev.ts is not None else last.ts,
                                      live=live))
        self._turn_error = None

    def status(self, now: float, last_write: float) -> Status:
        """The state at ``now`` (Unix seconds); ``last_write`` is the newest
        modification time of the session's files (Unix seconds)."""
        last = self._last
        if last is None:
            return Status("unknown")
        kind = last.kind
        common = dict(turn=self.turn, since=last.ts, live=self._last_live, detail=last.detail)
        quiet = now - last_write
        if kind == COMPLETE:
            if self._turn_error:
                return Status("error", error_kind=self._turn_error, **common)
            if last.stop_hooks and last.ts is not None and now < last.ts + self.timing.stop_hook_wait:
                common["detail"] = f"stop_hooks_running:{last.stop_hooks}"
                return Status("working", **common)  # the user's own Stop hooks may still block the stop
            wakes = last.wakes_at
            if wakes is not None and last.ts is not None and wakes > last.ts:
                common["detail"] = f"wakeup_armed:{_iso(wakes)}"
                if wakes - last.ts <= self.timing.wakeup_hold and now < wakes + self.timing.retry_grace:
                    return Status("working", **common)  # the harness re-invokes the agent by itself
            return Status("completed", evidence="explicit", duration=self._duration(last), **common)
        if kind == ERROR and (last.retry_in is None or quiet >= last.retry_in + self.timing.retry_grace):
            return Status("error", error_kind=self._turn_error, **common)
        if kind == INTERRUPT:
            return Status("interrupted", **common)
        if kind == WAIT and self._wait_review and quiet < self.timing.inferred_settle:
            common["detail"] = "permission_auto_review"  # the agent's own reviewer decides first
            return Status("working", **common)
        if kind == WAIT:
            key, reason, tool = self._wait
            return Status("waiting", reason=reason, tool=tool, wait=key or self.turn, **common)
        if kind == OUTPUT and not last.marker_certain:
            wait = self.timing.marker_wait if last.expects_marker else self.timing.inferred_settle
            if quiet >= wait:
                return Status("completed", evidence="inferred", duration=self._duration(last), **common)
        if quiet >= self.timing.stall_after:
            common["since"] = last_write + self.timing.stall_after
            return Status("stalled", **common)
        if self._turn_start is not None:
            common["since"] = self._turn_start  # working since the turn began
        return Status("working", **common)

    def _duration(self, last: Event) -> float | None:
        if last.duration is not None:
            return last.duration
        if self._turn_start is not None and last.ts is not None and last.ts >= self._turn_start:
            return last.ts - self._turn_start
        return None


def _iso(t: float) -> str:
    """Unix seconds as an ISO 8601 UTC time to the second (``2026-06-01T10:00:00Z``)."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
