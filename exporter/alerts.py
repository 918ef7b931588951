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
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .config import Config, ConfigError
from .metrics import Metrics
from .names import ALERT_KINDS
from .persist import load_json, save_json
from .pager import Pager, Pending, Rules, alert_key, unit_of  # noqa: F401  (alert_key, unit_of re-exported)
from .store import PROVIDER_MODULES, Session, Transition, project_label

if TYPE_CHECKING:  # imported where a target is built: start-up without alerts does not load it
    import apprise

log = logging.getLogger(__name__)

LEDGER_FILE = "alerts-ledger.json"
LEDGER_KEEP_SECONDS = 30 * 86400
LEDGER_MAX_ENTRIES = 50_000


#: What a page says the agent waits for, by wait reason.
WAIT_TITLES = {"permission": "needs your approval", "question": "asks you a question",
               "plan": "has a plan for you to approve", "elicitation": "needs your input"}
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


def build_targets(cfg: Config) -> list[Target]:
    """Targets from ``alerts.urls``, ``alerts.config_file`` and the
    ``alerts.url_env`` environment variable. Raises ``ValueError`` naming the
    key for a URL Apprise does not understand (the URL itself is not shown)."""
    entries = list(cfg.alerts.urls)
    env = os.environ.get(cfg.alerts.url_env, "") if cfg.alerts.url_env else ""
    entries += [e for e in env.split() if e]
    if not entries and not cfg.alerts.config_file:
        return []
    import apprise  # about 0.15 s of imports: only where alerts are configured

    plugins = []
    for i, entry in enumerate(entries):
        tags, url = _split_tags(entry)
        plugin = apprise.Apprise.instantiate(url, tag=tags or None)
        if plugin is None:
            where = f"alerts.urls[{i}]" if i < len(cfg.alerts.urls) else f"${cfg.alerts.url_env}"
            raise ValueError(f"{where}: not an Apprise URL that this installation supports")
        plugins.append(plugin)
    if cfg.alerts.config_file:
        path = Path(cfg.alerts.config_file).expanduser()
        if not path.is_file():
            raise ValueError(f"alerts.config_file: {path}: no such file")
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


def describe_targets(cfg: Config) -> str:
    """One line saying where alerts go (privacy-safe), or that they are off."""
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


def _fmt_duration(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h {m}m {s}s" if h else (f"{m}m {s}s" if m else f"{s}s")


class Alerter:
    """Delivers what the :class:`~.pager.Pager` decides: targets, the
    delivery thread, retries with backoff, message text, and the ledger file.
    ``observe``/``tick`` run on the reader thread, delivery in its own; the
    pager's state is guarded by one lock."""

    def __init__(self, cfg: Config, metrics: Metrics, targets: list[Target]):
        self.cfg = cfg
        self.a = cfg.alerts
        self.metrics = metrics
        self.targets = targets
        self.state_dir = cfg.resolved_state_dir()
        self.ledger_path = self.state_dir / LEDGER_FILE
        self.pager = Pager(Rules.from_config(cfg.alerts), self._load(), self._fields)
        self._last_sent: tuple[float, str] | None = None  # (Unix seconds, kind) of this run's last page
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()
        self._work: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

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
            log.info("%s", describe_targets(cfg))
        return cls(cfg, metrics, targets)

    def last_sent(self) -> tuple[float, str] | None:
        """``(Unix seconds, kind)`` of the last page this run delivered (the
        one ``coding_agent_alerts_total`` counted last, reminders included),
        or None. Read-only; safe from any thread."""
        return self._last_sent

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

    def _save(self) -> None:
        with self._save_lock:  # one writer at a time, so a newer ledger is never overwritten by an older one
            now = time.time()
            with self._lock:
                items = sorted(self.pager.ledger.items(), key=lambda kv: kv[1].get("at", 0))
                items = [(k, v) for k, v in items if now - v.get("at", now) < LEDGER_KEEP_SECONDS]
                self.pager.ledger = dict(items[-LEDGER_MAX_ENTRIES:])
                data = {"version": 1, "alerts": dict(self.pager.ledger)}
            try:
                save_json(self.ledger_path, data)
            except OSError as e:
                log.error("cannot write the alert ledger %s: %s", self.ledger_path, e.strerror or e)

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
        return {"kind": kind, "provider": s.provider, "session_id": s.session_id,
                "project": project_label(s.cwd, self.cfg.metrics.project_label), "turn": unit}

    def next_due_in(self) -> float:
        """Seconds until the next pending alert is due (for the reader loop)."""
        with self._lock:
            due = self.pager.next_due()
        return 3600.0 if due is None else max(0.0, due - time.time())

    def tick(self, now: float) -> None:
        """Hand due pages and due reminders to delivery, each to the targets
        that take its tag; a superseded page was dropped by the pager."""
        with self._lock:
            pages = self.pager.due(now)
            if self.pager.remind:
                pages += self.pager.reminders(now)
        for p in pages:
            tag = self.a.tags.get(p.kind, p.kind)
            p.remaining = [i for i, t in enumerate(self.targets) if t.wants(tag)]
            if not p.remaining:
                with self._lock:
                    self.pager.drop(p)
                if not p.reminder:
                    self.pager.decided(p.session, p.turn, p.kind, f"no target takes the tag {tag!r}")
                continue
            if p.reminder:
                with self._lock:
                    self.pager.pending[p.key] = p
            self._work.put(p)

    # -- delivery thread ---------------------------------------------------
    def start(self) -> None:
        if self.targets and self._thread is None:
            self._thread = threading.Thread(target=self._deliver_loop, name="alerts", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._work.put(None)
        if self._thread:
            self._thread.join(timeout=10)

    def _deliver_loop(self) -> None:
        retry = self.a.retry
        while not self._stop.is_set():
            p = self._work.get()
            if p is None:
                return
            try:
                self._deliver(p)
            except Exception:  # pragma: no cover - never let delivery die
                log.exception("alert delivery failed unexpectedly")
            if p.remaining:
                p.attempt += 1
                if p.attempt >= retry.attempts:
                    self.pager.decided(p.session, p.turn, p.kind,
                                       f"delivery failed {p.attempt} times (alerts.retry.attempts)",
                                       level=logging.ERROR)
                    with self._lock:
                        self.pager.failed(p, time.time())
                    self._save()
                    continue
                delay = min(retry.max_backoff_seconds, retry.initial_backoff_seconds * 2 ** (p.attempt - 1))
                log.warning("%s alert delivery failed for %d target(s); retrying in %.1f s", p.kind,
                            len(p.remaining), delay)
                threading.Timer(delay, self._work.put, args=(p,)).start()

    def _deliver(self, p: Pending) -> None:
        import apprise

        tag = self.a.tags.get(p.kind, p.kind)
        notify_type = apprise.NotifyType.FAILURE if p.kind == "error" else (
            apprise.NotifyType.WARNING if p.kind in ("stalled", "waiting") else apprise.NotifyType.SUCCESS)
        st = p.status or p.session.status
        title, body = self._message(p.session, st)
        if p.reminder:
            title = "Reminder: " + title
        still = []
        for i in p.remaining:
            target = self.targets[i]
            res = target.apobj.notify(body=body, title=title, notify_type=notify_type)
            if res:
                continue
            still.append(i)
            self.metrics.alerts_failed.labels(p.kind).inc()
            log.warning("could not deliver a %s alert to %s", p.kind, target.name)
        p.remaining = still
        if not still:
            now = time.time()
            self.metrics.alerts.labels(p.kind).inc()
            self._last_sent = (now, p.kind)
            self.metrics.alert_latency.labels(p.kind).observe(max(0.0, now - p.first_seen))
            with self._lock:
                self.pager.sent(p, now)
            if not p.reminder:
                self._save()
            self.pager.decided(p.session, p.turn, p.kind, None, tag=tag, evidence=st.evidence, detail=st.detail,
                               error_kind=st.error_kind, duration_seconds=None if st.duration is None
                               else round(st.duration, 1), targets=sum(t.wants(tag) for t in self.targets),
                               latency_seconds=round(now - p.first_seen, 3), reminder=True if p.reminder else None)

    # -- message -----------------------------------------------------------
    def _message(self, s: Session, st) -> tuple[str, str]:
        mod = PROVIDER_MODULES[s.provider]
        project = project_label(s.cwd, self.cfg.metrics.project_label) or "session"
        if st.state == "completed":
            title = f"{mod.LABEL} · {project}: your turn"
        elif st.state == "error":
            title = f"{mod.LABEL} · {project}: stopped on {(st.error_kind or 'error').replace('_', ' ')}"
        elif st.state == "waiting":
            title = f"{mod.LABEL} · {project}: {WAIT_TITLES.get(st.reason, 'waits for you')}"
            if st.tool and st.reason == "permission":
                title += f" ({st.tool})"
        else:
            title = f"{mod.LABEL} · {project}: stalled"
        lines = [f"Session: {s.session_id}"]
        dur = _fmt_duration(st.duration)
        if dur:
            lines.append(f"Turn took: {dur}")
        if st.state == "completed":
            lines.append(f"Detected: {st.evidence} ({st.detail})")
        elif st.state == "error":
            lines.append(f"Error: {st.error_kind}")
        elif st.state == "waiting":
            lines.append(f"Waiting for: {st.reason}" + (f" ({st.tool})" if st.tool else ""))
        if self.a.include_excerpt and s.reducer.last_text:
            text = s.reducer.last_text.strip()
            n = self.a.excerpt_chars
            lines.append("")
            lines.append(text if len(text) <= n else text[: max(0, n - 1)] + "…")
        return title, "\n".join(lines)
