"""The checkpoint: one versioned state file in ``state_dir`` saying what the
last run had read, and the one answer to "where does reading start".

``checkpoint.json`` (``version`` 1, written atomically, a damaged one set
aside with a warning by :func:`persist.load_json`)::

    {"version": 1,
     "files": {path: [st_ino, offset]},      # bytes read of every followed file
     "open": ["<provider>\\t<session id>"],   # sessions still working or stalled
     "history": "history-index.bin",          # the files left as history (binary, beside it)
     "hooks": [saved hook deliveries],        # hooks.to_record, see Daemon
     "usage": [[provider, model, 5 token counts, cost_usd, unpriced]]}  # exporter.usage counters

:meth:`Checkpoint.read_from` gives, for a file met at start-up, how its
bytes divide into backfill (state only, never a page) and news, as Vector's
file source does with its checkpointer and ``ReadFrom``:

- :class:`At` ``(offset)``: the last run read this file up to ``offset`` (same
  inode, a line end there): the bytes after it were written while the
  exporter was down and are news.
- :class:`Beginning` ``(news_from)``: a file the last run did not know, made
  while the exporter was down: all of it is news, and it was born after
  ``news_from`` (Unix seconds: when the last checkpoint was written; see
  :mod:`exporter.identity`).
- :class:`End`: no usable checkpoint (the first run), or the file was
  rewritten while the exporter was down: everything up to its end is
  backfill.

The checkpoint is written only after what it covers was evaluated, so a
page that a turn end owes is in the alert ledger ("pending") before the
checkpoint moves past its record.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from .persist import load_json, remove_leftovers, save_json

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.json"
#: The files left as history (``HistoryIndex.save``), written with the checkpoint.
HISTORY_FILE = "history-index.bin"
VERSION = 1


@dataclass(frozen=True, slots=True)
class Beginning:
    """Read from the start; all of it is news, born after ``news_from``
    (Unix seconds, None when unknown)."""

    news_from: float | None


@dataclass(frozen=True, slots=True)
class End:
    """Everything up to the file's end is backfill."""


@dataclass(frozen=True, slots=True)
class At:
    """Backfill up to ``offset`` (bytes), news after it."""

    offset: int


def until(where) -> int | None:
    """The start-up read's ``until`` (``parallel.read_start_up``) for a
    :meth:`Checkpoint.read_from` answer: the offset up to which the bytes are
    backfill (None: all of them)."""
    if isinstance(where, At):
        return where.offset
    if isinstance(where, Beginning):
        return 0
    return None


def line_end_at(path: str, offset: int) -> bool:
    """True when the byte before ``offset`` of ``path`` is a line end."""
    try:
        with open(path, "rb") as f:
            f.seek(offset - 1)
            return f.read(1) == b"\n"
    except OSError:
        return False


def continues(path: str, old: tuple, st: os.stat_result | None = None) -> bool:
    """True when ``path`` looks like the file ``old`` (``(st_ino, st_size,
    st_mtime_ns)`` when last seen) with bytes appended: the same inode, not
    shorter, and a line end where it ended (a file deleted and written again
    under the same name may get the same inode number). ``st``: its stat now
    (taken when None)."""
    try:
        st = os.stat(path) if st is None else st
    except OSError:
        return False
    ino, size, _mtime = old
    return st.st_ino == ino and st.st_size >= size and (size == 0 or line_end_at(path, size))


def _valid(data: dict) -> bool:
    files, open_ = data.get("files"), data.get("open", [])
    return (isinstance(files, dict) and isinstance(open_, list)
            and all(isinstance(v, list) and len(v) == 2 and all(type(x) is int for x in v) for v in files.values()))


class Checkpoint:
    """The checkpoint file of ``state_dir``: :meth:`load` it once at
    start-up, ask :meth:`read_from` per file, :meth:`save` what was read."""

    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / CHECKPOINT_FILE
        self.history_path = Path(state_dir) / HISTORY_FILE
        #: ``{path: [st_ino, offset]}`` of the last run; None: no checkpoint (first run).
        self.files: dict | None = None
        #: Sessions the last run left open, as ``(provider, session id)``.
        self.open: set[tuple[str, str]] = set()
        #: The saved hook deliveries (not checked here: see ``hooks.from_record``).
        self.hooks = None
        #: The last run saved a history index beside it.
        self.has_history = False
        #: When the last run wrote it (Unix seconds), or None.
        self.saved_at: float | None = None
        #: The usage counters' values it saved (``Accounting.state()``, not checked here), or None.
        self.usage = None
        self._saved: tuple | None = None

    def load(self) -> None:
        """Read the file (a damaged or foreign one is set aside and treated as
        missing, see :func:`persist.load_json`)."""
        cp = load_json(self.path, "checkpoint", _valid)
        files = cp.get("files")
        self.files = files if isinstance(files, dict) else None
        open_ = cp.get("open")
        if isinstance(open_, list):
            self.open = {tuple(k.split("\t", 1)) for k in open_ if isinstance(k, str) and "\t" in k}
        self.hooks = cp.get("hooks")
        self.usage = cp.get("usage")
        self.has_history = cp.get("history") == HISTORY_FILE and self.files is not None
        try:
            self.saved_at = os.stat(self.path).st_mtime if cp else None
        except OSError:
            self.saved_at = None
        remove_leftovers(self.history_path)  # an index save a crash interrupted

    def knows(self, path: str) -> bool:
        """The last run followed ``path``."""
        return self.files is not None and path in self.files

    def read_from(self, path: str, st: os.stat_result | None = None):
        """Where the start-up read of ``path`` (``st``: its stat now, taken
        when None) divides backfill from news: :class:`At`,
        :class:`Beginning` or :class:`End` (see the module doc)."""
        if self.files is None:
            return End()  # first run: everything is backfill
        cp = self.files.get(path)
        if cp is None:
            return Beginning(self.saved_at)  # made while the exporter was down: news
        try:
            st = os.stat(path) if st is None else st
        except OSError:
            return End()
        ino, offset = cp
        if ino != st.st_ino or not 0 <= offset <= st.st_size:
            return End()
        if offset and not line_end_at(path, offset):
            return End()  # rewritten while the exporter was down: not where it stopped
        return At(offset)

    def save(self, offsets: dict, open_: list[str], hooks: list, history=None, force: bool = False,
             version=None, usage=None) -> None:
        """Write the checkpoint atomically (the history index first, when
        ``history`` is given and its ``version`` changed: the checkpoint says
        it is there). Skipped when ``(offsets, open_, history version,
        version)`` equal the last save's (unless ``force``). ``version``: the
        caller's own change count of ``hooks`` (and of ``usage``: ``(version,
        state)`` of the usage counters, written with the offsets they
        counted up to). A write that fails is logged,
        never raised."""
        hv = history.version if history is not None else None
        key = (offsets, open_, hv, version, usage[0] if usage else None)
        if key == self._saved and not force:
            return
        try:
            if history is not None and (force or self._saved is None or hv != self._saved[2]):
                history.save(self.history_path)
            data = {"version": VERSION, "files": offsets, "open": open_, "history": HISTORY_FILE, "hooks": hooks}
            if usage:
                data["usage"] = usage[1]()
            save_json(self.path, data)
            self._saved = key
        except OSError as e:
            log.error("cannot write the checkpoint %s: %s", self.path, e.strerror or e)
