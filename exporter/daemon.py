"""The long-running exporter: the wiring (roots, file table, store, checkpoint,
alerter) and the reader loop, plus the start-up plan and hook persistence.

One worker thread owns the store: it reads queued paths (from watchdog
events), polls every known file's stat every ``poll_interval_seconds``, walks
the roots for new files, and evaluates time-based rules every
``evaluation_interval_seconds``. Transitions go to the alerter, whose
delivery runs in its own thread and never blocks reading.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from pathlib import Path

from . import checkpoint
from .checkpoint import Checkpoint
from .config import Config
from .discovery import ChangeQueue, Watcher
from .files import FileTable, short_of_fds, stat_key
from .history import HistoryIndex, horizon, split_start_up
from .hooklog import HookLog
from .hooks import HookInbox, from_record
from .metrics import Metrics
from .names import OPEN_STATES
from .roots import Roots, configured_roots, describe_root
from .registry import Registry
from .scan import make_store, read_start_up

log = logging.getLogger(__name__)

CHECKPOINT_EVERY_SECONDS = 5.0
#: Applied hook deliveries the checkpoint keeps per session (the newest:
#: a later event decides the state; two waits in a row merge) and sessions
#: it keeps them for (the most recently hooked; only deliveries younger than
#: ``metrics.session_ttl_seconds``).
HOOKS_KEPT_PER_SESSION = 3
HOOK_SESSIONS_KEPT = 1000



def _size(n: int) -> str:
    """Bytes for a log line: ``512 B``, ``3.4 kB``, ``12.0 MB``, ``1.73 GB``."""
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= div:
            return f"{n / div:.{2 if unit == 'GB' else 1}f} {unit}"
    return f"{n} B"


class Daemon:
    """Follows the configured roots and keeps the store current.

    ``alerter`` (optional) gets ``observe(transitions, now)`` after each
    evaluation and ``tick(now)`` on every loop.
    """

    def __init__(self, cfg: Config, metrics: Metrics | None = None, alerter=None, early_split=None):
        self.cfg = cfg
        #: The start-up walk begun early (``history.split_early``, by the CLI), or None.
        self.early_split = early_split
        self.metrics = metrics or Metrics()
        self.store = make_store(cfg, self.metrics)
        self.store.session_ttl = cfg.metrics.session_ttl_seconds
        self.roots = Roots(configured_roots(cfg))
        self.alerter = alerter
        # Turn ends whose page was decided but not sent when the last run
        # ended: judged again however they are read (the ledger wrote
        # "pending" before any checkpoint moved past their records).
        self.store.owed = alerter.owed() if alerter is not None else {}
        self.queue = ChangeQueue()
        #: Hook events from the HTTP threads, applied by the reader thread.
        self.hooks = HookInbox(self.metrics, self.queue.wake)
        #: Claude Code's session registry, stepped by the reader thread.
        self.registry = Registry.from_config(cfg, self.metrics, self.queue.put, self.roots)
        #: Applied deliveries, saved with the checkpoint and applied again at
        #: the next start: a wait only a hook reported outlives a restart.
        self.hook_log = HookLog(HOOKS_KEPT_PER_SESSION, HOOK_SESSIONS_KEPT)
        self._hook_log = self.hook_log.kept
        #: The followed files: reads, the poll and the walk, the history index.
        self.files = FileTable(self.store, self.roots, self.queue, self.metrics)
        self.watcher = (Watcher(self.roots, self.queue, self.files.on_dir, cfg.sources.poll_interval_seconds)
                        if cfg.sources.watch_events else None)
        self.files.watcher = self.watcher
        self.ready = threading.Event()
        self._stop = self.files.stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.checkpoint = Checkpoint(cfg.resolved_state_dir())
        self._backfilled = False  # the start-up scan ran to its end
        self._prev_history: HistoryIndex | None = None  # the previous run's, from its checkpoint
        self._split = None  # the start-up walk in this process (when not forked), between its two results
        self._history_counted: dict[str, int] | None = None  # its first result's count of history files

    @property
    def history(self) -> HistoryIndex:
        """The files the start-up scan left as history (:attr:`FileTable.history`)."""
        return self.files.history

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> None:
        """Read everything there is (backfill) in the worker thread;
        ``ready`` is set when that first pass is done. The file watches are
        placed right after it (placing them costs about 10 µs a folder, and
        nothing needs them before), followed by one stat of every file, so
        that nothing written meanwhile waits for the poll."""
        for prov, root in self.roots:
            if root.is_dir():
                log.info("reading %s transcripts under %s", prov, root)
            else:
                log.info("waiting for %s folder %s (it %s)", prov, root, describe_root(prov, root))
                self.files.missing.add(root)
        self._thread = threading.Thread(target=self._run, name="reader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.queue.wake()
        if self._thread:
            self._thread.join(timeout=10)
        if self.watcher:
            self.watcher.stop()
        self.registry.stop()
        if self._backfilled:
            self._save_checkpoint()
        # else: stopped during the start-up scan. The previous checkpoint (if
        # any) stays: what this run did not reach is still old history, not
        # news written while the exporter was down.

    def _save_checkpoint(self, force: bool = False) -> None:
        """Write what was read (path → [inode, offset]) and which sessions
        were still open, atomically; skipped when nothing changed (unless
        ``force``)."""
        offsets = self.store.offsets()
        open_ = {f"{s.provider}\t{s.session_id}" for s in list(self.store.sessions.values())
                 if not s.hidden and s.status.state in OPEN_STATES}
        open_ = sorted(open_ | {f"{p}\t{sid}" for p, sid in self.store.carry})
        ttl, now = self.cfg.metrics.session_ttl_seconds, time.time()
        self.checkpoint.save(offsets, open_, self.hook_log.records(ttl, now), self.history, force,
                             self.hook_log.version)

    # -- worker ------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._backfill()
            if not self._stop.is_set() and self._take_history():
                self._backfilled = True
        except Exception:  # pragma: no cover - never let the reader die silently
            log.exception("start-up scan failed")
        if not self._stop.is_set():
            # At once, even with nothing read: a checkpoint is also the mark
            # that this state_dir has run before, so that a crash before the
            # first periodic save does not make the next start take what was
            # written meanwhile for old history (and page none of it).
            self._save_checkpoint(force=True)
        self.ready.set()
        if self.watcher and not self._stop.is_set():
            self.watcher.ensure()
            try:
                self.files.poll(count=False)  # what was written before the watches were in place
                self._evaluate()
            except Exception:  # pragma: no cover - keep following files whatever happens
                log.exception("reader loop error; continuing")
        cfg = self.cfg
        next_poll = time.monotonic() + cfg.sources.poll_interval_seconds
        next_eval = 0.0
        next_save = time.monotonic() + CHECKPOINT_EVERY_SECONDS
        while not self._stop.is_set():
            now_m = time.monotonic()
            timeout = max(0.0, min(next_poll, next_eval) - now_m)
            if self.alerter is not None:
                timeout = min(timeout, self.alerter.next_due_in())
            paths = self.queue.take(timeout)
            try:
                self.files.drain_dirs()
                for p in paths:
                    self.files.read(p, live=True)
                polled = False
                if time.monotonic() >= next_poll:
                    polled = self.files.poll()
                    self.hooks.take_spool(cfg.resolved_state_dir(), cfg.hooks.spool_max_age_seconds,
                                          cfg.hooks.max_body_bytes)
                    next_poll = time.monotonic() + cfg.sources.poll_interval_seconds
                hooked = self._apply_hooks()
                hooked = self.registry.step(self) or hooked
                if paths or polled or hooked or time.monotonic() >= next_eval:
                    self._evaluate()
                    next_eval = time.monotonic() + cfg.reducer.evaluation_interval_seconds
                if self.alerter is not None:
                    self.alerter.tick(time.time())
                if time.monotonic() >= next_save:
                    self._evaluate()  # every turn end read is judged (its page "pending") before the checkpoint passes it
                    self._save_checkpoint()
                    next_save = time.monotonic() + CHECKPOINT_EVERY_SECONDS
            except Exception:  # pragma: no cover - keep following files whatever happens
                log.exception("reader loop error; continuing")
                time.sleep(0.5)

    def _apply_hooks(self) -> bool:
        """Apply the hook events received since the last round, in arrival
        order. A hook is taken only when its transcript is a regular file
        under a configured root that names its session (:meth:`_speaks_for`):
        anything else (a session this exporter does not follow, a made-up id,
        another session's file) is counted and dropped, so it can neither
        page nor linger. That transcript is read first, so the hook is ordered
        after every record written before it ran. True when there were any."""
        items = self.hooks.take()
        waits = False
        for d in items:
            if d.transcript_path is None:
                # Copilot CLI's hooks name no transcript: they join, by
                # session_id, a session its transcript already told of.
                s = self.store.apply_hook(d, may_create=False)
            elif not self._speaks_for(d):  # issue 22: a hook speaks only for a transcript on disk that it names
                self.metrics.hook_errors.labels("unknown_session").inc()
                continue
            else:
                self.files.read(d.transcript_path, live=True)
                s = self.store.apply_hook(d, may_create=True)
            if s is not None:
                waits = self._keep_hook(s, d) or waits
        if waits:
            # A wait only a hook knows of, or the end of one, outlives a
            # restart at once (after the alerter has seen it: its page).
            self._evaluate()
            self._save_checkpoint()
        return bool(items)

    def _speaks_for(self, d) -> bool:
        """A hook delivery ``d`` may change a session: its ``transcript_path``
        is a regular file (not a symlink) under a configured root, and that
        file's name names its ``session_id`` (Claude ``<sessionId>.jsonl``,
        Codex ``rollout-…-<id>.jsonl``) when it gives one."""
        if not self._ours(d.transcript_path):
            return False
        try:
            if not stat.S_ISREG(os.lstat(d.transcript_path).st_mode):
                return False
        except OSError:
            return False
        return d.session_id is None or d.session_id in os.path.basename(d.transcript_path)

    def _ours(self, path: str | None) -> bool:
        """``path`` (a hook's ``transcript_path``) lies under a configured root."""
        return bool(path) and ".." not in Path(path).parts and self.roots.root_of(path) is not None

    def _keep_hook(self, s, d) -> bool:
        """Keep an applied delivery for the checkpoint (:meth:`HookLog.keep`)."""
        return self.hook_log.keep(s, d)

    def _reapply_hooks(self, saved) -> None:
        """Apply again the hook deliveries the previous run saved (younger
        than ``metrics.session_ttl_seconds``), after the transcripts. Each is
        ordered by when it arrived: a record written after it (the user
        answered the prompt while the exporter was down) decides the state.
        They were news when they came, so they are news again: the page
        ledger says what was already sent. A session is made from one only
        while its transcript exists (a deleted session stays gone)."""
        ttl, now = self.cfg.metrics.session_ttl_seconds, time.time()
        dropped = 0
        if saved is not None and not isinstance(saved, list):
            log.warning("the saved hook events in the checkpoint are not a list; dropped")
        for rec in saved if isinstance(saved, list) else ():
            d = from_record(rec, now)
            if d is None:
                dropped += 1
                continue
            if ttl and now - d.event.ts >= ttl:
                continue
            path = d.transcript_path
            exists = self._ours(path) and os.path.isfile(path)
            if path and not exists and (d.provider, d.session_id) not in self.store.sessions:
                continue
            try:
                s = self.store.apply_hook(d, may_create=exists)
            except Exception:  # pragma: no cover - one bad entry never stops the start
                log.debug("saved hook event not applied", exc_info=True)
                dropped += 1
                continue
            if s is not None:
                self._keep_hook(s, d)
        if dropped:
            log.warning("%d saved hook event(s) in the checkpoint were unusable and are dropped", dropped)

    def _backfill(self) -> None:
        """Read everything there is. Bytes a previous run had read (its
        checkpoint: same path and inode) are backfill; bytes after them were
        written while the exporter was down and are news."""
        started = time.monotonic()
        cp = self.checkpoint
        cp.load()
        self.store.carry = set(cp.open)
        if cp.has_history and horizon(self.cfg) < float("inf"):
            try:
                self._prev_history = HistoryIndex.load(cp.history_path)
            except (OSError, ValueError) as e:
                log.warning("the history index %s is unusable (%s); history files appended while the exporter was "
                            "down are read whole, as news", cp.history_path, getattr(e, "strerror", None) or e)
        first = self.early_split.result(last=False) if self.early_split is not None else None
        if first is None:
            if self.early_split is not None and self._stop.is_set():
                return  # it was stopped with the exporter (Ctrl-C, the service manager)
            first = next(self._split_here())
        files, history_count, history_bytes = first
        for prov, n in history_count.items():
            if n:
                self.store._watched(prov).inc(n)
        # Files that were history at the previous run and were appended to
        # while the exporter was down: from where they ended, the rest is news.
        resumed = []
        if self._prev_history is not None and self._prev_history.slots():
            files, resumed = self._resumed_history(files)
        total = len(files) + len(resumed)
        until = {path: checkpoint.until(cp.read_from(path)) for path, *_ in files}
        reading = time.monotonic()
        read_start_up(self.store, files, until, self.cfg, self._stop.is_set,
                      lambda msg: log.info("start-up scan: %s", msg), news_from=cp.saved_at)
        for path, prov, root, st in resumed:
            if self._stop.is_set():
                break
            self.store.skip(path, prov, root, st=st)
            self.files.read(path, live=True)
        self._prev_history = None
        if self._stop.is_set():
            log.info("start-up scan stopped (%d files to read)", total)
            return
        self._reapply_hooks(cp.hooks)
        reading = time.monotonic() - reading
        read = 0
        for path, *_ in files + resumed:
            f = self.store.files.get(path)
            if f is None:
                continue
            read += f.tailer.offset
            if f.failing and not short_of_fds(f):  # logged and counted once; tried again when its stat changes
                try:
                    self.files.unreadable[path] = stat_key(os.stat(path))
                except OSError:
                    pass
        read -= sum(st[1] for path, _p, _r, st in resumed if path in self.store.files)  # skipped, not read
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

    def _take_history(self) -> bool:
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
            if self._stop.is_set():
                return False  # stopped with the exporter
            if self._split is None:
                next(self._split_here())
            index = next(self._split)
        self.early_split = self._split = None
        for path in self.store.files:
            index.take(path)
        for prov, n in index.count.items():
            if n != counted.get(prov, 0):
                self.store._watched(prov).inc(n - counted.get(prov, 0))
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
        followed from their old end (:meth:`SessionStore.skip`)."""
        rest, resumed = [], []
        for item in files:
            path, prov, root, _size = item
            got = self._prev_history.get(path)
            if got is not None and not self.checkpoint.knows(path) and checkpoint.continues(path, got[1]):
                resumed.append((path, prov, root, got[1]))
            else:
                rest.append(item)
        return rest, resumed

    def _evaluate(self) -> None:
        transitions = self.store.evaluate()
        if self.alerter is not None and transitions:
            self.alerter.observe(transitions, time.time())
