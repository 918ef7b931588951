"""The long-running exporter: the wiring (roots, file table, store,
evidence, checkpoint, alerter) and the reader loop.

One worker thread owns the store: it runs the start-up plan
(:mod:`exporter.startup`), then reads queued paths (from watchdog events),
polls every known file's stat every ``poll_interval_seconds``, walks the
roots for new files, applies hook and registry evidence, and evaluates
time-based rules every ``evaluation_interval_seconds``. Transitions go to
the alerter, whose delivery runs in its own thread and never blocks reading.
"""

from __future__ import annotations

import logging
import threading
import time

from .checkpoint import Checkpoint
from .config import Config
from .evidence import Evidence
from .files import FileTable, make_reader
from .history import HistoryIndex
from .hookjournal import RECOVER_MAX_LINES
from .hooks import HookInbox
from .metrics import Metrics
from .names import OPEN_STATES
from .poll import Poller
from .registry import Registry
from .roots import Roots, configured_roots, describe_root
from .startup import StartUp
from .watch import ChangeQueue, Watcher

log = logging.getLogger(__name__)

CHECKPOINT_EVERY_SECONDS = 5.0


def _open_journal(cfg: Config):
    """The state_dir's :class:`.hookjournal.HookJournal`, or None (logged)
    when it cannot be opened: hooks are then answered before they are saved."""
    from .hookjournal import HookJournal

    try:
        cfg.resolved_state_dir().mkdir(parents=True, exist_ok=True)
        return HookJournal(cfg.resolved_state_dir())
    except OSError as e:
        log.error("cannot open the hook journal in %s: %s (hook events are acknowledged before they are saved)",
                  cfg.resolved_state_dir(), e.strerror or e)
        return None


class Daemon:
    """Follows the configured roots and keeps the store current.

    ``alerter`` (optional) gets ``observe(transitions, now)`` after each
    evaluation and ``tick(now)`` on every loop.
    """

    def __init__(self, cfg: Config, metrics: Metrics | None = None, alerter=None, early_split=None):
        self.cfg = cfg
        self.metrics = metrics or Metrics()
        self.store, _ = make_reader(cfg, self.metrics, cfg.metrics.session_ttl_seconds)
        self.roots = Roots(configured_roots(cfg))
        self.alerter = alerter
        # Turn ends whose page was decided but not sent when the last run
        # ended: judged again however they are read (the ledger wrote
        # "pending" before any checkpoint moved past their records).
        self.store.owed = alerter.owed() if alerter is not None else {}
        self.queue = ChangeQueue()
        #: Hook events from the HTTP threads, applied by the reader thread.
        self.hooks = HookInbox(self.metrics, self.queue.wake)
        #: Hook deliveries on disk before their 2xx (state_dir/hook-journal.jsonl).
        self.journal = self.hooks.journal = _open_journal(cfg)
        #: Claude Code's session registry, stepped by the reader thread.
        self.registry = Registry.from_config(cfg, self.metrics, self.queue.put, self.roots)
        #: The followed files: reads, the poll and the walk, the history index.
        self.files = FileTable(self.store, cfg.sources.max_line_bytes, self.roots)
        #: What the watcher misses: the poll, the walk of the roots, the folders it reports.
        self.poller = Poller(self.files, self.roots, self.queue)
        self.watcher = (Watcher(self.roots, self.queue, self.poller.on_dir, cfg.sources.poll_interval_seconds)
                        if cfg.sources.watch_events else None)
        self.poller.watcher = self.watcher
        #: Hook and registry evidence; its ``kept`` deliveries go with the checkpoint.
        self.evidence = Evidence(self.store, self.files, self.roots, self.metrics)
        self.evidence.journal = self.journal  # its recovered deliveries are applied with the checkpoint's
        self.ready = threading.Event()
        self._stop = self.files.stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.checkpoint = Checkpoint(cfg.resolved_state_dir())
        self.start_up = StartUp(cfg, self.store, self.files, self.roots, self.checkpoint, self.evidence, alerter,
                                self._stop, early_split)
        self._backfilled = False  # the start-up scan ran to its end
        self._journaled: list[int] = []  # journal lines of hooks applied since the last checkpoint

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
                self.poller.missing.add(root)
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
        if self.journal is not None:
            self.journal.close()
        # else: stopped during the start-up scan. The previous checkpoint (if
        # any) stays: what this run did not reach is still old history, not
        # news written while the exporter was down.

    def _save_checkpoint(self, force: bool = False) -> bool:
        """Write what was read (path → [inode, offset]) and which sessions
        were still open, atomically; skipped when nothing changed (unless
        ``force``)."""
        offsets = self.files.offsets()
        open_ = {f"{s.provider}\t{s.session_id}" for s in list(self.store.sessions.values())
                 if not s.hidden and s.status.state in OPEN_STATES}
        open_ = sorted(open_ | {f"{p}\t{sid}" for p, sid in self.store.carry})
        ttl, now = self.cfg.metrics.session_ttl_seconds, time.time()
        kept = self.evidence.kept
        acct = self.store.usage
        applied, self._journaled = self._journaled, []  # every one of them is in what is saved now
        saved = self.checkpoint.save(offsets, open_, kept.records(ttl, now), self.history, force, kept.version,
                                     (acct.version, acct.state))
        if not saved:  # (the journal holds at most RECOVER_MAX_LINES owed lines: so does this list)
            self._journaled = (applied + self._journaled)[-RECOVER_MAX_LINES:]
        elif applied and self.journal is not None:
            self.journal.done(applied)  # in the checkpoint: their journal lines may go
        return saved

    # -- worker ------------------------------------------------------------
    def _run(self) -> None:
        try:
            self.start_up.read()
            if not self._stop.is_set() and self.start_up.take_history():
                self._backfilled = True
        except Exception:  # pragma: no cover - never let the reader die silently
            log.exception("start-up scan failed")
        if not self._stop.is_set():
            # At once, even with nothing read: a checkpoint is also the mark
            # that this state_dir has run before, so that a crash before the
            # first periodic save does not make the next start take what was
            # written meanwhile for old history (and page none of it).
            if self._save_checkpoint(force=True) and self.journal is not None:
                self.journal.done_recovered()  # the last run's journaled hooks are in the checkpoint now
        self.ready.set()
        try:  # the prices of the models read (genai-prices: ~0.4 s), here, not in the first scrape
            prices = self.store.usage.prices
            prices.prefetch({key[0] for s in list(self.store.sessions.values()) for key in s.usage.tokens}
                            | {key[1] for key in list(self.store.usage.counted)})
            prices.save()
            self.store.snapshot()
        except Exception:  # pragma: no cover - a scrape would say it
            log.debug("snapshot after start-up failed", exc_info=True)
        if self.watcher and not self._stop.is_set():
            self.watcher.ensure()
            try:
                self.poller.poll(count=False)  # what was written before the watches were in place
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
                self.poller.drain_dirs()
                for p in paths:
                    self.files.read(p, live=True)
                polled = False
                if time.monotonic() >= next_poll:
                    polled = self.poller.poll()
                    self.hooks.take_spool(cfg.resolved_state_dir(), cfg.hooks.spool_max_age_seconds,
                                          cfg.hooks.max_body_bytes)
                    next_poll = time.monotonic() + cfg.sources.poll_interval_seconds
                hooked = self._apply_hooks()
                hooked = self.registry.step(self.evidence) or hooked
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
        """Apply the hook deliveries received since the last round
        (:meth:`Evidence.apply_hooks`). True when there were any. Their
        journal lines go with the next checkpoint (:meth:`_save_checkpoint`):
        until then the journal is what makes a wait only a hook knows of
        outlive a crash, so a burst of hooks costs no checkpoint each."""
        items = self.hooks.take()
        self._journaled += self.hooks.taken
        self.evidence.apply_hooks(items)
        return bool(items)

    def _evaluate(self) -> None:
        transitions = self.store.evaluate()
        if self.alerter is not None and transitions:
            self.alerter.observe(transitions, time.time())
