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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .config import Config, ConfigError
from .metrics import Metrics
from .names import ALERT_KINDS
from .persist import load_json, save_json
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


def unit_of(st) -> str | None:
    """What one page is about: the wait for ``waiting``, else the turn."""
    return st.wait if st.state == "waiting" else st.turn


def alert_key(kind: str, provider: str, session_id: str, turn: str) -> str:
    """The ledger key of one alert: scoped to its session. Record ids are not
    unique across sessions in practice (Claude Code wrote one prompt ``uuid``
    into two live sessions: field case 30), so one session's turn never
    silences another's page. Replayed history (forks, resumed copies) is
    recognised by the provider from the file itself, not here."""
    return f"{kind}:{provider}:{session_id}:{turn}"


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


@dataclass
class Pending:
    key: str
    kind: str
    session: Session
    turn: str
    state: str
    title: str
    body: str
    first_seen: float
    due: float
    since: float | None = None  # record time the state began
    attempt: int = 0
    remaining: list = field(default_factory=list)  # target indexes still to deliver to
    status: object = None  # the Status that made it (evidence for the log)
    superseded: float | None = None  # record time of the first state after it (None: not yet)


class Alerter:
    """Turns session transitions into pages. Thread-safe where it matters:
    ``observe``/``tick`` run on the reader thread, delivery in its own."""

    def __init__(self, cfg: Config, metrics: Metrics, targets: list[Target]):
        self.cfg = cfg
        self.a = cfg.alerts
        self.metrics = metrics
        self.targets = targets
        self.state_dir = cfg.resolved_state_dir()
        self.ledger_path = self.state_dir / LEDGER_FILE
        self.ledger: dict[str, dict] = {}
        self.pending: dict[str, Pending] = {}
        #: Pages of this run that may still get their one reminder
        #: (``alerts.remind_after_seconds``): key → (pending, sent at).
        self._remind: dict[str, tuple[Pending, float]] = {}
        self._last_sent: tuple[float, str] | None = None  # (Unix seconds, kind) of this run's last page
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()
        self._work: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._load()

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

    # -- ledger ------------------------------------------------------------
    def _load(self) -> None:
        data = load_json(self.ledger_path, "alert ledger")
        entries = data.get("alerts") if isinstance(data, dict) else None
        if isinstance(entries, dict):
            self.ledger = {k: v for k, v in entries.items() if isinstance(v, dict)
                           and type(v.get("at")) in (int, float) and isinstance(v.get("status"), str)}
            if len(self.ledger) != len(entries):
                log.warning("the alert ledger %s had %d unusable entries; dropped them", self.ledger_path,
                            len(entries) - len(self.ledger))

    def _save(self) -> None:
        with self._save_lock:  # one writer at a time, so a newer ledger is never overwritten by an older one
            self._save_locked()

    def _save_locked(self) -> None:
        now = time.time()
        with self._lock:
            items = sorted(self.ledger.items(), key=lambda kv: kv[1].get("at", 0))
            items = [(k, v) for k, v in items if now - v.get("at", now) < LEDGER_KEEP_SECONDS]
            items = items[-LEDGER_MAX_ENTRIES:]
            self.ledger = dict(items)
            data = {"version": 1, "alerts": dict(self.ledger)}
        try:
            save_json(self.ledger_path, data)
        except OSError as e:
            log.error("cannot write the alert ledger %s: %s", self.ledger_path, e.strerror or e)

    def owed(self) -> dict[tuple[str, str], frozenset]:
        """Turn ends whose page the ledger says is still owed ("pending": a
        crash or stop came between the decision and the delivery):
        ``{(provider, session id): frozenset of turn keys}`` (completions and
        errors; the store keeps them as news however they are read)."""
        out: dict[tuple[str, str], set] = {}
        for key, v in self.ledger.items():
            prov, sid = v.get("provider"), v.get("session_id")
            if v.get("status") != "pending" or not isinstance(prov, str) or not isinstance(sid, str):
                continue
            for kind in ("completed", "error"):
                head = f"{kind}:{prov}:{sid}:"
                if key.startswith(head):
                    out.setdefault((prov, sid), set()).add(key[len(head):])
        return {k: frozenset(v) for k, v in out.items()}

    # -- reader thread -----------------------------------------------------
    def observe(self, transitions: list[Transition], now: float) -> None:
        """Consider each transition for a page (see the module doc). Every
        decision is logged by :meth:`_decided`."""
        if not self.targets:
            return
        changed = False
        backfill = 0
        for t in transitions:
            st, s = t.new, t.session
            kind = st.state
            if self.pending:
                self._supersede(s, st)
            if kind not in KINDS:
                continue
            unit = unit_of(st)
            if unit is None:
                continue
            if t.old.state == kind and unit_of(t.old) == unit:
                continue  # another marker of the same turn (e.g. end_turn, then turn_duration)
            key = alert_key(kind, s.provider, s.session_id, unit)
            if key in self.pending:
                continue
            entry = self.ledger.get(key)
            wanted = getattr(self.a.kinds, kind) and not s.hidden
            if not st.live and (entry is None or entry.get("status") in ("sent", "seen")):
                # Old at first sight (backfill): not news. Remember the turn, so
                # that re-reading this history never pages it.
                if entry is None and wanted:
                    with self._lock:
                        self.ledger[key] = {"status": "seen", "at": time.time()}
                    changed = True
                backfill += 1
                self._decided(s, unit, kind, "backfill: read as history at start-up", level=logging.DEBUG)
                continue
            if not getattr(self.a.kinds, kind):
                self._decided(s, unit, kind, f"kind off (alerts.kinds.{kind}: false)")
                continue
            if s.hidden:
                self._decided(s, unit, kind, "subagent: a subagent rollout whose parent session is unknown")
                continue
            if entry is not None:
                if entry.get("status") in ("sent", "seen"):
                    self.metrics.alerts_dedup.labels(kind).inc()
                    self._decided(s, unit, kind, "already sent" if entry.get("status") == "sent"
                                  else "already seen (this turn was history at an earlier start)")
                    continue
                # pending at a crash or stop: deliver now that the state is confirmed
            elif self.a.max_age_seconds and st.since is not None and now - st.since > self.a.max_age_seconds:
                self._decided(s, unit, kind, f"older than alerts.max_age_seconds ({now - st.since:.0f} s > "
                              f"{self.a.max_age_seconds:g} s)")
                continue
            title, body = self._message(s, st)
            p = Pending(key, kind, s, unit, st.state, title, body, first_seen=now,
                        due=now + self.a.settle_seconds, since=st.since, status=st)
            self.pending[key] = p
            log.debug("page pending for %g s (alerts.settle_seconds)", self.a.settle_seconds,
                      extra={"fields": self._fields(s, unit, kind)})
            with self._lock:
                self.ledger[key] = {"status": "pending", "at": time.time(), "provider": s.provider,
                                    "session_id": s.session_id}
            changed = True
        if backfill:
            log.info("not paging %d turn end(s) read as history at start-up (backfill); "
                     "--log.level debug names them", backfill)
        if changed:
            self._save()

    def _fields(self, s: Session, unit: str | None, kind: str) -> dict:
        return {"kind": kind, "provider": s.provider, "session_id": s.session_id,
                "project": project_label(s.cwd, self.cfg.metrics.project_label), "turn": unit}

    def _decided(self, s: Session, unit: str | None, kind: str, why: str | None, level: int = logging.INFO,
                 **evidence) -> None:
        """Log one page decision: ``page sent`` (``why`` None) with its
        evidence, or ``page not sent`` with the reason. Names provider,
        session id, project label, kind and turn key (``unit``: the wait for
        ``waiting``); never transcript text."""
        fields = self._fields(s, unit, kind)
        if why is None:
            fields.update({k: v for k, v in evidence.items() if v is not None})
        else:
            fields["reason"] = why
        log.log(level, "page sent" if why is None else "page not sent", extra={"fields": fields})

    def next_due_in(self) -> float:
        """Seconds until the next pending alert is due (for the reader loop)."""
        dues = [p.due for p in list(self.pending.values()) if not p.remaining]
        if not dues:
            return 3600.0
        return max(0.0, min(dues) - time.time())

    def tick(self, now: float) -> None:
        """Hand due alerts whose session still shows that state to delivery;
        drop superseded ones; queue due reminders."""
        if self._remind:
            self._reminders(now)
        for key, p in list(self.pending.items()):
            if p.due > now or p.remaining:
                continue
            cur = p.session.status
            if (cur.state != p.state or unit_of(cur) != p.turn) and not self._stood(p, cur):
                del self.pending[key]
                with self._lock:
                    self.ledger.pop(key, None)
                self._decided(p.session, p.turn, p.kind,
                              f"superseded within alerts.settle_seconds (now {cur.state})")
                continue
            tag = self.a.tags.get(p.kind, p.kind)
            p.remaining = [i for i, t in enumerate(self.targets) if t.wants(tag)]
            if not p.remaining:
                del self.pending[key]
                self._decided(p.session, p.turn, p.kind, f"no target takes the tag {tag!r}")
                continue
            self._work.put(p)

    def _reminders(self, now: float) -> None:
        """One reminder for a page whose session still shows the same state
        and turn (or wait) ``alerts.remind_after_seconds`` after it was sent:
        still waiting, or still your turn with no new prompt."""
        with self._lock:
            items = list(self._remind.items())
        for key, (p, sent_at) in items:
            cur = p.session.status
            if cur.state != p.state or unit_of(cur) != p.turn:
                with self._lock:
                    self._remind.pop(key, None)
                continue
            if now - sent_at < self.a.remind_after_seconds:
                continue
            with self._lock:
                self._remind.pop(key, None)
            r = Pending("remind:" + key, p.kind, p.session, p.turn, p.state, "Reminder: " + p.title, p.body,
                        first_seen=now, due=now, since=cur.since)
            r.remaining = [i for i, t in enumerate(self.targets) if t.wants(self.a.tags.get(p.kind, p.kind))]
            if r.remaining:
                self.pending[r.key] = r
                self._work.put(r)

    def _supersede(self, s: Session, st) -> None:
        """Note on ``s``'s pending pages the record time of the first state
        that followed them (the next turn's start, when several states
        passed in one read)."""
        for p in self.pending.values():
            if p.session is s and p.superseded is None and (st.state != p.state or unit_of(st) != p.turn):
                p.superseded = st.since

    def _stood(self, p: Pending, cur) -> bool:
        """A completion or error superseded before it settled on our clock
        still stood for the settle time in record time when what superseded
        it was written at least ``settle_seconds`` later (a backlog read at
        once, or a transcript appended faster than it was written)."""
        after = p.superseded if p.superseded is not None else cur.since
        if p.kind == "stalled" or p.since is None or after is None or unit_of(cur) == p.turn:
            return False
        return after - p.since >= self.a.settle_seconds

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
                    self._decided(p.session, p.turn, p.kind,
                                  f"delivery failed {p.attempt} times (alerts.retry.attempts)", level=logging.ERROR)
                    self.pending.pop(p.key, None)
                    with self._lock:
                        self.ledger[p.key] = {**self.ledger.get(p.key, {}), "status": "failed", "at": time.time()}
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
        still = []
        for i in p.remaining:
            target = self.targets[i]
            res = target.apobj.notify(body=p.body, title=p.title, notify_type=notify_type)
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
            self.pending.pop(p.key, None)
            with self._lock:
                self.ledger[p.key] = {**self.ledger.get(p.key, {}), "status": "sent", "at": now}
            self._save()
            st = p.status or p.session.status
            self._decided(p.session, p.turn, p.kind, None, tag=tag, evidence=st.evidence, detail=st.detail,
                          error_kind=st.error_kind, duration_seconds=None if st.duration is None
                          else round(st.duration, 1), targets=sum(t.wants(tag) for t in self.targets),
                          latency_seconds=round(now - p.first_seen, 3),
                          reminder=True if p.key.startswith("remind:") else None)
            if self.a.remind_after_seconds and p.kind in ("completed", "waiting") \
                    and not p.key.startswith("remind:"):
                with self._lock:
                    self._remind[p.key] = (p, now)

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
