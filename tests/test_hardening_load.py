"""Hardening, load: 50 sessions of both agents appending at once, at the pace
agents write (a record every 0.1–1.5 s per session, tool outputs of 1 KB to
512 KB), with turn ends of every kind, for 25 s of new turns (5 minutes with
``CAE_SLOW=1``), against the running exporter with pages going out through
Apprise. At the end every session is in the state its last record says, every
turn end paged exactly once, and the exporter's CPU time, peak RSS and alert
latency are reported (docs/hardening.md).
"""

from __future__ import annotations

import heapq
import random
import time

import pytest

from harness import claude_path, codex_path
from test_hardening_support import (SLOW, ClaudeSession, CodexSession, Daemon, Receiver, alerts_for, wait_for,
                                    write)

SESSIONS = 50
LOAD_SECONDS = 300 if SLOW else 25
#: Average CPU of the exporter over the load, in % of one core (bound asserted).
CPU_BOUND_PERCENT = 50


def _turns(prov: str, s, rng: random.Random, owed: dict, final: dict):
    """Yield ``(delay, bytes)`` for one session's turns, forever; records
    the page each turn end owes in ``owed`` and the last end in ``final``."""
    def output():
        return "x" * int(2 ** rng.uniform(10, 19))  # 1 KB .. 512 KB

    while True:
        if prov == "claude_code":
            yield 0.0, s.prompt()
            for _ in range(rng.randrange(1, 8)):
                yield rng.uniform(0.1, 1.5), s.tool_use()
                yield rng.uniform(0.1, 1.5), s.tool_result(output())
            end = rng.choice(["explicit", "explicit", "inferred", "error"])
            if end == "explicit":
                yield rng.uniform(0.1, 1.0), s.text("done") + s.turn_duration()
            elif end == "inferred":
                yield rng.uniform(0.1, 1.0), s.text("done")
            else:
                yield rng.uniform(0.1, 1.0), s.api_error()
            kind = "error" if end == "error" else "completed"
            quiet = 3.0 if end == "inferred" else 0.0  # the inferred settle time of these runs
        else:
            yield 0.0, s.start()
            for _ in range(rng.randrange(1, 8)):
                yield rng.uniform(0.1, 1.5), s.call(output()[:2000])
                if rng.random() < 0.3:
                    yield rng.uniform(0.1, 1.0), s.line("event_msg", type="agent_reasoning", text="thinking")
            if rng.random() < 0.8:
                yield rng.uniform(0.1, 1.0), s.answer() + s.complete()
                kind = "completed"
            else:
                yield rng.uniform(0.1, 1.0), s.error()
                kind = "error"
            quiet = 0.0
        owed[s.sid][kind] += 1
        final[s.sid] = kind
        yield None, rng.uniform(4.5, 8.0) + quiet  # the user reads the answer, then types again


@pytest.mark.timeout(LOAD_SECONDS + 300)
def test_fifty_sessions_appending_concurrently(tmp_path):
    rng = random.Random(50)
    (tmp_path / "claude" / "projects").mkdir(parents=True)
    (tmp_path / "codex" / "sessions").mkdir(parents=True)
    receiver = Receiver()
    exp = Daemon(tmp_path, receiver=receiver).start()
    sessions, gens, paths = [], {}, {}
    owed: dict[str, dict[str, int]] = {}
    final: dict[str, str] = {}
    for i in range(SESSIONS):
        if i % 2:
            s = CodexSession(f"0196{i:04d}-0000-7000-8000-0000000000{i:02d}", cwd=f"/home/dev/p{i}")
            paths[s.sid] = codex_path(tmp_path, s.sid)
            write(paths[s.sid], s.meta())
            prov = "codex"
        else:
            s = ClaudeSession(f"load{i:04d}-0000-4000-8000-0000000000{i:02d}", cwd=f"/home/dev/p{i}")
            paths[s.sid] = claude_path(tmp_path, s.sid, f"-home-dev-p{i}")
            prov = "claude_code"
        sessions.append(s)
        owed[s.sid] = {"completed": 0, "error": 0}
        gens[s.sid] = _turns(prov, s, random.Random(rng.random()), owed, final)
    try:
        cpu0, t0 = exp.cpu_seconds(), time.monotonic()
        pending = {s.sid: next(gens[s.sid]) for s in sessions}  # each session's next step
        heap = [(t0 + rng.uniform(0, 3), s.sid) for s in sessions]
        heapq.heapify(heap)
        lines = written = 0
        while heap:
            due, sid = heapq.heappop(heap)
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            delay, data = pending[sid]
            if delay is None:  # a turn ended; ``data`` is the pause before the next one
                if time.monotonic() - t0 > LOAD_SECONDS:
                    continue  # this session ends on this turn end
                pending[sid] = next(gens[sid])
                heapq.heappush(heap, (time.monotonic() + data + pending[sid][0], sid))
                continue
            write(paths[sid], data)
            lines += data.count(b"\n")
            written += len(data)
            pending[sid] = next(gens[sid])
            heapq.heappush(heap, (time.monotonic() + (pending[sid][0] or 0.0), sid))
        wall = time.monotonic() - t0
        cpu = exp.cpu_seconds() - cpu0
        for s in sessions:
            exp.wait_state(s.sid, final[s.sid], timeout=20)
        total = sum(n for o in owed.values() for n in o.values())
        wait_for(lambda: len(receiver.messages) >= total, timeout=30, what=f"{total} pages")
        time.sleep(2.0)
        wrong = [(sid, kind, n, len(alerts_for(receiver, sid, kind))) for sid, o in owed.items()
                 for kind, n in o.items() if len(alerts_for(receiver, sid, kind)) != n]
        assert not wrong, wrong
        assert len(receiver.messages) == total
        lat_sum = exp.value("coding_agent_alert_latency_seconds_sum")
        lat_n = exp.value("coding_agent_alert_latency_seconds_count")
        peak = exp.peak_rss_mib()
        report = (f"{SESSIONS} sessions for {wall:.0f} s: {lines} lines, {written / 2**20:.0f} MiB "
                  f"({lines / wall:.0f} lines/s, {written / 2**20 / wall:.1f} MiB/s); {total} turn ends, "
                  f"{len(receiver.messages)} pages; exporter CPU {100 * cpu / wall:.1f} % of a core, "
                  f"peak RSS {peak:.0f} MiB; mean alert latency {lat_sum / max(lat_n, 1):.2f} s "
                  f"(settle time 1 s included)")
        print("\n" + report)
        assert 100 * cpu / wall < CPU_BOUND_PERCENT, report
        assert exp.alive() and "Traceback" not in exp.log()
    finally:
        exp.stop()
        receiver.close()
