"""The delivery thread: each page the pager (and the gate after it) let
through goes to the targets that take it, one Apprise object per target, so
that a retry (exponential backoff, ``alerts.retry``) reaches only the
targets that failed. The ledger says ``sending`` before a transcript page
goes out, and the pager hears of every page sent or given up.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from .message import Message
from .metrics import Metrics
from .pager import Pager, Pending, unit_of

log = logging.getLogger(__name__)

#: The last line of a page whose delivery a stop interrupted (its ledger entry
#: said ``sending``): Apprise targets take no idempotency key, so the one
#: page that can come twice says so.
SENT_AGAIN = "(Sent again: the exporter stopped while sending this page, so it may have reached you already.)"


@dataclass(eq=False)
class Courier:
    """Delivers :class:`~.pager.Pending` pages in its own thread.

    ``retry``: ``alerts.retry`` (attempts, backoff seconds); ``targets``: the
    :class:`~.alerts.Target` list (a page's ``remaining`` indexes into it);
    ``pager`` and ``lock``: the pager, whose state ``lock`` guards, told of
    each page sent (``sent``) or given up (``failed``); ``save()``: write the
    ledger file; ``message``: a transcript page's title and body;
    ``tags_of(p)``: the Apprise tags of a transcript page. Pages are handed
    over with :meth:`put` from any thread; ``work`` is their queue.
    """

    retry: object
    metrics: Metrics
    targets: list
    pager: Pager
    lock: threading.Lock
    save: Callable[[], None]
    message: Message
    tags_of: Callable[[Pending], frozenset]
    #: Pages waiting for the delivery thread (None: stop).
    work: queue.Queue = field(default_factory=queue.Queue, init=False)
    #: ``(Unix seconds, kind)`` of this run's last page delivered, or None.
    last_sent: tuple[float, str] | None = field(default=None, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)

    def takers(self, tags: frozenset) -> list[int]:
        """Indexes of the targets that take a page with Apprise ``tags``."""
        return [i for i, t in enumerate(self.targets) if not t.tags or "always" in t.tags or t.tags & tags]

    def put(self, p: Pending) -> None:
        """Queue ``p`` for delivery to its ``remaining`` targets."""
        self.work.put(p)

    def start(self) -> bool:
        """Start the delivery thread (once, and only with targets); True when it started now."""
        if not self.targets or self._thread is not None:
            return False
        self._thread = threading.Thread(target=self._loop, name="alerts", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        """Stop the thread after the page it is delivering (waits up to 10 s)."""
        self._stop.set()
        self.work.put(None)
        if self._thread:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        retry = self.retry
        while not self._stop.is_set():
            p = self.work.get()
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
                    with self.lock:
                        self.pager.failed(p, time.time())
                    self.save()
                    continue
                delay = min(retry.max_backoff_seconds, retry.initial_backoff_seconds * 2 ** (p.attempt - 1))
                log.warning("%s alert delivery failed for %d target(s); retrying in %.1f s", p.kind,
                            len(p.remaining), delay)
                threading.Timer(delay, self.work.put, args=(p,)).start()

    def _deliver(self, p: Pending) -> None:
        import apprise

        tag = ",".join(sorted(self.tags_of(p))) if p.session is not None else None
        notify_type = p.notify or (apprise.NotifyType.FAILURE if p.kind == "error" else (
            apprise.NotifyType.WARNING if p.kind in ("stalled", "waiting") else apprise.NotifyType.SUCCESS))
        if p.session is None:  # a page made elsewhere (Alertmanager, the digest): its own text
            st, title, body = None, p.title, p.body
        else:
            # The state now when it is still the one paged (what the settle time
            # added: an error's kind from the transcript read after the hook;
            # Claude Code 2.1.332: StopFailure server_error, then a 529's envelope).
            cur = p.session.status
            st = cur if cur.state == p.state and unit_of(cur) == p.turn else (p.status or cur)
            title, body = self.message.text(p.session, st)
            if p.reminder:
                title = "Reminder: " + title
            if p.again:
                body += "\n" + SENT_AGAIN
        if p.session is not None and not p.reminder:
            self._mark_sending(p)
        still = []
        for i in p.remaining:
            target = self.targets[i]
            res = target.apobj.notify(body=body, title=title, notify_type=notify_type,
                                      body_format=apprise.NotifyFormat.TEXT)
            if res:
                continue
            still.append(i)
            self.metrics.alerts_failed.labels(p.kind).inc()
            log.warning("could not deliver a %s alert to %s", p.kind, target.name)
        p.remaining = still
        if still:
            return
        now = time.time()
        self.metrics.alerts.labels(p.kind).inc()
        self.last_sent = (now, p.kind)
        self.metrics.alert_latency.labels(p.kind).observe(max(0.0, now - p.first_seen))
        with self.lock:
            self.pager.sent(p, now)
            if p.session is None:
                self.pager.ledger.get(p.key, {}).pop("page", None)
        if not p.reminder:
            self.save()
        if p.session is None:
            log.info("page sent", extra={"fields": {"kind": p.kind, "key": p.key,
                                                     "latency_seconds": round(now - p.first_seen, 3)}})
            return
        self.pager.decided(p.session, p.turn, p.kind, None, tag=tag, evidence=st.evidence, detail=st.detail,
                           error_kind=st.error_kind, duration_seconds=None if st.duration is None
                           else round(st.duration, 1), targets=len(self.takers(self.tags_of(p))),
                           latency_seconds=round(now - p.first_seen, 3), reminder=True if p.reminder else None,
                           sent_again=True if p.again else None)

    def _mark_sending(self, p: Pending) -> None:
        """The ledger says ``sending`` for ``p`` (on disk) before its
        delivery starts: after a kill, a page marked ``pending`` is known
        never to have gone out; only ``sending`` ones may repeat."""
        with self.lock:
            entry = self.pager.ledger.get(p.key)
            if entry is None or entry.get("status") != "pending":
                return
            self.pager.ledger[p.key] = {**entry, "status": "sending"}
        self.save()
