"""The ``scan`` command: read transcript files once and print every
session's state. The same reading and ingest as the daemon
(:meth:`~.files.FileTable.read_all`, one-shot: every byte, nothing news), in
forked workers when there is enough to read (:mod:`exporter.parallel`).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

from . import parallel
from .config import Config
from .files import make_reader
from .roots import Roots, configured_roots, walk_jsonl
from .store import SessionStore

log = logging.getLogger(__name__)


class _Discard:
    """An instrument that keeps nothing (``labels()`` gives itself)."""

    __slots__ = ()

    def labels(self, *_a, **_k):
        return self

    def inc(self, *_a, **_k) -> None:
        pass

    observe = set = dec = inc


class _NoMetrics:
    """The store's metrics for ``scan``, which shows none: every instrument
    is a :class:`_Discard`. prometheus-client's import and the ~400 children
    :class:`~.metrics.Metrics` makes at 0 were a fifth of a scan's start-up,
    which no worker shares (docs/performance.md)."""

    def __getattr__(self, name: str) -> _Discard:
        if name.startswith("__"):
            raise AttributeError(name)
        setattr(self, name, _DISCARD)
        return _DISCARD


_DISCARD = _Discard()
NO_METRICS = _NoMetrics()


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


def scan(paths: list[str], cfg: Config, provider: str | None = None, at: float | None = None,
         progress=None, workers: int | None = None, by_hour: bool = False) -> tuple[list[dict], SessionStore | None]:
    """Reduce ``paths`` (files or folders) once; returns the session rows (see
    :meth:`SessionStore.rows`) evaluated at ``at`` (Unix seconds, default now)
    and the store (``None`` when worker processes did the reading; pass
    ``workers=1`` to keep it). Files are attributed to a provider by
    ``provider``, else by the configured/default root they sit under, else by
    their records. ``by_hour``: rows carry ``usage_hours`` (:func:`by_day`).
    Raises FileNotFoundError for a path that does not exist."""
    files = _discover(paths, cfg, provider)
    n = parallel.worth_forking(files, workers)

    def make():
        store, table = make_reader(cfg, NO_METRICS)
        store.usage_hours = by_hour
        return store, table

    if n > 1:
        rows = parallel.scan_rows(files, make, at, n, progress)
        if rows is not None:
            return rows, None
    store, table = make()
    table.read_all(files, progress)
    store.evaluate(time.time() if at is None else at)
    rows = store.rows(at)
    store.usage.prices.save()
    return rows, store


def by_day(rows: list[dict]) -> list[dict]:
    """The rows' ``usage_hours`` per local day and model, oldest first:
    ``[{"date": "YYYY-MM-DD", "models": {model: {"input", "output",
    "cache_read", "cache_write", "reasoning", "cost_usd"}}, "cost_usd"}]``
    (as ``ccusage daily`` groups; a day's cost sums its priced models, None
    when none is). Responses without a time are under date ``unknown``."""
    from datetime import datetime

    from .usage import TYPES

    days: dict = {}
    for r in rows:
        for hour, models in (r.get("usage_hours") or {}).items():
            date = datetime.fromtimestamp(hour * 3600).strftime("%Y-%m-%d") if hour >= 0 else "unknown"
            day = days.setdefault(date, {})
            for model, vals in models.items():
                got = day.setdefault(model, dict.fromkeys(TYPES, 0) | {"cost_usd": 0.0})
                for t, v in zip(TYPES, vals):
                    got[t] += v
                got["cost_usd"] = None if vals[5] is None or got["cost_usd"] is None else got["cost_usd"] + vals[5]
    out = []
    for date in sorted(days):
        costs = [m["cost_usd"] for m in days[date].values() if m["cost_usd"] is not None]
        out.append({"date": date, "models": days[date], "cost_usd": sum(costs) if costs else None})
    return out


def usd(c: float | None, tokens: int = 1, more: bool = False) -> str:
    """A cost for people: ``$1,234.57``; ``<$0.01`` for less than a cent;
    ``unpriced`` when ``c`` is None and there are ``tokens`` (no price
    known); ``-`` when there are no tokens; ``+`` after it when ``more``
    (tokens of no known price beside the priced ones, not in ``c``)."""
    if c is None:
        return "unpriced" if tokens else "-"
    plus = "+" if more else ""
    if 0 < c < 0.005:
        return "<$0.01" + plus
    return f"${c:,.2f}{plus}"


def compact(n: int) -> str:
    """A token count at a glance: ``850``, ``12k``, ``1.2M``, ``3.4B``
    (one decimal below 10 of the unit; ``-`` for 0)."""
    if not n:
        return "-"
    for unit, size in (("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= size * 0.9995:  # 999,999 is 1.0M, not 1,000k
            v = n / size
            return f"{v:.1f}{unit}" if v < 9.95 else f"{v:,.0f}{unit}"
    return str(n)


def _tokens(m: dict) -> int:
    """Input + output + cache reads + cache writes (reasoning is part of
    output), as ccusage's "Total Tokens"."""
    return m["input"] + m["output"] + m["cache_read"] + m["cache_write"]


def usage_hint(rows: list[dict]) -> str | None:
    """A line for people when some tokens have no price (their cost is in
    no total), naming the models; None when every token is priced."""
    from .usage import view_total

    total = view_total(rows)
    if not total["unpriced_tokens"]:
        return None
    names = total["unpriced_models"]
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    what = ("no model here has a known price" if total["cost_usd"] is None
            else f"{total['unpriced_tokens']:,} tokens are of models with no known price, in no cost")
    unknown = "; 'unknown': responses before any model was recorded" if "unknown" in names else ""
    return f"{what} ({shown}{unknown}); add prices under usage.prices (docs/tokens.md)"


def _align(table: list[tuple], right: set[int]) -> list[str]:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return ["  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
            for row in table]


def format_days(days: list[dict]) -> list[str]:
    """The plain ``scan --by day`` output: one row per day and model (tokens
    by type, their total, cost), a row with the day's total where a day has
    more than one model, and a total line."""
    from .usage import TYPES

    head = ("DATE", "MODEL", "INPUT", "OUTPUT", "CACHE READ", "CACHE WRITE", "REASONING", "TOTAL TOKENS", "COST")

    def line(date, label, m, cost, more=False):
        return (date, label) + tuple(f"{m[t]:,}" for t in TYPES) + (f"{_tokens(m):,}", usd(cost, _tokens(m), more))

    table = [head]
    grand = dict.fromkeys(TYPES, 0)
    grand_cost, grand_more = None, False
    for d in days:
        day = dict.fromkeys(TYPES, 0)
        for model, m in sorted(d["models"].items()):
            table.append(line(d["date"], model, m, m["cost_usd"]))
            for t in TYPES:
                day[t] += m[t]
                grand[t] += m[t]
        more = any(m["cost_usd"] is None for m in d["models"].values())
        grand_more = grand_more or more
        if len(d["models"]) > 1:
            table.append(line(d["date"], f"(all {len(d['models'])} models)", day, d["cost_usd"], more))
        if d["cost_usd"] is not None:
            grand_cost = (grand_cost or 0.0) + d["cost_usd"]
    table.append(line("TOTAL", f"{len(days)} day" + ("" if len(days) == 1 else "s"), grand, grand_cost, grand_more))
    return _align(table, set(range(2, len(head))))


def _ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= n:
            return f"{seconds // n}{unit} ago"
    return f"{seconds}s ago"


def format_table(rows: list[dict], now: float) -> list[str]:
    """The plain ``scan`` output: a header row, one aligned row per session
    and a total line; times are local (``YYYY-MM-DD HH:MM``) with their age
    at ``now`` (Unix seconds); tokens (:func:`compact`) and cost
    (:func:`usd`) right-aligned."""
    from datetime import datetime

    def when(t):
        if not t:
            return "-"
        return f"{datetime.fromtimestamp(t).strftime('%Y-%m-%d %H:%M')} ({_ago(now - t)})"

    from .usage import view_total

    def unpriced(usage: dict) -> bool:
        return any(m["cost_usd"] is None for m in usage.values())

    table = [("PROVIDER", "SESSION", "PROJECT", "STATE", "HOW", "SINCE", "LAST EVENT", "TOKENS", "COST")]
    for r in rows:
        wait = r.get("waiting_for") or {}
        how = r["evidence"] or r["error_kind"] or (
            f"{wait.get('reason')}" + (f" ({wait['tool']})" if wait.get("tool") else "") if wait else "-")
        n = sum(_tokens(m) for m in (r.get("usage") or {}).values())
        table.append((r["provider"], r["session_id"], r["project"] or "-", r["state"], how,
                      when(r["since"]), when(r["last_event_at"]), compact(n),
                      usd(r.get("cost_usd"), n, unpriced(r.get("usage") or {}))))
    total = view_total(rows)
    table.append(("TOTAL", f"{len(rows)} sessions", "", "", "", "", "", compact(total["tokens"]),
                  usd(total["cost_usd"], total["tokens"], bool(total["unpriced_tokens"]))))
    return _align(table, {7, 8})


def print_progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
