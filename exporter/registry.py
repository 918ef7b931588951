"""Claude Code's live session registry: a third source of evidence beside
transcripts and hooks, with no setup.

Follows the registry folder(s) (``sources.claude_code.registry``; file
events plus the poll, like the transcript roots) through
:class:`~.registry_records.RecordFolder` (the record files: listing, reading
at most ``max_record_bytes`` of each ``<pid>.json``, process checks), and
decides each round which records changed and what that means for their
sessions. What a reading means is the provider's
(:func:`~.providers.claude_registry.evidence`,
:func:`~.providers.claude_registry.exited`); :meth:`Registry.step` hands it
to ingest as a hook delivery named ``registry``
(:meth:`~.evidence.Evidence.apply`, the path hook events take), in the
reader thread, after reading the session's transcripts so that it is ordered
after every record written before it. It learns a session's state only as a
value (:meth:`~.evidence.Evidence.status_of`), never the store's objects.

Privacy: a record's ``name`` is never read and its ``cwd`` never leaves this
module; logs name the record file (``<pid>.json``) at most.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import Counter, Gauge

from .config import Config
from .events import WAIT
from .providers import claude_registry as creg
from .registry_records import MAX_RECORDS, Entry, RecordFolder

log = logging.getLogger(__name__)

PROVIDER = "claude_code"
#: How long an ``idle``/``shell`` reading waits before it ends a wait the
#: registry reported: Claude Code 2.1.332 flushes the rejection and
#: "[Request interrupted by user for tool use]" to the transcript tens of ms
#: after the record says ``idle`` (an Esc at the prompt), and the transcript
#: decides what the end of the wait was.
IDLE_GRACE_SECONDS = 1.0


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
        self.poll_interval = poll_interval
        self._entries: dict[str, Entry] = {}
        self._next_poll = 0.0
        self._first = True
        self._said = False  # the start-up line naming the folders was logged
        self._waits: dict[str, _Wait] = {}
        r = metrics.registry
        m_skipped = _counter(metrics, "coding_agent_registry_records_skipped",
                             "Claude Code session registry records not used, by reason.", ["reason"], r)
        for reason in creg.SKIP_REASONS:
            m_skipped.labels(reason)
        self.m_live = _gauge(metrics, "coding_agent_registry_records",
                             "Claude Code session registry records whose process is alive.", r)
        #: The record files: events, listing, reading, process checks.
        self.records = RecordFolder(folders, m_skipped, wake, poll_interval, max_bytes)

    @classmethod
    def from_config(cls, cfg: Config, metrics, wake, roots) -> Registry:
        """The registry of ``cfg`` (no folders: every step is a no-op)."""
        return cls(folders_of(cfg, roots), metrics, wake, cfg.sources.poll_interval_seconds,
                   cfg.sources.claude_code.registry.max_record_bytes)

    def stop(self) -> None:
        """Stop the file events."""
        self.records.stop()

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
        records = self.records
        dirty = records.take_changed()
        due = now_m >= self._next_poll
        if not due and not dirty and not self._unapplied():
            return False
        removed: list[Entry] = []
        if due:
            self._next_poll = now_m + self.poll_interval
            records.watch()
            listed = records.list()
            if listed is not None:
                for path in set(self._entries) - listed:
                    removed.append(self._entries.pop(path))
                for path in listed:
                    self._entries.setdefault(path, Entry())
            paths = list(self._entries)
        else:
            paths = [p for p in dirty if creg.RECORD_NAME.fullmatch(os.path.basename(p))]
        for path in paths:
            e = self._entries.get(path)
            if e is None:
                if len(self._entries) >= MAX_RECORDS:
                    continue
                e = self._entries[path] = Entry()
            if not records.read(path, e):
                removed.append(self._entries.pop(path))
                continue
            if e.rec is not None and not e.gone and (due or path in dirty or e.alive is None):
                e.alive = records.alive(e.rec)
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
    def _apply(evidence, sid: str, ev, ident: str, history: bool) -> bool:
        """Hand ``ev`` for session ``sid`` to ingest as a delivery
        (:meth:`Evidence.apply`; ``ident`` hashed into its identity)."""
        import hashlib

        ident = "registry:" + hashlib.blake2b(ident.encode(), digest_size=12).hexdigest()
        return evidence.apply(PROVIDER, sid, ev, ident, history)

    def _apply_reading(self, evidence, e: Entry) -> bool:
        rec = e.rec
        st = evidence.status_of(PROVIDER, rec.session_id, read=True)
        if st is None:
            return False  # no transcript yet (a session before its first prompt): tried again
        e.applied = rec.key
        w = self._waits.get(rec.session_id)
        reg_wait = w.since if w is not None and st.state == "waiting" and st.wait == w.key else None
        ev = creg.evidence(rec, st.state, reg_wait)
        if ev is None:
            return False
        if reg_wait is not None and ev.ts == reg_wait and rec.status_at is not None \
                and time.time() - rec.status_at < IDLE_GRACE_SECONDS:
            e.applied = None  # tried again at the next round: the transcript may still say more
            return False
        ok = self._apply(evidence, rec.session_id, ev, f"registry:{rec.pid}:{rec.status}:{rec.waiting_for}:{rec.status_at}",
                         history=False)
        after = evidence.status_of(PROVIDER, rec.session_id)
        if ev.kind == WAIT and after.state == "waiting":
            self._waits[rec.session_id] = _Wait(after.wait, after.since)
        elif after.state != "waiting":
            self._waits.pop(rec.session_id, None)
        return ok

    def _apply_exit(self, evidence, e: Entry, removed: bool) -> bool:
        e.gone = True
        rec = e.rec
        self._waits.pop(rec.session_id, None)
        st = evidence.status_of(PROVIDER, rec.session_id, read=True)
        if st is None:
            return False
        ev = creg.exited(st.state, removed, time.time())
        if ev is None:
            return False
        how = "removed" if removed else "exited"
        return self._apply(evidence, rec.session_id, ev, f"registry:{rec.pid}:{rec.proc_start}:{how}", history=self._first)


#: The registry's metrics made so far, per Prometheus registry (one set per
#: ``Metrics``: a daemon made again in one process, as tests do, reuses them).
_MADE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _counter(metrics, name, doc, labels, registry):
    """One counter per ``Metrics`` (its registry), made once."""
    got = _MADE.setdefault(registry, {})
    if name not in got:
        got[name] = Counter(name, doc, labels, registry=registry)
    return got[name]


def _gauge(metrics, name, doc, registry):
    got = _MADE.setdefault(registry, {})
    if name not in got:
        got[name] = Gauge(name, doc, registry=registry)
    return got[name]
