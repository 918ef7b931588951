"""Token and cost accounting: what the agents' records say each API response
used, counted once per response, and what that costs.

Each provider's ``FileDecoder`` has a list ``usage``: while it projects a
record that carries usage (and only then: the branch of its projection that
already reads that record type asks for it, so other records cost nothing),
it appends the record's API responses, each ``(key, model, (input, output,
cache_read, cache_write, reasoning, cache_write_1h))`` with the raw values
as the record has them (checked here), or :data:`BAD` (usage the record
carries but of a shape that cannot be read). :func:`exporter.ingest.apply_lines`
hands the list to :func:`take` after each record (unless it is one
response already counted: another line of it) and empties it. ``key``
identifies the response across lines, files and sessions (Claude
``message.id:requestId``, a Codex ``token_count``'s time and totals, a Pi
entry id, …) or is None (counted each time it is seen, as ccusage does). The
state a provider keeps for it (Codex: the model of the turn, the last
totals) lives in the decoder, so it is reset with the file.

Counting (:func:`take`, called by :func:`exporter.ingest.apply_lines` for
every record that carries usage):

- a response whose key was already counted is not counted again: one API
  response written as several lines (Claude: one line per content block), a
  resumed or forked file's copies of earlier responses, a file rewritten and
  read again from its start;
- a value that is not a whole number from 0 to :data:`MAX_TOKENS` (negative,
  huge, a string, a missing required field) makes the response count
  nothing and is counted as ``coding_agent_transcript_parse_errors_total
  {reason="bad_usage"}``;
- every response read goes into its session's :class:`Tally` (``scan``, the
  API, ``coding_agent_session_cost_usd``); it goes into the counters
  (:class:`Accounting`, ``coding_agent_tokens_total`` …) when it is news
  (read after start-up, or written while the exporter was down) or when this
  is the first start of the ``state_dir`` (no checkpoint yet: what the first
  start reads counts once). The counted tokens are saved with the
  checkpoint (with the offsets they were counted up to) and go on from
  there at the next start.

Prices (:class:`Prices`): the pinned ``genai-prices`` library's bundled data
(no network), imported only when a cost is first asked for; each model's
rates are resolved once and kept in ``state_dir/price-cache.json`` (keyed by
the library's version and the configured prices), so a later ``scan`` does
not import the library at all. ``usage.prices`` in the configuration adds or
overrides a model's prices. A model neither knows has no cost (None) and its
tokens count in ``coding_agent_unpriced_tokens_total``. A response's prompt
size (input + cache reads + cache writes) picks the price tier (the library's
tiers: e.g. above 200,000 input tokens), so tokens are kept per model and
prompt-size bucket (:data:`EDGES`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from bisect import bisect_left

log = logging.getLogger(__name__)

#: The token types, in the order of every count tuple (label ``type``).
TYPES = ("input", "output", "cache_read", "cache_write", "reasoning")
#: A provider's answer for usage it cannot read: a response of no key
#: (``(key, model, counts)`` like the others, so a batch is looked at alike).
BAD = (None, "bad", None)
#: The parse-error reason of :data:`BAD` and of values out of bounds.
BAD_REASON = "bad_usage"
#: The most tokens of one type one response may have (the largest context
#: windows are about 2 million tokens): more is a bad value, not usage.
MAX_TOKENS = 50_000_000
#: Every tier start (input tokens) of the pinned genai-prices data (a tier
#: applies above its start); a response's bucket is how many of them its
#: prompt size exceeds. tests/test_usage.py keeps this equal to the data.
EDGES = (32000, 100000, 128000, 199999, 200000, 256000, 272000, 512000, 524288)
#: The genai-prices distribution whose data prices the tokens (pyproject pins it).
LIBRARY = "genai-prices"
#: Providers' ids in genai-prices for the agents whose API is known.
PRICE_PROVIDER = {"claude_code": "anthropic", "codex": "openai"}


def _count(v) -> int | None:
    """A token count: a whole number 0 ≤ v ≤ MAX_TOKENS (an int, or a float
    with no fraction), else None."""
    t = type(v)
    if t is int:
        return v if 0 <= v <= MAX_TOKENS else None
    if t is float and v.is_integer() and 0 <= v <= MAX_TOKENS:
        return int(v)
    return None


#: The type of every value of a response in the common case (whole numbers).
_INTS = frozenset({int})


def check(raw: tuple) -> tuple | None:
    """``(input, output, cache_read, cache_write, reasoning, cache_write_1h)``
    as ints from a provider's raw values (the same six), or None when one is
    not a token count (the 1 h cache writes, a part of ``cache_write``, are
    capped by it)."""
    if _INTS.issuperset(map(type, raw)):  # whole numbers: only the bounds can be wrong (e.g. negative)
        return (*raw[:5], min(raw[5], raw[3])) if 0 <= min(raw) and max(raw) <= MAX_TOKENS else None
    out = []
    for v in raw:
        n = _count(v)
        if n is None:
            return None
        out.append(n)
    out[5] = min(out[5], out[3])
    return tuple(out)


class Tally:
    """One session's usage: ``tokens[(model, bucket, hour)]`` = ``[input, output,
    cache_read, cache_write, reasoning, cache_write_1h]`` (bucket: see
    :data:`EDGES`; hour: the response's record time in whole hours since
    the epoch, a float with no fraction, -1 when unknown, for summaries by day), the keys of its responses (forgotten with it), and
    ``version``, changed by every response (for cached summaries)."""

    __slots__ = ("tokens", "keys", "version", "_summary")

    def __init__(self) -> None:
        self.tokens: dict = {}
        self.keys: list = []
        self.version = 0
        self._summary = None

    def summary(self, prices: Prices) -> dict:
        """``{model: {"input", "output", "cache_read", "cache_write",
        "reasoning", "cost_usd"}}`` (``cost_usd``: USD rounded to 1e-6, None
        when the model has no price), cached until the next response."""
        cached = self._summary
        if cached is not None and cached[0] == self.version:
            return cached[1]
        out: dict = {}
        for (model, bucket, _hour), vals in self.tokens.items():
            row = out.get(model)
            if row is None:
                row = out[model] = dict.fromkeys(TYPES, 0)
                row["cost_usd"] = 0.0
            for t, v in zip(TYPES, vals):
                row[t] += v
            cost = prices.cost(model, bucket, vals)
            row["cost_usd"] = None if cost is None or row["cost_usd"] is None else row["cost_usd"] + cost
        for row in out.values():  # micro-dollars: no float noise in the JSON
            if row["cost_usd"] is not None:
                row["cost_usd"] = round(row["cost_usd"], 6)
        self._summary = (self.version, out)
        return out

    def by_hour(self, prices: Prices) -> dict:
        """``{hour: {model: [input, output, cache_read, cache_write,
        reasoning, cost_usd or None]}}`` (hour: see the class doc)."""
        out: dict = {}
        for (model, bucket, hour), vals in self.tokens.items():
            row = out.setdefault(int(hour), {}).setdefault(model, [0, 0, 0, 0, 0, 0.0])
            for i in range(5):
                row[i] += vals[i]
            cost = prices.cost(model, bucket, vals)
            row[5] = None if cost is None or row[5] is None else row[5] + cost
        return out

    def cost(self, prices: Prices) -> float | None:
        """The session's cost in USD (the priced models'); None when it has
        tokens of no priced model at all, 0.0 when it has none."""
        total, priced = 0.0, not self.tokens
        for row in self.summary(prices).values():
            if row["cost_usd"] is not None:
                total += row["cost_usd"]
                priced = True
        return round(total, 6) if priced else None

    def __getstate__(self):
        return (self.tokens, self.keys, self.version)

    def __setstate__(self, state) -> None:
        self.tokens, self.keys, self.version = state
        self._summary = None


def view_total(rows) -> dict:
    """The usage of a view's session rows (:meth:`.store.SessionStore.rows`,
    their ``usage``), summed over sessions and models: ``{"input", "output",
    "cache_read", "cache_write", "reasoning"`` (tokens), ``"tokens"``
    (input + output + cache reads + cache writes: reasoning is part of
    output, as ccusage's "Total Tokens"), ``"cost_usd"`` (USD of the priced
    models, rounded to 1e-6; 0.0 when there are no tokens; None when there
    are tokens and none of a priced model), ``"unpriced_tokens"`` (tokens, as
    ``"tokens"``, of models with no price: not in ``cost_usd``),
    ``"unpriced_models"`` (their names, sorted)}``."""
    out = dict.fromkeys(TYPES, 0)
    cost, unpriced, models = None, 0, set()
    for r in rows:
        for model, row in (r.get("usage") or {}).items():
            for t in TYPES:
                out[t] += row[t]
            if row["cost_usd"] is None:
                unpriced += row["input"] + row["output"] + row["cache_read"] + row["cache_write"]
                models.add(model)
            else:
                cost = (cost or 0.0) + row["cost_usd"]
    out["tokens"] = out["input"] + out["output"] + out["cache_read"] + out["cache_write"]
    if cost is None and not out["tokens"]:
        cost = 0.0
    out["cost_usd"] = None if cost is None else round(cost, 6)
    out["unpriced_tokens"] = unpriced
    out["unpriced_models"] = sorted(models)
    return out


class Accounting:
    """The store's usage counters and response keys.

    ``keys``: every response key counted (→ None), for all sessions kept;
    ``counted[(provider, model, bucket)]``: the counted tokens (as in
    :class:`Tally`), including what earlier runs of this state folder
    counted (:meth:`restore`); ``count_all``: backfill counts too (the
    first start of a state folder). ``prices``: see :class:`Prices`; costs
    are the counted tokens at the current prices (a new price data release
    or ``usage.prices`` change reprices the whole count).
    """

    def __init__(self, prices: Prices | None = None) -> None:
        self.keys: dict = {}
        self.counted: dict = {}
        self.count_all = False
        self.version = 0
        self.prices = prices or Prices()
        self._lock = threading.Lock()

    def __getstate__(self):  # a start-up reader process hands it back (parallel.read_start_up)
        return (self.keys, self.counted, self.count_all, self.version)

    def __setstate__(self, state) -> None:
        self.keys, self.counted, self.count_all, self.version = state
        self.prices = Prices()
        self._lock = threading.Lock()

    def add(self, provider: str, model: str, bucket: int, vals) -> None:
        k = (provider, model, bucket)
        with self._lock:
            got = self.counted.get(k)
            self.counted[k] = list(vals) if got is None else [x + y for x, y in zip(got, vals)]
            self.version += 1

    def forget(self, tally: Tally) -> None:
        """Drop the keys of a session forgotten (its file deleted, expired)."""
        keys = self.keys
        for k in tally.keys:
            keys.pop(k, None)

    def totals(self) -> dict:
        """``{(provider, model): [input, output, cache_read, cache_write,
        reasoning, cost_usd, unpriced]}`` (``cost_usd`` of the priced tokens;
        ``unpriced``: input + output + cache tokens of models with no price)."""
        with self._lock:
            counted = [(k, list(v)) for k, v in self.counted.items()]
        out: dict = {}
        for (prov, model, bucket), vals in counted:
            row = out.get((prov, model))
            if row is None:
                row = out[(prov, model)] = [0, 0, 0, 0, 0, 0.0, 0]
            for i in range(5):
                row[i] += vals[i]
            cost = self.prices.cost(model, bucket, vals)
            if cost is None:
                row[6] += vals[0] + vals[1] + vals[2] + vals[3]
            else:
                row[5] += cost
        return out

    def state(self) -> list:
        """What the checkpoint keeps: ``[[provider, model, bucket, input,
        output, cache_read, cache_write, reasoning, cache_write_1h], …]``
        (no prices needed to save it)."""
        with self._lock:
            return [[p, m, b] + list(v) for (p, m, b), v in sorted(self.counted.items())]

    def restore(self, saved, first: bool) -> None:
        """Go on from the counts a previous run saved (``state()``; anything
        malformed is dropped with a warning); ``first``: no checkpoint, so
        what this start reads counts (``count_all``)."""
        self.count_all = first
        if saved is None:
            return
        try:
            for row in saved:
                p, m, b, *vals = row
                nums = [_count(v) for v in vals]
                if not (isinstance(p, str) and isinstance(m, str) and type(b) is int and 0 <= b <= len(EDGES)
                        and len(vals) == 6 and None not in nums):
                    raise ValueError(row)
                self.add(p, m, b, nums)
        except (TypeError, ValueError):
            log.warning("the checkpoint's usage counters are unusable; they start again from 0")
            self.counted.clear()

    def merge(self, other: Accounting) -> None:
        """Take over what a start-up reader process counted (it started
        from nothing: the saved counts are this store's)."""
        self.keys.update(other.keys)
        for (prov, model, bucket), vals in other.counted.items():
            self.add(prov, model, bucket, vals)


def take(store, s, provider: str, got: list, live: bool, ts: float | None = None) -> None:
    """Count the responses one record gave (a decoder's ``usage`` list: see
    the module doc) for session ``s`` of ``store``: into ``s.usage`` always,
    into ``store.usage``'s counters when ``live`` (news) or on a first
    start. ``ts``: the record's time (Unix seconds). The caller holds the
    store's lock. Every response read goes through here: it keeps to
    locals and few bytecodes (docs/performance.md, "The token accounting")."""
    acct = store.usage
    keys = acct.keys
    tally = s.usage
    for r in got:
        key, model, vals = r
        if key is not None:
            if key in keys:
                continue  # this response was counted: another line of it, a copy, a file read again
        elif r is BAD:
            store.metrics.parse_errors.labels(provider, BAD_REASON).inc()
            s.counters.parse_errors += 1
            continue
        a, b, c, d, e, h = vals
        try:  # the common case: whole numbers in bounds (a float, a string or None raises here)
            ok = 0 <= (a | b | c | d | e | h) <= MAX_TOKENS and h <= d \
                and type(a) is type(b) is type(c) is type(d) is type(e) is type(h) is int  # (not bool)
        except TypeError:
            ok = False
        if not ok:
            vals = check(vals)
            if vals is None:
                store.metrics.parse_errors.labels(provider, BAD_REASON).inc()
                s.counters.parse_errors += 1
                continue
            a, b, c, d, e, h = vals
        if key is not None:
            keys[key] = None
            tally.keys.append(key)
        if not (a or b or c or d or e):
            continue  # nothing used
        n = a + c + d  # the prompt's size: its price tier (bisect_left(EDGES, n), the first four inline: a C call
        # costs 1.4 k instructions, each compare ~60; tests/test_usage.py keeps the two equal)
        bucket = (0 if n <= 32000 else 1 if n <= 100000 else 2 if n <= 128000 else 3) if n <= 199999 \
            else bisect_left(EDGES, n)
        k = (model, bucket, ts // 3600 if ts is not None else -1)  # a whole float: int() is a call too
        old = tally.tokens.get(k)
        if old is None:
            tally.tokens[k] = [a, b, c, d, e, h]
        else:
            old[0] += a
            old[1] += b
            old[2] += c
            old[3] += d
            old[4] += e
            old[5] += h
        tally.version += 1
        if live or acct.count_all:
            acct.add(provider, model, bucket, vals)


# -- prices -----------------------------------------------------------------

#: The pinned version (pyproject.toml; tests/test_usage.py keeps it equal to the
#: installed one): the rate cache's key, without asking importlib.metadata (60 ms).
LIBRARY_VERSION = "0.2.3"


def _library_version() -> str:
    return LIBRARY_VERSION


class Prices:
    """USD per token of each model, per prompt-size bucket.

    ``overrides``: ``{model: (input, output, cache_read, cache_write)}`` in
    USD per million tokens (config ``usage.prices``; ``cache_read`` and
    ``cache_write`` None: the input price); ``cache_path``: where resolved
    rates are kept between runs (None: not kept). :meth:`cost` is cheap once
    a model's rates are known; the first ask for a model not in the cache
    imports the library (about a second, once per process)."""

    #: Resolve rates in a child process while the library is not imported
    #: here (the daemon: genai-prices and its data hold about 25 MB for good
    #: once imported; a one-shot command imports it in process).
    isolate = False

    def __init__(self, overrides: dict | None = None, cache_path: str | None = None) -> None:
        self.overrides = overrides or {}
        self.cache_path = cache_path
        self._rates: dict = {}  # model -> None (no price) or [bucket rates (in, out, cr, cw, cw1h)]
        self._lock = threading.Lock()
        self._cache_key = None
        self._dirty = False
        if cache_path:
            self._load_cache()

    # the cache file: {"key": "<library version>", "models": {model: null | [[5 rates] per bucket]}}
    def _key(self) -> str:
        if self._cache_key is None:
            self._cache_key = _library_version()
        return self._cache_key

    def _load_cache(self) -> None:
        try:
            with open(self.cache_path, "rb") as f:
                data = json.loads(f.read(1 << 22))
        except (OSError, ValueError):
            return
        if not isinstance(data, dict) or data.get("key") != self._key() or not isinstance(data.get("models"), dict):
            return
        for model, rates in data["models"].items():
            if rates is None or (isinstance(rates, list) and len(rates) == len(EDGES) + 1
                                 and all(isinstance(r, list) and len(r) == 5 for r in rates)):
                self._rates[model] = rates

    def save(self) -> None:
        """Write the rates resolved from the library to ``cache_path`` (when
        something new was resolved; errors are ignored: it is a cache)."""
        if not (self.cache_path and self._dirty):
            return
        with self._lock:
            models = {m: r for m, r in self._rates.items() if m not in self.overrides}
            self._dirty = False
        try:
            os.makedirs(os.path.dirname(self.cache_path), exist_ok=True)
            tmp = f"{self.cache_path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump({"key": self._key(), "models": models}, f)
            os.replace(tmp, self.cache_path)
        except OSError:
            pass

    def rates(self, model: str):
        """The model's rates per bucket (``[(input, output, cache_read,
        cache_write, cache_write_1h) USD per token]``), or None: no price."""
        try:
            return self._rates[model]
        except KeyError:
            pass
        with self._lock:
            if model not in self._rates:
                self._rates[model] = self._resolve(model)
                self._dirty = self._dirty or model not in self.overrides
            return self._rates[model]

    def cost(self, model: str, bucket: int, vals) -> float | None:
        """USD of ``vals`` (a :class:`Tally` count list) of ``model`` in
        prompt-size ``bucket``; None when the model has no price."""
        rates = self.rates(model)
        if rates is None:
            return None
        r = rates[bucket]
        h1 = vals[5]
        return vals[0] * r[0] + vals[1] * r[1] + vals[2] * r[2] + (vals[3] - h1) * r[3] + h1 * r[4]

    def prefetch(self, models) -> None:
        """Resolve the rates of ``models`` not known yet at once (with
        :attr:`isolate`: in one child process for all of them)."""
        with self._lock:
            want = sorted({m for m in models if m not in self._rates and m not in self.overrides})
            if not want:
                return
            if self.isolate and "genai_prices" not in sys.modules:
                try:
                    got = _from_child(want)
                except Exception as e:  # priced one by one at first use instead
                    log.warning("prices not resolved in a child process: %s", e)
                    return
                self._rates.update((m, got.get(m)) for m in want)
                self._dirty = True
                return
        for m in want:
            self.rates(m)

    def _resolve(self, model: str):
        own = self.overrides.get(model)
        if own is not None:
            i, o, cr, cw = own
            cr = i if cr is None else cr
            cw = i if cw is None else cw
            row = [i / 1e6, o / 1e6, cr / 1e6, cw / 1e6, cw / 1e6]
            return [row] * (len(EDGES) + 1)
        try:
            if self.isolate and "genai_prices" not in sys.modules:
                return _from_child([model]).get(model)
            return _from_library(model)
        except Exception as e:  # a library fault is no cost, never a crash
            log.warning("no price for model %r: %s", model, e)
            return None


_CHILD = ("import importlib, json, sys; m = importlib.import_module(sys.argv[1]); "
          "print(json.dumps({k: m._from_library(k) for k in sys.argv[2:]}))")


def _from_child(models: list[str], timeout: float = 60.0) -> dict:
    """``{model: _from_library(model)}`` computed by a child interpreter
    (this module by the same name and ``sys.path``), so that this process
    never holds the library. Raises ``OSError``, ``subprocess`` errors or
    ``ValueError`` when the child fails."""
    import subprocess

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", _CHILD, __name__, *models], capture_output=True, timeout=timeout,
                         env=env, check=True, stdin=subprocess.DEVNULL).stdout
    got = json.loads(out)
    if not isinstance(got, dict):
        raise ValueError("not a mapping")
    return got


def _from_library(model: str):
    """Rates per bucket from genai-prices (None: it has no such model).
    ``<model>-fast`` (Claude's fast mode, named so as ccusage does) takes the
    model's ``speed: fast`` prices. Each rate is the library's own price of
    a usage in the bucket's tier, divided by its tokens."""
    from datetime import datetime, timezone
    from decimal import Decimal

    from genai_prices import Usage, data_snapshot

    context = None
    ref = model
    if model.endswith("-fast"):
        ref, context = model[: -len("-fast")], {"speed": "fast"}
    snap = data_snapshot.get_snapshot()
    try:
        provider, info = snap.find_provider_model(ref, None, None, None)
    except LookupError:
        return None
    now = datetime.now(timezone.utc)
    mp = info.get_prices(now, context)
    out = []
    n = 1000
    for b in range(len(EDGES) + 1):
        p = 1 if b == 0 else EDGES[b - 1] + 1  # a prompt of this bucket's tier
        def price(**kw) -> Decimal:
            return mp.calc_price(Usage(**kw))["total_price"]
        base = price(input_tokens=p)
        r_in = base / p
        r_out = (price(input_tokens=p, output_tokens=n) - base) / n
        r_cr = price(input_tokens=p, cache_read_tokens=p) / p
        r_cw = price(input_tokens=p, cache_write_tokens=p) / p
        try:
            r_h1 = price(input_tokens=p, cache_write_tokens=p, cache_write_1h_tokens=p) / p
        except Exception:  # a model without 1 h cache writes
            r_h1 = r_cw
        out.append([float(r_in), float(r_out), float(r_cr), float(r_cw), float(r_h1)])
    return out


def prices_from_config(cfg) -> Prices:
    """The :class:`Prices` of a configuration: ``usage.prices`` overrides,
    the rate cache in ``state_dir``."""
    own = {m: (p.input, p.output, p.cache_read, p.cache_write) for m, p in cfg.usage.prices.items()}
    try:
        path = os.path.join(cfg.resolved_state_dir(), "price-cache.json")
    except Exception:
        path = None
    return Prices(own, path)


class UsageCollector:
    """Scrape-time usage series of ``store`` (a :class:`~.store.SessionStore`):
    ``coding_agent_tokens_total{provider,model,type}``,
    ``coding_agent_cost_usd_total{provider,model}``,
    ``coding_agent_unpriced_tokens_total{provider,model}`` (the per-session
    ``coding_agent_session_cost_usd`` comes with the other per-session series,
    :class:`~.metrics.SessionCollector`)."""

    def __init__(self, store) -> None:
        self._store = store

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        acct = self._store.usage
        tokens = CounterMetricFamily("coding_agent_tokens", "Tokens of the agents' API responses, each response "
                                     "counted once, by type (input: not cached; reasoning: part of output).",
                                     labels=["provider", "model", "type"])
        cost = CounterMetricFamily("coding_agent_cost_usd", "Cost of the responses counted in coding_agent_tokens "
                                   "at the pinned price data (USD).", labels=["provider", "model"])
        unpriced = CounterMetricFamily("coding_agent_unpriced_tokens", "Tokens of models with no known price "
                                       "(no cost counted).", labels=["provider", "model"])
        for (prov, model), row in sorted(acct.totals().items()):
            for t, v in zip(TYPES, row):
                tokens.add_metric([prov, model, t], v)
            cost.add_metric([prov, model], row[5])
            unpriced.add_metric([prov, model], row[6])
        yield tokens
        yield cost
        yield unpriced
        acct.prices.save()
