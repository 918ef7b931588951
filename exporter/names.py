"""The closed lists of the exporter's vocabulary, declared once: session
states, completion evidence, alert kinds and error kinds. Metrics pre-create
their label values from these, the config checks its keys against them, the
providers map agent error names into them. Providers themselves are
:data:`exporter.providers.PROVIDER_MODULES` (one module each)."""

from __future__ import annotations

#: A session's state (``coding_agent_session_state{state}``), in display order.
STATES = ("working", "waiting", "completed", "error", "interrupted", "stalled", "unknown")
#: States of a turn still under way: a session in one at a checkpoint is
#: carried open to the next start (its ending is news then).
OPEN_STATES = ("working", "stalled")
#: How a completion was told (``coding_agent_completions_total{evidence}``).
EVIDENCE = ("explicit", "inferred")
#: What a page is about (``alerts.kinds.*``, ``alerts.tags.*``, ``coding_agent_alerts_total{kind}``).
ALERT_KINDS = ("completed", "error", "stalled", "waiting")
#: Why a page was not sent (``coding_agent_alerts_suppressed_total{reason}``; :mod:`exporter.suppress`).
SUPPRESS_REASONS = ("min_turn", "presence", "quiet_hours", "muted", "route", "rate_limit")
#: Why a turn stopped on an error (``coding_agent_turn_errors_total{kind}``):
#: Claude Code API errors and ``StopFailure`` hooks, Codex ``error`` events
#: and ``task_complete.error`` (``server_error``: Codex 0.160 HTTP 500),
#: ``agent_exited``: a Claude Code process died mid-turn (its session registry).
ERROR_KINDS = ("rate_limit", "usage_limit", "overloaded", "auth", "billing", "server_error", "api_error",
               "no_response", "agent_exited")
#: ``StopFailure`` hook ``error`` values (Claude Code hooks reference; Codex's
#: generated hook schemas use the same names) → error kinds; any other → ``api_error``.
STOP_FAILURE_KINDS = {"rate_limit": "rate_limit", "authentication_failed": "auth", "billing_error": "billing",
                      "overloaded": "overloaded", "server_error": "api_error", "invalid_request": "api_error",
                      "max_output_tokens": "api_error"}
