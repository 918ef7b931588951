"""Discovery: which files to follow, and when they changed.

watchdog events (inotify/FSEvents/ReadDirectoryChangesW) tell quickly; a
periodic stat poll of every known file and a walk of every root is the safety
net, because watchers drop events silently (queue overflow, bind mounts,
network file systems, appends through a long-open fd on macOS). Changes only
the poll found are counted (``coding_agent_poll_recoveries_total``).

The watchdog handler never raises and does no work: it only queues paths.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from watchdog import events
from watchdog.events import FileSystemEventHandler
from watchdog.observers import Observer

log = logging.getLogger(__name__)


def walk_jsonl(root: Path):
    """Yield every ``*.jsonl`` file path under ``root`` (no symlinked
    folders followed; unreadable folders skipped)."""
    stack = [str(root)]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                        elif e.name.endswith(".jsonl") and e.is_file():
                            yield e.path
                    except OSError:
                        continue
        except OSError:
            continue


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
    Failures (inotify watch limit, a root that vanished) are logged and leave
    polling in charge.
    """

    def __init__(self, roots, queue: ChangeQueue, on_dir):
        self.roots = roots
        self._handler = _Handler(queue, on_dir)
        self._observer = None
        self._watched: set[str] = set()
        self.degraded = False

    def ensure(self) -> None:
        """Start or restart the observer and watch every existing root."""
        if self._observer is not None and not self._observer.is_alive():
            log.warning("file watcher stopped; restarting it (polling covered the gap)")
            self._observer = None
            self._watched.clear()
        if self._observer is None:
            self._observer = Observer()
            self._observer.daemon = True
            self._observer.start()
        for _prov, root in self.roots:
            key = str(root)
            if key in self._watched or not root.is_dir():
                continue
            try:
                self._observer.schedule(self._handler, key, recursive=True, event_filter=_EVENTS)
                self._watched.add(key)
            except OSError as e:
                if not self.degraded:
                    log.warning("cannot watch %s for file events (%s); relying on polling", key, e.strerror or e)
                self.degraded = True

    def forget_missing(self) -> None:
        """Drop the bookkeeping of roots that disappeared so they are watched
        again when they come back."""
        for key in list(self._watched):
            if not os.path.isdir(key):
                self._watched.discard(key)
                self._observer = None if self._observer is None else self._restart()

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
