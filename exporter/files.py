"""The followed-file table: every followed file's state (tailer, decoder,
the session it is bound to), reading it (:meth:`FileTable.refresh`, batches
handed to the store, which applies them through :mod:`exporter.ingest`),
the one-shot and start-up reads of many files (:meth:`FileTable.read_all`),
and, for the daemon, reading a followed or new file (:meth:`FileTable.read`)
and the history index of the files left unread at start-up. Finding what
to read that the watcher missed (the poll, the walk of the roots) is
:mod:`exporter.poll`'s.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from pathlib import Path

from types import ModuleType

from .decode import decode_line
from .events import SESSION
from .history import HistoryIndex
from .providers import PROVIDER_MODULES, sniff
from .tailer import Tailer

log = logging.getLogger("exporter.daemon")

#: Bytes of a history file's first line read when the provider names the
#: session there (Codex ``session_meta``).
HISTORY_HEAD_BYTES = 1 << 20


def stat_key(st: os.stat_result) -> tuple:
    """What must change before a file that could not be read is tried again
    (a chmod changes ``st_ctime_ns``)."""
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode


def short_of_fds(f) -> bool:
    """The last read of ``f`` failed for want of descriptors (EMFILE,
    ENFILE): the file is fine, so it is tried again at the next poll instead
    of waiting for its stat to change (issue 22)."""
    return f.failing in (errno.EMFILE, errno.ENFILE)


class _File:
    """One followed file: its ``tailer`` (offset, fingerprint), the
    provider's ``decoder`` (None while a history file has not been appended
    to), the ``session`` it is bound to, and what its name says
    (``name_sid``, ``sidechain``: the provider's ``classify_path``)."""

    __slots__ = ("path", "provider", "tailer", "decoder", "session", "sidechain", "name_sid", "last_ts",
                 "failing", "first_live", "head", "head_unread", "born")

    def __init__(self, path: str, provider: ModuleType, tailer: Tailer, sid: str | None, sidechain: bool):
        self.path = path
        self.provider = provider
        self.tailer = tailer
        self.decoder = provider.FileDecoder(sidechain_file=sidechain, file_session=sid)
        self.session = None  # the store's Session it is bound to (ingest.bind)
        self.sidechain = sidechain
        self.name_sid = sid
        self.last_ts: float | None = None
        self.failing = False  # the last read failed (logged once until it recovers)
        self.first_live: bool | None = None  # liveness of a first read that failed
        #: The file's ``SESSION`` event (Codex ``session_meta``): binds the
        #: file to its session again after the session expired, or when the
        #: file was skipped as history.
        self.head = None
        self.head_unread = False  # skipped as history: the head is read at the first append
        #: The file's first write as far as news goes (Unix seconds): when it
        #: was first seen live, or the checkpoint's time for a file made while
        #: the exporter was down; None for history and backfill (see identity).
        self.born: float | None = None

    def new_decoder(self):
        """A fresh decoder of the provider for this file (at its first read, or after a reset)."""
        return self.provider.FileDecoder(sidechain_file=self.sidechain, file_session=self.name_sid)

    def __getstate__(self):  # a start-up reader process hands files back (parallel.read_start_up)
        return {k: (self.provider.NAME if k == "provider" else getattr(self, k)) for k in self.__slots__}

    def __setstate__(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, PROVIDER_MODULES[v] if k == "provider" else v)


class FileTable:
    """The files followed for ``store`` (:class:`~.store.SessionStore`,
    which applies what they say): ``files`` maps a path to its
    :class:`_File`. ``max_line_bytes``: the tailer's line cap. For the
    daemon also ``roots`` (:class:`~.roots.Roots`: which paths are
    followed) and ``stop`` (an event that ends a long read early); a
    one-shot reader (``scan``, tests) needs neither. What the watcher
    misses is found by :class:`~.poll.Poller`. Runs on the reader thread
    only."""

    def __init__(self, store, max_line_bytes: int, roots=None):
        self.store, self.roots = store, roots
        self.metrics = store.metrics
        self.max_line_bytes = max_line_bytes
        self.files: dict[str, _File] = {}
        self._watched_gauges: dict = {}
        self.stop = threading.Event()
        #: Files the start-up scan left as history, followed from their end once they change.
        self.history = HistoryIndex()
        self.unreadable: dict[str, tuple] = {}  # path → stat key of a failed read (not retried until it changes)

    # -- one file ------------------------------------------------------------
    def track(self, path: str, provider: str, root: Path | None = None, role=False,
              born: float | None = None) -> bool:
        """Start following ``path`` for ``provider``. Returns False when the
        provider says the file is not a transcript. ``role``: what the
        provider's ``classify_path`` said of it, when the caller knows;
        ``born``: when its news begins (see :class:`_File`)."""
        if path in self.files:
            return True
        mod = PROVIDER_MODULES[provider]
        if role is False:
            role = mod.classify_path(root or os.path.dirname(path), path)
        if role is None:
            return False
        sid, sidechain = role
        f = self.files[path] = _File(path, mod, Tailer(path, self.max_line_bytes), sid, sidechain)
        f.born = born
        self.watched(provider).inc()
        return True

    def skip(self, path: str, provider: str, root: Path | None = None, role=False,
             st: tuple | None = None) -> int | None:
        """Follow ``path`` from its end without decoding it (history, see
        ``sources.skip_history``); ``st`` is its ``(st_ino, st_size,
        st_mtime_ns)`` (the file is then not even opened). Nothing of it is
        needed to tell a resumed or forked session's replay of it: the copy
        says so itself (Claude records naming another session, Codex
        ``forked_from_id``). Where the provider names the session in the
        first record only (``SESSION_IN_FIRST_RECORD``: Codex
        ``session_meta`` gives the id, cwd, subagent parent and fork point),
        that record is read at the first append. Returns the bytes skipped,
        or None when the file is no transcript or cannot be read (the caller
        then reads it as usual)."""
        if not self.track(path, provider, root, role):
            return None
        f = self.files[path]
        f.decoder = None  # made at the first append: a history file costs little while it stays one
        try:
            f.tailer.skip_to_end(st)
        except OSError:
            f.tailer = Tailer(path, self.max_line_bytes)
            return None
        f.head_unread = f.provider.SESSION_IN_FIRST_RECORD
        return f.tailer.offset

    @staticmethod
    def _read_head(f: _File) -> None:
        """The first record of a file skipped as history, when it names the
        session (a Codex ``session_meta``): it binds the appended records."""
        f.head_unread = False
        if f.decoder is None:
            f.decoder = f.new_decoder()
        try:
            with open(f.path, "rb") as fh:
                first = fh.readline(HISTORY_HEAD_BYTES)
            if not first.endswith(b"\n"):
                return
            obj = decode_line(first[:-1])
            ev = f.decoder.project(obj) if obj else None
        except Exception:  # unreadable, not JSON, a shape the provider did not foresee: no head
            return
        finally:
            f.decoder.usage.clear()  # (the head is not applied: its usage is not counted)
        if ev is not None and ev.kind == SESSION:
            f.head = ev

    def watched(self, provider: str):
        """``coding_agent_files_watched{provider}`` (its child, cached: one
        call per followed file)."""
        g = self._watched_gauges.get(provider)
        if g is None:
            g = self._watched_gauges[provider] = self.metrics.files_watched.labels(provider)
        return g

    def forget(self, path: str) -> None:
        """Stop following a file that disappeared (its session goes with its last file)."""
        f = self.files.pop(path, None)
        if f is None:
            return
        self.watched(f.provider.NAME).dec()
        if f.session is not None:
            self.store.file_gone(f.session, path)

    def changed(self, path: str, st: os.stat_result) -> bool:
        """True when ``st`` differs from what the file's last read saw."""
        f = self.files.get(path)
        return f is not None and not f.tailer.unchanged(st)

    def session_of(self, path: str | None):
        """The session the followed file ``path`` is bound to, or None."""
        f = self.files.get(path) if path else None
        return f.session if f is not None else None

    def refresh(self, path: str, live: bool, final: bool = False, until: int | None = None) -> int:
        """Read what was appended to ``path`` and hand it to the store
        (:meth:`~.store.SessionStore.take`).

        ``live``: the bytes are news (read after start-up), so completions
        they carry may page. ``final``: also take an unterminated last line
        (one-shot scans). ``until``: read no further than this offset.
        Returns the number of bytes consumed. A file that
        cannot be read is counted and logged, never raised.
        """
        f = self.files.get(path)
        if f is None:
            return 0
        try:
            res = f.tailer.read(final=final, until=until)
        except FileNotFoundError:
            self.forget(path)
            return 0
        except OSError as e:
            self.metrics.read_errors.labels(f.provider.NAME).inc()
            if not f.failing:
                log.warning("cannot read %s: %s (retrying quietly)", path, e.strerror or e)
            f.failing = e.errno or True  # truthy; EMFILE/ENFILE say the process, not the file, is short
            if f.tailer.inode is None and f.first_live is None:
                f.first_live = live  # what it holds when it becomes readable is as old as it is now
            return 0
        if f.failing:
            log.info("%s is readable again", path)
            f.failing = False
        if f.head_unread and res.lines and not res.reset:
            self._read_head(f)
        if f.decoder is None or res.reset:
            f.decoder = f.new_decoder()
            if res.reset:
                log.info("%s was truncated or replaced; reading it again from the start", path)
        if f.first_live is not None:
            live, f.first_live = f.first_live, None
        self.store.take(f, res, live)
        return res.bytes_read

    def expire(self, now: float | None = None) -> int:
        """Forget the sessions not written for the store's ``session_ttl``
        (:meth:`~.store.SessionStore.expire`) at ``now`` (Unix seconds;
        default the clock). Their files stay followed, unbound: a later
        append starts the session afresh. Returns how many were forgotten."""
        gone = self.store.expire(now)
        for s in gone:
            for path in s.files:
                f = self.files.get(path)
                if f is not None and f.session is s:
                    f.session = None
        return len(gone)

    def offsets(self) -> dict[str, list[int]]:
        """``{path: [inode, offset]}`` of every followed file (a checkpoint)."""
        return {p: [f.tailer.inode, f.tailer.offset] for p, f in self.files.items() if f.tailer.inode is not None}

    def read_all(self, files, progress=None, until: dict | None = None, stop=None,
                 news_from: float | None = None) -> dict:
        """Read ``files`` (``[(path, provider or None, root, size)]``, in
        order) to their end; returns ``{session key: index in files of the
        first file that made it}``. A ``None`` provider is sniffed from the
        records (:func:`~.providers.sniff`).

        ``until`` None: a one-shot scan (every byte, an unterminated last line
        too, nothing live). Else the daemon's start-up: ``until[path]`` is the
        offset up to which the bytes are backfill (missing or None: all of
        them); the rest is news (``live``), read after every file's backfill,
        the files made while the exporter was down last. A file whose every byte is news
        (``until[path] == 0``: made while the exporter was down) was born after
        ``news_from`` (Unix seconds: the previous run's last checkpoint).
        ``stop()`` true ends the read early. ``progress(message)`` is told
        every 200 files after the first 2 s.
        """
        start = time.monotonic()
        total = len(files)
        first: dict = {}
        known = set(self.store.sessions)
        going = (lambda: not stop()) if stop is not None else (lambda: True)
        news = []  # the daemon's start-up: (made while down, index, path) of each file, for its news
        for i, (fp, prov, root, *_rest) in enumerate(files):
            if not going():
                break
            prov = prov or sniff(fp)
            if prov is None:
                log.warning("%s: no records of a known agent found; skipped", fp)
            elif self.track(fp, prov, root, born=news_from if until is not None and until.get(fp) == 0 else None):
                # Each refresh reads at most READ_BUDGET_BYTES (4 MiB, a fraction of a second): a stop
                # is looked at between them, so it waits out no large file.
                if until is None:
                    tailer = self.files[fp].tailer
                    # until a read reaches the end (not one more to find nothing)
                    while self.refresh(fp, live=False, final=True) and tailer.offset < tailer.size and going():
                        pass
                else:
                    u = until.get(fp)
                    while self.refresh(fp, live=False, until=u) and going():
                        pass
                    news.append((u == 0, i, fp))
                self._first_of(fp, i, known, first)
            if progress and (i + 1 == total or time.monotonic() - start > 2 and (i + 1) % 200 == 0):
                progress(f"read {i + 1}/{total} files")
        # The news after all backfill, and the files made while the exporter was down last: a file
        # resumed or forked meanwhile repeats records of one read here, whatever the order of their
        # paths, and only a store that holds the original's records tells the copy (exporter.identity).
        for _new, i, fp in sorted(news):
            if not going():
                break
            while going() and fp in self.files and self.refresh(fp, live=True):
                pass
            self._first_of(fp, i, known, first)
        return first

    def _first_of(self, fp: str, i: int, known: set, first: dict) -> None:
        """Note ``i`` (an index in read_all's files) as the first file of its session, if it is."""
        s = self.session_of(fp)
        if s is not None:
            key = (s.provider, s.session_id)
            if key not in known:
                known.add(key)
                first[key] = i

    # -- the daemon's side -------------------------------------------------------
    def read(self, path: str, live: bool, until: int | None = None) -> None:
        """Read ``path`` (followed or not yet: a file under a root, new or a
        history file that changed) as far as it goes (``until``: no further
        than this offset). A file that cannot be read is tried again only
        once its stat changes (or, short of descriptors, at the next poll)."""
        if path not in self.files:
            hit = self.roots.root_of(path)
            if hit is None:
                return
            old = self.history.take(path)  # changed or deleted: no longer history
            if old is not None:
                self.watched(old[0]).dec()
            if not os.path.isfile(path):
                return
            from .checkpoint import continues  # (the daemon's side only: scan does not import the checkpoint)

            if old is not None and continues(path, old[1]):
                # history until now: followed from where it ended
                if self.skip(path, hit[0], hit[1], st=old[1]) is None:
                    return
            elif not self.track(path, hit[0], hit[1], born=time.time()):  # new, or another file under the old name
                return
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self.forget(path)
            self.unreadable.pop(path, None)
            return
        except OSError:
            st = None
        key = stat_key(st) if st is not None else None
        if key is not None and self.unreadable.get(path) == key:
            return  # failed with this very stat: logged and counted once; tried again when it changes
        t = self.files[path].tailer
        before = (t.inode, t.size, t.mtime_ns)
        while self.refresh(path, live=live, until=until):
            if self.stop.is_set():
                return  # shutting down: the checkpoint says how far this got
        f = self.files.get(path)
        if f is None:
            return
        if key is not None and (f.tailer.inode, f.tailer.size, f.tailer.mtime_ns) == before \
                and self.changed(path, st) and not short_of_fds(f):
            self.unreadable[path] = key  # the open failed (permissions, not a regular file, …)
        else:
            self.unreadable.pop(path, None)  # (refresh said it is readable again)


def make_reader(cfg, metrics=None, session_ttl: float = 0) -> tuple:
    """``(SessionStore, FileTable)`` configured from ``cfg`` (a
    :class:`~.config.Config`; ``session_ttl``: 0 for scans, which show every
    session however old)."""
    from .reducer import Timing
    from .store import SessionStore

    if metrics is None:
        from .metrics import Metrics

        metrics = Metrics()
    r = cfg.reducer
    store = SessionStore(
        metrics,
        Timing(r.inferred_settle_seconds, r.marker_wait_seconds, r.stall_after_seconds, r.api_retry_grace_seconds,
               r.wakeup_hold_seconds, r.stop_hook_wait_seconds),
        cfg.metrics.project_label,
        cfg.metrics.max_sessions,
        session_ttl,
    )
    from .usage import Accounting, prices_from_config

    store.usage = Accounting(prices_from_config(cfg))
    return store, FileTable(store, cfg.sources.max_line_bytes)
