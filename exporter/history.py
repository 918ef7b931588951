"""Heavy histories: which files the daemon's start-up leaves undecoded, and
a record of them whose memory does not grow with the history.

At start-up a file not written for the horizon (``metrics.session_ttl_seconds``)
is *history*: its session would expire at once, and nothing in it can page
(backfill never pages; ``alerts.max_age_seconds`` is shorter). It is
stat'ed, not opened. Unless another file of its session was written within
the horizon, it goes into a :class:`HistoryIndex` instead of the store: no
path, no reader, no decoder — 33 bytes. When it changes (a file event, or
the poll's walk finds its stat changed), the daemon takes it out of the
index and follows it from where it ended (:meth:`FileTable.skip`).

The index is saved beside the checkpoint (:meth:`HistoryIndex.save`), so
that a restart reads a history file appended while the exporter was down
from where it ended, and pages only what was appended.
"""

from __future__ import annotations

import hashlib
import os
import sys
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from pathlib import Path

from .providers import PROVIDER_MODULES
from .roots import walk_jsonl
from .parallel import Forked

_PROVIDERS = list(PROVIDER_MODULES)


def path_key(path: str) -> int:
    """A path's 64-bit key (BLAKE2b, signed; the same in every process and
    run, unlike ``hash()``). A collision among a history's files (about
    1e-10 for 50,000 of them) would follow one file from the other's end:
    the inode must match too, so it could only misplace one read."""
    return int.from_bytes(hashlib.blake2b(os.fsencode(path), digest_size=8).digest(), "little", signed=True)


class HistoryIndex:
    """Files left as history: per file its path's key (:func:`path_key`), its
    provider, ``st_ino``, ``st_size`` and ``st_mtime_ns`` at start-up, in
    flat arrays (33 bytes a file; paths are not kept). Built with
    :meth:`add` then :meth:`seal`; looked up by path. Not thread-safe: the
    daemon's reader thread owns it."""

    def __init__(self) -> None:
        self._key = array("q")
        self._prov = array("b")
        self._ino = array("Q")
        self._size = array("q")  # -1: taken (followed now, or gone)
        self._mtime = array("q")
        self._sealed = True
        #: Moves on at every change (the daemon saves the index when it moved).
        self.version = 0
        #: Files per provider still in the index.
        self.count: dict[str, int] = dict.fromkeys(_PROVIDERS, 0)
        #: Bytes the files had when they were put in (for the start-up log line).
        self.bytes = 0

    def __len__(self) -> int:
        return sum(self.count.values())

    def add(self, path: str, provider: str, ino: int, size: int, mtime_ns: int) -> None:
        """Put a file in (before :meth:`seal`): its ``st_ino``, ``st_size``
        (bytes) and ``st_mtime_ns``."""
        self._key.append(path_key(path))
        self._prov.append(_PROVIDERS.index(provider))
        self._ino.append(ino)
        self._size.append(size)
        self._mtime.append(mtime_ns)
        self.count[provider] += 1
        self.bytes += size
        self._sealed = False

    def seal(self) -> None:
        """Sort by key (lookups bisect)."""
        if self._sealed:
            return
        self._select(sorted(range(len(self._key)), key=self._key.__getitem__))
        self._sealed = True
        self.version += 1

    def _select(self, positions: list[int]) -> None:
        """Keep the entries at ``positions``, in that order."""
        for name in ("_key", "_prov", "_ino", "_size", "_mtime"):
            old = getattr(self, name)
            setattr(self, name, array(old.typecode, (old[i] for i in positions)))

    def position(self, path: str) -> int:
        """The entry's position (for :meth:`unchanged` and :meth:`drop_unseen`),
        or -1."""
        key = path_key(path)
        i = bisect_left(self._key, key)
        return i if i < len(self._key) and self._key[i] == key and self._size[i] >= 0 else -1

    def get(self, path: str) -> tuple[str, tuple[int, int, int]] | None:
        """``(provider, (st_ino, st_size, st_mtime_ns))`` as the file was put
        in, or None when it is not (or no longer) in the index."""
        i = self.position(path)
        if i < 0:
            return None
        return _PROVIDERS[self._prov[i]], (self._ino[i], self._size[i], self._mtime[i])

    def take(self, path: str) -> tuple[str, tuple[int, int, int]] | None:
        """:meth:`get`, and the file leaves the index."""
        i = self.position(path)
        if i < 0:
            return None
        got = _PROVIDERS[self._prov[i]], (self._ino[i], self._size[i], self._mtime[i])
        self._drop(i)
        return got

    def _drop(self, i: int) -> None:
        self._size[i] = -1
        self.count[_PROVIDERS[self._prov[i]]] -= 1
        self.version += 1

    def unchanged(self, i: int, st: os.stat_result) -> bool:
        return st.st_ino == self._ino[i] and st.st_size == self._size[i] and st.st_mtime_ns == self._mtime[i]

    def drop_unseen(self, seen: bytearray) -> dict[str, int]:
        """Drop every entry whose position is not marked in ``seen`` (a walk
        that listed every folder did not find the file: it is gone).
        Returns how many left, per provider."""
        gone = dict.fromkeys(_PROVIDERS, 0)
        for i in range(len(self._size)):
            if not seen[i] and self._size[i] >= 0:
                gone[_PROVIDERS[self._prov[i]]] += 1
                self._drop(i)
        return gone

    def slots(self) -> int:
        """Positions in the index (taken ones included): the size of a
        ``seen`` map for :meth:`drop_unseen`."""
        return len(self._key)

    # -- the checkpoint ------------------------------------------------------
    #: First bytes of a saved index (the arrays are in this machine's byte order).
    MAGIC = b"CAEHIST1" + sys.byteorder[0].encode()

    def save(self, path: Path) -> None:
        """Write the files still in the index (keys, inodes, sizes: 24 bytes
        a file, straight from the arrays) to ``path`` atomically, for the
        next start (:meth:`load`). Taken entries are dropped from the arrays
        first. Raises ``OSError``."""
        if any(v < 0 for v in self._size):
            self._select([i for i, v in enumerate(self._size) if v >= 0])

        def write(f) -> None:
            f.write(self.MAGIC + len(self._key).to_bytes(8, "little"))
            for a in (self._key, self._ino, self._size):
                a.tofile(f)

        from .persist import write_atomic  # (filelock: not needed by the early walk)

        write_atomic(path, write)

    @classmethod
    def load(cls, path: Path) -> HistoryIndex:
        """An index from :meth:`save` (provider and mtime unknown: for
        :meth:`get`'s inode and size only). Raises ``OSError`` (no such
        file) or ``ValueError`` (not what :meth:`save` writes here)."""
        idx = cls()
        with open(path, "rb") as f:
            head = f.read(len(cls.MAGIC) + 8)
            if len(head) != len(cls.MAGIC) + 8 or not head.startswith(cls.MAGIC):
                raise ValueError("not a saved history index")
            n = int.from_bytes(head[len(cls.MAGIC):], "little")
            if n * 24 != os.fstat(f.fileno()).st_size - len(head):
                raise ValueError("a saved history index of the wrong size")
            try:
                for a in (idx._key, idx._ino, idx._size):
                    a.fromfile(f, n)
            except EOFError:
                raise ValueError("a truncated history index") from None
        idx._prov.frombytes(bytes(n))
        idx._mtime.frombytes(bytes(8 * n))
        keys = idx._key
        idx._sealed = all(keys[i] <= keys[i + 1] for i in range(n - 1))  # as saved; else sort
        idx.seal()
        return idx


def horizon(cfg) -> float:
    """Seconds without a write after which a file is history at start-up
    (``metrics.session_ttl_seconds``), infinite when ``sources.skip_history``
    is off or the TTL is 0 (read everything)."""
    ttl = cfg.metrics.session_ttl_seconds
    return ttl if cfg.sources.skip_history and ttl > 0 else float("inf")


def split_start_up(roots: list[tuple[str, Path]], horizon: float, now: float) -> Iterator:
    """Walk ``roots`` (``[(provider, root)]``) and sort the files: a
    generator of two results, in this order, so that the start-up read can
    begin before the index is built.

    1. ``(to read, history files per provider, their bytes)``. ``to read``
       is ``[(path, provider, root, size)]``: every file written within
       ``horizon`` seconds before ``now`` (Unix seconds), every file that
       cannot be stat'ed (the reader says what is wrong), and every older
       file of a session that has a file written within the horizon (where
       the provider's ``related_paths`` says such files lie).
    2. The :class:`HistoryIndex` of the other files.

    Costs a folder listing and a ``stat`` per file (about 8 µs) before the
    first result, and :meth:`HistoryIndex.add` per history file (about 5
    µs) before the second; :func:`split_early` runs it in a forked process
    while the exporter starts. The history's paths are held until the
    second result (in that process, when forked).
    """
    cutoff = now - horizon
    to_read: list = []
    paths: list[str] = []
    provs, stats = array("b"), array("q")  # per history file: provider; st_ino, st_size, st_mtime_ns
    count = dict.fromkeys(_PROVIDERS, 0)
    nbytes = 0
    for prov, root in roots:
        if not root.is_dir():
            continue
        p = _PROVIDERS.index(prov)
        for e in walk_jsonl(root, entries=True):
            try:
                st = e.stat()
            except OSError:
                to_read.append((e.path, prov, root, 0))  # the reader says what is wrong
                continue
            if st.st_mtime >= cutoff:
                to_read.append((e.path, prov, root, st.st_size))
            else:
                paths.append(e.path)
                provs.append(p)
                stats.extend((st.st_ino, st.st_size, st.st_mtime_ns))
                count[prov] += 1
                nbytes += st.st_size
    # Older files of the sessions to read (a Claude session's subagents
    # from days ago): read as well, so that the session is whole.
    reading = {path for path, *_ in to_read}
    visited: set[str] = set()
    extra = []
    for path, prov, root, _size in to_read:
        for rel in PROVIDER_MODULES[prov].related_paths(path):
            if rel in visited:
                continue
            visited.add(rel)
            if rel.endswith(".jsonl"):
                found = [rel]
            elif os.path.isdir(rel):
                found = walk_jsonl(Path(rel))
            else:
                continue
            for q in found:
                if q in reading:
                    continue
                try:
                    size = os.stat(q).st_size
                except OSError:
                    continue
                reading.add(q)
                extra.append((q, prov, root, size))
    taken = {q for q, *_ in extra}
    if taken:  # history files that are read now: out of the counts
        for i, q in enumerate(paths):
            if q in taken:
                count[_PROVIDERS[provs[i]]] -= 1
                nbytes -= stats[3 * i + 1]
    yield to_read + extra, count, nbytes
    index = HistoryIndex()
    for i, q in enumerate(paths):
        if q not in taken:
            index.add(q, _PROVIDERS[provs[i]], stats[3 * i], stats[3 * i + 1], stats[3 * i + 2])
    index.seal()
    yield index


def split_early(roots: list[tuple[str, Path]], horizon: float, now: float) -> Forked:
    """:func:`split_start_up` begun in a forked process now (its two results
    come through ``result()``; None: do it in this process). Called before
    the rest of the exporter is imported and before any thread starts, so
    the walk overlaps with them, and the fork is of a process with one
    thread."""
    return Forked(lambda: split_start_up(roots, horizon, now))
