"""The daemon's start-up plan: what to read, how far it is old, what is news.

1. The walk (:func:`~.history.split_start_up`, forked early by the CLI when
   it can: :func:`~.history.split_early`) sorts the files: those written
   within ``metrics.session_ttl_seconds`` (and their sessions' older files)
   are read; the others are history, followed from their end
   (:class:`~.history.HistoryIndex`).
2. The files to read are read (:func:`~.parallel.read_start_up`, forked when
   there is enough): the bytes the previous run had read (the checkpoint,
   :meth:`~.checkpoint.Checkpoint.read_from`) are backfill, those after them
   news. History files the previous run left as history that grew since are
   followed from where they ended.
3. The hook deliveries the previous run saved are applied again
   (:meth:`~.evidence.Evidence.reapply`), the store is evaluated and the
   transitions go to the alerter (whose ledger says what was already sent).
4. The walk's second result, the history index, is taken
   (:meth:`StartUp.take_history`).
"""

from __future__ import annotations

import logging
import os
import time

from . import checkpoint, parallel
from .files import make_reader, short_of_fds, stat_key
from .history import HistoryIndex, horizon, split_start_up

log = logging.getLogger("exporter.daemon")


def _size(n: int) -> str:
    """Bytes for a log line: ``512 B``, ``3.4 kB``, ``12.0 MB``, ``1.73 GB``."""
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= div:
            return f"{n / div:.{2 if unit == 'GB' else 1}f} {unit}"
    return f"{n} B"


class StartUp:
    """The start-up read of ``files`` (a :class:`~.files.FileTable`) into
    ``store`` under ``roots``, against ``checkpoint`` (loaded here); saved
    hook deliveries go through ``evidence``; the transitions to ``alerter``
    (or None). ``early_split``: the walk begun early (:func:`~.history.split_early`),
    or None; ``stop``: an event that ends the read early."""

    def __init__(self, cfg, store, files, roots, checkpoint, evidence, alerter, stop, early_split=None):
        self.cfg, self.store, self.files, self.roots = cfg, store, files, roots
        self.checkpoint, self.evidence, self.alerter, self.stop = checkpoint, evidence, alerter, stop
        self.early_split = early_split
        self._prev_history: HistoryIndex | None = None  # the previous run's, from its checkpoint
        self._split = None  # the start-up walk in this process (when not forked), between its two results
        self._history_counted: dict[str, int] | None = None  # its first result's count of history files

    def read(self) -> None:
        """Read everything there is (steps 1–3). Bytes a previous run had
        read (its checkpoint: same path and inode) are backfill; bytes after
        them were written while the exporter was down and are news. Returns
        early when ``stop`` is set."""
        started = time.monotonic()
        cp = self.checkpoint
        cp.load()
        self.store.carry = set(cp.open)
        # The usage counters go on from the saved values; on a first start what is read counts once.
        self.store.usage.restore(cp.usage, first=cp.files is None)
        if cp.has_history and horizon(self.cfg) < float("inf"):
            try:
                self._prev_history = HistoryIndex.load(cp.history_path)
            except (OSError, ValueError) as e:
                log.warning("the history index %s is unusable (%s); history files appended while the exporter was "
                            "down are read whole, as news", cp.history_path, getattr(e, "strerror", None) or e)
        first = self.early_split.result(last=False) if self.early_split is not None else None
        if first is None:
            if self.early_split is not None and self.stop.is_set():
                return  # it was stopped with the exporter (Ctrl-C, the service manager)
            first = next(self._split_here())
        files, history_count, history_bytes = first
        for prov, n in history_count.items():
            if n:
                self.files.watched(prov).inc(n)
        # Files that were history at the previous run and were appended to
        # while the exporter was down: from where they ended, the rest is news.
        resumed = []
        if self._prev_history is not None and self._prev_history.slots():
            files, resumed = self._resumed_history(files)
        total = len(files) + len(resumed)
        until = {path: checkpoint.until(cp.read_from(path)) for path, *_ in files}
        reading = time.monotonic()
        parallel.read_start_up(self.store, self.files, files, until, lambda: make_reader(self.cfg), self.stop.is_set,
                               lambda msg: log.info("start-up scan: %s", msg), news_from=cp.saved_at)
        for path, prov, root, st in resumed:
            if self.stop.is_set():
                break
            self.files.skip(path, prov, root, st=st)
            self.files.read(path, live=True)
        self._prev_history = None
        if self.stop.is_set():
            log.info("start-up scan stopped (%d files to read)", total)
            return
        self.evidence.reapply(cp.hooks, self.cfg.metrics.session_ttl_seconds)
        reading = time.monotonic() - reading
        read = 0
        for path, *_ in files + resumed:
            f = self.files.files.get(path)
            if f is None:
                continue
            read += f.tailer.offset
            if f.failing and not short_of_fds(f):  # logged and counted once; tried again when its stat changes
                try:
                    self.files.unreadable[path] = stat_key(os.stat(path))
                except OSError:
                    pass
        read -= sum(st[1] for path, _p, _r, st in resumed if path in self.files.files)  # skipped, not read
        transitions = self.store.evaluate()
        self.store.carry &= set(self.store.sessions)  # sessions whose files are gone are not waited for
        if self.alerter is not None:
            self.alerter.observe(transitions, time.time())
        self._history_counted = history_count
        took = time.monotonic() - started
        log.info("start-up scan done in %.2f s: read %d files (%s in %.2f s), skipped %d files (%s) as history "
                 "(not written for %g s); %d sessions", took, total, _size(read), reading,
                 sum(history_count.values()), _size(history_bytes), self.cfg.metrics.session_ttl_seconds,
                 len(self.store.sessions))

    def take_history(self) -> bool:
        """Take the start-up walk's second result, the :class:`HistoryIndex`
        (built while the files to read were read). Should the forked walk
        have failed since its first result, the walk is done again here;
        files it finds that the start-up read already follows are taken
        out. False when the start-up scan did not get that far (stopped)."""
        counted = self._history_counted  # history files per provider already in files_watched
        if counted is None:
            return False
        index = self.early_split.result() if self.early_split is not None else None
        if index is None:
            if self.stop.is_set():
                return False  # stopped with the exporter
            if self._split is None:
                next(self._split_here())
            index = next(self._split)
        self.early_split = self._split = None
        for path in self.files.files:
            index.take(path)
        for prov, n in index.count.items():
            if n != counted.get(prov, 0):
                self.files.watched(prov).inc(n - counted.get(prov, 0))
        self.files.history = index
        return True

    def _split_here(self):
        """The start-up walk (:func:`split_start_up`) in this process: where
        there is no fork, or the forked walk failed (said in the log)."""
        if self.early_split is not None:
            log.warning("the start-up walk's process failed; walking the folders in this process")
        self.early_split = None
        self._split = split_start_up(self.roots, horizon(self.cfg), time.time())
        return self._split

    def _resumed_history(self, files: list) -> tuple[list, list]:
        """Split ``files`` (to read at start-up) into those to read as usual and
        those the previous run left as history that grew since (same inode,
        not shorter): ``(path, provider, root, (st_ino, size then, 0))``,
        followed from their old end (:meth:`FileTable.skip`)."""
        rest, resumed = [], []
        for item in files:
            path, prov, root, _size = item
            got = self._prev_history.get(path)
            if got is not None and not self.checkpoint.knows(path) and checkpoint.continues(path, got[1]):
                resumed.append((path, prov, root, got[1]))
            else:
                rest.append(item)
        return rest, resumed
