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


def _exit_quietly(_signum, _frame) -> None:  # pragma: no cover - runs in a child
    os._exit(1)


class Forked:
    """``work()`` (no arguments; returns an iterable of picklable results)
    running in a forked child from construction on. Each result goes to the
    parent as soon as it is made, so a first result can be used while the
    child still works on the next. Where there is no ``os.fork`` nothing
    runs and :meth:`result` gives None."""

    def __init__(self, work) -> None:
        self._pid: int | None = None
        self._pipe = None
        if not hasattr(os, "fork"):
            return
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 0
            try:
                # Ctrl-C and a service manager's stop reach the whole group:
                # the child ends quietly, the parent says what happens.
                for name in ("SIGINT", "SIGTERM"):
                    signal.signal(getattr(signal, name), _exit_quietly)
                os.close(r)
                with os.fdopen(w, "wb") as pipe:
                    for out in work():
                        pickle.dump(out, pipe, protocol=pickle.HIGHEST_PROTOCOL)
                        pipe.flush()
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        self._pid, self._pipe = pid, os.fdopen(r, "rb")

    def result(self, last: bool = True):
        """The child's next result; None when it failed before sending it
        (or did not run). ``last``: no more is wanted, so the child is
        waited for, and a child that then exits with a failure gives None."""
        if self._pid is None:
            return None
        try:
            out = pickle.load(self._pipe)
        except (EOFError, pickle.UnpicklingError, OSError):
            out, last = None, True
        if last:
            self._pipe.close()
            _, status = os.waitpid(self._pid, 0)
            self._pid = None
            if status != 0:
                out = None
        return out

    def cancel(self) -> None:
        """Kill the child (its results are not wanted)."""
        if self._pid is None:
            return
        try:
            os.kill(self._pid, signal.SIGKILL)
        except OSError:
            pass
        self._pipe.close()
        os.waitpid(self._pid, 0)
        self._pid = None


def fork_map(parts: list, work, progress=None, stop=None) -> list | None:
    """Run ``work(part, progress)`` for every part: the first in this process,
    the others in :class:`Forked` children (which get no ``progress``).
    Returns the results in the order of ``parts``; ``None`` when a child
    failed or ``stop()`` became true (children are then killed)."""
    children = [Forked(lambda part=part: [work(part, None)]) for part in parts[1:]]
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
