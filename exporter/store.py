"""Session store: files → tailers → decoder → reducers, plus counters.

One owner thread calls :meth:`SessionStore.refresh`, :meth:`forget` and
:meth:`evaluate`; scrapes call :meth:`snapshot` from other threads (guarded by
a lock). Provider knowledge stays in ``exporter.providers``; the store only
routes files to sessions and counts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from . import ingest
from .decode import decode_line
from .events import SESSION
from .identity import Identity
from .metrics import Metrics
from .names import OPEN_STATES
from .providers import PROVIDER_MODULES
from .reducer import SessionReducer, Status, Timing
from .tailer import Tailer

log = logging.getLogger(__name__)

#: Bytes of a history file's first line read when the provider names the
#: session there (Codex ``session_meta``).
HISTORY_HEAD_BYTES = 1 << 20



def _decided_by(reducer) -> str | None:
    """Which source's evidence decides the state: ``transcript``, ``hook``
    or ``registry`` (Claude Code's session registry); None before any."""
    last = reducer._last
    return None if last is None else last.source or "transcript"


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


class _File:
    __slots__ = ("path", "provider", "tailer", "decoder", "session", "sidechain", "name_sid", "last_ts",
                 "failing", "first_live", "head", "head_unread", "born")

    def __init__(self, path: str, provider: ModuleType, tailer: Tailer, sid: str | None, sidechain: bool):
        self.path = path
        self.provider = provider
        self.tailer = tailer
        self.decoder = provider.FileDecoder(sidechain_file=sidechain, file_session=sid)
        self.session: Session | None = None
        self.sidechain = sidechain
        self.name_sid = sid
        self.last_ts: float | None = None
        self.failing = False  # the last read failed (logged once until it recovers)
        self.first_live: bool | None = None  # liveness of a first read that failed
        #: The file's ``SESSION`` event (Codex ``session_meta``): binds the
        #: file to its session again after the session expired, or when the
        #: file was skipped as history.
        self.head = None
        self.head_unread = False  # skipped as history: the head is read at the first append
        #: The file's first write as far as news goes (Unix seconds): when it
        #: was first seen live, or the checkpoint's time for a file made while
        #: the exporter was down; None for history and backfill (see identity).
        self.born: float | None = None

    def __getstate__(self):  # a start-up reader process hands files back (scan.read_start_up)
        return {k: (self.provider.NAME if k == "provider" else getattr(self, k)) for k in self.__slots__}

    def __setstate__(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, PROVIDER_MODULES[v] if k == "provider" else v)


@dataclass(frozen=True, slots=True)
class Transition:
    """A session's status changed (``old`` → ``new``)."""

    session: Session
    old: Status
    new: Status


#: Hook delivery identities remembered to apply a delivery made twice once.
HOOK_IDENTS_KEPT = 4096


class SessionStore:
    """Holds every followed file and session.

    ``timing`` gives the reducer's time rules; ``max_line_bytes`` the tailer's
    line cap; ``project_mode`` the ``project`` label mode.
    """

    def __init__(self, metrics: Metrics, timing: Timing, max_line_bytes: int, project_mode: str = "basename",
                 max_sessions: int = 500, session_ttl: float = 7 * 86400.0):
        self.metrics = metrics
        self.timing = timing
        self.max_line_bytes = max_line_bytes
        self.project_mode = project_mode
        self.max_sessions = max_sessions
        self.session_ttl = session_ttl
        self.files: dict[str, _File] = {}
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
        self._watched_gauges: dict = {}
        #: ``{(provider, session id): turn keys}`` whose end still owes a page
        #: (the page ledger's "pending" entries at start-up; see
        #: ``SessionReducer.owed``).
        self.owed: dict[tuple[str, str], frozenset] = {}
        #: Record identities of every session (duplicates and copies).
        self.identity = Identity()

    # -- files -------------------------------------------------------------
    def track(self, path: str, provider: str, root: Path | None = None, role=False,
              born: float | None = None) -> bool:
        """Start following ``path`` for ``provider``. Returns False when the
        provider says the file is not a transcript. ``role``: what the
        provider's ``classify_path`` said of it, when the caller knows;
        ``born``: when its news begins (see :class:`_File`)."""
        if path in self.files:
            return True
        mod = PROVIDER_MODULES[provider]
        if role is False:
            role = mod.classify_path(root or os.path.dirname(path), path)
        if role is None:
            return False
        sid, sidechain = role
        f = self.files[path] = _File(path, mod, Tailer(path, self.max_line_bytes), sid, sidechain)
        f.born = born
        self._watched(provider).inc()
        return True

    def skip(self, path: str, provider: str, root: Path | None = None, role=False,
             st: tuple | None = None) -> int | None:
        """Follow ``path`` from its end without decoding it (history, see
        ``sources.skip_history``); ``st`` is its ``(st_ino, st_size,
        st_mtime_ns)`` (the file is then not even opened). Nothing of it is
        needed to tell a resumed or forked session's replay of it: the copy
        says so itself (Claude records naming another session, Codex
        ``forked_from_id``). Where the provider names the session in the
        first record only (``SESSION_IN_FIRST_RECORD``: Codex
        ``session_meta`` gives the id, cwd, subagent parent and fork point),
        that record is read at the first append. Returns the bytes skipped,
        or None when the file is no transcript or cannot be read (the caller
        then reads it as usual)."""
        if not self.track(path, provider, root, role):
            return None
        f = self.files[path]
        f.decoder = None  # made at the first append: a history file costs little while it stays one
        try:
            f.tailer.skip_to_end(st)
        except OSError:
            f.tailer = Tailer(path, self.max_line_bytes)
            return None
        f.head_unread = f.provider.SESSION_IN_FIRST_RECORD
        return f.tailer.offset

    @staticmethod
    def _read_head(f: _File) -> None:
        """The first record of a file skipped as history, when it names the
        session (a Codex ``session_meta``): it binds the appended records."""
        f.head_unread = False
        if f.decoder is None:
            f.decoder = f.provider.FileDecoder(sidechain_file=f.sidechain, file_session=f.name_sid)
        try:
            with open(f.path, "rb") as fh:
                first = fh.readline(HISTORY_HEAD_BYTES)
            if not first.endswith(b"\n"):
                return
            obj = decode_line(first[:-1])
            ev = f.decoder.project(obj) if obj else None
        except Exception:  # unreadable, not JSON, a shape the provider did not foresee: no head
            return
        if ev is not None and ev.kind == SESSION:
            f.head = ev

    def _watched(self, provider: str):
        """``coding_agent_files_watched{provider}`` (its child, cached: one
        call per followed file)."""
        g = self._watched_gauges.get(provider)
        if g is None:
            g = self._watched_gauges[provider] = self.metrics.files_watched.labels(provider)
        return g

    def forget(self, path: str) -> None:
        """Stop following a file that disappeared."""
        f = self.files.pop(path, None)
        if f is None:
            return
        self._watched(f.provider.NAME).dec()
        s = f.session
        if s is not None:
            s.files.discard(path)
            if not s.files:  # every file of the session is gone
                with self._lock:
                    if self.sessions.pop((s.provider, s.session_id), None) is not None:
                        self.identity.forget(s.seen)

    def changed(self, path: str, st: os.stat_result) -> bool:
        """True when ``st`` differs from what the file's last read saw."""
        f = self.files.get(path)
        return f is not None and not f.tailer.unchanged(st)

    def refresh(self, path: str, live: bool, final: bool = False, until: int | None = None) -> int:
        """Read what was appended to ``path`` and apply it.

        ``live``: the bytes are news (read after start-up), so completions
        they carry may page. ``final``: also take an unterminated last line
        (one-shot scans). ``until``: read no further than this offset.
        Returns the number of bytes consumed. A file that
        cannot be read is counted and logged, never raised.
        """
        f = self.files.get(path)
        if f is None:
            return 0
        prov = f.provider.NAME
        try:
            res = f.tailer.read(final=final, until=until)
        except FileNotFoundError:
            self.forget(path)
            return 0
        except OSError as e:
            self.metrics.read_errors.labels(prov).inc()
            if not f.failing:
                log.warning("cannot read %s: %s (retrying quietly)", path, e.strerror or e)
            f.failing = e.errno or True  # truthy; EMFILE/ENFILE say the process, not the file, is short
            if f.tailer.inode is None and f.first_live is None:
                f.first_live = live  # what it holds when it becomes readable is as old as it is now
            return 0
        if f.failing:
            log.info("%s is readable again", path)
            f.failing = False
        if f.head_unread and res.lines and not res.reset:
            self._read_head(f)
        if f.decoder is None:
            f.decoder = f.provider.FileDecoder(sidechain_file=f.sidechain, file_session=f.name_sid)
        if f.first_live is not None:
            live, f.first_live = f.first_live, None
        m = self.metrics
        with self._lock:
            if res.reset:
                f.decoder = f.provider.FileDecoder(sidechain_file=f.sidechain, file_session=f.name_sid)
                log.info("%s was truncated or replaced; reading it again from the start", path)
            if res.oversized:
                m.skipped.labels(prov, "oversized").inc(res.oversized)
            if res.lines:
                m.lines.labels(prov).inc(len(res.lines))
                self._lines(f, res.lines, live)
            if res.bytes_read:
                m.bytes.labels(prov).inc(res.bytes_read)
            if f.session is not None:
                s = f.session
                s.counters.bytes += res.bytes_read
                s.counters.skipped += res.oversized
                s.last_write = max(s.last_write, f.tailer.mtime_ns / 1e9)
                self._dirty.add((s.provider, s.session_id))
        return res.bytes_read

    # -- ingest (exporter.ingest) --------------------------------------------
    def _lines(self, f: _File, lines: list[bytes], live: bool) -> None:
        ingest.apply_lines(self, f, lines, live)

    def _session(self, provider: str, sid: str, hidden: bool = False) -> Session:
        return ingest.session(self, provider, sid, hidden)

    def apply_hook(self, d, may_create: bool = True) -> Session | None:
        """Apply one hook delivery: see :func:`exporter.ingest.apply_hook`."""
        with self._lock:
            return ingest.apply_hook(self, d, may_create)

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

    def expire(self, now: float | None = None) -> int:
        """Forget sessions not written for ``session_ttl`` seconds (their
        reducer and identity set), so memory does not grow over weeks. Their
        files stay followed: a later append starts the session afresh.
        Returns how many were forgotten."""
        if not self.session_ttl:
            return 0
        now = time.time() if now is None else now
        with self._lock:
            old = [k for k, s in self.sessions.items() if now - s.last_write > self.session_ttl]
            for key in old:
                s = self.sessions.pop(key)
                self.identity.forget(s.seen)
                for path in s.files:
                    f = self.files.get(path)
                    if f is not None and f.session is s:
                        f.session = None
        return len(old)

    # -- views -------------------------------------------------------------
    def rows(self, now: float | None = None) -> list[dict]:
        """Visible sessions as dicts (provider, session_id, project, state,
        evidence, error_kind, source (transcript/hook/registry), waiting_for (reason, tool), since, last_event_at, last_write, counters),
        newest first, within the session TTL."""
        now = time.time() if now is None else now
        rows = []
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
                "source": _decided_by(s.reducer),
                "waiting_for": {"reason": st.reason, "tool": st.tool} if st.state == "waiting" else None,
                "turn": st.turn,
                "since": st.since,
                "last_event_at": s.reducer.last_event_ts,
                "last_write": s.last_write,
                "files": len(s.files),
                "counters": dict(vars(s.counters)),
            })
        rows.sort(key=lambda r: r["last_write"], reverse=True)
        return rows

    def snapshot(self):
        """For the collector: ``(rows cut to max_sessions, counts by
        (provider, state), how many the cap left out)``."""
        with self._lock:
            rows = self.rows()
        counts: dict[tuple[str, str], int] = {}
        for r in rows:
            counts[(r["provider"], r["state"])] = counts.get((r["provider"], r["state"]), 0) + 1
        dropped = max(0, len(rows) - self.max_sessions) if self.max_sessions else 0
        return (rows[: self.max_sessions] if self.max_sessions else rows), counts, dropped

    def offsets(self) -> dict[str, list[int]]:
        """``{path: [inode, offset]}`` of every followed file (a checkpoint)."""
        with self._lock:
            return {p: [f.tailer.inode, f.tailer.offset] for p, f in self.files.items() if f.tailer.inode is not None}

    #: Counters a reading process moves along (handed over by :meth:`export`).
    _READ_COUNTERS = ("lines", "bytes", "parse_errors", "skipped", "duplicates", "read_errors")

    def export(self) -> tuple:
        """What a start-up reader process hands back to the daemon's store
        (picklable): ``(files, sessions, [(counter, labels, increment)])``."""
        counts = []
        for name in self._READ_COUNTERS:
            for fam in getattr(self.metrics, name).collect():
                counts += [(name, smp.labels, smp.value) for smp in fam.samples
                           if smp.name.endswith("_total") and smp.value]
        return self.files, self.sessions, counts, self.identity

    def adopt(self, part: tuple) -> None:
        """Take over the files, sessions and counts of :meth:`export` (of a
        store that read other files than this one)."""
        files, sessions, counts, identity = part
        with self._lock:
            self.identity.merge(identity)
            for path, f in files.items():
                self.files[path] = f
                self._watched(f.provider.NAME).inc()
            for key, s in sessions.items():
                self.sessions[key] = s
                self._dirty.add(key)
        for name, labels, value in counts:
            getattr(self.metrics, name).labels(**labels).inc(value)

    def session(self, provider: str, session_id: str) -> Session | None:
        return self.sessions.get((provider, session_id))
