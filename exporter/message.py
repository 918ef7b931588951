"""A page's words: its title and body from a session and its status (the
agent, the project label, what happened, how to act: :mod:`.pagetext`), the
turn's duration, and with ``alerts.include_cost`` what the turn cost, with
``alerts.include_excerpt`` the end of the agent's last text."""

from __future__ import annotations

import json

from .config import Config
from .names import ERROR_KINDS
from .providers import PROVIDER_MODULES
from .store import Session, project_label
from . import pagetext

#: What a page says the agent waits for, by wait reason.
WAIT_TITLES = pagetext.WAIT_WORDS
#: What an error page's title says, by error kind (``names.ERROR_KINDS``): "stopped on <kind>", but
#: for a process that died, whose turn did not stop on anything.
ERROR_TITLES = {**{kind: f"stopped on {kind.replace('_', ' ')}" for kind in ERROR_KINDS},
                "agent_exited": "the agent exited mid-turn"}


def _fmt_duration(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h {m}m {s}s" if h else (f"{m}m {s}s" if m else f"{s}s")


class Message:
    """The words of ``cfg``'s pages (``alerts.*``, ``metrics.project_label``).
    Keeps each session's cost at its last completion page (at most 4096
    sessions) for the next page's cost of the turn."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.a = cfg.alerts

    def text(self, s: Session, st) -> tuple[str, str]:
        """The ``(title, body)`` of the page for session ``s`` (a
        :class:`~.store.Session`) reaching status ``st`` (a
        :class:`~.reducer.Status`; completed, error, waiting or stalled).
        No transcript text unless ``alerts.include_excerpt``."""
        mod = PROVIDER_MODULES[s.provider]
        project = project_label(s.cwd, self.cfg.metrics.project_label) or "session"
        if st.state == "completed":
            title = f"{mod.LABEL} · {project}: your turn"
        elif st.state == "error":
            title = f"{mod.LABEL} · {project}: {ERROR_TITLES.get(st.error_kind, 'stopped on an error')}"
        elif st.state == "waiting":
            title = f"{mod.LABEL} · {project}: {WAIT_TITLES.get(st.reason, 'waits for you')}"
        else:
            title = f"{mod.LABEL} · {project}: stalled"
        lines = [pagetext.headline(mod.LABEL, project if project != "session" else "", st),
                 *pagetext.action_lines(mod, s, self.a.link_base_url), f"Session: {s.session_id}"]
        dur = _fmt_duration(st.duration)
        if dur:
            lines.append(f"Turn took: {dur}")
        if st.state == "completed":
            lines.append(f"Detected: {st.evidence} ({st.detail})")
        elif st.state == "error":
            lines.append(f"Error: {st.error_kind}")
        elif st.state == "waiting":
            # A tool name comes from a hook body: data, quoted and bounded, never the title (issue 22).
            lines.append(f"Waiting for: {st.reason}" + (f" (tool {json.dumps(st.tool[:64])})" if st.tool else ""))
        if self.a.include_cost and st.state == "completed":
            lines.append(self._cost_line(s))
        if self.a.include_excerpt and s.reducer.last_text:
            text = s.reducer.last_text.strip()
            n = self.a.excerpt_chars
            lines.append("")
            lines.append(text if len(text) <= n else text[: max(0, n - 1)] + "…")
        return title, "\n".join(lines)

    def _cost_line(self, s: Session) -> str:
        """``alerts.include_cost``: what the turn cost, as the session's cost
        (exporter.usage) now less at its previous completion page in this
        run; the session's cost so far when there was none (the first page,
        or after a restart)."""
        from .usage import prices_from_config

        prices = getattr(self, "_prices", None)
        if prices is None:
            prices = self._prices = prices_from_config(self.cfg)
            self._costs: dict = {}
        now = s.usage.cost(prices)
        if now is None:
            return "Cost: unknown (no price for the model)"
        key = (s.provider, s.session_id)
        before = self._costs.pop(key, None)
        self._costs[key] = now
        if len(self._costs) > 4096:
            del self._costs[next(iter(self._costs))]
        if before is None:
            return f"Cost: ${now:.2f} session so far"
        return f"Cost: ${max(0.0, now - before):.2f} this turn (${now:.2f} session)"
