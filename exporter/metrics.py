"""Prometheus instruments and the scrape-time collector of session state.

The exporter's own counters are ordinary prometheus-client instruments in a
private registry; per-session state is a custom collector that snapshots the
session store at scrape time, so vanished sessions leave no stale series.
Known label values are pre-created at 0.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily

from . import __version__
from .decode import PARSE_ERROR_REASONS, SKIP_REASONS
from .events import WAIT_REASONS
from .names import ALERT_KINDS, ERROR_KINDS, EVIDENCE, STATES, SUPPRESS_REASONS
from .providers import PROVIDER_MODULES

PROVIDERS = tuple(PROVIDER_MODULES)
#: Hook events counted by name (``hook_event_name``); any other name counts as ``other``.
HOOK_EVENTS = ("PermissionRequest", "Notification", "PreToolUse", "PostToolUse", "PostToolUseFailure",
               "PermissionDenied", "UserPromptSubmit", "Stop", "StopFailure", "SubagentStop", "SessionStart",
               "SessionEnd", "Interrupt", "BeforeAgent", "AfterAgent", "BeforeTool", "AfterTool", "other")
#: Why a hook delivery was refused or skipped.
HOOK_ERROR_REASONS = ("too_large", "invalid_json", "not_object", "unknown_agent", "no_session", "unknown_session",
                      "unreadable_spool", "expired", "unauthorized", "not_json_content_type", "unsaved")
#: Why a request was refused before any route saw it (``host``: a ``Host``
#: not allowed, DNS rebinding; ``origin``: a browser's cross-origin request).
#: ``body_timeout``: a body not complete within ``web.body_timeout_seconds``
#: (408); ``body_budget``: too many body bytes held at once (503).
HTTP_REFUSED_REASONS = ("host", "origin", "body_timeout", "body_budget")
#: What the user was waiting to answer (``your_turn``: the turn had ended).
USER_WAIT_REASONS = ("your_turn",) + WAIT_REASONS
#: Outcomes of an Alertmanager notification: ``accepted`` (2xx: every alert
#: in it is in the ledger), ``malformed`` (400), ``too_large`` (413),
#: ``unavailable`` (503: ledger not writable or no Apprise target; Alertmanager retries).
#: ``unauthorized`` (401: no or wrong credential), ``too_many_alerts`` (413:
#: past ``alertmanager.max_alerts``).
ALERTMANAGER_STATUSES = ("accepted", "malformed", "too_large", "unavailable", "unauthorized", "too_many_alerts")


class Metrics:
    """All instruments of one exporter instance, in their own registry.

    Counters are labelled by ``provider`` (a :data:`~.providers.PROVIDER_MODULES` name) and, where
    named, ``reason``/``evidence``/``kind``. Durations are seconds.
    """

    def __init__(self) -> None:
        disable_created_metrics()  # *_created series only add noise to dashboards
        r = self.registry = CollectorRegistry(auto_describe=True)
        p = ["provider"]
        self.lines = Counter("coding_agent_transcript_lines", "Transcript lines read.", p, registry=r)
        self.bytes = Counter("coding_agent_transcript_bytes", "Transcript bytes consumed.", p, registry=r)
        self.parse_errors = Counter("coding_agent_transcript_parse_errors",
                                    "Lines that are not JSON objects, by reason.", p + ["reason"], registry=r)
        self.skipped = Counter("coding_agent_transcript_skipped_lines",
                               "Lines skipped without parsing, by reason.", p + ["reason"], registry=r)
        self.duplicates = Counter("coding_agent_duplicate_events",
                                  "Records seen again with an identity already applied.", p, registry=r)
        self.completions = Counter("coding_agent_completions",
                                   "Main-thread turn completions, by evidence.", p + ["evidence"], registry=r)
        self.turn_errors = Counter("coding_agent_turn_errors", "Turns ended by a provider error, by kind.",
                                   p + ["kind"], registry=r)
        self.poll_recoveries = Counter("coding_agent_poll_recoveries",
                                       "File changes found by the periodic stat poll, not by a file event.",
                                       p, registry=r)
        self.read_errors = Counter("coding_agent_transcript_read_errors",
                                   "Files that could not be opened or read.", p, registry=r)
        self.files_watched = Gauge("coding_agent_files_watched", "Transcript files followed.", p, registry=r)
        self.turn_duration = Histogram("coding_agent_turn_duration_seconds",
                                       "Time from a turn's start to its completion.", p, registry=r,
                                       buckets=(5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200))
        self.alerts = Counter("coding_agent_alerts", "Notifications delivered.", ["kind"], registry=r)
        self.alerts_failed = Counter("coding_agent_alerts_failed", "Notification delivery attempts that failed.",
                                     ["kind"], registry=r)
        self.alerts_dedup = Counter("coding_agent_alerts_deduplicated",
                                    "Notifications not sent because the ledger had them already.",
                                    ["kind"], registry=r)
        self.alerts_rate_limited = Counter("coding_agent_alerts_rate_limited",
                                           "Notifications not sent: the session had alerts.max_pages_per_session "
                                           "pages within alerts.page_rate_window_seconds.", ["kind"], registry=r)
        self.alerts_suppressed = Counter("coding_agent_alerts_suppressed",
                                         "Pages not sent, by kind and reason (min_turn, presence, quiet_hours, "
                                         "muted, route, rate_limit).", ["kind", "reason"], registry=r)
        self.http_refused = Counter("coding_agent_http_requests_refused",
                                    "HTTP requests refused before routing, by reason (host, origin, body_timeout, "
                                    "body_budget).",
                                    ["reason"], registry=r)
        for reason in HTTP_REFUSED_REASONS:
            self.http_refused.labels(reason)
        self.alert_latency = Histogram("coding_agent_alert_latency_seconds",
                                       "Time from reading the completion to delivery (settle time included).",
                                       ["kind"], registry=r,
                                       buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300))
        self.hook_events = Counter("coding_agent_hook_events", "Agent hook events received, by event name.",
                                   p + ["event"], registry=r)
        self.hook_errors = Counter("coding_agent_hook_errors", "Hook deliveries refused or skipped, by reason.",
                                   ["reason"], registry=r)
        self.user_wait = Histogram("coding_agent_user_wait_seconds",
                                   "Time an agent waited for its user: from a completion (your_turn) or a "
                                   "question, plan or permission prompt to the user's next prompt or answer.",
                                   p + ["reason"], registry=r,
                                   buckets=(5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400))
        build = Gauge("coding_agent_exporter_build_info", "Build of coding-agent-exporter; value 1.",
                      ["version"], registry=r)
        build.labels(__version__).set(1)
        self.alertmanager_notifications = Counter(
            "coding_agent_alertmanager_notifications", "Alertmanager webhook notifications received at "
            "/hooks/alertmanager, by outcome.", ["status"], registry=r)
        for status in ALERTMANAGER_STATUSES:
            self.alertmanager_notifications.labels(status)
        #: Set once by :meth:`set_machine` (the ``_info`` convention: value 1).
        self.info = Gauge("coding_agent_exporter_info", "This exporter: the machine it watches and its version; "
                          "value 1.", ["machine", "version"], registry=r)
        for prov in PROVIDERS:
            for c in (self.lines, self.bytes, self.duplicates, self.poll_recoveries, self.read_errors):
                c.labels(prov)
            self.files_watched.labels(prov)
            self.turn_duration.labels(prov)
            for reason in PARSE_ERROR_REASONS:
                self.parse_errors.labels(prov, reason)
            for reason in SKIP_REASONS:
                self.skipped.labels(prov, reason)
            for ev in EVIDENCE:
                self.completions.labels(prov, ev)
            for kind in ERROR_KINDS:
                self.turn_errors.labels(prov, kind)
            for event in HOOK_EVENTS:
                self.hook_events.labels(prov, event)
            # (user_wait's children come with a provider's first wait of a reason: 4 providers × 8
            # reasons × 16 samples of zeros were 60 % of an idle /metrics, and of each scrape's time)
        for reason in HOOK_ERROR_REASONS:
            self.hook_errors.labels(reason)
        for kind in ALERT_KINDS + ("alertmanager",):
            for c in (self.alerts, self.alerts_failed, self.alerts_dedup, self.alerts_rate_limited):
                c.labels(kind)
            self.alert_latency.labels(kind)
        for kind in ALERT_KINDS:
            for reason in SUPPRESS_REASONS:
                self.alerts_suppressed.labels(kind, reason)


    def set_machine(self, machine: str) -> None:
        """Expose ``coding_agent_exporter_info{machine, version} 1`` (config
        key ``machine``, default the host name)."""
        self.info.clear()
        self.info.labels(machine, __version__).set(1)


class SessionCollector:
    """Scrape-time mirror of the session store.

    ``snapshot`` is a callable returning ``(rows, dropped)``: ``rows`` a list
    of dicts with ``provider``, ``session_id``, ``project``, ``state``,
    ``since`` and ``last_event_at`` (Unix seconds or None), newest first and
    already cut to the series cap; ``dropped`` how many sessions the cap left
    out. ``per_session=False`` emits only the per-state totals.
    """

    def __init__(self, snapshot, metrics: Metrics, per_session: bool = True):
        self._snapshot = snapshot
        self._metrics = metrics
        self._per_session = per_session

    def describe(self):
        return []

    def collect(self):
        rows, counts, dropped = self._snapshot()
        total = GaugeMetricFamily("coding_agent_sessions", "Sessions by current state.",
                                  labels=["provider", "state"])
        for prov in PROVIDERS:
            for state in STATES:
                total.add_metric([prov, state], counts.get((prov, state), 0))
        yield total
        if not self._per_session:
            return
        over = GaugeMetricFamily("coding_agent_session_series_dropped",
                                 "Sessions left out of the per-session series by metrics.max_sessions.")
        over.add_metric([], dropped)
        yield over
        labels = ["provider", "session_id", "project"]
        state = GaugeMetricFamily("coding_agent_session_state",
                                  "Current state of a session (1 for the state it is in).",
                                  labels=labels + ["state"])
        since = GaugeMetricFamily("coding_agent_session_state_since_timestamp_seconds",
                                  "When the session entered its current state (record time).", labels=labels)
        last = GaugeMetricFamily("coding_agent_session_last_event_timestamp_seconds",
                                 "Timestamp of the session's newest record.", labels=labels)
        cost = GaugeMetricFamily("coding_agent_session_cost_usd", "Cost of the session's responses read, all its "
                                 "files (USD, priced models only; exporter.usage).", labels=labels)
        for row in rows:
            key = [row["provider"], row["session_id"], row["project"]]
            state.add_metric(key + [row["state"]], 1)
            if row["since"] is not None:
                since.add_metric(key, row["since"])
            if row["last_event_at"] is not None:
                last.add_metric(key, row["last_event_at"])
            if row.get("cost_usd") is not None:
                cost.add_metric(key, row["cost_usd"])
        yield state
        yield since
        yield last
        yield cost
