"""Alerts: exactly one Apprise page per validated main-thread completion,
and one per wait for the user.

Flow: a session transition into ``completed``/``error``/``stalled``/
``waiting`` that was read live (not backfill) and is younger than
``max_age_seconds`` becomes a *pending* alert keyed by (kind, provider,
session, turn) — for ``waiting`` by the wait, since one turn may wait
several times. After ``settle_seconds`` it
is sent only if it is still the session's current state. Delivery runs in a
worker thread, one Apprise object per target so that a retry (exponential
backoff) reaches only the targets that failed. The ledger in ``state_dir``
(written atomically) records pending and sent alerts, so restarts, re-reads,
duplicated file events and replayed history never page twice, and an alert
pending at a crash is sent after the restart.

Privacy: titles name the agent and project only; the assistant's last
message goes into the body only with ``alerts.include_excerpt: true``; target
URLs are logged in Apprise's privacy form (no secrets).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .config import Config, ConfigError
from .courier import Courier
from .gate import Gate
from .metrics import Metrics
from .message import ERROR_TITLES, WAIT_TITLES, Message  # noqa: F401  (the titles re-exported)
from .names import ALERT_KINDS
from .pagerate import PageRate
from .persist import load_json, save_json
from .pager import Pager, Pending, Rules, alert_key  # noqa: F401  (alert_key re-exported)
from .store import Session, Transition
from .suppress import DIGEST_FILE, MUTES_FILE, Digest, Mutes, Noise

if TYPE_CHECKING:  # imported where a target is built: start-up without alerts does not load it
    import apprise

log = logging.getLogger(__name__)

LEDGER_FILE = "alerts-ledger.json"
#: Times of each session's recent pages (``alerts.max_pages_per_session``),
#: kept across restarts.
RATES_FILE = "page-rates.json"
LEDGER_KEEP_SECONDS = 30 * 86400
LEDGER_MAX_ENTRIES = 50_000
#: Entries of Alertmanager pages (keys ``alertmanager:…``) kept, apart from
#: the turn ends' ``LEDGER_MAX_ENTRIES``: a flood of alerts cannot push out
#: a turn end still owed.
AM_LEDGER_MAX_ENTRIES = 20_000
AM_KEY_PREFIX = "alertmanager:"


KINDS = ALERT_KINDS


@dataclass
class Target:
    """One configured notification service."""

    name: str  # privacy-safe URL, for logs and test-alert output
    tags: frozenset
    apobj: apprise.Apprise

    def wants(self, tag: str) -> bool:
        return not self.tags or tag in self.tags or "always" in self.tags


def _split_tags(entry: str) -> tuple[list[str], str]:
    """``"error,completed=json://host"`` → (["error", "completed"], url);
    a plain URL has no tags (it gets every kind)."""
    eq, scheme = entry.find("="), entry.find("://")
    if 0 < eq and (scheme < 0 or eq < scheme):
        tags = [t.strip() for t in entry[:eq].replace(" ", ",").split(",") if t.strip()]
        return tags, entry[eq + 1:].strip()
    return [], entry.strip()


def _unusable(plugin) -> str | None:
    """Why an Apprise URL that parsed can never deliver, or None: a port out
    of range (Apprise keeps ``json://host:99999``), an ntfy URL with no topic
    (``ntfys://``: Apprise's ntfy plugin then sends nothing)."""
    port = getattr(plugin, "port", None)
    if isinstance(port, int) and not 0 < port < 65536:
        return f"port {port} is out of range (1-65535)"
    if getattr(plugin, "service_name", "") == "ntfy" and not getattr(plugin, "topics", True):
        return "an ntfy URL names no topic (ntfys://ntfy.sh/<topic> or ntfys://<topic>)"
    return None


def build_targets(cfg: Config) -> list[Target]:
    """Targets from ``alerts.urls``, ``alerts.config_file`` and the
    ``alerts.url_env`` environment variable. Raises ``ValueError`` naming the
    key of every URL Apprise does not understand, one per line (the URL
    itself is not shown)."""
    entries = list(cfg.alerts.urls)
    env = os.environ.get(cfg.alerts.url_env, "") if cfg.alerts.url_env else ""
    entries += [e for e in env.split() if e]
    if not entries and not cfg.alerts.config_file:
        return []
    import apprise  # about 0.15 s of imports: only where alerts are configured

    plugins, problems = [], []  # every problem at once (check-config lists them all), one per line
    for i, entry in enumerate(entries):
        tags, url = _split_tags(entry)
        plugin = apprise.Apprise.instantiate(url, tag=tags or None)
        why = "not an Apprise URL that this installation supports" if plugin is None else _unusable(plugin)
        if why:
            where = f"alerts.urls[{i}]" if i < len(cfg.alerts.urls) else \
                f"${cfg.alerts.url_env} (entry {i - len(cfg.alerts.urls) + 1})"
            problems.append(f"{where}: {why}")
            continue
        plugins.append(plugin)
    if cfg.alerts.config_file:
        path = Path(cfg.alerts.config_file).expanduser()
        if not path.is_file():
            problems.append(f"alerts.config_file: {path}: no such file")
    if problems:
        raise ValueError("\n".join(problems))
    if cfg.alerts.config_file:
        ac = apprise.AppriseConfig()
        ac.add(str(path))
        holder = apprise.Apprise()
        holder.add(ac)
        plugins.extend(list(holder))
    targets = []
    for plugin in plugins:
        ap = apprise.Apprise()
        ap.add(plugin)
        targets.append(Target(plugin.url(privacy=True), frozenset(plugin.tags or ()), ap))
    return targets


def describe_targets(cfg: Config, targets: list[Target] | None = None) -> str:
    """One line saying where alerts go (privacy-safe), or that they are off;
    ``targets``: those :func:`build_targets` made already (else built here)."""
    if targets is None:
        try:
            targets = build_targets(cfg)
        except ValueError as e:
            return f"alerts: configuration error: {e}"
    if not targets:
        return "alerts: off (no Apprise URLs configured)"
    kinds = [k for k in KINDS if getattr(cfg.alerts.kinds, k)]
    return f"alerts: {', '.join(kinds) or 'no kinds'} to {len(targets)} target(s): " + \
        ", ".join(t.name for t in targets)


def test_alert(cfg: Config) -> int:
    """Send a test notification to every target; print one line per target.
    Returns 0 when all succeeded, 1 otherwise (or when none is configured)."""
    try:
        targets = build_targets(cfg)
    except ValueError as e:
        print(f"coding-agent-exporter: configuration error: {e}")
        return 2
    if not targets:
        print("no Apprise URLs configured (alerts.urls, alerts.config_file or "
              f"${cfg.alerts.url_env}); nothing sent")
        return 1
    import apprise

    failed = 0
    ap_log = logging.getLogger("apprise")
    for t in targets:
        propagate, ap_log.propagate = ap_log.propagate, False  # the reason is printed below, once
        try:
            with apprise.LogCapture(level=logging.WARNING, fmt="%(message)s") as why:
                res = t.apobj.notify(body="This is a test notification from coding-agent-exporter.",
                                     title="coding-agent-exporter · test")
        finally:
            ap_log.propagate = propagate
        ok = bool(res)
        failed += not ok
        print(f"{'ok    ' if ok else 'FAILED'} {t.name}")
        if not ok:
            for line in why.getvalue().splitlines() or ["Apprise gave no reason"]:
                print(f"       {line}")
    return 1 if failed else 0


class Alerter:
    """The alerts, wired: the :class:`~.pager.Pager` decides which pages
    are owed, the :class:`~.gate.Gate` which of the due ones go out now and
    to which tags, the :class:`~.courier.Courier` delivers them in its own
    thread; this class keeps the ledger file and takes pages made elsewhere
    (:meth:`page`). ``observe``/``tick`` run on the reader thread; the
    pager's state is guarded by one lock."""

    def __init__(self, cfg: Config, metrics: Metrics, targets: list[Target]):
        self.cfg = cfg
        self.a = cfg.alerts
        self.metrics = metrics
        self.targets = targets
        self.state_dir = cfg.resolved_state_dir()
        self.ledger_path = self.state_dir / LEDGER_FILE
        self.pager = Pager(Rules.from_config(cfg.alerts), self._load(), self._fields)
        #: The noise controls (:mod:`.suppress`): routes, mutes, min_turn, presence, quiet hours.
        self.noise = Noise(cfg.alerts, Mutes(self.state_dir / MUTES_FILE))
        self.digest = Digest(self.state_dir / DIGEST_FILE)
        #: A page's title and body (:mod:`.message`).
        self.message = Message(cfg)
        #: ``lookup(provider, session_id)`` → the store's :class:`Session` or None
        #: (``run`` sets the store's; the digest and the mute API read sessions through it).
        self.lookup = lambda provider, session_id: None
        #: (provider, session id) → its recent pages (``alerts.max_pages_per_session``).
        self.rates = PageRate(self.state_dir / RATES_FILE, self.a.max_pages_per_session,
                              self.a.page_rate_window_seconds)
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()
        self.gate = Gate(cfg, metrics, self.pager, self._lock, self._save, self.noise, self.digest, self.rates,
                         lambda provider, session_id: self.lookup(provider, session_id), self.page)
        self.courier = Courier(self.a.retry, metrics, targets, self.pager, self._lock, self._save, self.message,
                               self.gate.tags_of)
        #: Keys of :meth:`page`'s pages the previous run left pending, taken
        #: at load (before any new page can be added), queued by :meth:`start`.
        self._left_pending = [k for k, v in self.pager.ledger.items()
                              if v.get("status") == "pending" and isinstance(v.get("page"), dict)]

    @property
    def ledger(self) -> dict[str, dict]:
        return self.pager.ledger

    @property
    def pending(self) -> dict:
        return self.pager.pending

    @classmethod
    def from_config(cls, cfg: Config, metrics: Metrics) -> Alerter:
        """Build targets and load the ledger. With no URLs, alerts are off
        (logged). Raises :class:`ConfigError` for a URL Apprise does not
        understand or a missing ``alerts.config_file``: better to stop at
        start than to page nobody."""
        try:
            targets = build_targets(cfg)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if not targets:
            log.info("alerts off: no Apprise URLs configured (alerts.urls, alerts.config_file or $%s)",
                     cfg.alerts.url_env)
        else:
            log.info("%s", describe_targets(cfg, targets))
        return cls(cfg, metrics, targets)

    def last_sent(self) -> tuple[float, str] | None:
        """``(Unix seconds, kind)`` of the last page this run delivered (the
        one ``coding_agent_alerts_total`` counted last, reminders included),
        or None. Read-only; safe from any thread."""
        return self.courier.last_sent

    def owed(self) -> dict[tuple[str, str], frozenset]:
        """See :meth:`Pager.owed` (the store keeps these turn ends as news)."""
        with self._lock:
            return self.pager.owed()

    # -- ledger ------------------------------------------------------------
    def _load(self) -> dict:
        data = load_json(self.ledger_path, "alert ledger")
        entries = data.get("alerts") if isinstance(data, dict) else None
        if not isinstance(entries, dict):
            return {}
        ledger = {k: v for k, v in entries.items() if isinstance(v, dict)
                  and type(v.get("at")) in (int, float) and isinstance(v.get("status"), str)}
        if len(ledger) != len(entries):
            log.warning("the alert ledger %s had %d unusable entries; dropped them", self.ledger_path,
                        len(entries) - len(ledger))
        return ledger

    def _save(self, strict: bool = False, locked: bool = False) -> None:
        """Write the ledger file atomically. ``strict``: raise the ``OSError``
        when it cannot be written (else it is logged); ``locked``: the caller
        holds the save lock already."""
        if locked:
            self._save_unlocked(strict)
            return
        with self._save_lock:  # one writer at a time, so a newer ledger is never overwritten by an older one
            self._save_unlocked(strict)

    def _save_unlocked(self, strict: bool) -> None:
        now = time.time()
        with self._lock:
            items = sorted(self.pager.ledger.items(), key=lambda kv: kv[1].get("at", 0))
            items = [(k, v) for k, v in items if now - v.get("at", now) < LEDGER_KEEP_SECONDS]
            am = [kv for kv in items if kv[0].startswith(AM_KEY_PREFIX)][-AM_LEDGER_MAX_ENTRIES:]
            turns = [kv for kv in items if not kv[0].startswith(AM_KEY_PREFIX)][-LEDGER_MAX_ENTRIES:]
            self.pager.ledger = dict(sorted(am + turns, key=lambda kv: kv[1].get("at", 0)))
            data = {"version": 1, "alerts": dict(self.pager.ledger)}
        try:
            save_json(self.ledger_path, data)
        except OSError as e:
            log.error("cannot write the alert ledger %s: %s", self.ledger_path, e.strerror or e)
            if strict:
                raise

    # -- pages made elsewhere (Alertmanager) ---------------------------------
    def page(self, key: str, kind: str, title: str, body: str, tags: frozenset = frozenset(),
             notify: str = "warning") -> bool:
        """One page of :meth:`page_many` (the same rules); True when new."""
        return self.page_many([(key, kind, title, body, tags, notify, None)])["new"] == 1

    def page_many(self, pages) -> dict[str, int]:
        """Pages made outside the transcripts, one notification's at once:
        ``pages`` is a list of ``(key, kind, title, body, tags, notify,
        rate_key)`` (see :meth:`page`; ``rate_key``: what
        ``alerts.max_pages_per_session`` counts them under, None: not
        limited). The ledger is written once for all of them. A page over
        the rate is kept in the ledger as ``rate_limited`` (its re-sends do
        not page either) and counted on ``coding_agent_alerts_rate_limited_total``.
        Returns ``{"new", "duplicate", "untaken", "rate_limited"}`` counts;
        raises ``OSError`` (nothing kept) when the ledger cannot be written."""
        counts = {"new": 0, "duplicate": 0, "untaken": 0, "rate_limited": 0}
        queued = []
        now = time.time()
        with self._save_lock:  # check, add and write as one: two senders of one key page once
            with self._lock:
                ledger = self.pager.ledger
                added = []
                for key, kind, title, body, tags, notify, rate_key in pages:
                    if key in ledger and ledger[key].get("status") != "failed":
                        self.metrics.alerts_dedup.labels(kind).inc()
                        counts["duplicate"] += 1
                        continue
                    remaining = self.courier.takers(tags)
                    if not remaining:
                        counts["untaken"] += 1
                        continue
                    if rate_key is not None and not self.rates.take(rate_key, now):
                        self.metrics.alerts_rate_limited.labels(kind).inc()
                        counts["rate_limited"] += 1
                        ledger[key] = {"status": "rate_limited", "at": now}
                        added.append(key)
                        continue
                    ledger[key] = {"status": "pending", "at": now,
                                   "page": {"kind": kind, "title": title, "body": body, "tags": sorted(tags),
                                            "notify": notify}}
                    added.append(key)
                    queued.append(Pending(key, kind, None, key, kind, first_seen=now, due=0.0,
                                          remaining=remaining, title=title, body=body, notify=notify))
            if added:
                try:
                    self._save(strict=True, locked=True)
                except OSError:
                    with self._lock:
                        for key in added:
                            self.pager.ledger.pop(key, None)
                    raise
        counts["new"] = len(queued)
        if queued and self.a.max_pages_per_session and any(pg[6] is not None for pg in pages):
            self.rates.save()
        for p in queued:  # not in the pager's pending (the reader thread's): delivery and its retries only
            self.courier.put(p)
        return counts

    def _resume_pages(self) -> None:
        """Queue the pages of :meth:`page` a previous run left pending."""
        with self._lock:
            left = [(k, self.pager.ledger[k]["page"]) for k in self._left_pending
                    if self.pager.ledger.get(k, {}).get("status") == "pending"]
            self._left_pending = []
        for key, pg in left:
            try:
                p = Pending(key, str(pg["kind"]), None, key, str(pg["kind"]), first_seen=time.time(), due=0.0,
                            remaining=self.courier.takers(frozenset(pg.get("tags") or ())), title=str(pg["title"]),
                            body=str(pg["body"]), notify=str(pg.get("notify") or "warning"))
            except (KeyError, TypeError):
                log.warning("the alert ledger's pending page %s is damaged; dropped it", key)
                continue
            if p.remaining:
                log.info("delivering a page left pending by the previous run", extra={"fields": {"key": key}})
                self.courier.put(p)

    # -- reader thread -----------------------------------------------------
    def observe(self, transitions: list[Transition], now: float) -> None:
        """Let the pager consider each transition (see :mod:`.pager`); the
        ledger is saved at once when it changed (a pending page outlives a
        crash)."""
        if not self.targets:
            return
        with self._lock:
            _made, dups, changed = self.pager.observe(transitions, now)
        for kind in dups:
            self.metrics.alerts_dedup.labels(kind).inc()
        if changed:
            self._save()

    def _fields(self, s: Session, unit: str | None, kind: str) -> dict:
        return self.gate.fields(s, unit, kind)

    def next_due_in(self) -> float:
        """Seconds until the next pending alert is due (for the reader loop)."""
        with self._lock:
            due = self.pager.next_due()
        end = self.digest.next_end()
        if end is not None:
            due = end if due is None else min(due, end)
        return 3600.0 if due is None else max(0.0, due - time.time())

    def tick(self, now: float) -> None:
        """Hand due pages and due reminders to delivery, each to the targets
        that take its tag and within the session's page rate; a superseded
        page was dropped by the pager."""
        with self._lock:
            pages = self.pager.due(now)
            if self.pager.remind:
                pages += self.pager.reminders(now)
        for p in pages:
            if self.gate.suppressed(p, now):
                continue
            tags = self.gate.tags_of(p)
            p.remaining = self.courier.takers(tags)
            if not p.remaining:
                with self._lock:
                    self.pager.drop(p)
                if not p.reminder:
                    self.pager.decided(p.session, p.turn, p.kind, f"no target takes the tags {sorted(tags)}")
                continue
            if not self.gate.rate_ok(p, now):
                with self._lock:
                    self.pager.drop(p)
                continue
            if p.reminder:
                with self._lock:
                    self.pager.pending[p.key] = p
            self.courier.put(p)
        if self.digest.held:
            self.gate.send_digests(now)
        self.gate.expire_mutes(now)

    def start(self) -> None:
        """Start delivery (with targets), then send the pages of :meth:`page` a previous run left pending."""
        if self.courier.start():
            self._resume_pages()

    def stop(self) -> None:
        """Stop delivery (see :meth:`.courier.Courier.stop`)."""
        self.courier.stop()
