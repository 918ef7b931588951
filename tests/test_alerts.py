"""Apprise delivery, end to end: real notifications to a loopback receiver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import yaml

from harness import CASES, ROOT, Exporter, Receiver, append_lines, claude_path, session_id_of, wait_for

SECRET = "sk-ant-PLANTED-SECRET-1234567890"


def _lines(name: str) -> list[bytes]:
    return (CASES / name).read_bytes().splitlines(keepends=True)


def test_failing_receiver_delivered_once_after_retries(tmp_path):
    receiver = Receiver(fail_first=3)
    exp = Exporter(tmp_path, receiver=receiver).start()
    try:
        src = CASES / "24_one_turn_many_end_markers.jsonl"
        sid = session_id_of(src)
        append_lines(claude_path(tmp_path, sid), src.read_bytes(), 0.02)
        wait_for(lambda: len(receiver.messages) == 1, timeout=20, what="delivery after retries")
        time.sleep(1.5)
        assert len(receiver.messages) == 1
        assert receiver.failed == 3
        assert exp.value("coding_agent_alerts_failed_total", kind="completed") == 3
        assert exp.value("coding_agent_alerts_total", kind="completed") == 1
        assert exp.value("coding_agent_alert_latency_seconds_count", kind="completed") == 1
        msg = receiver.messages[0]
        assert msg["title"] == "Claude Code · proj: your turn"
        assert f"Session: {sid}" in msg["message"]
        assert "Turn took: 2s" in msg["message"] and "Detected: explicit" in msg["message"]
    finally:
        exp.stop()
        receiver.close()


def test_restart_in_the_middle_of_cases(tmp_path):
    """Stop the exporter mid-case (SIGTERM, then kill -9), keep appending while
    it is down, start it again: every turn pages exactly once."""
    receiver = Receiver()
    exp = Exporter(tmp_path, receiver=receiver).start()
    started = [exp]
    src03 = "03_malformed_midfile.jsonl"  # two turns
    sid = session_id_of(CASES / src03)
    path = claude_path(tmp_path, sid)
    lines = _lines(src03)
    try:
        append_lines(path, b"".join(lines[:4]), 0.05)  # turn 1 complete
        wait_for(lambda: len(receiver.messages) == 1, what="turn 1 alert")
        exp.stop()
        append_lines(path, b"".join(lines[4:]), 0)  # turn 2 written while down
        exp2 = Exporter(tmp_path, receiver=receiver)
        exp2.port = exp.port
        exp2.config = exp.config
        started.append(exp2)
        exp2.start()
        wait_for(lambda: len(receiver.messages) == 2, what="turn 2 alert after restart")
        time.sleep(1.0)
        assert len(receiver.messages) == 2
        # crash (kill -9) and restart: nothing repeated
        exp2.stop(sig="kill")
        exp3 = Exporter(tmp_path, receiver=receiver)
        exp3.config = exp.config
        started.append(exp3)
        exp3.start()
        exp3.wait_state(sid, "completed")
        time.sleep(1.0)
        assert len(receiver.messages) == 2
        assert exp3.value("coding_agent_alerts_total") == 0
        exp3.stop()
    finally:
        for e in started:
            e.stop()
        receiver.close()


def test_pending_alert_survives_a_crash(tmp_path):
    """An alert still settling when the exporter dies is sent after restart."""
    receiver = Receiver()
    exp = Exporter(tmp_path, receiver=receiver, config={"alerts": {"settle_seconds": 3.0}}).start()
    src = CASES / "24_one_turn_many_end_markers.jsonl"
    sid = session_id_of(src)
    try:
        append_lines(claude_path(tmp_path, sid), src.read_bytes(), 0)
        exp.wait_state(sid, "completed")
        time.sleep(0.3)
        ledger = json.loads((tmp_path / "state" / "alerts-ledger.json").read_text())
        assert [v["status"] for v in ledger["alerts"].values()] == ["pending"]
        exp.stop(sig="kill")
        assert receiver.messages == []
        exp2 = Exporter(tmp_path, receiver=receiver)
        exp2.config = exp.config
        exp2.start()
        wait_for(lambda: len(receiver.messages) == 1, timeout=10, what="the pending alert")
        time.sleep(1.0)
        assert len(receiver.messages) == 1
        exp2.stop()
    finally:
        exp.stop()
        receiver.close()


def _claude(sid: str, recs: list[tuple]) -> bytes:
    """(kind, seconds, uuid) triples to Claude Code lines."""
    out = b""
    for kind, sec, uid in recs:
        r = {"type": "user", "uuid": uid, "sessionId": sid, "cwd": "/x/proj",
             "timestamp": f"2026-05-01T10:00:{sec:06.3f}Z"}
        if kind == "prompt":
            r["message"] = {"role": "user", "content": "go on"}
        else:
            r.update(type="system", subtype="turn_duration", durationMs=1000)
        out += json.dumps(r).encode() + b"\n"
    return out


def test_superseded_within_settle_sends_nothing(tmp_path):
    """A queued prompt that starts the next turn 0.3 s (record time) after the
    first ends: the first turn never settled, only the second pages. The same
    file with the next prompt a minute later (appended fast, as a replay, or
    written in one piece, read at once) pages both: the first completion
    stood for a minute."""
    receiver = Receiver()
    exp = Exporter(tmp_path, receiver=receiver, config={"alerts": {"settle_seconds": 1.5}}).start()
    try:
        sid = "c0de0000-0000-4000-8000-00000000a001"
        quick = [("prompt", 0, "9b1c0001-0000-4000-8000-000000000001"), ("done", 5, "9b1c0001-0000-4000-8000-000000000002"),
                 ("prompt", 5.3, "9b1c0001-0000-4000-8000-000000000003"), ("done", 9, "9b1c0001-0000-4000-8000-000000000004")]
        append_lines(claude_path(tmp_path, sid), _claude(sid, quick), 0.05)
        exp.wait_state(sid, "completed")
        wait_for(lambda: len(receiver.messages) == 1, timeout=10, what="turn 2 alert")
        sid2 = "c0de0000-0000-4000-8000-00000000a002"
        slow = [("prompt", 0, "9b1c0002-0000-4000-8000-000000000001"), ("done", 5, "9b1c0002-0000-4000-8000-000000000002"),
                ("prompt", 59, "9b1c0002-0000-4000-8000-000000000003"), ("done", 59.5, "9b1c0002-0000-4000-8000-000000000004")]
        append_lines(claude_path(tmp_path, sid2), _claude(sid2, slow), 0.05)
        wait_for(lambda: len(receiver.messages) == 3, timeout=10, what="both turns of the slow session")
        # the same turns written at once (one read): each turn end still pages
        sid3 = "c0de0000-0000-4000-8000-00000000a003"
        path = claude_path(tmp_path, sid3)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_claude(sid3, [(k, t, "9b1c0003" + u[8:]) for k, t, u in slow]))
        wait_for(lambda: len(receiver.messages) == 5, timeout=10, what="both turns written at once")
        time.sleep(2.0)  # past settle: nothing more from any of the three (the pager's rules: tests/test_pager.py)
        per = [sum(f"Session: {x}" in m.get("message", "") for m in receiver.messages) for x in (sid, sid2, sid3)]
        assert per == [1, 2, 2], per
        assert exp.value("coding_agent_completions_total") == 4 + 2
    finally:
        exp.stop()
        receiver.close()


def test_excerpt_only_on_opt_in_and_no_secret_by_default(tmp_path):
    sid = "c0de0000-0000-4000-8000-00000000e001"
    recs = [
        {"type": "user", "uuid": "u1", "sessionId": sid, "cwd": "/x/proj", "timestamp": "2026-05-01T10:00:00Z",
         "message": {"role": "user", "content": f"use the key {SECRET}"}},
        {"type": "assistant", "uuid": "u2", "sessionId": sid, "cwd": "/x/proj", "timestamp": "2026-05-01T10:00:02Z",
         "message": {"id": "m2", "role": "assistant", "stop_reason": "end_turn", "model": "m",
                     "content": [{"type": "text", "text": f"Done. I used {SECRET} and all tests pass now."}]}},
    ]
    data = b"".join(json.dumps(r).encode() + b"\n" for r in recs)
    for opt_in, expect in ((False, False), (True, True)):
        root = tmp_path / str(opt_in)
        receiver = Receiver()
        exp = Exporter(root, receiver=receiver,
                       config={"alerts": {"include_excerpt": opt_in, "excerpt_chars": 30}}).start()
        try:
            append_lines(claude_path(root, sid), data, 0)
            wait_for(lambda: len(receiver.messages) == 1, what="alert")
            body = receiver.messages[0]["message"]
            assert ("Done. I used" in body) is expect
            if expect:
                assert body.endswith("…") and len(body.split("\n\n", 1)[1]) == 30
            else:
                assert SECRET not in body
            assert SECRET not in exp.scrape_text()
        finally:
            exp.stop()
            receiver.close()
        assert SECRET not in exp.log()


def test_tags_route_kinds(tmp_path):
    errors, completions = Receiver(), Receiver()
    exp = Exporter(tmp_path, config={"alerts": {"urls": [f"error={errors.url}", f"completed={completions.url}"]}})
    exp.start()
    try:
        for name in ("15_rate_limit_error.jsonl", "24_one_turn_many_end_markers.jsonl"):
            append_lines(claude_path(tmp_path, session_id_of(CASES / name)), (CASES / name).read_bytes(), 0)
        wait_for(lambda: len(errors.messages) == 1 and len(completions.messages) == 1, what="one each")
        time.sleep(0.5)
        assert "stopped on rate limit" in errors.messages[0]["title"]
        assert "your turn" in completions.messages[0]["title"]
    finally:
        exp.stop()
        errors.close()
        completions.close()


def test_max_age_and_disabled_kinds(tmp_path):
    """Records older than alerts.max_age_seconds never page; nor do kinds
    switched off."""
    receiver = Receiver()
    exp = Exporter(tmp_path, receiver=receiver,
                   config={"alerts": {"max_age_seconds": 3600, "kinds": {"error": False}}}).start()
    try:
        for name in ("24_one_turn_many_end_markers.jsonl", "15_rate_limit_error.jsonl"):
            append_lines(claude_path(tmp_path, session_id_of(CASES / name)), (CASES / name).read_bytes(), 0)
        exp.wait_state(session_id_of(CASES / "24_one_turn_many_end_markers.jsonl"), "completed")
        exp.wait_state(session_id_of(CASES / "15_rate_limit_error.jsonl"), "error")
        time.sleep(1.0)
        assert receiver.messages == []  # the case files' records are from May 2026
    finally:
        exp.stop()
        receiver.close()


def test_url_from_environment_and_test_alert(tmp_path):
    receiver = Receiver()
    try:
        cfg = tmp_path / "c.yml"
        cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "s")}))
        env = {**os.environ, "CODING_AGENT_EXPORTER_APPRISE_URLS": receiver.url}
        out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "test-alert", "--config.file", str(cfg)], cwd=ROOT,
                             capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        assert out.stdout.startswith("ok")
        assert len(receiver.messages) == 1 and "test" in receiver.messages[0]["title"]
        receiver.fail_first = 10
        receiver.failed = 0
        out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "test-alert", "--config.file", str(cfg)], cwd=ROOT,
                             capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 1 and "FAILED" in out.stdout
        env.pop("CODING_AGENT_EXPORTER_APPRISE_URLS")
        out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "test-alert", "--config.file", str(cfg)], cwd=ROOT,
                             capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 1 and "no Apprise URLs configured" in out.stdout
    finally:
        receiver.close()


def test_secret_url_not_logged(tmp_path):
    receiver = Receiver()
    url = f"json://user:{SECRET}@127.0.0.1:{receiver.port}/notify"
    exp = Exporter(tmp_path, config={"alerts": {"urls": [url]}}).start()
    try:
        src = CASES / "24_one_turn_many_end_markers.jsonl"
        append_lines(claude_path(tmp_path, session_id_of(src)), src.read_bytes(), 0)
        wait_for(lambda: len(receiver.messages) == 1, what="alert")
    finally:
        exp.stop()
        receiver.close()
    assert SECRET not in exp.log()
    assert "alerts: completed, error, waiting to 1 target(s)" in exp.log()


def test_resumed_session_replaying_history_does_not_page(tmp_path):
    """Claude Code's resume writes a new session file that starts with copies
    of the old conversation (same uuids, still naming the old session).
    Whether the old turn was paged live or was already there at start-up, its
    replay pages nothing: the file itself says it is a copy."""
    receiver = Receiver()
    src = CASES / "24_one_turn_many_end_markers.jsonl"
    old_sid = session_id_of(src)
    claude_path(tmp_path, old_sid).parent.mkdir(parents=True)
    claude_path(tmp_path, old_sid).write_bytes(src.read_bytes())  # backfill
    exp = Exporter(tmp_path, receiver=receiver).start()
    try:
        exp.wait_state(old_sid, "completed")
        new_sid = "c0000024-2424-4424-8424-00000000beef"
        append_lines(claude_path(tmp_path, new_sid), src.read_bytes(), 0.02)
        time.sleep(1.0)
        assert exp.state(new_sid) == "completed"  # the copied history sets the state, as a backlog does
        assert receiver.messages == []
        # new work in the resumed session pages
        more = (b'{"type":"user","uuid":"n1","sessionId":"%s","cwd":"/home/dev/proj","timestamp":"2026-05-01T11:00:00Z",'
                b'"message":{"role":"user","content":"next"}}\n'
                b'{"type":"system","subtype":"turn_duration","durationMs":1000,"uuid":"n2","sessionId":"%s",'
                b'"timestamp":"2026-05-01T11:00:01Z"}\n') % (new_sid.encode(), new_sid.encode())
        append_lines(claude_path(tmp_path, new_sid), more, 0)
        wait_for(lambda: len(receiver.messages) == 1, what="alert for the new turn")
    finally:
        exp.stop()
        receiver.close()


def test_two_turns_ended_while_the_exporter_was_down_page_twice(tmp_path):
    """Two turns that ended while the exporter was down are read in one
    piece at the next start: each turn end is news and pages once."""
    receiver = Receiver()
    exp = Exporter(tmp_path, receiver=receiver, config={"alerts": {"settle_seconds": 1.5}}).start()
    sid = "c0de0000-0000-4000-8000-00000000a004"
    path = claude_path(tmp_path, sid)
    path.parent.mkdir(parents=True, exist_ok=True)
    uid = "9b1c0004-0000-4000-8000-0000000000{:02d}".format
    try:
        path.write_bytes(_claude(sid, [("prompt", 0, uid(1)), ("done", 5, uid(2))]))
        wait_for(lambda: len(receiver.messages) == 1, what="the first turn's page")
        assert exp.stop() == 0
        with open(path, "ab") as f:
            f.write(_claude(sid, [("prompt", 20, uid(3)), ("done", 25, uid(4)), ("prompt", 40, uid(5)),
                                  ("done", 45, uid(6))]))
        exp.start()
        wait_for(lambda: len(receiver.messages) == 3, what="a page for each turn ended while down")
        time.sleep(2.0)
        assert len(receiver.messages) == 3
        assert exp.value("coding_agent_completions_total") == 2
    finally:
        exp.stop()
        receiver.close()


def test_every_error_kind_has_a_title_that_reads_well():
    """An error page's title says what happened in words (not "stopped on agent exited")."""
    from coding_agent_exporter.alerts import ERROR_TITLES
    from coding_agent_exporter.names import ERROR_KINDS

    assert set(ERROR_TITLES) == set(ERROR_KINDS)
    assert ERROR_TITLES["agent_exited"] == "the agent exited mid-turn"
    assert all("_" not in title for title in ERROR_TITLES.values())
