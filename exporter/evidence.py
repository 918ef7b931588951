"""Evidence besides transcript lines: hook deliveries and Claude Code's
session registry, into the store through the one ingest path
(:func:`exporter.ingest.apply_hook`), on the reader thread.

What a hook may change is decided here: a hook speaks only for a regular
transcript file under a configured root that names its session (issue 22),
and that transcript is read first, so the hook is ordered after every record
written before it ran. Applied deliveries are kept (:class:`~.hooklog.HookLog`)
for the checkpoint and applied again at the next start (:meth:`reapply`): a
wait only a hook reported outlives a restart.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from pathlib import Path

from .hooklog import HookLog
from .hooks import HookDelivery, from_record
from .providers import PROVIDER_MODULES

log = logging.getLogger("exporter.daemon")

#: Applied hook deliveries the checkpoint keeps per session (the newest:
#: a later event decides the state; two waits in a row merge) and sessions
#: it keeps them for (the most recently hooked; only deliveries younger than
#: ``metrics.session_ttl_seconds``).
HOOKS_KEPT_PER_SESSION = 3
HOOK_SESSIONS_KEPT = 1000


class Evidence:
    """Hook and registry evidence for ``store`` (a
    :class:`~.store.SessionStore`) whose files ``files`` (a
    :class:`~.files.FileTable`) follows under ``roots``
    (:class:`~.roots.Roots`)."""

    def __init__(self, store, files, roots, metrics):
        self.store, self.files, self.roots, self.metrics = store, files, roots, metrics
        #: Applied deliveries, saved with the checkpoint.
        self.kept = HookLog(HOOKS_KEPT_PER_SESSION, HOOK_SESSIONS_KEPT)

    # -- hooks ---------------------------------------------------------------
    def apply_hooks(self, items) -> bool:
        """Apply hook deliveries (:class:`~.hooks.HookDelivery`, in arrival
        order). A delivery is taken only when :meth:`speaks_for` says so;
        anything else (a session this exporter does not follow, a made-up
        id, another session's file) is counted as ``unknown_session`` and
        dropped, so it can neither page nor linger. A delivery naming no
        transcript (Copilot CLI's hooks) joins, by ``session_id``, a session
        its transcript already told of. True when one was a wait or ended
        one: worth a checkpoint at once."""
        urgent = False
        judged: dict = {}  # (provider, session_id, path) -> speaks_for, once a batch
        read: set = set()  # transcripts read in this batch (a burst of one session's hooks reads it once)
        for d in items:
            if d.transcript_path is None:
                # read what its session's files hold first: a record written before the hook
                # fired is ordered before it (Copilot CLI 1.0.102 writes the ask_user call
                # ~20 ms before its Notification hook, which names no transcript)
                if d.session_id is not None:
                    self.current(d.provider, d.session_id)
                s = self.store.apply_hook(d, may_create=False)
            else:
                key = (d.provider, d.session_id, d.transcript_path)
                ok = judged.get(key)
                if ok is None:
                    ok = judged[key] = self.speaks_for(d)
                if not ok:
                    self.metrics.hook_errors.labels("unknown_session").inc()
                    continue
                if d.transcript_path not in read:
                    read.add(d.transcript_path)
                    self.files.read(d.transcript_path, live=True)
                s = self.store.apply_hook(d, may_create=True, by_file=self.files.session_of(d.transcript_path))
            if s is not None:
                urgent = self.kept.keep(s, d) or urgent
        return urgent

    def speaks_for(self, d) -> bool:
        """A hook delivery ``d`` may change a session: its ``transcript_path``
        is a regular file (not a symlink) under a configured root of the
        delivery's own agent (a route takes only its agent's transcripts), and that
        file's name names its ``session_id`` (Claude ``<sessionId>.jsonl``,
        Codex ``rollout-…-<id>.jsonl``; a provider's ``transcript_names``
        where the name holds less: Gemini CLI) when it gives one, or the path
        names it as its agent lays its files out (the provider's
        ``classify_path``: Copilot CLI's ``<sessionId>/events.jsonl``)."""
        path = d.transcript_path
        found = self.roots.root_of(path) if self._ours(path) else None
        if found is None:
            return False
        if found[0] != d.provider:  # /hooks/codex naming a Claude transcript
            return False
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return False
        except OSError:
            return False
        if d.session_id is None or d.session_id in os.path.basename(path):
            return True
        module = PROVIDER_MODULES[found[0]]
        names = getattr(module, "transcript_names", None)  # (Gemini CLI: the first 8 of its id)
        if names is not None:
            return names(d.session_id, path)
        named = module.classify_path(found[1], Path(path))
        return named is not None and named[0] == d.session_id

    def _ours(self, path: str | None) -> bool:
        """``path`` (a hook's ``transcript_path``) lies under a configured root."""
        return bool(path) and ".." not in Path(path).parts and self.roots.root_of(path) is not None

    def reapply(self, saved, ttl: float) -> None:
        """Apply again the hook deliveries the previous run saved (``saved``:
        the checkpoint's list of :func:`~.hooks.to_record` records; those
        older than ``ttl`` seconds are left out), after the transcripts. Each
        is ordered by when it arrived: a record written after it (the user
        answered the prompt while the exporter was down) decides the state.
        They were news when they came, so they are news again: the page
        ledger says what was already sent. A session is made from one only
        while its transcript exists (a deleted session stays gone). Unusable
        entries are counted in one warning, never raised."""
        now = time.time()
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
                s = self.store.apply_hook(d, may_create=exists, by_file=self.files.session_of(path))
            except Exception:  # pragma: no cover - one bad entry never stops the start
                log.debug("saved hook event not applied", exc_info=True)
                dropped += 1
                continue
            if s is not None:
                self.kept.keep(s, d)
        if dropped:
            log.warning("%d saved hook event(s) in the checkpoint were unusable and are dropped", dropped)

    # -- the session registry --------------------------------------------------
    def current(self, provider: str, sid: str):
        """The store's session ``(provider, sid)`` with its transcripts read
        first (so that evidence applied next is ordered after every record
        written before it), or None when no transcript told of it yet."""
        s = self.store.sessions.get((provider, sid))
        if s is None:
            return None
        for path in list(s.files):
            self.files.read(path, live=True)
        return s

    def status_of(self, provider: str, sid: str, read: bool = False):
        """Session ``(provider, sid)``'s :class:`~.reducer.Status` now, or
        None when no transcript told of it yet. ``read``: its transcripts
        are read first (:meth:`current`), so that evidence applied next is
        ordered after every record written before it. What the session
        registry (:mod:`exporter.registry`) learns of a session: a value,
        never the store's session or its reducer."""
        s = self.current(provider, sid) if read else self.store.sessions.get((provider, sid))
        return None if s is None else s.reducer.status(time.time(), s.last_write)

    def apply(self, provider: str, sid: str, ev, ident: str, history: bool) -> bool:
        """Apply event ``ev`` (from the session registry) to session
        ``(provider, sid)`` as a hook delivery named ``registry`` with
        identity ``ident``, through the one ingest path hooks take
        (:meth:`~.store.SessionStore.apply_hook`; never creates a session).
        ``history``: found so at start-up (shown, never news; the session is
        no longer carried open). Live evidence is kept with the hook
        deliveries for the checkpoint, so that after a restart a wait that a
        hook and the registry both reported has one key (one page). True
        when applied."""
        s = self.store.sessions.get((provider, sid))
        if s is None:
            return False
        if history:
            ev.replayed = True
            self.store.carry.discard((s.provider, s.session_id))
        d = HookDelivery(s.provider, "registry", s.session_id, None, None, ev, ident)
        if self.store.apply_hook(d, may_create=False) is None:
            return False
        if not history:
            self.kept.keep(s, d)
        return True
