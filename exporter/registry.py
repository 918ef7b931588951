"""Claude Code's live session registry: a third source of evidence beside
transcripts and hooks, with no setup.

Follows the registry folder(s) (``sources.claude_code.registry``; file
events plus the poll, like the transcript roots), reads only ``<pid>.json``
records (``providers.claude_registry.RECORD_NAME``; never the
``<pid>.<hash>.key`` files beside them, which hold secrets), at most
``max_record_bytes`` of each, and checks that each record's process is alive
and started when its ``procStart`` says (psutil), so that a reused pid is a
dead one. What a reading means is the provider's
(:func:`~.providers.claude_registry.evidence`,
:func:`~.providers.claude_registry.exited`); :meth:`Registry.step` applies
it through the path hook events take (``SessionStore.apply_hook``), in the
reader thread, after reading the session's transcripts so that it is ordered
after every record written before it.

Privacy: a record's ``name`` is never read and its ``cwd`` never leaves this
module; logs name the record file (``<pid>.json``) at most.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import Counter, Gauge
from watchdog import events as wd_events
from watchdog.observers import Observer

from .config import Config
from .events import WAIT
from .providers import claude_registry as creg

log = logging.getLogger(__name__)

PROVIDER = "claude_code"
#: How far (seconds) a process's start time may be from its record's
#: ``procStart`` (1 s resolution on macOS; FILETIME and clock ticks are
#: finer). A pid reused within a second of the same start is not plausible.
START_TOLERANCE_SECONDS = 1.5
#: How long an ``idle``/``shell`` reading waits before it ends a wait the
#: registry reported: Claude Code 2.1.332 flushes the rejection and
#: "[Request interrupted by user for tool use]" to the transcript tens of ms
#: after the record says ``idle`` (an Esc at the prompt), and the transcript
#: decides what the end of the wait was.
IDLE_GRACE_SECONDS = 1.0
#: Records followed at most (more ``<pid>.json`` files are left unread).
MAX_RECORDS = 10_000
_WATCHED_EVENTS = [wd_events.FileCreatedEvent, wd_events.FileModifiedEvent, wd_events.FileMovedEvent,
                   wd_events.FileDeletedEvent, wd_events.FileClosedEvent]


def folders_of(cfg: Config, roots: list[tuple[str, Path]]) -> list[Path]:
    """The registry folders to follow: ``sources.claude_code.registry.path``,
    else ``sessions`` beside each Claude Code projects root (which is
    ``$CLAUDE_CONFIG_DIR/sessions``, else ``~/.claude/sessions``, for the
    default root); ``[]`` when the registry or Claude Code is off."""
    src = cfg.sources.claude_code
    if not src.enabled or not src.registry.enabled:
        return []
    if src.registry.path:
        return [Path(src.registry.path).expanduser()]
    out = []
    for prov, root in roots:
        if prov == PROVIDER and root.parent / "sessions" not in out:
            out.append(root.parent / "sessions")
    return out or creg.default_folders()


def own_pid_domain() -> tuple[str, str] | None:
    """This host's ``(machine id, pid namespace)`` as Claude Code 2.1.332
    writes them in ``pidDomain`` (Linux: ``/etc/machine-id``, ``readlink
    /proc/self/ns/pid``; checked against the real records of
    ``shared/live-agents``), or None elsewhere."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            with open(path) as f:
                machine = f.read().strip()
            return machine, os.readlink("/proc/self/ns/pid")
        except OSError:
            continue
    return None


def process_started(pid: int) -> float | None:
    """The start time (Unix seconds, psutil ``create_time``) of the live
    process ``pid``; None when there is none (or only a zombie). Raises
    ``psutil.AccessDenied`` when the OS does not say."""
    import psutil  # here: not imported on the start path (its Linux module needs ``resource``)

    try:
        p = psutil.Process(pid)
        created = p.create_time()
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return created
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None


@dataclass
class _Entry:
    """One followed ``<pid>.json``."""

    stat: tuple | None = None  # (ino, size, mtime_ns, ctime_ns) of the last read attempt
    rec: creg.Record | None = None  # the last whole record
    alive: bool | None = None  # its process, at the last check
    applied: tuple | None = None  # rec.key already turned into evidence (or found to be none)
    gone: bool = False  # its process's end was already told
    skipped: tuple | None = None  # stat key of a read counted as skipped (counted once)
    cut: tuple | None = None  # stat key of a read that found cut JSON


@dataclass
class _Wait:
    """A wait the registry reported: the session's wait key and its record time."""

    key: str | None
    since: float | None


class Registry:
    """Follows registry folders; :meth:`step` (called by the reader thread on
    every round) reads what changed, checks liveness every
    ``poll_interval`` seconds and on every file event, and applies the
    evidence. ``wake(path)`` is called from the file-event thread with the
    changed record's path: the daemon's ``ChangeQueue.put``, whose reader
    then wakes at once even when it was busy (a bare notify would be lost);
    the daemon's transcript reader ignores such a path (not ``.jsonl``).

    Metrics: ``coding_agent_registry_records`` (records whose process is
    alive), ``coding_agent_registry_records_skipped_total{reason}`` (cut
    JSON, too large, invalid, no status, another machine's or container's pids).
    """

    def __init__(self, folders: list[Path], metrics, wake=None, poll_interval: float = 2.0,
                 max_bytes: int = 65536):
        self.folders = folders
        self.max_bytes = max_bytes
        self.poll_interval = poll_interval
        self._wake = wake or (lambda path: None)
        self._entries: dict[str, _Entry] = {}
        self._dirty: set[str] = set()
        self._lock = threading.Lock()
        self._observer = None
        self._watched: dict[str, object] = {}
        self._next_poll = 0.0
        self._first = True
        self._said = False  # the start-up line naming the folders was logged
        self._waits: dict[str, _Wait] = {}
        self._domain = own_pid_domain()
        self._clock_ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        r = metrics.registry
        self.m_skipped = _counter(metrics, "coding_agent_registry_records_skipped",
                                  "Claude Code session registry records not used, by reason.", ["reason"], r)
        for reason in creg.SKIP_REASONS:
            self.m_skipped.labels(reason)
        self.m_live = _gauge(metrics, "coding_agent_registry_records",
                             "Claude Code session registry records whose process is alive.", r)

    @classmethod
    def from_config(cls, cfg: Config, metrics, wake, roots) -> Registry:
        """The registry of ``cfg`` (no folders: every step is a no-op)."""
        return cls(folders_of(cfg, roots), metrics, wake, cfg.sources.poll_interval_seconds,
                   cfg.sources.claude_code.registry.max_record_bytes)

    # -- file events -------------------------------------------------------
    def _watch(self) -> None:
        if self._observer is False:
            return  # file events cannot be had: the poll covers the folder
        if self._observer is None:
            try:
                observer = Observer()
                observer.daemon = True
                observer.start()
            except OSError as e:  # e.g. the inotify instance limit: said once, polled from now on
                log.warning("no file events for the session registry (%s); polling it every %g s", e.strerror or e,
                            self.poll_interval)
                self._observer = False
                return
            self._observer = observer
        handler = _Handler(self)
        for folder in self.folders:
            key = str(folder)
            if key in self._watched or not folder.is_dir():
                continue
            try:
                self._watched[key] = self._observer.schedule(handler, key, recursive=False,
                                                             event_filter=_WATCHED_EVENTS)
            except OSError as e:  # the poll still covers it
                log.debug("cannot watch the registry folder %s: %s", folder, e.strerror or e)

    def _changed(self, path: str) -> None:
        with self._lock:
            self._dirty.add(path)
        self._wake(path)

    def stop(self) -> None:
        if self._observer:
            try:
                self._observer.stop()
                self._observer.join(timeout=5)
            except Exception:  # pragma: no cover - stopping never fails the exit
                pass

    # -- reading -----------------------------------------------------------
    def _list(self) -> set[str] | None:
        """Every ``<pid>.json`` path in the folders (None: a folder could not be listed)."""
        out: set[str] = set()
        ok = True
        for folder in self.folders:
            try:
                with os.scandir(folder) as it:
                    for e in it:
                        if creg.RECORD_NAME.fullmatch(e.name):
                            out.add(e.path)
                            if len(out) >= MAX_RECORDS:
                                return out
            except FileNotFoundError:
                continue
            except OSError:
                ok = False
        return out if ok else None

    def _skip(self, e: _Entry, key: tuple, reason: str) -> None:
        if e.skipped != key:
            e.skipped = key
            self.m_skipped.labels(reason).inc()

    def _read(self, path: str, e: _Entry) -> bool:
        """Read ``path`` when its stat changed; False when it is gone. A cut
        record leaves the last whole one in place and is read again at its
        next change."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return False
        except OSError:
            return True
        key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if key == e.stat:
            return True
        e.stat = key
        if not stat.S_ISREG(st.st_mode):
            self._skip(e, key, "invalid")  # a link, a FIFO, …: never opened
            return True
        if st.st_size > self.max_bytes:
            self._skip(e, key, "too_large")
            return True
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            return False
        except OSError as err:
            if err.errno not in (errno.ELOOP, errno.EACCES, errno.EPERM):
                log.debug("cannot read registry record %s: %s", os.path.basename(path), err.strerror)
            return True
        try:
            data = os.read(fd, self.max_bytes + 1)
        except OSError:
            return True
        finally:
            os.close(fd)
        if len(data) > self.max_bytes:
            self._skip(e, key, "too_large")
            return True
        try:
            rec = creg.parse(data)
        except creg.RecordCut:
            # Not written yet: read again at the next change. A write that
            # completes within the file system's timestamp tick may leave the
            # stat as it was, so the first cut at a stat is read once more.
            self.m_skipped.labels("cut").inc()
            if e.cut != key:
                e.cut, e.stat = key, None
            return True
        except creg.RecordSkipped as err:
            self._skip(e, key, err.reason)
            return True
        if str(rec.pid) != os.path.basename(path)[:-5]:
            self._skip(e, key, "invalid")
            return True
        if self._domain is not None and rec.pid_domain:
            parts = creg.pid_domain(rec.pid_domain)
            if parts is not None and parts != self._domain:
                # another machine (a shared home folder) or another container's
                # pids: their liveness cannot be known from here
                self._skip(e, key, "foreign_pid_domain")
                return True
        if e.rec is None or e.rec.pid != rec.pid or e.rec.proc_start != rec.proc_start:
            e.alive, e.gone = None, False  # another process (or its first reading)
        e.rec = rec  # (a /clear: the same process under a new session id, followed from here)
        return True

    def _alive(self, rec: creg.Record) -> bool:
        """The record's process is alive and started when ``procStart`` says."""
        import psutil

        try:
            started = process_started(rec.pid)
        except psutil.AccessDenied:
            return True  # the OS does not say: not evidence of an exit
        if started is None:
            return False
        candidates = creg.proc_start_seconds(rec.proc_start, psutil.boot_time(), self._clock_ticks)
        if not candidates:
            return True  # a form this version cannot read: pid liveness alone
        return any(abs(started - c) <= START_TOLERANCE_SECONDS for c in candidates)

    # -- the reader thread's round ----------------------------------------
    def step(self, evidence) -> bool:
        """Read what changed, check liveness when due, and apply the evidence
        through ``evidence`` (:class:`~.evidence.Evidence`). True when some
        evidence was applied."""
        if not self.folders:
            return False
        try:
            return self._step(evidence)
        except Exception:  # pragma: no cover - the registry never stops the reader
            log.exception("session registry round failed; continuing")
            self._next_poll = time.monotonic() + self.poll_interval
            return False

    def _step(self, evidence) -> bool:
        if self._first and not self._said:
            self._said = True
            for folder in self.folders:
                log.info("reading Claude Code's session registry in %s (it %s)", folder,
                         "exists" if folder.is_dir() else "does not exist yet")
        now_m = time.monotonic()
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        due = now_m >= self._next_poll
        if not due and not dirty and not self._unapplied():
            return False
        removed: list[_Entry] = []
        if due:
            self._next_poll = now_m + self.poll_interval
            self._watch()
            listed = self._list()
            if listed is not None:
                for path in set(self._entries) - listed:
                    removed.append(self._entries.pop(path))
                for path in listed:
                    self._entries.setdefault(path, _Entry())
            paths = list(self._entries)
        else:
            paths = [p for p in dirty if creg.RECORD_NAME.fullmatch(os.path.basename(p))]
        for path in paths:
            e = self._entries.get(path)
            if e is None:
                if len(self._entries) >= MAX_RECORDS:
                    continue
                e = self._entries[path] = _Entry()
            if not self._read(path, e):
                removed.append(self._entries.pop(path))
                continue
            if e.rec is not None and not e.gone and (due or path in dirty or e.alive is None):
                e.alive = self._alive(e.rec)
        applied = False
        for e in removed:
            if e.rec is not None and e.alive and not e.gone:
                applied = self._apply_exit(evidence, e, removed=True) or applied
        for e in self._entries.values():
            if e.rec is None or e.gone or e.alive is None:
                continue
            if not e.alive:
                applied = self._apply_exit(evidence, e, removed=False) or applied
            elif e.applied != e.rec.key:
                applied = self._apply_reading(evidence, e) or applied
        self.m_live.set(sum(1 for e in self._entries.values() if e.rec is not None and e.alive and not e.gone))
        self._first = False
        return applied

    def _unapplied(self) -> bool:
        return any(e.rec is not None and e.alive and e.applied != e.rec.key for e in self._entries.values())

    @staticmethod
    def _apply(evidence, s, ev, ident: str, history: bool) -> bool:
        """Apply ``ev`` to session ``s`` (:meth:`Evidence.apply`; ``ident``
        hashed into the delivery's identity)."""
        import hashlib

        ident = "registry:" + hashlib.blake2b(ident.encode(), digest_size=12).hexdigest()
        return evidence.apply(s, ev, ident, history)

    def _apply_reading(self, evidence, e: _Entry) -> bool:
        rec = e.rec
        s = evidence.current(PROVIDER, rec.session_id)
        if s is None:
            return False  # no transcript yet (a session before its first prompt): tried again
        e.applied = rec.key
        st = evidence.status(s)
        w = self._waits.get(rec.session_id)
        reg_wait = w.since if w is not None and st.state == "waiting" and st.wait == w.key else None
        ev = creg.evidence(rec, st.state, reg_wait)
        if ev is None:
            return False
        if reg_wait is not None and ev.ts == reg_wait and rec.status_at is not None \
                and time.time() - rec.status_at < IDLE_GRACE_SECONDS:
            e.applied = None  # tried again at the next round: the transcript may still say more
            return False
        ok = self._apply(evidence, s, ev, f"registry:{rec.pid}:{rec.status}:{rec.waiting_for}:{rec.status_at}",
                         history=False)
        after = evidence.status(s)
        if ev.kind == WAIT and after.state == "waiting":
            self._waits[rec.session_id] = _Wait(after.wait, after.since)
        elif after.state != "waiting":
            self._waits.pop(rec.session_id, None)
        return ok

    def _apply_exit(self, evidence, e: _Entry, removed: bool) -> bool:
        e.gone = True
        rec = e.rec
        self._waits.pop(rec.session_id, None)
        s = evidence.current(PROVIDER, rec.session_id)
        if s is None:
            return False
        ev = creg.exited(evidence.status(s).state, removed, time.time())
        if ev is None:
            return False
        how = "removed" if removed else "exited"
        return self._apply(evidence, s, ev, f"registry:{rec.pid}:{rec.proc_start}:{how}", history=self._first)


class _Handler(wd_events.FileSystemEventHandler):
    def __init__(self, registry: Registry):
        self.registry = registry

    def on_any_event(self, event) -> None:
        for p in (event.src_path, getattr(event, "dest_path", "")):
            if p and not event.is_directory and creg.RECORD_NAME.fullmatch(os.path.basename(p)):
                self.registry._changed(os.fsdecode(p))


def _counter(metrics, name, doc, labels, registry):
    """One counter per ``Metrics`` (its registry), made once."""
    got = getattr(metrics, "_registry_counters", None)
    if got is None:
        got = metrics._registry_counters = {}
    if name not in got:
        got[name] = Counter(name, doc, labels, registry=registry)
    return got[name]


def _gauge(metrics, name, doc, registry):
    got = getattr(metrics, "_registry_counters", None)
    if got is None:
        got = metrics._registry_counters = {}
    if name not in got:
        got[name] = Gauge(name, doc, registry=registry)
    return got[name]
