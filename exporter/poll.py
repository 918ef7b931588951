"""What the file watcher misses, found for the daemon's file table
(:class:`~.files.FileTable`): the poll of every followed file's stat, the
walk of the roots for new and changed history files (paced by its own
cost), roots that disappear and appear, folders that cannot be listed, and
the folders the watcher reports (:meth:`Poller.on_dir`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from .files import stat_key
from .roots import WalkStats, walk_jsonl

log = logging.getLogger("exporter.daemon")

#: The poll walks the roots at most once per this many times the last
#: walk's duration (1 % of a core; see Poller.poll).
WALK_COST_FACTOR = 100.0


class Poller:
    """Finds what to read for ``files`` (a :class:`~.files.FileTable`)
    under ``roots`` (:class:`~.roots.Roots`): ``queue`` is the change queue
    the watcher fills (``pending(path)``, ``wake()``), ``watcher`` the
    :class:`~.watch.Watcher` (or None: polling only). ``missing``: the
    roots that do not exist (now). Runs on the reader thread
    (:meth:`on_dir` excepted: any thread)."""

    def __init__(self, files, roots, queue, watcher=None):
        self.table, self.roots, self.queue, self.watcher = files, roots, queue, watcher
        self.metrics = files.metrics
        self.missing: set[Path] = set()  # roots that do not exist (now)
        self._new_dirs: list[str] = []
        self._dir_lock = threading.Lock()
        self._denied: set[str] = set()  # folders that could not be listed at the last poll
        self._next_coverage = 0.0
        self._next_walk = 0.0  # monotonic time of the poll's next walk of the roots
        self._walk_reading = 0.0  # seconds the last walk spent reading the files it found
        self._folders: dict[str, int] = {}  # root → folders its last walk listed

    def on_dir(self, path: str) -> None:
        """The watcher found folder ``path`` (new): its files are read at
        the next :meth:`drain_dirs` (the reader is woken)."""
        with self._dir_lock:
            self._new_dirs.append(path)
        self.queue.wake()

    def drain_dirs(self) -> None:
        """Read the files of the folders :meth:`on_dir` reported."""
        with self._dir_lock:
            dirs, self._new_dirs = self._new_dirs, []
        for d in dirs:
            for p in walk_jsonl(Path(d)):
                if p not in self.table.files:
                    self.table.read(p, live=True)

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
        m = self.metrics
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
        for path in list(self.table.files):
            try:
                st = os.stat(path)
            except FileNotFoundError:
                self.table.forget(path)
                self.table.unreadable.pop(path, None)
                continue
            except OSError:
                continue
            if self.table.changed(path, st) and not self.queue.pending(path):
                if self.table.unreadable.get(path) == stat_key(st):
                    continue  # failed with this very stat: logged and counted once, retried when it changes
                if counting and path not in self.table.unreadable:
                    m.poll_recoveries.labels(self.table.files[path].provider.NAME).inc()
                self.table.read(path, live=True)
                found = True
        gone = self.table.expire()
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
        """The poll's walk of every root (see :meth:`poll`): files not
        followed yet are read (new ones from their start, history files that
        changed from where they ended); history files no longer found are
        forgotten. True when it read something."""
        m, history = self.metrics, self.table.history
        found = False
        self._walk_reading = 0.0
        seen = bytearray(history.slots()) if len(history) else None
        denied: dict[str, OSError] = {}
        for prov, root in self.roots:
            if root in self.missing:
                continue  # its files are gone with it
            stats = WalkStats()
            for path in walk_jsonl(root, stats):
                if path in self.table.files:
                    continue
                i = history.position(path) if seen is not None else -1
                if i >= 0:  # a history file: read when its stat changed
                    seen[i] = 1
                    try:
                        if history.unchanged(i, os.stat(path)):
                            continue
                    except OSError:
                        continue
                if self.queue.pending(path) or (i < 0 and not self.table.track(path, prov, root, born=time.time())):
                    continue
                if counting:
                    m.poll_recoveries.labels(prov).inc()
                began = time.monotonic()
                self.table.read(path, live=True)
                self._walk_reading += time.monotonic() - began
                found = True
            self._folders[str(root)] = stats.dirs
            denied.update(stats.denied)
        self._note_denied(denied)
        if seen is not None and not denied:  # every folder listed: a history file not found is gone
            for prov, n in history.drop_unseen(seen).items():
                if n:
                    self.table.watched(prov).dec(n)
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
