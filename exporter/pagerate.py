"""The per-session page rate limit (``alerts.max_pages_per_session`` per
``alerts.page_rate_window_seconds``): the recent page times of each key, kept
in a small state file so that a restart does not reset the limit."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from .persist import load_json, save_json

log = logging.getLogger("coding_agent_exporter.alerts")  # (its lines are the alerter's)

#: Keys kept at most before those paged outside the window are forgotten.
MAX_KEYS = 10_000


class PageRate:
    """At most ``limit`` pages per ``window`` seconds under one key (a
    ``(provider, session id)`` tuple of strings; 0 for either: no limit).
    ``path``: the JSON file the page times are kept in (``{"version": 1,
    "rates": {"<key parts joined by tab>": [Unix seconds, ...]}}``); read at
    construction, unusable entries left out."""

    def __init__(self, path: Path, limit: int, window: float):
        self.path, self.limit, self.window = path, limit, window
        self._times: dict[tuple, list[float]] = self._load()

    def _load(self) -> dict[tuple, list[float]]:
        data = load_json(self.path, "page rate file")
        rates = data.get("rates") if isinstance(data, dict) else None
        now, window = time.time(), self.window
        out = {}
        for key, times in (rates.items() if isinstance(rates, dict) else ()):
            if isinstance(key, str) and isinstance(times, list):
                kept = [t for t in times if type(t) in (int, float) and 0 <= now - t < window]
                if kept:
                    out[tuple(key.split("\t"))] = kept[-max(1, self.limit):]
        return out

    def take(self, key: tuple, now: float) -> bool:
        """One more page under ``key`` at ``now`` (Unix seconds): True (and
        counted) while within the limit, else False (not counted)."""
        if not self.limit or not self.window:
            return True
        rates, window = self._times, self.window
        times = [t for t in rates.get(key, ()) if now - t < window]
        if len(rates) > MAX_KEYS:  # keys paged long ago: forgotten
            for k in [k for k, v in rates.items() if not v or now - v[-1] >= window]:
                del rates[k]
        if len(times) >= self.limit:
            rates[key] = times
            return False
        rates[key] = times + [now]
        return True

    def save(self) -> None:
        """Write the page times still within the window (atomically; a
        failure is logged, never raised)."""
        now, window = time.time(), self.window
        data = {"version": 1, "rates": {"\t".join(map(str, k)): v for k, v in list(self._times.items())
                                        if v and now - v[-1] < window}}
        try:
            save_json(self.path, data)
        except OSError as e:
            log.error("cannot write the page rate file %s: %s", self.path, e.strerror or e)
