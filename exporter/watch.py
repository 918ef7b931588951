"""File events: when followed files and folders changed (``watch``).

watchdog events (inotify/FSEvents/ReadDirectoryChangesW) tell quickly; a
periodic stat poll of every known file and a walk of every root is the safety
net, because watchers drop events silently (queue overflow, bind mounts,
network file systems, appends through a long-open fd on macOS). Changes only
the poll found are counted (``coding_agent_poll_recoveries_total``).

The watchdog handler never raises and does no work: it only queues paths.

When the kernel refuses watches (inotify's ``fs.inotify.max_user_watches`` or
``max_user_instances`` reached), watchdog (7.x: one shared inotify instance,
made at the first ``schedule``) fails to watch a root with an ``OSError`` and
gives back the watches it had taken for that root's folders: the root is then
polled only, said once in the log with the kernel's reason, and tried again
every ``Watcher.RETRY_SECONDS`` (not at every poll: each try takes and gives
back watches the user's editor may need). Folders made below a watched root
once the limit is reached are left unwatched silently: the watcher compares
the watches this process holds (``/proc/self/fdinfo``) with the folders the
poll listed, and says in the log when file events cover only part of the tree
and polling covers the rest.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import threading
import time

from watchdog import events
from watchdog.events import FileSystemEventHandler
from watchdog.observers import Observer

log = logging.getLogger(__name__)


def inotify_watches() -> int | None:
    """How many inotify watches this process holds (Linux ``/proc``); None
    where that cannot be known."""
    if not sys.platform.startswith("linux"):
        return None
    total = None
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:inotify":
                continue
            with open(f"/proc/self/fdinfo/{fd}", "rb") as f:
                n = f.read().count(b"\ninotify wd:")
        except OSError:
            continue
        total = (total or 0) + n
    return total


def _why(e: OSError) -> str:
    if e.errno == errno.ENOSPC:
        return "inotify watch limit reached: raise fs.inotify.max_user_watches"
    if e.errno == errno.EMFILE:
        return "inotify instance limit reached: raise fs.inotify.max_user_instances"
    return e.strerror or str(e)


class ChangeQueue:
    """Paths waiting to be read, deduplicated; thread-safe."""

    def __init__(self) -> None:
        self._paths: set[str] = set()
        self._cond = threading.Condition()

    def put(self, path: str) -> None:
        with self._cond:
            self._paths.add(path)
            self._cond.notify()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def take(self, timeout: float) -> set[str]:
        """Wait up to ``timeout`` seconds for paths; return and clear them."""
        with self._cond:
            if not self._paths:
                self._cond.wait(timeout)
            paths, self._paths = self._paths, set()
            return paths

    def pending(self, path: str) -> bool:
        with self._cond:
            return path in self._paths


#: Event types that say a file was read, not written. Reacting to them would
#: loop: reading a file opens it, which is an event, which makes us read it.
_IGNORED = ("opened", "closed_no_write")
#: What the watches subscribe to (no open/close-without-write from the kernel).
_EVENTS = [events.FileCreatedEvent, events.FileModifiedEvent, events.FileMovedEvent, events.FileDeletedEvent,
           events.FileClosedEvent, events.DirCreatedEvent, events.DirMovedEvent, events.DirDeletedEvent,
           events.DirModifiedEvent]


class _Handler(FileSystemEventHandler):
    def __init__(self, queue: ChangeQueue, on_dir):
        self._queue = queue
        self._on_dir = on_dir

    def on_any_event(self, event) -> None:  # never raises into watchdog
        try:
            if event.event_type in _IGNORED:
                return  # our own reads (open/close without write): never news
            for p in (event.src_path, getattr(event, "dest_path", "")):
                if not p:
                    continue
                p = os.fsdecode(p)
                if event.is_directory:
                    if event.event_type in ("created", "moved"):
                        self._on_dir(p)
                elif p.endswith(".jsonl"):
                    self._queue.put(p)
        except Exception:  # pragma: no cover - defensive
            log.exception("file event handler failed")


class Watcher:
    """Keeps watchdog watches on the roots that exist; supervises the observer.

    ``roots`` is a list of ``(provider, Path)``. ``on_dir(path)`` is called
    (from watchdog's thread) when a folder appears, so the owner can walk it.
    Failures (inotify watch or instance limit, a root that vanished or was
    replaced) are logged and leave polling (every ``poll_interval`` seconds)
    in charge.
    """

    #: Seconds between attempts to watch again the folders the kernel refused.
    RETRY_SECONDS = 300.0

    def __init__(self, roots, queue: ChangeQueue, on_dir, poll_interval: float = 2.0):
        self.roots = roots
        self.poll_interval = poll_interval
        self._handler = _Handler(queue, on_dir)
        self._observer = None
        self._watched: dict[str, int] = {}  # root → its inode when it was scheduled
        self.degraded = False  # some root or folder has no file events (polling only)
        self._failed: set[str] = set()  # roots (or "" for the observer) the kernel refused
        self._short = 0  # consecutive checks that found fewer watches than folders
        self._partial = False
        self._retry_at = 0.0
        self._retry_failed_at = 0.0  # when the roots the kernel refused are tried again

    def ensure(self) -> None:
        """Start or restart the observer and watch every existing root."""
        if self._observer is not None and not self._observer.is_alive():
            log.warning("file watcher stopped; restarting it (polling covered the gap)")
            self._observer = None
            self._watched.clear()
        if self._observer is None:
            try:
                observer = Observer()
                observer.daemon = True
                observer.start()
            except OSError as e:  # inotify instance limit, no inotify at all
                if "" not in self._failed:
                    log.warning("cannot start the file watcher (%s); polling every %g s instead", _why(e),
                                self.poll_interval)
                self._failed.add("")
                self.degraded = True
                return
            self._observer = observer
            self._failed.discard("")
        now = time.monotonic()
        retry_failed = now >= self._retry_failed_at
        for _prov, root in self.roots:
            key = str(root)
            if key in self._watched or (key in self._failed and not retry_failed):
                continue
            try:
                ino = os.stat(key).st_ino
            except OSError:
                continue
            if not os.path.isdir(key):
                continue
            try:
                self._observer.schedule(self._handler, key, recursive=True, event_filter=_EVENTS)
                self._watched[key] = ino
                if key in self._failed:
                    self._failed.discard(key)
                    log.info("watching %s for file events again", key)
            except OSError as e:
                if key not in self._failed:
                    log.warning("cannot watch %s for file events (%s); polling it every %g s instead, "
                                "trying again every %g s", key, _why(e), self.poll_interval, self.RETRY_SECONDS)
                self._failed.add(key)
                self._retry_failed_at = now + self.RETRY_SECONDS
        self.degraded = bool(self._failed) or self._partial

    def check_coverage(self, folders: dict[str, int]) -> None:
        """Compare the inotify watches held with ``folders`` (root → folders
        the poll listed under it). Fewer watches than folders on two checks in
        a row means the kernel refused some (watchdog does not say): log it
        once, and try again every ``RETRY_SECONDS``."""
        if self._observer is None or not self._watched:
            return
        want = sum(n for root, n in folders.items() if root in self._watched)
        have = inotify_watches()
        if have is None or want == 0:
            return
        if have >= want:
            self._short = 0
            if self._partial:
                log.info("file events cover all %d folders again", want)
                self._partial = False
            self.degraded = bool(self._failed)
            return
        self._short += 1
        if self._short < 2:
            return  # folders created since the walk are watched a moment later
        now = time.monotonic()
        if not self._partial:
            log.warning("file events cover only %d of %d folders (inotify watch limit reached: raise "
                        "fs.inotify.max_user_watches); polling every %g s covers the rest", have, want,
                        self.poll_interval)
            self._partial = True
            self.degraded = True
            self._retry_at = now + self.RETRY_SECONDS
        elif now >= self._retry_at:
            self._retry_at = now + self.RETRY_SECONDS
            self._short = 0
            self._observer = self._restart()
            self.ensure()

    def forget_missing(self) -> None:
        """Drop the watches of roots that disappeared or were replaced (a new
        folder under the same name: the old watch went with the old one), so
        that they are watched again when they exist."""
        for key, ino in list(self._watched.items()):
            try:
                same = os.path.isdir(key) and os.stat(key).st_ino == ino
            except OSError:
                same = False
            if not same:
                log.info("%s disappeared or was replaced; watching it again when it exists", key)
                self._observer = None if self._observer is None else self._restart()
                break

    def _restart(self):
        try:
            self._observer.stop()
        except Exception:  # pragma: no cover
            pass
        self._watched.clear()
        return None

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None
