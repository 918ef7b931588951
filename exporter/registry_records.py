"""Claude Code's session registry folder(s), as files: file events on them,
listing the ``<pid>.json`` records (``providers.claude_registry.RECORD_NAME``;
never the ``<pid>.<hash>.key`` files beside them, which hold secrets),
reading one record safely (a regular file, at most ``max_bytes``, a cut
record read again at its next change), and whether a record's process is
alive and started when its ``procStart`` says (psutil), so that a reused pid
is a dead one. What a reading means for a session is not decided here
(:mod:`exporter.registry`).

Privacy: a record's ``name`` is never read and its ``cwd`` never leaves the
registry; logs name the record file (``<pid>.json``) at most.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from watchdog import events as wd_events
from watchdog.observers import Observer

from .providers import claude_registry as creg

log = logging.getLogger("coding_agent_exporter.registry")

#: How far (seconds) a process's start time may be from its record's
#: ``procStart`` (1 s resolution on macOS; FILETIME and clock ticks are
#: finer). A pid reused within a second of the same start is not plausible.
START_TOLERANCE_SECONDS = 1.5
#: Records followed at most (more ``<pid>.json`` files are left unread).
MAX_RECORDS = 10_000
_WATCHED_EVENTS = [wd_events.FileCreatedEvent, wd_events.FileModifiedEvent, wd_events.FileMovedEvent,
                   wd_events.FileDeletedEvent, wd_events.FileClosedEvent]


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
class Entry:
    """One followed ``<pid>.json``."""

    stat: tuple | None = None  # (ino, size, mtime_ns, ctime_ns) of the last read attempt
    rec: creg.Record | None = None  # the last whole record
    alive: bool | None = None  # its process, at the last check
    applied: tuple | None = None  # rec.key already turned into evidence (or found to be none)
    gone: bool = False  # its process's end was already told
    skipped: tuple | None = None  # stat key of a read counted as skipped (counted once)
    cut: tuple | None = None  # stat key of a read that found cut JSON


class RecordFolder:
    """The record files of registry ``folders`` (a list of paths): file
    events (``wake(path)`` is called from the file-event thread with a
    changed record's path), :meth:`list`, :meth:`read` and :meth:`alive`.
    ``skipped`` is the ``coding_agent_registry_records_skipped_total{reason}``
    counter; ``poll_interval`` (seconds) only names the poll in the warning
    when file events cannot be had."""

    def __init__(self, folders: list[Path], skipped, wake=None, poll_interval: float = 2.0,
                 max_bytes: int = 65536):
        self.folders = folders
        self.max_bytes = max_bytes
        self.poll_interval = poll_interval
        self.m_skipped = skipped
        self._wake = wake or (lambda path: None)
        self._dirty: set[str] = set()
        self._lock = threading.Lock()
        self._observer = None
        self._watched: dict[str, object] = {}
        self._domain = own_pid_domain()
        self._clock_ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def take_changed(self) -> set[str]:
        """The record paths file events named since the last call."""
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        return dirty

    # -- file events -------------------------------------------------------
    def watch(self) -> None:
        """Ask for file events on the folders that exist (once each); when
        they cannot be had, the poll alone covers the folders."""
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

    def changed(self, path: str) -> None:
        """A file event named record ``path`` (the file-event thread)."""
        with self._lock:
            self._dirty.add(path)
        self._wake(path)

    def stop(self) -> None:
        """Stop the file events."""
        if self._observer:
            try:
                self._observer.stop()
                self._observer.join(timeout=5)
            except Exception:  # pragma: no cover - stopping never fails the exit
                pass

    # -- reading -----------------------------------------------------------
    def list(self) -> set[str] | None:
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

    def _skip(self, e: Entry, key: tuple, reason: str) -> None:
        if e.skipped != key:
            e.skipped = key
            self.m_skipped.labels(reason).inc()

    def read(self, path: str, e: Entry) -> bool:
        """Read record ``path`` into ``e`` when its stat changed; False when it is gone. A cut
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

    def alive(self, rec: creg.Record) -> bool:
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


class _Handler(wd_events.FileSystemEventHandler):
    def __init__(self, registry: RecordFolder):
        self.registry = registry

    def on_any_event(self, event) -> None:
        for p in (event.src_path, getattr(event, "dest_path", "")):
            if p and not event.is_directory and creg.RECORD_NAME.fullmatch(os.path.basename(p)):
                self.registry.changed(os.fsdecode(p))
