"""Tailer: incremental, line-aligned, bounded reading of one growing file.

- Reads from the last offset to EOF in chunks of ``CHUNK_BYTES`` and splits on
  ``\\n`` (0x0A) only: U+2028 and U+0085 are legal inside JSON strings.
- An unterminated last line is not consumed: the offset stays at the start of
  that line and it is read again after the next append.
- A line longer than ``max_line_bytes`` is skipped without being held in
  memory: the tailer drops bytes until the next newline (remembering that it
  is inside such a line across reads) and reports it once as ``oversized``.
  Memory per read is bounded by ``max_line_bytes + CHUNK_BYTES``.
- A file that shrank (size < offset), was replaced (another inode) or was
  rewritten in place (the last bytes before the offset changed: truncated and
  written again past the old offset) is read again from the start.
- One call consumes at most ``READ_BUDGET_BYTES`` unless told otherwise (the
  caller calls again while bytes come back), so memory does not grow with the
  size of what was appended.
- Only regular files are read; the file is opened non-blocking, so a FIFO or
  device swapped in under a followed name cannot hang or flood the reader.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field

CHUNK_BYTES = 1 << 20
#: Default bound on the bytes one :meth:`Tailer.read` consumes.
READ_BUDGET_BYTES = 4 * CHUNK_BYTES
#: How many bytes before the offset are remembered to recognise a rewrite.
SIGNATURE_BYTES = 64


@dataclass(slots=True)
class ReadResult:
    """What one :meth:`Tailer.read` found.

    ``lines``: complete lines (without ``\\n``) in file order; ``oversized``:
    how many lines were skipped for their size; ``bytes_read``: bytes consumed
    (complete lines, their newlines and skipped bytes); ``reset``: the file was
    truncated or replaced and reading restarted at offset 0.
    """

    lines: list[bytes] = field(default_factory=list)
    oversized: int = 0
    bytes_read: int = 0
    reset: bool = False


class Tailer:
    """Follows one file. Not thread-safe; one owner calls :meth:`read`.

    Attributes: ``path``; ``offset`` (bytes consumed so far); ``inode``,
    ``size`` and ``mtime_ns`` as of the last read (its fingerprint).
    """

    __slots__ = ("path", "max_line_bytes", "offset", "inode", "size", "mtime_ns", "_skipping", "_sig", "_history")

    def __init__(self, path: str, max_line_bytes: int):
        self.path = path
        self.max_line_bytes = max_line_bytes
        self.offset = 0
        self.inode: int | None = None
        self.size = -1
        self.mtime_ns = -1
        self._skipping = False
        self._sig = b""  # the last bytes before ``offset`` (rewrite detection)
        self._history = False  # skip_to_end(st): the offset is settled at the first read

    def _consumed(self, data: bytes) -> None:
        if len(data) >= SIGNATURE_BYTES:
            self._sig = data[-SIGNATURE_BYTES:]
        elif data:
            self._sig = (self._sig + data)[-SIGNATURE_BYTES:]

    def unchanged(self, st: os.stat_result) -> bool:
        """True when ``st`` matches the fingerprint of the last read."""
        return st.st_ino == self.inode and st.st_size == self.size and st.st_mtime_ns == self.mtime_ns

    def read(self, final: bool = False, max_bytes: int | None = None, until: int | None = None) -> ReadResult:
        """Read what was appended since the last call.

        ``final=True`` (one-shot scans of finished files) also returns an
        unterminated last line. ``max_bytes`` bounds the bytes consumed in one
        call (default ``READ_BUDGET_BYTES``; the caller calls again while
        ``bytes_read`` is non-zero).
        ``until`` stops reading at that absolute offset (a restart checkpoint:
        what lies before it was read by the previous run).
        Raises ``OSError`` when the file cannot be opened or read, or is not a
        regular file.
        """
        res = ReadResult()
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
                     | getattr(os, "O_BINARY", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, "not a regular file", self.path)
            f = os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise
        with f:
            if self._history and st.st_ino == self.inode and st.st_size >= self.offset:
                self._settle(fd, self.offset)  # history skipped unopened: from its last newline on
                n = min(self.offset, SIGNATURE_BYTES)
                self._sig = os.pread(fd, n, self.offset - n) if n else b""
            self._history = False
            if self.inode is not None and (st.st_ino != self.inode or st.st_size < self.offset
                                           or self._rewritten(fd)):
                self.offset = 0
                self._skipping = False
                self._sig = b""
                res.reset = True
            self.inode = st.st_ino
            self.size = st.st_size
            self.mtime_ns = st.st_mtime_ns
            f.seek(self.offset)
            buf = b""
            at_eof = False
            budget = max_bytes if max_bytes is not None else READ_BUDGET_BYTES
            while True:
                want = CHUNK_BYTES
                if until is not None:
                    want = min(want, until - f.tell())
                    if want <= 0:
                        break
                chunk = f.read(want)
                if not chunk:
                    self.size = max(self.size, f.tell())
                    at_eof = True
                    break
                if self._skipping:
                    nl = chunk.find(b"\n")
                    if nl < 0:
                        self.offset += len(chunk)
                        res.bytes_read += len(chunk)
                        self._consumed(chunk)
                        if 0 <= budget <= res.bytes_read:
                            break
                        continue
                    self._skipping = False
                    self.offset += nl + 1
                    res.bytes_read += nl + 1
                    self._consumed(chunk[: nl + 1])
                    chunk = chunk[nl + 1:]
                buf = buf + chunk if buf else chunk
                start = 0
                while True:
                    nl = buf.find(b"\n", start)
                    if nl < 0:
                        break
                    if nl - start > self.max_line_bytes:
                        res.oversized += 1
                    else:
                        res.lines.append(buf[start:nl])
                    start = nl + 1
                self.offset += start
                res.bytes_read += start
                if start:
                    self._consumed(buf[max(0, start - SIGNATURE_BYTES):start])
                buf = buf[start:]
                if len(buf) > self.max_line_bytes:
                    # Inside an oversized line: drop it, resume at the next newline.
                    res.oversized += 1
                    self.offset += len(buf)
                    res.bytes_read += len(buf)
                    self._consumed(buf)
                    buf = b""
                    self._skipping = True
                if 0 <= budget <= res.bytes_read:
                    break
            # An unterminated last line is taken only at the end of the file
            # (not when the budget or ``until`` stopped the read mid-line).
            if final and buf and not self._skipping and at_eof:
                res.lines.append(buf)
                self.offset += len(buf)
                res.bytes_read += len(buf)
                self._consumed(buf)
        return res

    def skip_to_end(self, st: tuple | None = None) -> None:
        """Take the file as read up to its last newline without reading it
        (history: followed from here on). An unterminated last line stays
        unread, as after :meth:`read`; one longer than ``max_line_bytes`` is
        skipped. With ``st`` (the file's ``(st_ino, st_size, st_mtime_ns)``)
        the file is not even opened: its end is taken from ``st``, and the
        last newline before it is looked for at the first :meth:`read` (the
        bytes before it do not change in an append-only file). Raises
        ``OSError`` like :meth:`read`."""
        if st is not None:
            self.inode, self.size, self.mtime_ns = st
            self.offset, self._history = self.size, True
            return
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, "not a regular file", self.path)
            self._settle(fd, st.st_size)
            n = min(self.offset, SIGNATURE_BYTES)
            self._sig = os.pread(fd, n, self.offset - n) if n else b""
        finally:
            os.close(fd)
        self.inode, self.size, self.mtime_ns = st.st_ino, st.st_size, st.st_mtime_ns

    def _settle(self, fd: int, size: int) -> None:
        """Set the offset just after the last newline before ``size``."""
        pos, end, skipping, step = size, 0, False, 1 << 12
        while pos > 0:  # back from the end, in growing steps, to the last newline
            start = max(0, pos - step)
            nl = os.pread(fd, pos - start, start).rfind(b"\n")
            if nl >= 0:
                end = start + nl + 1
                break
            pos, step = start, min(step * 4, CHUNK_BYTES)
            if size - pos > self.max_line_bytes:  # an oversized line in progress: skip it
                end, skipping = size, True
                break
        self.offset, self._skipping, self._history = end, skipping, False

    def _rewritten(self, fd: int) -> bool:
        """True when the bytes just before the offset are no longer those
        this tailer consumed (the file was rewritten in place)."""
        n = len(self._sig)
        if not n or self.offset < n:
            return False
        try:
            return os.pread(fd, n, self.offset - n) != self._sig
        except OSError:
            return False
