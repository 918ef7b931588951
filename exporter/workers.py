"""Forked worker processes, where ``os.fork`` exists: the daemon's start-up
walk runs in one while the rest of the exporter is imported
(:class:`Forked`), and parallel reads (``scan``, the start-up read) split
their files over several (:func:`fork_map`). A worker's result comes back
pickled through a pipe; a worker that fails only means doing its work
again in the calling process."""

from __future__ import annotations

import logging
import os
import pickle
import signal

log = logging.getLogger(__name__)


def worker_count() -> int:
    """How many processes a parallel read uses: the CPUs this process may
    run on, 1 where there is no ``os.fork``."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    return n if hasattr(os, "fork") else 1


class Forked:
    """``work()`` (no arguments; returns something picklable) running in a
    forked child from construction on. Where there is no ``os.fork``
    nothing runs and :meth:`result` gives None."""

    def __init__(self, work) -> None:
        self._pid: int | None = None
        self._pipe: int | None = None
        if not hasattr(os, "fork"):
            return
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 0
            try:
                os.close(r)
                out = work()
                with os.fdopen(w, "wb") as pipe:
                    pickle.dump(out, pipe, protocol=pickle.HIGHEST_PROTOCOL)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        self._pid, self._pipe = pid, r

    def result(self):
        """Wait for the child; what ``work()`` returned, or None when it
        failed (or did not run)."""
        if self._pid is None:
            return None
        out = None
        with os.fdopen(self._pipe, "rb") as pipe:
            try:
                out = pickle.load(pipe)
            except (EOFError, pickle.UnpicklingError, OSError):
                out = None
        _, status = os.waitpid(self._pid, 0)
        self._pid = None
        return out if status == 0 else None

    def cancel(self) -> None:
        """Kill the child (its result is not wanted)."""
        if self._pid is None:
            return
        try:
            os.kill(self._pid, signal.SIGKILL)
        except OSError:
            pass
        os.close(self._pipe)
        os.waitpid(self._pid, 0)
        self._pid = None


def fork_map(parts: list, work, progress=None, stop=None) -> list | None:
    """Run ``work(part, progress)`` for every part: the first in this process,
    the others in :class:`Forked` children (which get no ``progress``).
    Returns the results in the order of ``parts``; ``None`` when a child
    failed or ``stop()`` became true (children are then killed)."""
    children = [Forked(lambda part=part: work(part, None)) for part in parts[1:]]
    label = (lambda msg: progress(f"{msg} (this process; {len(parts) - 1} more in parallel)")) if progress else None
    results = [work(parts[0], label)]
    if stop is not None and stop():
        for c in children:
            c.cancel()
        return None
    failed = False
    for c in children:
        out = c.result()
        failed = failed or out is None
        results.append(out)
    if failed:
        log.warning("a worker process failed; doing its work again in this process")
        return None
    return results
