"""The page decision, apart from its delivery: which turn ends and waits
page, when, and which never do. No I/O and no clock of its own: it takes
transitions (``.session`` with ``provider``, ``session_id``, ``hidden``,
``status``; ``.old``, ``.new`` :class:`~.reducer.Status`) and the time
``now`` (Unix seconds), and keeps the ledger as a dict the delivery part
saves (:class:`~.alerts.Alerter`).

Rules (docs/alerts.md):

- A transition into ``completed``/``error``/``stalled``/``waiting`` read as
  news (``Status.live``) becomes a *pending* page keyed by :func:`alert_key`
  (kind, provider, session, turn; for ``waiting`` the wait). The ledger
  says ``pending`` at once, so a crash before delivery loses nothing.
- Backfill (not news) is noted ``seen`` and never pages; a ledger entry
  ``sent``/``seen`` never pages again (re-reads, restarts, duplicates); a
  ledger entry ``pending`` from an earlier run pages once its state is
  confirmed, even when read as backfill.
- After ``settle_seconds`` a pending page is due when the session still
  shows that state and unit, or when what superseded it came at least
  ``settle_seconds`` later in record time (:meth:`Pager._stood`); else it is
  dropped (and its ledger entry with it).
- A sent ``completed``/``waiting`` page gets one reminder after
  ``remind_after_seconds`` while the session still shows it.
- ``max_age_seconds``: news older than this in record time does not page.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from .names import ALERT_KINDS

log = logging.getLogger("exporter.alerts")


def unit_of(st) -> str | None:
    """What one page is about: the wait for ``waiting``, else the turn."""
    return st.wait if st.state == "waiting" else st.turn


def alert_key(kind: str, provider: str, session_id: str, turn: str) -> str:
    """The ledger key of one alert: scoped to its session. Record ids are not
    unique across sessions in practice (Claude Code wrote one prompt ``uuid``
    into two live sessions: field case 30), so one session's turn never
    silences another's page. Copies of history are told by
    ``exporter.identity``, not here."""
    return f"{kind}:{provider}:{session_id}:{turn}"


@dataclass
class Pending:
    """One page decided and not yet delivered. ``session``: the session
    object (opaque here but for ``provider``, ``session_id``, ``status``);
    ``first_seen``/``due``: Unix seconds; ``since``: record time the state
    began; ``superseded``: record time of the first state after it."""

    key: str
    kind: str
    session: object
    turn: str
    state: str
    first_seen: float
    due: float
    since: float | None = None
    status: object = None
    superseded: float | None = None
    reminder: bool = False
    #: The ledger said ``sending`` when this run found it: the last run was
    #: stopped during its delivery, so it may have reached the user already.
    again: bool = False
    attempt: int = 0
    remaining: list = field(default_factory=list)  # target indexes still to deliver to (delivery's)
    #: A page made outside the transcripts (``session`` None: an Alertmanager
    #: alert): its own text and Apprise NotifyType.
    title: str | None = None
    body: str | None = None
    notify: str | None = None


@dataclass(frozen=True)
class Rules:
    """The time rules and switches of the decision (``alerts.*``; seconds)."""

    settle_seconds: float = 2.0
    max_age_seconds: float = 0.0
    remind_after_seconds: float = 0.0
    kinds: frozenset = frozenset(ALERT_KINDS)

    @classmethod
    def from_config(cls, a) -> Rules:
        return cls(a.settle_seconds, a.max_age_seconds, a.remind_after_seconds,
                   frozenset(k for k in ALERT_KINDS if getattr(a.kinds, k)))


class Pager:
    """The decision state: ``ledger`` (key → ``{"status", "at", …}``),
    ``pending`` (key → :class:`Pending`) and the sent pages that may get a
    reminder. ``fields(session, unit, kind)`` gives the log fields of a
    decision (provider, session, project label …)."""

    def __init__(self, rules: Rules, ledger: dict | None = None, fields=None):
        self.rules = rules
        self.ledger: dict[str, dict] = ledger if ledger is not None else {}
        self.pending: dict[str, Pending] = {}
        #: key → (the page sent, when) for pages that may get their one reminder.
        self.remind: dict[str, tuple[Pending, float]] = {}
        self._fields = fields or (lambda s, unit, kind: {"kind": kind, "provider": s.provider,
                                                         "session_id": s.session_id, "turn": unit})

    def owed(self) -> dict[tuple[str, str], frozenset]:
        """Turn ends the ledger says are still owed a page ("pending": a
        crash or stop came between the decision and the delivery; "sending":
        during the delivery, which may have reached the user):
        ``{(provider, session id): frozenset of turn keys}`` (completions and
        errors)."""
        out: dict[tuple[str, str], set] = {}
        for key, v in self.ledger.items():
            prov, sid = v.get("provider"), v.get("session_id")
            if v.get("status") not in ("pending", "sending") or not isinstance(prov, str) or not isinstance(sid, str):
                continue
            for kind in ("completed", "error"):
                head = f"{kind}:{prov}:{sid}:"
                if key.startswith(head):
                    out.setdefault((prov, sid), set()).add(key[len(head):])
        return {k: frozenset(v) for k, v in out.items()}

    def decided(self, s, unit: str | None, kind: str, why: str | None, level: int = logging.INFO,
                **evidence) -> None:
        """Log one decision: ``page sent`` (``why`` None) with its evidence,
        or ``page not sent`` with the reason; never transcript text. ``s``
        None: a page made outside the transcripts (``unit`` is its key)."""
        fields = self._fields(s, unit, kind) if s is not None else {"kind": kind, "key": unit}
        if why is None:
            fields.update({k: v for k, v in evidence.items() if v is not None})
        else:
            fields["reason"] = why
        log.log(level, "page sent" if why is None else "page not sent", extra={"fields": fields})

    def observe(self, transitions, now: float) -> tuple[list[Pending], list[str], bool]:
        """Consider each transition for a page. Returns ``(pages made
        pending, kinds of the pages not made because they were sent or seen
        before, whether the ledger changed)``."""
        rules, made, dups, changed, backfill = self.rules, [], [], False, 0
        for t in transitions:
            st, s = t.new, t.session
            kind = st.state
            if self.pending:
                self._supersede(s, st)
            if kind not in ALERT_KINDS:
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
            wanted = kind in rules.kinds and not s.hidden
            if not st.live and (entry is None or entry.get("status") in ("sent", "seen")):
                # Old at first sight (backfill): not news. Remember the turn, so
                # that re-reading this history never pages it.
                if entry is None and wanted:
                    self.ledger[key] = {"status": "seen", "at": now}
                    changed = True
                backfill += 1
                self.decided(s, unit, kind, "not news: history (read at start-up, a copy of another session's records, or "
                             "a file read again from its start)", level=logging.DEBUG)
                continue
            if kind not in rules.kinds:
                self.decided(s, unit, kind, f"kind off (alerts.kinds.{kind}: false)")
                continue
            if s.hidden:
                self.decided(s, unit, kind, "subagent: a subagent rollout whose parent session is unknown")
                continue
            if entry is not None:
                if entry.get("status") in ("sent", "seen"):
                    self.decided(s, unit, kind, "already sent" if entry.get("status") == "sent"
                                 else "already seen (this turn was history at an earlier start)")
                    dups.append(kind)
                    continue
                # pending at a crash or stop: deliver now that the state is confirmed
            elif rules.max_age_seconds and st.since is not None and now - st.since > rules.max_age_seconds:
                self.decided(s, unit, kind, f"older than alerts.max_age_seconds ({now - st.since:.0f} s > "
                             f"{rules.max_age_seconds:g} s)")
                continue
            p = Pending(key, kind, s, unit, st.state, first_seen=now, due=now + rules.settle_seconds,
                        since=st.since, status=st, again=entry is not None and entry.get("status") == "sending")
            self.pending[key] = p
            log.debug("page pending for %g s (alerts.settle_seconds)", rules.settle_seconds,
                      extra={"fields": self._fields(s, unit, kind)})
            self.ledger[key] = {"status": "sending" if p.again else "pending", "at": now, "provider": s.provider,
                                "session_id": s.session_id}
            made.append(p)
            changed = True
        if backfill:
            log.info("not paging %d turn end(s) that were not news (history read at start-up, copies, or a "
                     "file read again); "
                     "--log.level debug names them", backfill)
        return made, dups, changed

    def next_due(self) -> float | None:
        """When the next pending page is due (Unix seconds), or None."""
        dues = [p.due for p in list(self.pending.values()) if not p.remaining]
        return min(dues) if dues else None

    def due(self, now: float, status_of=lambda s: s.status) -> list[Pending]:
        """The pending pages due at ``now`` whose state stood; superseded ones
        are dropped (logged, their ledger entry removed). ``status_of(session)``
        gives a session's current :class:`~.reducer.Status`. The caller hands
        the returned pages to delivery (or drops them: :meth:`drop`)."""
        out = []
        for key, p in list(self.pending.items()):
            if p.due > now or p.remaining or p.reminder:
                continue
            cur = status_of(p.session)
            if (cur.state != p.state or unit_of(cur) != p.turn) and not self._stood(p, cur):
                del self.pending[key]
                self.ledger.pop(key, None)
                self.decided(p.session, p.turn, p.kind, f"superseded within alerts.settle_seconds (now {cur.state})")
                continue
            out.append(p)
        return out

    def reminders(self, now: float, status_of=lambda s: s.status) -> list[Pending]:
        """One reminder for each sent page whose session still shows the
        same state and unit ``remind_after_seconds`` after it was sent."""
        out = []
        for key, (p, sent_at) in list(self.remind.items()):
            cur = status_of(p.session)
            if cur.state != p.state or unit_of(cur) != p.turn:
                self.remind.pop(key, None)
                continue
            if now - sent_at < self.rules.remind_after_seconds:
                continue
            self.remind.pop(key, None)
            r = Pending("remind:" + key, p.kind, p.session, p.turn, p.state, first_seen=now, due=now,
                        since=cur.since, status=p.status, reminder=True)
            out.append(r)
        return out

    def drop(self, p: Pending) -> None:
        """Forget a pending page that nobody will deliver."""
        self.pending.pop(p.key, None)

    def sent(self, p: Pending, now: float) -> None:
        """``p`` was delivered at ``now``: the ledger says ``sent``; a first
        ``completed``/``waiting`` page may get its reminder."""
        self.pending.pop(p.key, None)
        if p.reminder:
            return
        self.ledger[p.key] = {**self.ledger.get(p.key, {}), "status": "sent", "at": now}
        if self.rules.remind_after_seconds and p.kind in ("completed", "waiting"):
            self.remind[p.key] = (p, now)

    def failed(self, p: Pending, now: float) -> None:
        """Delivery of ``p`` gave up: the ledger says ``failed`` (never retried)."""
        self.pending.pop(p.key, None)
        if not p.reminder:
            self.ledger[p.key] = {**self.ledger.get(p.key, {}), "status": "failed", "at": now}

    def _supersede(self, s, st) -> None:
        """Note on ``s``'s pending pages the record time of the first state
        that followed them (the next turn's start, when several states passed
        in one read)."""
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
        return after - p.since >= self.rules.settle_seconds
