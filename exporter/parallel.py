"""The forked split: reading many files at once in forked worker
processes, where ``os.fork`` exists. The daemon's start-up walk runs in one
while the rest of the exporter is imported (:class:`Forked`); ``scan`` and
the daemon's start-up read split their files over several
(:func:`scan_rows`, :func:`read_start_up`, both on :func:`fork_map`).

Speed (see docs/performance.md): files that may belong to one session (a
Claude project folder's sessions and subagents; a Codex rollout and the
subagent rollouts naming it as parent) go to the same worker, which reduces
whole sessions in a store and file table of its own. The workers report
what they built (``scan``: the session rows; the daemon: files and
sessions, adopted by its own); should two workers have built the same
session after all, or seen one record (content the grouping could not
foresee), everything is read again in one process, so the result never
depends on the split. A worker's result comes back pickled through a pipe;
a worker that fails only means doing its work again in the calling
process.
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import signal
import time

from .providers import PROVIDER_MODULES, sniff

log = logging.getLogger(__name__)

#: Below this many bytes a read stays in one process (forking costs more).
PARALLEL_MIN_BYTES = 16 << 20
#: How often a wait for a forked child looks at its stop callable (seconds).
STOP_POLL_SECONDS = 0.05


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
                        data = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
                        pipe.write(len(data).to_bytes(8, "little") + data)  # one frame: its length, then it
                        pipe.flush()
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        self._pid, self._pipe = pid, r

    def _read(self, n: int, stop) -> bytes | None:
        """``n`` bytes from the child; None at its end (or when ``stop()``
        became true while waiting: checked every ``STOP_POLL_SECONDS``)."""
        out = bytearray()
        while len(out) < n:
            if stop is not None:
                while not select.select([self._pipe], [], [], STOP_POLL_SECONDS)[0]:
                    if stop():
                        return None
            chunk = os.read(self._pipe, min(n - len(out), 1 << 20))
            if not chunk:
                return None
            out += chunk
        return bytes(out)

    def result(self, last: bool = True, stop=None):
        """The child's next result; None when it failed before sending it
        (or did not run). ``last``: no more is wanted, so the child is
        waited for, and a child that then exits with a failure gives None.
        ``stop`` (a callable): when it becomes true while waiting, the child
        is killed and None returned at once (a stop waits out no walk)."""
        if self._pid is None:
            return None
        out = None
        try:
            head = self._read(8, stop)
            data = self._read(int.from_bytes(head, "little"), stop) if head is not None else None
            if data is not None:
                out = pickle.loads(data)
        except (pickle.UnpicklingError, EOFError, OSError, ValueError):
            out = None
        if out is None and stop is not None and stop():
            self.cancel()
            return None
        if out is None or last:
            os.close(self._pipe)
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
        os.close(self._pipe)
        os.waitpid(self._pid, 0)
        self._pid = None


def fork_map(parts: list, work, progress=None, stop=None) -> list | None:
    """Run ``work(part, progress)`` for every part: the first in this process,
    the others in :class:`Forked` children (which get no ``progress``).
    Returns the results in the order of ``parts``; ``None`` when a child
    failed or ``stop()`` became true (children are then killed)."""
    children = [Forked(lambda part=part: [work(part, None)]) for part in parts[1:]]
    others = len(parts) - 1
    label = (lambda msg: progress(f"{msg} of this process's share ({others} other process{'es' * (others > 1)} "
                                  "read the rest)")) if progress else None
    results = [work(parts[0], label)]
    if stop is not None and stop():
        for c in children:
            c.cancel()
        return None
    failed = False
    for c in children:
        out = c.result(stop=stop)
        failed = failed or out is None
        results.append(out)
    if stop is not None and stop():
        for c in children:
            c.cancel()
        return None
    if failed:
        log.warning("a worker process failed; doing its work again in this process")
        return None
    return results


def worth_forking(files, workers: int | None) -> int:
    """How many processes read ``files`` (``[(path, provider, root,
    size)]``): :func:`worker_count` (or ``workers``) when there are two
    files or more and :data:`PARALLEL_MIN_BYTES` to read, else 1."""
    n = worker_count() if workers is None else max(1, workers)
    return n if n > 1 and len(files) > 1 and sum(f[3] for f in files) >= PARALLEL_MIN_BYTES else 1


def _group_key(fp: str, prov: str | None) -> str:
    """Files with the same key may belong to one session and go to one
    worker: the provider's guess from the layout (``group_hint``), else the
    folder. A wrong guess costs a serial re-run, never a wrong result."""
    prov = prov or sniff(fp)
    if prov is not None:
        hint = PROVIDER_MODULES[prov].group_hint(fp)
        if hint:
            return hint
    return os.path.dirname(fp)


def _shards(files, n: int) -> list[list[int]]:
    """Split file indexes into ``n`` shards of about equal bytes, keeping each
    group whole; each shard keeps the files' order."""
    groups: dict[str, list[int]] = {}
    for i, (fp, prov, _root, _size) in enumerate(files):
        groups.setdefault(_group_key(fp, prov), []).append(i)
    loads = [0] * n
    shards: list[list[int]] = [[] for _ in range(n)]
    for idx in sorted(groups.values(), key=lambda g: -sum(files[i][3] for i in g)):
        k = loads.index(min(loads))
        shards[k].extend(idx)
        loads[k] += sum(files[i][3] for i in idx)
    return [sorted(s) for s in shards]


def _fork(files, n: int, work, progress=None, stop=None) -> list | None:
    """Run ``work(shard, progress)`` (``shard``: indexes into ``files``;
    returns ``(session keys, payload)``, picklable) on ``n`` shards (see
    :func:`fork_map`). Returns the payloads, this process's first; ``None``
    when a worker failed, two workers built the same session, or ``stop()``
    became true."""
    results = fork_map([s for s in _shards(files, n) if s], work, progress, stop)
    if results is None:
        return None
    seen: set = set()
    for keys, _payload in results:
        if seen.intersection(keys):
            log.debug("a session spans two reading workers; reading again in one process")
            return None
        seen.update(keys)
    return [payload for _keys, payload in results]


def scan_rows(files, make, at: float | None, n: int, progress=None) -> list[dict] | None:
    """Reduce ``files`` (``[(path, provider or None, root, size)]``) in ``n``
    processes; ``make()`` gives a fresh ``(store, file table)``. Returns
    the session rows evaluated at ``at`` (Unix seconds; None: now), newest
    first, or ``None`` when the split failed (the caller then reads in one
    process)."""
    # Sniffed once, here (the split needs the provider), not again in the worker.
    files = [(fp, prov or sniff(fp), root, size) for fp, prov, root, size in files]

    def work(shard, label):
        store, table = make()
        first = table.read_all([files[i] for i in shard], label)
        store.evaluate(time.time() if at is None else at)
        rows = store.rows(at)
        store.usage.prices.save()  # the models this worker priced, for the next scan
        order = {key: shard[i] for key, i in first.items()}
        return sorted(set(store.sessions)), ([(order.get((r["provider"], r["session_id"]), 0), r) for r in rows],
                                             list(store.usage.keys))

    results = _fork(files, n, work, progress)
    if results is None:
        return None
    # A response counted by two workers (a copy of it in files of two shards): which session it
    # belongs to depends on the order of reading, which only one process can keep.
    seen: set = set()
    for _rows, keys in results:
        if not seen.isdisjoint(keys):
            log.debug("a response is in files of two reading workers; reading again in one process")
            return None
        seen.update(keys)
    indexed = [x for rows, _keys in results for x in rows]
    indexed.sort(key=lambda x: x[0])  # the order one process creates the sessions in
    rows = [r for _i, r in indexed]
    rows.sort(key=lambda r: r["last_write"], reverse=True)
    return rows


#: Counters a reading process moves along (handed over by :func:`_export`).
_READ_COUNTERS = ("lines", "bytes", "parse_errors", "skipped", "duplicates", "read_errors")


def _export(store, table) -> tuple:
    """What a start-up reader process hands back (picklable): ``(files,
    sessions, [(counter, labels, increment)], identity, usage)``."""
    counts = []
    for name in _READ_COUNTERS:
        for fam in getattr(store.metrics, name).collect():
            counts += [(name, smp.labels, smp.value) for smp in fam.samples
                       if smp.name.endswith("_total") and smp.value]
    return table.files, store.sessions, counts, store.identity, store.usage


def _adopt(store, table, part: tuple) -> None:
    """Take over the files, sessions and counts of :func:`_export` (of a
    worker that read other files than this process)."""
    files, sessions, counts, identity, usage = part
    store.adopt(sessions, identity, usage)
    for path, f in files.items():
        table.files[path] = f
        table.watched(f.provider.NAME).inc()
    for name, labels, value in counts:
        getattr(store.metrics, name).labels(**labels).inc(value)


def _copies_span(parts) -> bool:
    """True when two start-up readers saw one record identity, whatever its
    record time (a fork keeps its copies' times, a resume stamps them anew):
    which of them is the copy, and so whether it is news, only one store
    that saw both can say (``exporter.identity``)."""
    union: set = set()
    for part in parts:
        first = part[3].first
        if not union.isdisjoint(first):
            return True
        union.update(first)
    return False


def read_start_up(store, table, files, until: dict, make, stop=None, progress=None,
                  workers: int | None = None, news_from: float | None = None) -> None:
    """The daemon's start-up read: ``files`` (``(path, provider, root,
    size)``) into ``store`` and its file ``table``, backfill up to
    ``until[path]`` and news after it (see
    :meth:`~.files.FileTable.read_all`), split over forked workers when
    there is enough to read. Each worker reads into a store and table of
    its own (``make()``); ``store`` and ``table`` adopt their sessions and
    files."""
    n = worth_forking(files, workers)
    if n > 1:
        def work(shard, label):
            part, part_table = make()
            part.owed = store.owed
            part.usage.count_all = store.usage.count_all
            part_table.read_all([files[i] for i in shard], label, until, stop, news_from)
            return sorted(set(part.sessions)), _export(part, part_table)

        results = _fork(files, n, work, progress, stop)
        if results is not None and _copies_span(results):
            log.debug("a record copied between files of two reading workers; reading again in one process")
            results = None
        if results is not None:
            for part in results:
                _adopt(store, table, part)
            return
        if stop is not None and stop():
            return
    table.read_all(files, progress, until, stop, news_from)
