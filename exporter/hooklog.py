"""Hook deliveries kept for the checkpoint: a wait only a hook reported
(a permission prompt) outlives a restart. The newest few of each session
(a later event decides the state; two waits in a row merge), for the
sessions hooked most recently; saved as :func:`hooks.to_record` records and
applied again at the next start (``Evidence.reapply``)."""

from __future__ import annotations

import collections

from .events import WAIT
from .hooks import to_record


class HookLog:
    """``per_session`` deliveries kept per session, for ``sessions`` sessions
    (the most recently hooked). ``version`` counts changes (the checkpoint
    is written only when something changed)."""

    def __init__(self, per_session: int, sessions: int):
        self.per_session, self.sessions = per_session, sessions
        #: ``(provider, session id)`` → its kept records, oldest first; the
        #: dict's order is the order the sessions were last hooked in.
        self.kept: dict[tuple, collections.deque[dict]] = {}
        self.version = 0

    def keep(self, s, d) -> bool:
        """Keep an applied delivery ``d`` of session ``s``. True when it is a
        wait or follows one (worth a checkpoint at once)."""
        key = (s.provider, s.session_id)
        kept = self.kept.pop(key, None) or collections.deque(maxlen=self.per_session)
        urgent = d.event.kind == WAIT or bool(kept) and kept[-1]["kind"] == WAIT
        kept.append(to_record(d))
        self.kept[key] = kept  # last in the order: the most recently hooked
        if len(self.kept) > self.sessions:
            del self.kept[next(iter(self.kept))]
        self.version += 1
        return urgent

    def records(self, ttl: float, now: float) -> list[dict]:
        """The kept records younger than ``ttl`` seconds at ``now`` (Unix
        seconds; ``ttl`` 0: all)."""
        return [r for kept in self.kept.values() for r in kept if not ttl or now - r["ts"] < ttl]
