"""Session store: the sessions (reducer, identity, counters), what the
files and hooks say applied to them (:meth:`SessionStore.take`,
:meth:`~SessionStore.apply_hook`, both through :mod:`exporter.ingest`),
``evaluate(now)`` → transitions, and the rows ``/metrics``, the status page
and ``scan`` show.

One owner thread (the reader) applies and evaluates; scrapes call
:meth:`SessionStore.snapshot` from other threads (guarded by a lock). The
followed files are the file table's (:mod:`exporter.files`); provider
knowledge stays in ``exporter.providers``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import ingest
from .identity import Identity
from .names import OPEN_STATES
from .reducer import SessionReducer, Status, Timing
from .usage import Accounting, Tally

if TYPE_CHECKING:  # (prometheus-client is not imported by ``scan``)
    from .metrics import Metrics

log = logging.getLogger(__name__)


def project_label(cwd: str | None, mode: str) -> str:
    """The ``project`` label from a working directory: ``basename`` (last path
    component), ``full``, ``hashed`` (8 hex digits of SHA-256) or ``none``."""
    if not cwd or mode == "none":
        return ""
    if mode == "full":
        return cwd
    if mode == "hashed":
        return hashlib.sha256(cwd.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return cwd.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]


@dataclass
class SessionCounters:
    """Per-session reading counters (shown by ``scan``)."""

    lines: int = 0
    bytes: int = 0
    parse_errors: int = 0
    skipped: int = 0
    duplicates: int = 0
    events: int = 0


@dataclass
class Session:
    """One agent session: its reducer, files and identity."""

    provider: str
    session_id: str
    reducer: SessionReducer
    cwd: str | None = None
    hidden: bool = False  # a Codex subagent rollout with no known parent
    files: set = field(default_factory=set)
    last_write: float = 0.0
    seq: int = 0
    seen: set = field(default_factory=set)
    counters: SessionCounters = field(default_factory=SessionCounters)
    status: Status = field(default_factory=lambda: Status("unknown"))
    completed_turns: set = field(default_factory=set)
    error_turns: set = field(default_factory=set)
    #: Tokens of the session's responses (exporter.usage).
    usage: Tally = field(default_factory=Tally)


@dataclass(frozen=True, slots=True)
class Transition:
    """A session's status changed (``old`` → ``new``)."""

    session: Session
    old: Status
    new: Status


#: Hook delivery identities remembered to apply a delivery made twice once.
HOOK_IDENTS_KEPT = 4096

#: Longer (or unprintable) session ids are replaced by a digest in labels.
MAX_ID_CHARS = 128


class SessionStore:
    """Holds every session.

    ``timing`` gives the reducer's time rules; ``project_mode`` the
    ``project`` label mode; ``max_sessions`` the rows ``/metrics`` shows
    (0: all); ``session_ttl`` the seconds without a write after which a
    session is forgotten (0: never).
    """

    def __init__(self, metrics: Metrics, timing: Timing, project_mode: str = "basename",
                 max_sessions: int = 500, session_ttl: float = 7 * 86400.0):
        self.metrics = metrics
        self.timing = timing
        self.project_mode = project_mode
        self.max_sessions = max_sessions
        self.session_ttl = session_ttl
        self.sessions: dict[tuple[str, str], Session] = {}
        self._lock = threading.Lock()
        self._dirty: set[tuple[str, str]] = set()
        #: Sessions the previous run left open (working or stalled at its
        #: last checkpoint): the turn end they reach now was never news to it,
        #: so it is news, although its records may be read as backfill.
        self.carry: set[tuple[str, str]] = set()
        #: Identities of the hook deliveries applied lately (a delivery made
        #: twice, e.g. posted and spooled, comes within minutes): bounded, so
        #: memory does not grow with hook traffic over a session's life.
        self._hook_idents: dict[str, None] = {}
        #: ``{(provider, session id): turn keys}`` whose end still owes a page
        #: (the page ledger's "pending" entries at start-up; see
        #: ``SessionReducer.owed``).
        self.owed: dict[tuple[str, str], frozenset] = {}
        #: Record identities of every session (duplicates and copies).
        self.identity = Identity()
        #: Token counters and response keys (exporter.usage).
        self.usage = Accounting()
        #: Rows carry ``usage_hours`` (``Tally.by_hour``: ``scan --by day``).
        self.usage_hours = False

    # -- what the files and hooks say (exporter.ingest) ------------------------
    def take(self, f, res, live: bool) -> None:
        """Apply one read of file ``f`` (a :class:`~.files._File`; ``res``
        its :class:`~.tailer.ReadResult`): its lines through
        :func:`exporter.ingest.apply_lines` (``live``: they are news), the
        reading counters, and the session's last write."""
        m, prov = self.metrics, f.provider.NAME
        with self._lock:
            if res.oversized:
                m.skipped.labels(prov, "oversized").inc(res.oversized)
            if res.lines:
                m.lines.labels(prov).inc(len(res.lines))
                ingest.apply_lines(self, f, res.lines, live)
            if res.bytes_read:
                m.bytes.labels(prov).inc(res.bytes_read)
            s = f.session
            if s is not None:
                s.counters.bytes += res.bytes_read
                s.counters.skipped += res.oversized
                s.last_write = max(s.last_write, f.tailer.mtime_ns / 1e9)
                self._dirty.add((s.provider, s.session_id))

    def open_session(self, provider: str, sid: str, hidden: bool = False) -> Session:
        """The session ``(provider, sid)``, made when new (``hidden``: a
        subagent's file with no known parent yet). An id longer than
        :data:`MAX_ID_CHARS` or unprintable (it comes from transcript or hook
        content and becomes a label value) is replaced by ``sha256:`` and 16
        hex digits. For :mod:`exporter.ingest`; the caller holds the lock."""
        if len(sid) > MAX_ID_CHARS or not sid.isprintable():
            sid = "sha256:" + hashlib.sha256(sid.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        key = (provider, sid)
        s = self.sessions.get(key)
        if s is None:
            s = Session(provider, sid, SessionReducer(self.timing))
            s.reducer.owed = self.owed.get(key, s.reducer.owed)
            s.hidden = hidden
            self.sessions[key] = s
        return s

    def hook_once(self, ident: str) -> bool:
        """True the first time hook delivery ``ident`` is seen, False for a
        delivery made twice (posted and spooled, saved and applied again:
        these come within minutes). The identities are kept in one window of
        :data:`HOOK_IDENTS_KEPT` for all sessions, so memory does not grow
        with hook traffic. The caller holds the lock."""
        idents = self._hook_idents
        if ident in idents:
            return False
        idents[ident] = None
        if len(idents) > HOOK_IDENTS_KEPT:
            del idents[next(iter(idents))]
        return True

    def changed(self, s: Session) -> None:
        """Session ``s`` took new evidence: :meth:`evaluate` looks at it next
        time. The caller holds the lock."""
        self._dirty.add((s.provider, s.session_id))

    def adopt(self, sessions: dict, identity: Identity, usage: Accounting) -> None:
        """Take over ``sessions`` (``{(provider, session id): Session}``), the
        record identities and the token accounting of another store (a
        start-up reading process that read other files: ``exporter.parallel``);
        each adopted session is evaluated next."""
        with self._lock:
            self.identity.merge(identity)
            self.usage.merge(usage)
            for key, s in sessions.items():
                self.sessions[key] = s
                self._dirty.add(key)

    def file_gone(self, s: Session, path: str) -> None:
        """Session ``s`` lost its file ``path`` (deleted); a session whose
        every file is gone is forgotten (its reducer and identities)."""
        s.files.discard(path)
        if not s.files:
            with self._lock:
                if self.sessions.pop((s.provider, s.session_id), None) is not None:
                    self.identity.forget(s.seen)
                    self.usage.forget(s.usage)

    def apply_hook(self, d, may_create: bool = True, by_file: Session | None = None) -> Session | None:
        """Apply one hook delivery: see :func:`exporter.ingest.apply_hook`
        (``by_file``: the session its ``transcript_path`` is bound to)."""
        with self._lock:
            return ingest.apply_hook(self, d, may_create, by_file)

    # -- evaluation --------------------------------------------------------
    def evaluate(self, now: float | None = None) -> list[Transition]:
        """Evaluate sessions whose status may have changed (new records, or a
        time-based rule pending) at ``now`` (Unix seconds; default the clock).
        Counts completions, errors and turn durations once per turn, when
        they are news (see :meth:`_count`)."""
        now = time.time() if now is None else now
        out = []
        with self._lock:
            keys = set(self._dirty)
            self._dirty.clear()
            for key, s in self.sessions.items():
                if s.status.state in OPEN_STATES:
                    keys.add(key)
            for key in keys:
                s = self.sessions.get(key)
                if s is None:
                    continue
                old = s.status
                passed, s.reducer.passed = s.reducer.passed, []
                for p in passed:  # turn ends a later turn superseded within one read: each in turn
                    if p != old:
                        out.append(Transition(s, old, p))
                        s.status = old = p
                new = s.reducer.status(now, self._known_write(s, now))
                if new == old:
                    continue
                s.status = new
                out.append(Transition(s, old, new))
            if self.carry:
                out = self._carried(out)
            for t in out:
                self._count(t.session, t.new)
                self._waited(t.session, t.old, t.new)
                if log.isEnabledFor(logging.DEBUG) and (t.old.state, t.old.turn) != (t.new.state, t.new.turn):
                    self._log_transition(t)
        return out

    def _carried(self, transitions: list[Transition]) -> list[Transition]:
        """The first ending of each carried-open session (see ``carry``) as
        news."""
        out = []
        for t in transitions:
            key = (t.session.provider, t.session.session_id)
            if key in self.carry and t.new.state not in ("working", "stalled", "unknown"):
                self.carry.discard(key)
                if not t.new.live and t.new.state in ("completed", "error"):
                    t = Transition(t.session, t.old, dataclasses.replace(t.new, live=True))
            out.append(t)
        return out

    @staticmethod
    def _known_write(s: Session, now: float) -> float:
        """The last write known at ``now``: the files' modification time, or,
        when that lies after ``now`` (``scan --at`` in the past; a copied,
        restored or checked-out file), the last record time at or before
        ``now``. A second of slack keeps the live clock's jitter out."""
        if s.last_write <= now + 1.0:
            return s.last_write
        last = s.reducer.last_event_ts
        return now if last is None else min(now, last)

    def _log_transition(self, t: Transition) -> None:
        s, new = t.session, t.new
        fields = {"provider": s.provider, "session_id": s.session_id,
                  "project": project_label(s.cwd, self.project_mode), "from": t.old.state, "to": new.state,
                  "turn": new.turn, "evidence": new.evidence, "detail": new.detail, "error_kind": new.error_kind,
                  "live": new.live, "subagent": s.hidden or None}
        log.debug("session state", extra={"fields": {k: v for k, v in fields.items() if v is not None}})

    def _count(self, s: Session, st: Status) -> None:
        """Count a turn's completion or error once, and only when it is news
        (``st.live``: read after start-up, or carried open from the previous
        run). History read at start-up marks its turns as counted without
        counting them, so the counters mean the same across restarts."""
        if s.hidden or st.turn is None:
            return
        if st.state == "completed" and st.turn not in s.completed_turns:
            s.completed_turns.add(st.turn)
            if st.live:
                self.metrics.completions.labels(s.provider, st.evidence).inc()
                if st.duration is not None and st.duration >= 0:
                    self.metrics.turn_duration.labels(s.provider).observe(st.duration)
        elif st.state == "error" and st.turn not in s.error_turns:
            s.error_turns.add(st.turn)
            if st.live:
                self.metrics.turn_errors.labels(s.provider, st.error_kind or "api_error").inc()

    def _waited(self, s: Session, old: Status, new: Status) -> None:
        """``coding_agent_user_wait_seconds``: the user answered a wait or
        gave the next prompt after a completion (news only)."""
        if s.hidden or not new.live or old.state not in ("completed", "waiting") or old.since is None:
            return
        if new.state in ("stalled", "unknown") or (new.state == old.state and new.turn == old.turn
                                                   and new.wait == old.wait):
            return
        at = s.reducer.decided_at
        if at is None or at < old.since:
            return
        reason = "your_turn" if old.state == "completed" else (old.reason or "permission")
        self.metrics.user_wait.labels(s.provider, reason).observe(at - old.since)

    def expire(self, now: float | None = None) -> list[Session]:
        """Forget sessions not written for ``session_ttl`` seconds (their
        reducer and identity set), so memory does not grow over weeks.
        Returns the sessions forgotten (their files stay followed: the file
        table unbinds them, and a later append starts the session afresh)."""
        if not self.session_ttl:
            return []
        now = time.time() if now is None else now
        with self._lock:
            old = [k for k, s in self.sessions.items() if now - s.last_write > self.session_ttl]
            gone = [self.sessions.pop(key) for key in old]
            for s in gone:
                self.identity.forget(s.seen)
                self.usage.forget(s.usage)
        return gone

    # -- views -------------------------------------------------------------
    def rows(self, now: float | None = None) -> list[dict]:
        """Under the lock: :meth:`_rows`."""
        with self._lock:
            return self._rows(now)

    def _rows(self, now: float | None = None) -> list[dict]:
        """Visible sessions as dicts (provider, session_id, project, state,
        evidence, error_kind, source (transcript/hook/registry), waiting_for (reason, tool), since, last_event_at, last_write, counters,
        usage (:meth:`~.usage.Tally.summary`), cost_usd (USD or None)), newest first, within the session TTL."""
        now = time.time() if now is None else now
        rows = []
        prices = self.usage.prices
        for s in self.sessions.values():
            if s.hidden or (self.session_ttl and now - s.last_write > self.session_ttl):
                continue
            st = s.status
            rows.append({
                "provider": s.provider,
                "session_id": s.session_id,
                "project": project_label(s.cwd, self.project_mode),
                "state": st.state,
                "evidence": st.evidence,
                "detail": st.detail,
                "error_kind": st.error_kind,
                "source": s.reducer.decided_by,
                "waiting_for": {"reason": st.reason, "tool": st.tool} if st.state == "waiting" else None,
                "turn": st.turn,
                "since": st.since,
                "last_event_at": s.reducer.last_event_ts,
                "last_write": s.last_write,
                "files": len(s.files),
                "counters": dict(vars(s.counters)),
                "usage": (usage := s.usage.summary(prices)),
                "cost_usd": s.usage.cost(prices) if usage else None,
            })
            if self.usage_hours:
                rows[-1]["usage_hours"] = s.usage.by_hour(prices)
        rows.sort(key=lambda r: r["last_write"], reverse=True)
        return rows

    def snapshot(self):
        """For the collector: ``(rows cut to max_sessions, counts by
        (provider, state), how many the cap left out)``."""
        rows = self.rows()
        counts: dict[tuple[str, str], int] = {}
        for r in rows:
            counts[(r["provider"], r["state"])] = counts.get((r["provider"], r["state"]), 0) + 1
        dropped = max(0, len(rows) - self.max_sessions) if self.max_sessions else 0
        return (rows[: self.max_sessions] if self.max_sessions else rows), counts, dropped

    def session(self, provider: str, session_id: str) -> Session | None:
        """The session ``(provider, session_id)``, or None."""
        return self.sessions.get((provider, session_id))
