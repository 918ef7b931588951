"""The followed-file table's daemon side: reading a followed or new file
(:meth:`FileTable.read`), the poll of every followed file's stat and the
walk of the roots for new and changed history files (:meth:`FileTable.poll`),
the folders the watcher reports (:meth:`FileTable.on_dir`), and the history
index of the files left unread at start-up. The per-file state (tailer,
decoder, session) is the store's (``SessionStore.track/skip/forget``).
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from pathlib import Path

from . import checkpoint
from .history import HistoryIndex
from .roots import WalkStats, walk_jsonl

log = logging.getLogger("exporter.daemon")

#: The poll walks the roots at most once per this many times the last
#: walk's duration (1 % of a core; see Daemon._poll).
WALK_COST_FACTOR = 100.0


def stat_key(st: os.stat_result) -> tuple:
    """What must change before a file that could not be read is tried again
    (a chmod changes ``st_ctime_ns``)."""
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode


def short_of_fds(f) -> bool:
    """The last read of ``f`` failed for want of descriptors (EMFILE,
    ENFILE): the file is fine, so it is tried again at the next poll instead
    of waiting for its stat to change (issue 22)."""
    return f.failing in (errno.EMFILE, errno.ENFILE)


class FileTable:
    """Follows the files under ``roots`` for ``store``; ``queue`` is the
    change queue the watcher fills (``pending(path)``), ``watcher`` the
    watcher or None, ``stop`` an event that ends a long read early. Runs on
    the reader thread only (``on_dir`` excepted: any thread)."""

    def __init__(self, store, roots, queue, metrics, watcher=None):
        self.store, self.roots, self.queue, self.metrics, self.watcher = store, roots, queue, metrics, watcher
        self.stop = threading.Event()
        #: Files the start-up scan left as history, followed from their end once they change.
        self.history = HistoryIndex()
        self.missing: set[Path] = set()  # roots that do not exist (now)
        self.unreadable: dict[str, tuple] = {}  # path → stat key of a failed read (not retried until it changes)
        self._new_dirs: list[str] = []
        self._dir_lock = threading.Lock()
        self._denied: set[str] = set()  # folders that could not be listed at the last poll
        self._next_coverage = 0.0
        self._next_walk = 0.0  # monotonic time of the poll's next walk of the roots
        self._walk_reading = 0.0  # seconds the last walk spent reading the files it found
        self._folders: dict[str, int] = {}  # root → folders its last walk listed

    def on_dir(self, path: str) -> None:
        with self._dir_lock:
            self._new_dirs.append(path)
        self.queue.wake()

    def read(self, path: str, live: bool, until: int | None = None) -> None:
        store = self.store
        if path not in store.files:
            hit = self.roots.root_of(path)
            if hit is None:
                return
            old = self.history.take(path)  # changed or deleted: no longer history
            if old is not None:
                store._watched(old[0]).dec()
            if not os.path.isfile(path):
                return
            if old is not None and checkpoint.continues(path, old[1]):
                # history until now: followed from where it ended
                if store.skip(path, hit[0], hit[1], st=old[1]) is None:
                    return
            elif not store.track(path, hit[0], hit[1], born=time.time()):  # new, or another file under the old name
                return
        try:
            st = os.stat(path)
        except FileNotFoundError:
            store.forget(path)
            self.unreadable.pop(path, None)
            return
        except OSError:
            st = None
        key = stat_key(st) if st is not None else None
        if key is not None and self.unreadable.get(path) == key:
            return  # failed with this very stat: logged and counted once; tried again when it changes
        t = store.files[path].tailer
        before = (t.inode, t.size, t.mtime_ns)
        while store.refresh(path, live=live, until=until):
            if self.stop.is_set():
                return  # shutting down: the checkpoint says how far this got
        f = store.files.get(path)
        if f is None:
            return
        if key is not None and (f.tailer.inode, f.tailer.size, f.tailer.mtime_ns) == before \
                and store.changed(path, st) and not short_of_fds(f):
            self.unreadable[path] = key  # the open failed (permissions, not a regular file, …)
        elif self.unreadable.pop(path, None) is not None:
            log.info("%s can be read again", path)

    def drain_dirs(self) -> None:
        with self._dir_lock:
            dirs, self._new_dirs = self._new_dirs, []
        for d in dirs:
            for p in walk_jsonl(Path(d)):
                if p not in self.store.files:
                    self.read(p, live=True)

    def poll(self, count: bool = True) -> bool:
        """Stat every followed file, walk the roots for new files and changed
        history files, recover what the watcher missed (counted, unless
        ``count`` is false: before the watches were placed), drop files that
        vanished. True when it read something (the caller then evaluates at
        once).

        The walk lists every folder and stats every history file: with a
        heavy history that is most of the poll's cost, so it runs at most
        once per ``WALK_COST_FACTOR`` times its own duration (a walk that
        takes 0.3 s runs every 30 s or more: 1 % of a core), at every poll
        for a small tree. File events find new and changed files at once
        meanwhile; a root that appears is walked at the next poll."""
        store, m = self.store, self.metrics
        found = False
        counting = self.watcher is not None and count
        appeared = False
        for prov, root in self.roots:
            if not root.is_dir():
                if root not in self.missing:
                    log.warning("%s folder %s disappeared; waiting for it", prov, root)
                    self.missing.add(root)
            elif root in self.missing:
                self.missing.discard(root)
                log.info("%s folder %s appeared; reading it", prov, root)
                appeared = True
        now_m = time.monotonic()
        if not count or appeared or now_m >= self._next_walk:
            found = self._walk(counting)
            # the walk's own cost: not the time spent reading the files it found (issue 22: a root swapped
            # for a symlink and back was read whole in its walk, and walks then paused for minutes)
            self._next_walk = now_m + max(0.0, time.monotonic() - now_m - self._walk_reading) * WALK_COST_FACTOR
        for path in list(store.files):
            try:
                st = os.stat(path)
            except FileNotFoundError:
                store.forget(path)
                self.unreadable.pop(path, None)
                continue
            except OSError:
                continue
            if store.changed(path, st) and not self.queue.pending(path):
                if self.unreadable.get(path) == stat_key(st):
                    continue  # failed with this very stat: logged and counted once, retried when it changes
                if counting and path not in self.unreadable:
                    m.poll_recoveries.labels(store.files[path].provider.NAME).inc()
                self.read(path, live=True)
                found = True
        gone = store.expire()
        if gone:
            log.info("forgot %d session(s) not written for metrics.session_ttl_seconds", gone)
        if self.watcher is not None:
            self.watcher.forget_missing()
            self.watcher.ensure()
            if time.monotonic() >= self._next_coverage:
                self._next_coverage = time.monotonic() + 2.0
                self.watcher.check_coverage(self._folders)
        return found

    def _walk(self, counting: bool) -> bool:
        """The poll's walk of every root (see :meth:`_poll`): files not
        followed yet are read (new ones from their start, history files that
        changed from where they ended); history files no longer found are
        forgotten. True when it read something."""
        store, m, history = self.store, self.metrics, self.history
        found = False
        self._walk_reading = 0.0
        seen = bytearray(history.slots()) if len(history) else None
        denied: dict[str, OSError] = {}
        for prov, root in self.roots:
            if root in self.missing:
                continue  # its files are gone with it
            stats = WalkStats()
            for path in walk_jsonl(root, stats):
                if path in store.files:
                    continue
                i = history.position(path) if seen is not None else -1
                if i >= 0:  # a history file: read when its stat changed
                    seen[i] = 1
                    try:
                        if history.unchanged(i, os.stat(path)):
                            continue
                    except OSError:
                        continue
                if self.queue.pending(path) or (i < 0 and not store.track(path, prov, root, born=time.time())):
                    continue
                if counting:
                    m.poll_recoveries.labels(prov).inc()
                began = time.monotonic()
                self.read(path, live=True)
                self._walk_reading += time.monotonic() - began
                found = True
            self._folders[str(root)] = stats.dirs
            denied.update(stats.denied)
        self._note_denied(denied)
        if seen is not None and not denied:  # every folder listed: a history file not found is gone
            for prov, n in history.drop_unseen(seen).items():
                if n:
                    store._watched(prov).dec(n)
        return found

    def _note_denied(self, denied: dict[str, OSError]) -> None:
        """Say once when a folder cannot be listed (its transcripts are not
        read), and when it can again."""
        for d in sorted(set(denied) - self._denied):
            e = denied[d]
            log.warning("cannot list folder %s: %s; its transcripts are not read until it can be", d,
                        e.strerror or e)
        for d in sorted(self._denied - set(denied)):
            if os.path.isdir(d):
                log.info("folder %s can be listed again", d)
        self._denied = set(denied)

