"""Reading many transcript files at once: the one-shot reduction (``scan``)
and the daemon's start-up read (:func:`read_start_up`) share one path.

Speed (see README "Performance"): on a machine with several cores the
files are split between forked worker processes, each reducing whole
sessions in its own store. Files that may belong to one session (a Claude
project folder's sessions and subagents; a Codex rollout and the subagent
rollouts naming it as parent) go to the same worker. The workers report what
they built (``scan``: the session rows; the daemon: files and sessions,
adopted by its store); should two workers have built the same session after
all (content the grouping could not foresee), everything is read again in
one process, so the result never depends on the split.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

from .config import Config
from .decode import LineError, decode_line
from .metrics import Metrics
from .reducer import Timing
from .roots import Roots, configured_roots, walk_jsonl
from .store import PROVIDER_MODULES, SessionStore
from .workers import fork_map, worker_count

log = logging.getLogger(__name__)

#: Below this many bytes a scan stays in one process (forking costs more).
PARALLEL_MIN_BYTES = 16 << 20


def sniff_provider(path: str, max_lines: int = 50) -> str | None:
    """Guess a file's provider from its first records (``None``: no idea)."""
    try:
        with open(path, "rb") as f:
            for _ in range(max_lines):
                line = f.readline(1 << 20)
                if not line:
                    break
                try:
                    obj = decode_line(line.rstrip(b"\n"))
                except LineError:
                    continue
                if not obj:
                    continue
                for name, mod in PROVIDER_MODULES.items():
                    if mod.sniff(obj):
                        return name
    except OSError:
        return None
    return None


def make_store(cfg: Config, metrics: Metrics | None = None) -> SessionStore:
    """A store configured from ``cfg``."""
    r = cfg.reducer
    return SessionStore(
        metrics or Metrics(),
        Timing(r.inferred_settle_seconds, r.marker_wait_seconds, r.stall_after_seconds, r.api_retry_grace_seconds,
               r.wakeup_hold_seconds),
        cfg.sources.max_line_bytes,
        cfg.metrics.project_label,
        cfg.metrics.max_sessions,
        0,  # scans show every session, however old
    )


def _discover(paths: list[str], cfg: Config, provider: str | None):
    """``(path, provider, root, size)`` of every file to read, in order.
    ``provider`` is ``None`` where only the records can tell (the reader
    sniffs them: in the worker, when there are workers)."""
    lookup = Roots(configured_roots(cfg)).root_of
    files: list[tuple[str, str | None, Path, int]] = []
    for p in paths:
        path = Path(p).expanduser()
        if not path.exists():
            raise FileNotFoundError(f"{p}: no such file or folder")
        if path.is_file():
            found = [(str(path), os.path.realpath(path), path.stat().st_size)]
        else:
            found = sorted(walk_jsonl(path, resolved=True))
        base = path if path.is_dir() else path.parent
        for fp, resolved, size in found:
            prov, root = provider, base
            if prov is None:
                hit = lookup(fp, resolved)
                if hit:
                    prov, root = hit
            files.append((fp, prov, root, size))
    return files


def _read_files(store: SessionStore, files, progress=None, until: dict | None = None, stop=None,
                news_from: float | None = None) -> dict:
    """Read ``files`` (in order) into ``store``; returns ``{session key:
    index in files of the first file that made it}``.

    ``until`` None: a one-shot scan (every byte, an unterminated last line
    too, nothing live). Else the daemon's start-up: ``until[path]`` is the
    offset up to which the bytes are backfill (missing or None: all of
    them); the rest is news (``live``). A file whose every byte is news
    (``until[path] == 0``: made while the exporter was down) was born after
    ``news_from`` (Unix seconds: the previous run's last checkpoint).
    ``stop()`` true ends the read early.
    """
    start = time.monotonic()
    total = len(files)
    first: dict = {}
    known = set(store.sessions)
    for i, (fp, prov, root, *_rest) in enumerate(files):
        if stop is not None and stop():
            break
        prov = prov or sniff_provider(fp)
        if prov is None:
            log.warning("%s: no records of a known agent found; skipped", fp)
        elif store.track(fp, prov, root, born=news_from if until is not None and until.get(fp) == 0 else None):
            if until is None:
                tailer = store.files[fp].tailer
                # until a read reaches the end (not one more to find nothing)
                while store.refresh(fp, live=False, final=True) and tailer.offset < tailer.size:
                    pass
            else:
                u = until.get(fp)
                while store.refresh(fp, live=False, until=u):
                    pass
                while store.refresh(fp, live=True):
                    pass
            f = store.files.get(fp)
            s = f.session if f is not None else None
            if s is not None:
                key = (s.provider, s.session_id)
                if key not in known:
                    known.add(key)
                    first[key] = i
        if progress and (i + 1 == total or time.monotonic() - start > 2 and (i + 1) % 200 == 0):
            progress(f"read {i + 1}/{total} files")
    return first


def _group_key(fp: str, prov: str | None) -> str:
    """Files with the same key may belong to one session and go to one
    worker: the provider's guess from the layout (``group_hint``), else the
    folder. A wrong guess costs a serial re-run, never a wrong result."""
    prov = prov or sniff_provider(fp)
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


def _rows_of(store: SessionStore, first: dict, shard: list[int], at: float | None) -> list[tuple]:
    """``(index of the session's first file, row)`` for every row; keys of
    every session the store built (hidden ones too) go with it."""
    store.evaluate(time.time() if at is None else at)
    with store._lock:
        rows = store.rows(at)
    order = {key: shard[i] for key, i in first.items()}
    return [(order.get((r["provider"], r["session_id"]), 0), r) for r in rows]


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


def _parallel(files, cfg: Config, at: float | None, n: int, progress=None):
    """Reduce ``files`` in ``n`` processes. Returns the rows, or ``None`` when
    the split failed (the caller then scans serially)."""
    # Sniffed once, here (the split needs the provider), not again in the worker.
    files = [(fp, prov or sniff_provider(fp), root, size) for fp, prov, root, size in files]

    def work(shard, label):
        store = make_store(cfg)
        first = _read_files(store, [files[i] for i in shard], label)
        return sorted(set(store.sessions)), _rows_of(store, first, shard, at)

    results = _fork(files, n, work, progress)
    if results is None:
        return None
    indexed = [x for rows in results for x in rows]
    indexed.sort(key=lambda x: x[0])  # the order one process creates the sessions in
    rows = [r for _i, r in indexed]
    rows.sort(key=lambda r: r["last_write"], reverse=True)
    return rows


def scan(paths: list[str], cfg: Config, provider: str | None = None, at: float | None = None,
         progress=None, workers: int | None = None) -> tuple[list[dict], SessionStore | None]:
    """Reduce ``paths`` (files or folders) once; returns the session rows (see
    :meth:`SessionStore.rows`) evaluated at ``at`` (Unix seconds, default now)
    and the store (``None`` when worker processes did the reading; pass
    ``workers=1`` to keep it). Files are attributed to a provider by
    ``provider``, else by the configured/default root they sit under, else by
    their records."""
    files = _discover(paths, cfg, provider)
    n = worker_count() if workers is None else max(1, workers)
    if n > 1 and len(files) > 1 and sum(f[3] for f in files) >= PARALLEL_MIN_BYTES:
        rows = _parallel(files, cfg, at, n, progress)
        if rows is not None:
            return rows, None
    store = make_store(cfg)
    _read_files(store, files, progress)
    store.evaluate(time.time() if at is None else at)
    with store._lock:
        rows = store.rows(at)
    return rows, store


def _ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= n:
            return f"{seconds // n}{unit} ago"
    return f"{seconds}s ago"


def _copies_span(parts) -> bool:
    """True when two start-up readers saw one record (same identity, same
    record time): which of them is the copy, and so whether it is news,
    only one store that saw both can say (``exporter.identity``)."""
    union: dict = {}
    for part in parts:
        first = part[3].first
        for k, v in first.items():
            if k in union and union[k] == v:
                return True
        union.update(first)
    return False


def read_start_up(store: SessionStore, files, until: dict, cfg: Config, stop=None, progress=None,
                  workers: int | None = None, news_from: float | None = None) -> None:
    """The daemon's start-up read: ``files`` (``(path, provider, root,
    size)``) into ``store``, backfill up to ``until[path]`` and news after
    it (see :func:`_read_files`), split over forked workers like a ``scan``
    when there is enough to read. Each worker reads into a store of its own;
    ``store`` adopts their files and sessions."""
    n = worker_count() if workers is None else max(1, workers)
    if n > 1 and len(files) > 1 and sum(f[3] for f in files) >= PARALLEL_MIN_BYTES:
        def work(shard, label):
            part = make_store(cfg)
            part.owed = store.owed
            _read_files(part, [files[i] for i in shard], label, until, stop, news_from)
            return sorted(set(part.sessions)), part.export()

        results = _fork(files, n, work, progress, stop)
        if results is not None and _copies_span(results):
            log.debug("a record copied between files of two reading workers; reading again in one process")
            results = None
        if results is not None:
            for part in results:
                store.adopt(part)
            return
        if stop is not None and stop():
            return
    _read_files(store, files, progress, until, stop, news_from)


def format_table(rows: list[dict], now: float) -> list[str]:
    """The plain ``scan`` output: a header row and one aligned row per
    session; times are local (``YYYY-MM-DD HH:MM``) with their age at
    ``now`` (Unix seconds)."""
    from datetime import datetime

    def when(t):
        if not t:
            return "-"
        return f"{datetime.fromtimestamp(t).strftime('%Y-%m-%d %H:%M')} ({_ago(now - t)})"

    table = [("PROVIDER", "SESSION", "PROJECT", "STATE", "HOW", "SINCE", "LAST EVENT")]
    for r in rows:
        wait = r.get("waiting_for") or {}
        how = r["evidence"] or r["error_kind"] or (
            f"{wait.get('reason')}" + (f" ({wait['tool']})" if wait.get("tool") else "") if wait else "-")
        table.append((r["provider"], r["session_id"], r["project"] or "-", r["state"], how,
                      when(r["since"]), when(r["last_event_at"])))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]


def print_progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
