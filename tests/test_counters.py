"""Restart-safe counters, as a real Prometheus sees them.

``coding_agent_completions_total``, ``coding_agent_turn_errors_total`` and
``coding_agent_turn_duration_seconds`` count what this process observed as
news (the rule pages follow): history read at start-up never increments
them. The exporter is restarted twice over a history of completed and failed
turns while Prometheus (Debian's ``prometheus``, as in test_stack.py) scrapes
it every second; ``increase()`` over the whole window must show exactly the
turns written during the test. Between the restarts history files are
removed, as Claude Code's ``cleanupPeriodDays`` does: an exporter that
counted history at every start would then show a counter reset and
Prometheus would add the whole recount.
"""

from __future__ import annotations

import datetime as dt
import json
import time

import yaml

from harness import Exporter, claude_path, wait_for
from harness import Proc, listening_port
from test_stack import EXPORTER_JOB, _get, _need, _query, _wait


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _turn(sid: str, n: int, end: str = "completed", t0: float | None = None) -> bytes:
    """One Claude Code 2.1.x turn: a prompt, then ``turn_duration`` (a
    completion of 12 s) or an overloaded API error envelope."""
    t0 = time.time() - 60 if t0 is None else t0
    base = {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": "/home/dev/proj",
            "sessionId": sid, "version": "2.1.120"}
    prompt = {**base, "type": "user", "uuid": f"{sid[:8]}-{n:04d}-4000-8000-000000000001", "timestamp": _iso(t0),
              "message": {"role": "user", "content": "do the thing"}}
    if end == "completed":
        last = {**base, "type": "system", "subtype": "turn_duration", "durationMs": 12000, "isMeta": False,
                "uuid": f"{sid[:8]}-{n:04d}-4000-8000-000000000002", "timestamp": _iso(t0 + 12)}
    else:
        last = {**base, "type": "assistant", "isApiErrorMessage": True, "error": "overloaded_error",
                "apiErrorStatus": 529, "uuid": f"{sid[:8]}-{n:04d}-4000-8000-000000000002",
                "timestamp": _iso(t0 + 3),
                "message": {"id": f"err_{sid[:8]}_{n}", "role": "assistant", "model": "<synthetic>",
                            "stop_reason": "stop_sequence",
                            "content": [{"type": "text", "text": "API Error: overloaded"}]}}
    return b"".join(json.dumps(r).encode() + b"\n" for r in (prompt, last))


def _sid(i: int) -> str:
    return f"c0de{i:04d}-0000-4000-8000-000000000000"


def _append(path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.write(data)


def test_counters_count_news_only_across_restarts(tmp_path):
    prometheus = _need("prometheus")
    # History: six sessions with a completed turn, two with an error turn.
    for i in range(6):
        _append(claude_path(tmp_path, _sid(i)), _turn(_sid(i), 1, t0=time.time() - 86400))
    for i in (6, 7):
        _append(claude_path(tmp_path, _sid(i)), _turn(_sid(i), 1, "error", t0=time.time() - 86400))

    exp = Exporter(tmp_path)
    prom = None
    try:
        exp.start()
        assert exp.value("coding_agent_completions_total") == 0  # history is not news
        assert exp.value("coding_agent_turn_errors_total") == 0
        assert exp.value("coding_agent_turn_duration_seconds_count") == 0

        cfg = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
               "scrape_configs": [{"job_name": EXPORTER_JOB,
                                   "static_configs": [{"targets": [f"127.0.0.1:{exp.port}"]}]}]}
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))
        prom = Proc([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                      f"--storage.tsdb.path={tmp_path / 'tsdb'}", "--web.listen-address=127.0.0.1:0",
                      "--log.level=info"], tmp_path / "prometheus.log", tmp_path)
        base = f"http://127.0.0.1:{listening_port(prom)}"
        _wait("prometheus ready", lambda: _get(f"{base}/-/ready") is not None, 30, [(prom.p, prom.log)])

        def scrapes() -> int:
            res = _query(base, f'count_over_time(up{{job="{EXPORTER_JOB}"}}[1h])')
            return int(float(res[0]["value"][1])) if res else 0

        def settle(n: int = 3) -> None:
            k = scrapes()
            _wait("scrapes", lambda: scrapes() >= k + n, 60, [(prom.p, prom.log)])

        settle()
        # Run 1: two completions written live.
        _append(claude_path(tmp_path, _sid(0)), _turn(_sid(0), 2))
        _append(claude_path(tmp_path, _sid(1)), _turn(_sid(1), 2))
        wait_for(lambda: exp.value("coding_agent_completions_total") == 2, what="two live completions")
        settle()

        # Down: one completion written, two history sessions cleaned up.
        exp.stop()
        _append(claude_path(tmp_path, _sid(2)), _turn(_sid(2), 2))
        claude_path(tmp_path, _sid(4)).unlink()
        claude_path(tmp_path, _sid(6)).unlink()
        exp.start()
        # Written while it was down: news, as for pages. History: not.
        wait_for(lambda: exp.value("coding_agent_completions_total") == 1, what="the down-time completion")
        assert exp.value("coding_agent_turn_errors_total") == 0
        settle()

        # Run 2: a completion and an error written live.
        _append(claude_path(tmp_path, _sid(3)), _turn(_sid(3), 2))
        _append(claude_path(tmp_path, _sid(7)), _turn(_sid(7), 2, "error"))
        wait_for(lambda: exp.value("coding_agent_turn_errors_total", kind="overloaded") == 1, what="live error")
        wait_for(lambda: exp.value("coding_agent_completions_total") == 2, what="live completion")
        settle()

        # Restart 2, with nothing written meanwhile and another session cleaned up.
        exp.stop()
        claude_path(tmp_path, _sid(5)).unlink()
        exp.start()
        assert exp.value("coding_agent_completions_total") == 0
        assert exp.value("coding_agent_turn_errors_total") == 0
        settle()

        def increase(expr: str) -> float:
            res = _query(base, f"sum(increase({expr}[1h]))")
            return float(res[0]["value"][1]) if res else 0.0

        # Written during the test: 4 completions (each with a duration), 1 error.
        # increase() extrapolates a little at the window's edges: allow < 0.5.
        got = {m: increase(m) for m in ("coding_agent_completions_total", "coding_agent_turn_errors_total",
                                         "coding_agent_turn_duration_seconds_count")}
        assert abs(got["coding_agent_completions_total"] - 4) < 0.5, got
        assert abs(got["coding_agent_turn_errors_total"] - 1) < 0.5, got
        assert abs(got["coding_agent_turn_duration_seconds_count"] - 4) < 0.5, got
        # Prometheus saw each restart as a counter reset (the counter went down).
        resets = _query(base, 'sum(resets(coding_agent_completions_total[1h]))')
        assert float(resets[0]["value"][1]) == 2, resets
    finally:
        exp.stop()
        if prom is not None:
            prom.stop()
