"""Tailer: incremental, line-aligned, bounded reading of one growing file.

- Reads from the last offset to EOF in chunks of ``CHUNK_BYTES`` and splits on
  ``\\n`` (0x0A) only: U+2028 and U+0085 are legal inside JSON strings.
- An unterminated last line is not consumed: the offset stays at the start of
  that line and it is read again after the next append.
- A line longer than ``max_line_bytes`` is skipped without being held in
  memory: the tailer drops bytes until the next newline (remembering that it
  is inside such a line across reads) and reports it once as ``oversized``.
  Memory per read is bounded by ``max_line_bytes + CHUNK_BYTES``.
- A file that shrank (size < offset) or was replaced (another inode) is read
  again from the start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

CHUNK_BYTES = 1 << 20


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

    __slots__ = ("path", "max_line_bytes", "offset", "inode", "size", "mtime_ns", "_skipping")

    def __init__(self, path: str, max_line_bytes: int):
        self.path = path
        self.max_line_bytes = max_line_bytes
        self.offset = 0
        self.inode: int | None = None
        self.size = -1
        self.mtime_ns = -1
        self._skipping = False

    def unchanged(self, st: os.stat_result) -> bool:
        """True when ``st`` matches the fingerprint of the last read."""
        return st.st_ino == self.inode and st.st_size == self.size and st.st_mtime_ns == self.mtime_ns

    def read(self, final: bool = False, max_bytes: int | None = None, until: int | None = None) -> ReadResult:
        """Read what was appended since the last call.

        ``final=True`` (one-shot scans of finished files) also returns an
        unterminated last line. ``max_bytes`` bounds the bytes consumed in one
        call (the caller calls again while ``bytes_read`` is non-zero).
        ``until`` stops reading at that absolute offset (a restart checkpoint:
        what lies before it was read by the previous run).
        Raises ``OSError`` when the file cannot be opened or read.
        """
        res = ReadResult()
        with open(self.path, "rb") as f:
            st = os.fstat(f.fileno())
            if self.inode is not None and (st.st_ino != self.inode or st.st_size < self.offset):
                self.offset = 0
                self._skipping = False
                res.reset = True
            self.inode = st.st_ino
            self.size = st.st_size
            self.mtime_ns = st.st_mtime_ns
            f.seek(self.offset)
            buf = b""
            budget = max_bytes if max_bytes is not None else -1
            while True:
                want = CHUNK_BYTES
                if until is not None:
                    want = min(want, until - f.tell())
                    if want <= 0:
                        break
                chunk = f.read(want)
                if not chunk:
                    self.size = max(self.size, f.tell())
                    break
                if self._skipping:
                    nl = chunk.find(b"\n")
                    if nl < 0:
                        self.offset += len(chunk)
                        res.bytes_read += len(chunk)
                        continue
                    self._skipping = False
                    self.offset += nl + 1
                    res.bytes_read += nl + 1
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
                buf = buf[start:]
                if len(buf) > self.max_line_bytes:
                    # Inside an oversized line: drop it, resume at the next newline.
                    res.oversized += 1
                    self.offset += len(buf)
                    res.bytes_read += len(buf)
                    buf = b""
                    self._skipping = True
                if 0 <= budget <= res.bytes_read:
                    break
            if final and buf and not self._skipping:
                res.lines.append(buf)
                self.offset += len(buf)
                res.bytes_read += len(buf)
        return res
