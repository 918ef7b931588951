"""The vocabulary is declared once (exporter.names) and every user of it
agrees: the error kinds providers emit have pre-created series, alert kinds
are the config's keys, providers are the provider modules."""

from __future__ import annotations

import dataclasses

from exporter import names
from exporter.config import AlertKinds
from exporter.events import ERROR
from exporter.metrics import PROVIDERS, Metrics
from exporter.providers import PROVIDER_MODULES, codex


def _series(m: Metrics, family: str) -> set[tuple]:
    return {tuple(sorted(s.labels.items())) for fam in m.registry.collect() if fam.name == family
            for s in fam.samples if s.name.endswith("_total")}


def test_every_error_kind_a_provider_emits_has_a_series():
    m = Metrics()
    have = {dict(k)["kind"] for k in _series(m, "coding_agent_turn_errors")}
    assert have == set(names.ERROR_KINDS)
    # Codex 0.160 reports an HTTP 500 as task_complete with an error: server_error
    ev = codex.FileDecoder().project({"timestamp": "2026-11-30T10:00:00Z", "type": "event_msg", "payload": {
        "type": "error", "message": "stream error", "codex_error_info": "server_error", "turn_id": "t"}})
    assert ev.kind == ERROR and ev.error_kind in names.ERROR_KINDS
    assert set(names.STOP_FAILURE_KINDS.values()) <= set(names.ERROR_KINDS)


def test_alert_kinds_are_the_config_keys_and_providers_the_modules():
    assert tuple(f.name for f in dataclasses.fields(AlertKinds)) == names.ALERT_KINDS
    assert PROVIDERS == tuple(PROVIDER_MODULES)
    assert set(names.OPEN_STATES) <= set(names.STATES)
