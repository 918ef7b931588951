"""Logs that answer "why did (or didn't) I get paged?".

The real exporter with ``--log.format json``: one line per page decision
naming provider, session id, project, kind and turn, sent (with evidence) or
not sent with the reason; Apprise's chatter and watchdog's per-event lines
stay out of INFO; DEBUG shows per-session state transitions.
"""

from __future__ import annotations

import json
import time

from harness import Exporter, Receiver, claude_path, codex_path, wait_for
from test_hardening_support import ClaudeSession, CodexSession, iso, write


def _lines(exp: Exporter) -> list[dict]:
    out = []
    for raw in exp.log().splitlines():
        out.append(json.loads(raw))  # every line is JSON: fails on any other output
    return out


def _decisions(exp: Exporter, sid: str) -> list[dict]:
    return [r for r in _lines(exp) if r["msg"].startswith("page ") and r.get("session_id") == sid]


def _wait_decision(exp: Exporter, sid: str, what: str) -> dict:
    return wait_for(lambda: next(iter(_decisions(exp, sid)), None), timeout=15, what=what)


def test_every_page_decision_is_one_info_line(tmp_path):
    receiver = Receiver()
    old = ClaudeSession("0a0a0000-0000-4000-8000-00000000000a", cwd="/home/dev/history")
    write(claude_path(tmp_path, old.sid), old.prompt() + old.text() + old.turn_duration())
    exp = Exporter(tmp_path, receiver=receiver, extra_args=["--log.format", "json"],
                   config={"alerts": {"settle_seconds": 2.0, "max_age_seconds": 3600},
                           "reducer": {"stall_after_seconds": 2.0}}).start()
    try:
        # Sent, with the evidence.
        done = ClaudeSession("0b0b0000-0000-4000-8000-00000000000b", cwd="/home/dev/shop")
        write(claude_path(tmp_path, done.sid), done.prompt() + done.text() + done.turn_duration(ms=42000))
        sent = _wait_decision(exp, done.sid, "the sent decision")
        assert sent["msg"] == "page sent" and sent["level"] == "INFO", sent
        assert sent["provider"] == "claude_code" and sent["project"] == "shop" and sent["kind"] == "completed"
        assert sent["turn"] and sent["evidence"] == "explicit" and sent["detail"] == "turn_duration"
        assert sent["duration_seconds"] == 42.0 and sent["targets"] == 1
        assert len(receiver.messages) == 1

        # Superseded within the settle time: the next prompt came 0.1 s later.
        quick = ClaudeSession("0c0c0000-0000-4000-8000-00000000000c")
        write(claude_path(tmp_path, quick.sid), quick.prompt() + quick.turn_duration())
        exp.wait_state(quick.sid, "completed")
        write(claude_path(tmp_path, quick.sid), quick.prompt("next"))
        d = _wait_decision(exp, quick.sid, "the superseded decision")
        assert d["msg"] == "page not sent" and d["reason"].startswith("superseded within alerts.settle_seconds")
        assert "now working" in d["reason"]

        # Older than max_age_seconds (written now, but its record says two hours ago).
        stale = ClaudeSession("0d0d0000-0000-4000-8000-00000000000d")
        two_hours_ago = iso(time.time() - 7200)
        write(claude_path(tmp_path, stale.sid),
              stale.line(stale._base(type="user", message={"role": "user", "content": "go"}, timestamp=two_hours_ago))
              + stale.line(stale._base(type="system", subtype="turn_duration", durationMs=1000, isMeta=False,
                                       timestamp=two_hours_ago)))
        d = _wait_decision(exp, stale.sid, "the max-age decision")
        assert d["msg"] == "page not sent" and "older than alerts.max_age_seconds" in d["reason"], d

        # Kind off: stalled pages are off by default.
        hung = ClaudeSession("0e0e0000-0000-4000-8000-00000000000e")
        write(claude_path(tmp_path, hung.sid), hung.prompt() + hung.tool_use())
        d = _wait_decision(exp, hung.sid, "the kind-off decision")
        assert d["kind"] == "stalled" and d["reason"] == "kind off (alerts.kinds.stalled: false)", d

        # A subagent's turn end is sidechain work of its session: no decision at all.
        sub = CodexSession("0196ffff-0000-7000-8000-00000000000f")
        meta = CodexSession.line("session_meta", id=sub.sid, timestamp=iso(), cwd="/home/dev/proj",
                                 source={"subagent": "review"}, cli_version="0.130.0")
        write(codex_path(tmp_path, sub.sid), meta + sub.start() + sub.answer() + sub.complete())

        # Backfill: one summary line at INFO (the session is named at DEBUG only).
        assert any(r["msg"].startswith("not paging 1 turn end(s) that were not news") for r in _lines(exp))
        assert _decisions(exp, old.sid) == []
        time.sleep(1.0)
        # One line per decision, and nothing from Apprise or watchdog at INFO.
        for sid, kind in ((done.sid, "completed"), (quick.sid, "completed"), (stale.sid, "completed"),
                          (hung.sid, "stalled")):
            assert len([d for d in _decisions(exp, sid) if d["kind"] == kind]) == 1, _decisions(exp, sid)
        assert _decisions(exp, sub.sid) == []
        assert not [r for r in _lines(exp) if r["source"] in ("apprise", "watchdog") or r["level"] == "DEBUG"]
    finally:
        exp.stop()
        receiver.close()


def test_debug_shows_state_transitions_not_file_events(tmp_path):
    receiver = Receiver()
    s = ClaudeSession("0f0f0000-0000-4000-8000-00000000000f", cwd="/home/dev/shop")
    exp = Exporter(tmp_path, receiver=receiver, extra_args=["--log.level", "debug", "--log.format", "logfmt"]).start()
    try:
        path = claude_path(tmp_path, s.sid)
        write(path, s.prompt())
        exp.wait_state(s.sid, "working")
        for _ in range(20):  # twenty appends: twenty batches of file events
            write(path, s.tool_use() + s.tool_result())
            time.sleep(0.02)
        write(path, s.text() + s.turn_duration())
        wait_for(lambda: "msg=\"page sent\"" in exp.log(), what="the page")
    finally:
        exp.stop()
        receiver.close()
    log = exp.log().splitlines()
    mine = [ln for ln in log if f"session_id={s.sid}" in ln and 'msg="session state"' in ln]
    assert any("from=unknown to=working" in ln for ln in mine), mine
    assert any("from=working to=completed" in ln and "evidence=explicit" in ln and "live=True" in ln
               for ln in mine), mine
    assert len(mine) <= 4, mine  # transitions, not one line per append
    assert not [ln for ln in log if "source=watchdog" in ln], "watchdog's per-event lines"
    assert not [ln for ln in log if "connectionpool" in ln], "urllib3's request lines (some URLs hold tokens)"
    assert any("source=apprise" in ln and "level=DEBUG" in ln for ln in log), "Apprise chatter at DEBUG"
    assert all(ln.startswith("time=") and " level=" in ln and " msg=" in ln for ln in log), log[:5]
