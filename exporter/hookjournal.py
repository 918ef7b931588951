"""The hook journal: a hook delivery is on disk before its 2xx.

``state_dir/hook-journal.jsonl`` is append-only: one :func:`.hooks.to_record`
line per delivery that means something for a session (nothing of the body
beyond what the checkpoint keeps). The HTTP server's event loop hands its
line to :meth:`HookJournal.write_async` and awaits it (the spool's reader
thread: :meth:`HookJournal.write`); one writer thread writes every line
queued with one ``write`` and one ``fdatasync``, and wakes the waiters
(group commit: the lines that arrive during a flush go together in the
next one, so a burst of hooks costs a few disk flushes, not one each, and a
lone hook waits for no timer). Only then does the route answer 2xx; a write
that fails answers 503 (the ``hook`` command spools, Claude Code reports
the hook failed).

Once the reader thread has applied a delivery and saved the next checkpoint
(:meth:`HookJournal.done`), its line is no longer needed: when every written
line is done the file is truncated; past :data:`REWRITE_BYTES` with lines
still owed it is rewritten with those only. At start, the lines a kill left
(:attr:`HookJournal.recovered`) are applied again with the checkpoint's
saved deliveries (a delivery made twice is applied once: its ``ident``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import orjson

log = logging.getLogger(__name__)

JOURNAL_FILE = "hook-journal.jsonl"
#: A journal this large with lines still owed is rewritten with those only.
REWRITE_BYTES = 4 << 20
#: Lines read back at start at most (a damaged or foreign file cannot fill memory).
RECOVER_MAX_LINES = 100_000


def _settle(futures, ok: bool) -> None:
    """In the event loop: the futures of :meth:`HookJournal.write_async`
    whose flush is done (a waiter that gave up has cancelled its own)."""
    for fut in futures:
        if not fut.done():
            fut.set_result(ok)


class HookJournal:
    """The append-only hook journal of ``state_dir`` (see the module doc).

    ``recovered``: the records (dicts, oldest first) a previous run wrote
    and did not mark done; :meth:`done_recovered` marks them once they are
    in a checkpoint. Raises ``OSError`` when the file cannot be opened."""

    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / JOURNAL_FILE
        self.recovered: list[dict] = []
        self._pending: dict[int, bytes] = {}  # written, not yet done: seq -> line
        self._seq = 0
        for line in self._read():
            self._seq += 1
            self._pending[self._seq] = line
        self._recovered_seqs = list(self._pending)
        self._fd = self._open()
        self._cond = threading.Condition()
        self._io = threading.Lock()  # the file: appends, truncation, rewrite
        self._queue: list[tuple[int, bytes]] = []
        self._durable = self._seq
        self._failed: set[int] = set()
        #: Lines whose writer awaits them in an event loop: seq -> (loop, future).
        self._async: dict[int, tuple] = {}
        self._closed = False
        #: Flushes done and lines written (the bench reads them).
        self.flushes = self.lines = 0
        self._thread = threading.Thread(target=self._run, name="hook-journal", daemon=True)
        self._thread.start()

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)

    def _read(self) -> list[bytes]:
        try:
            with open(self.path, "rb") as f:
                lines = f.read(REWRITE_BYTES * 4).splitlines()[:RECOVER_MAX_LINES]
        except FileNotFoundError:
            return []
        except OSError as e:
            log.error("cannot read the hook journal %s: %s", self.path, e.strerror or e)
            return []
        kept, bad = [], 0
        for line in lines:
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:  # the last line of a kill mid-write, never acknowledged
                bad += 1
                continue
            self.recovered.append(rec)
            kept.append(line + b"\n")
        if bad:
            log.debug("hook journal: %d unreadable line(s) left out", bad)
        return kept

    def write(self, record: dict, timeout: float = 5.0, wait: bool = True) -> int:
        """Append ``record`` (a :func:`.hooks.to_record` dict) and return
        once it is on disk: its sequence number, or 0 when it could not be
        written (disk full, I/O error; logged) or ``timeout`` seconds passed.
        ``wait`` False: return the number at once (see :meth:`flush`)."""
        line = orjson.dumps(record) + b"\n"
        deadline = time.monotonic() + timeout
        with self._cond:
            if self._closed:
                return 0
            self._seq += 1
            seq = self._seq
            self._queue.append((seq, line))
            self._cond.notify_all()
            if not wait:
                return seq
            while self._durable < seq and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            if self._durable < seq or seq in self._failed:
                self._failed.discard(seq)
                return 0
        return seq

    def write_async(self, record: dict):
        """Append ``record`` from an asyncio event loop without blocking it:
        returns ``(seq, future)``, the future (of the running loop) done with
        True once the line is on disk, False when it could not be written;
        ``(0, None)`` when the journal is closed. The writer thread settles
        every future of one flush with one ``call_soon_threadsafe`` per loop."""
        import asyncio

        loop = asyncio.get_running_loop()
        line = orjson.dumps(record) + b"\n"
        with self._cond:
            if self._closed:
                return 0, None
            self._seq += 1
            fut = loop.create_future()
            self._async[self._seq] = (loop, fut)
            self._queue.append((self._seq, line))
            self._cond.notify_all()
            return self._seq, fut

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed and not self._queue:
                    return
            with self._cond:
                batch, self._queue = self._queue, []
            with self._io:
                ok = True
                try:
                    data = b"".join(line for _, line in batch)
                    while data:
                        data = data[os.write(self._fd, data):]
                    os.fdatasync(self._fd) if hasattr(os, "fdatasync") else os.fsync(self._fd)
                except OSError as e:
                    ok = False
                    log.error("cannot write the hook journal %s: %s (hooks answered 503)", self.path,
                              e.strerror or e)
                with self._cond:
                    if ok:
                        self._pending.update(batch)
                        while len(self._pending) > RECOVER_MAX_LINES:  # checkpoints failing for long: memory stays bounded
                            del self._pending[next(iter(self._pending))]
                        self.flushes += 1
                        self.lines += len(batch)
                    else:
                        self._failed.update(seq for seq, _ in batch if seq not in self._async)
                    self._durable = batch[-1][0]
                    waiters = [self._async.pop(seq) for seq, _ in batch if seq in self._async]
                    self._cond.notify_all()
                loops: dict = {}
                for loop, fut in waiters:
                    loops.setdefault(loop, []).append(fut)
                for loop, futs in loops.items():
                    try:
                        loop.call_soon_threadsafe(_settle, futs, ok)
                    except RuntimeError:  # that loop is closed: nobody waits any more
                        pass

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until every line written so far is on disk (or ``timeout``)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            seq = self._seq
            while self._durable < seq and not self._closed and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            self._failed = {q for q in self._failed if q > seq}  # the unwaited lines' failures are logged

    def done(self, seqs) -> None:
        """The deliveries ``seqs`` (from :meth:`write`) are applied and in a
        saved checkpoint: their lines may go. Truncates the journal when no
        line is owed any more (rewrites it when large). Errors are logged."""
        with self._io:
            with self._cond:
                for seq in seqs:
                    self._pending.pop(seq, None)
                owed = list(self._pending.values())
            try:
                if not owed:
                    os.ftruncate(self._fd, 0)
                elif os.fstat(self._fd).st_size > REWRITE_BYTES:
                    from .persist import write_atomic

                    write_atomic(self.path, lambda f: f.write(b"".join(owed)))
                    os.close(self._fd)
                    self._fd = self._open()
            except OSError as e:
                log.error("cannot shorten the hook journal %s: %s", self.path, e.strerror or e)

    def done_recovered(self) -> None:
        """The :attr:`recovered` records are in a saved checkpoint."""
        seqs, self._recovered_seqs = self._recovered_seqs, []
        self.recovered = []
        self.done(seqs)

    def close(self) -> None:
        """Stop the writer thread after the lines queued are written."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)
        try:
            os.close(self._fd)
        except OSError:
            pass
