"""What a due page meets on its way out, after the pager decided it is owed:
the noise controls (:mod:`.suppress`: routes and their Apprise tags, mutes,
``min_turn``, presence, quiet hours and the digest at their end) and the
session's page rate (``alerts.max_pages_per_session``). A page stopped here
is counted, logged with its session and noted in the ledger, so no re-read
or restart pages it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable

from . import pagetext
from .config import Config
from .metrics import Metrics
from .pagerate import PageRate
from .pager import Pager, Pending
from .providers import PROVIDER_MODULES
from .store import Session, project_label
from .suppress import Digest, Noise, Verdict, fmt_duration, still_waiting

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Gate:
    """The checks between a due page and its delivery (run on the reader thread).

    ``pager`` and ``lock``: the pager, whose state ``lock`` guards (a page
    stopped here is dropped from it); ``save()``: write the ledger file;
    ``noise``, ``digest``, ``rates``: the noise controls, the quiet-hours
    digest file and the page rate (:mod:`.suppress`, :mod:`.pagerate`);
    ``lookup(provider, session_id)``: the store's :class:`Session` or None;
    ``page(key, kind, title, body, tags, notify=…)``: send a page made here
    (the digest), as :meth:`.alerts.Alerter.page`.
    """

    cfg: Config
    metrics: Metrics
    pager: Pager
    lock: threading.Lock
    save: Callable[[], None]
    noise: Noise
    digest: Digest
    rates: PageRate
    lookup: Callable
    page: Callable
    _mutes_looked: float = field(default=0.0, init=False)

    def project(self, s: Session) -> str:
        """The session's ``project`` label (``metrics.project_label``)."""
        return project_label(s.cwd, self.cfg.metrics.project_label)

    def fields(self, s: Session, unit: str | None, kind: str) -> dict:
        """The log fields naming a page's session and turn."""
        return {"kind": kind, "provider": s.provider, "session_id": s.session_id, "project": self.project(s),
                "turn": unit}

    def tags_of(self, p: Pending) -> frozenset:
        """The Apprise tags of a due page: its route's, else its kind's."""
        return self.noise.tags_for(self.project(p.session), p.session.provider, p.kind)

    def suppressed(self, p: Pending, now: float) -> bool:
        """Ask :meth:`.suppress.Noise.verdict` about a due page. True when it
        is not to be delivered now: held (it stays pending, due again at the
        hold's end) or suppressed (counted on
        ``coding_agent_alerts_suppressed_total{kind,reason}``, logged at INFO
        with the session, and noted ``seen`` in the ledger so that no re-read
        or restart pages it; a quiet-hours page also goes to the digest)."""
        s = p.session
        held = p.status or s.status
        v: Verdict = self.noise.verdict(p.kind, s.provider, s.session_id, self.project(s), held, s.status, now,
                                        reminder=p.reminder)
        if v.hold_until is not None:
            if p.due < v.hold_until:
                log.debug("page held until %.1f (alerts.presence_delay_seconds)", v.hold_until,
                          extra={"fields": self.fields(s, p.turn, p.kind)})
            p.due = v.hold_until  # still pending: the pager hands it back then
            return True
        if v.reason is None:
            return False
        if v.quiet_until is not None and not p.reminder:
            self.digest.hold(v.quiet_until, {"provider": s.provider, "session_id": s.session_id, "kind": p.kind,
                                             "unit": p.turn, "since": held.since, "project": self.project(s),
                                             "tags": sorted(self.tags_of(p))})
        self.metrics.alerts_suppressed.labels(p.kind, v.reason).inc()
        with self.lock:
            self.pager.drop(p)
            if not p.reminder:
                self.pager.ledger[p.key] = {**self.pager.ledger.get(p.key, {}), "status": "seen",
                                            "suppressed": v.reason, "at": now}
        self.pager.decided(s, p.turn, p.kind, f"{v.reason}: {v.why}")
        if not p.reminder:
            self.save()
        return True

    def rate_ok(self, p: Pending, now: float) -> bool:
        """``p`` keeps ``alerts.max_pages_per_session`` per
        ``alerts.page_rate_window_seconds`` (Unix seconds ``now``); when
        over, it is counted, logged and dropped (never sent)."""
        a = self.cfg.alerts
        if not a.max_pages_per_session or not a.page_rate_window_seconds:
            return True
        if not self.rates.take((p.session.provider, p.session.session_id), now):
            self.metrics.alerts_rate_limited.labels(p.kind).inc()
            self.metrics.alerts_suppressed.labels(p.kind, "rate_limit").inc()
            if not p.reminder:
                with self.lock:
                    self.pager.ledger.pop(p.key, None)
            self.pager.decided(p.session, p.turn, p.kind, f"{a.max_pages_per_session} pages within "
                               "alerts.page_rate_window_seconds (alerts.max_pages_per_session)",
                               level=logging.WARNING)
            return False
        self.rates.save()  # a restart does not reset the limit
        return True

    def expire_mutes(self, now: float) -> None:
        """Every 5 s at most: end the mutes whose session has moved on to another turn or is gone."""
        mutes = self.noise.mutes
        if not (mutes.sessions or mutes.projects) or now - self._mutes_looked < 5.0:
            return
        self._mutes_looked = now

        def turn_of(provider, sid):
            s = self.lookup(provider, sid)
            return ... if s is None else (s.status.turn or "")
        mutes.expire(now, turn_of)

    def send_digests(self, now: float) -> None:
        """At a quiet window's end, one page listing the held sessions that
        still wait (each with its kind, how long it has waited and its resume
        command); none when every one of them was answered meanwhile. The
        digest goes through ``page`` (ledger first: a crash after it
        repeats nothing), then leaves the digest file."""
        for end in [k for k in self.digest.held if float(k) <= now]:
            items = self.digest.held[end]

            def status_of(provider, sid):
                s = self.lookup(provider, sid)
                return s.status if s is not None else None
            left = [(it, st) for it, st in still_waiting(items, status_of)  # muted since: left out too
                    if not self.noise.mutes.muted(it["provider"], it["session_id"], it.get("project") or "", st.turn,
                                                  now)]
            if not left:
                log.info("quiet hours over: no digest (all %d held page(s) were answered meanwhile)", len(items))
            else:
                lines = []
                for it, st in left:
                    mod = PROVIDER_MODULES.get(it["provider"])
                    label = mod.LABEL if mod else it["provider"]
                    what = pagetext.headline(label, it.get("project") or "", st)
                    waited = fmt_duration(now - it["since"]) if isinstance(it.get("since"), (int, float)) else None
                    lines.append(f"- {what} ({it['kind']}" + (f", waiting {waited})" if waited else ")"))
                    cmd = pagetext.resume_command(mod, it["session_id"]) if mod else None
                    if cmd:
                        lines.append(f"  Resume: {cmd}")
                    lines.append(f"  Session: {it['session_id']}")
                n = len(left)
                title = f"Quiet hours over: {n} session{'s' if n != 1 else ''} wait{'s' if n == 1 else ''} for you"
                tags = frozenset(t for it, _ in left for t in it.get("tags") or ())
                try:
                    self.page(f"digest:{end}", "digest", title, "\n".join(lines), tags, notify="info")
                except OSError:
                    log.error("cannot write the alert ledger: the quiet-hours digest waits for the next try")
                    continue
            self.digest.done(end)
