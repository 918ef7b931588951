"""Copilot CLI and Pi under the rules that hold for every agent: history
skipped at start-up and read from its end at an append (with the session's
id and project from the first line), the line cap, turns ended while the
exporter was down, and restarts that never page twice. The real exporter,
pages through Apprise to a loopback receiver."""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from harness import Exporter, Receiver, copilot_path, pi_path, wait_for

COPILOT_SID = "c0000000-0000-4000-8000-0000000000a1"
PI_SID = "019e7000-0000-7000-8000-0000000000a1"
OLD = time.time() - 3 * 86400


def _iso(t: float) -> str:
    dt = datetime.fromtimestamp(t, timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def _cp(type_: str, data: dict, t: float) -> bytes:
    """One Copilot CLI events line (envelope as 1.0.78 writes it)."""
    return json.dumps({"type": type_, "data": data, "id": str(uuid.uuid4()), "timestamp": _iso(t),
                       "parentId": None}).encode() + b"\n"


def _cp_turn(t: float, big: int = 0) -> bytes:
    """A prompt, one tool round (its result ``big`` bytes long), the answer."""
    iid = str(uuid.uuid4())
    return b"".join([
        _cp("user.message", {"content": "Run the tests", "delivery": "idle", "interactionId": iid}, t),
        _cp("assistant.turn_start", {"turnId": "0", "interactionId": iid}, t + 0.1),
        _cp("assistant.message", {"content": "", "interactionId": iid, "turnId": "0",
                                  "toolRequests": [{"toolCallId": "c1", "name": "bash", "type": "function"}]}, t + 1),
        _cp("tool.execution_start", {"toolCallId": "c1", "toolName": "bash", "turnId": "0"}, t + 1.1),
        _cp("tool.execution_complete", {"toolCallId": "c1", "turnId": "0", "success": True,
                                        "result": {"content": "x" * big}}, t + 2),
        _cp("assistant.turn_end", {"turnId": "0"}, t + 2.1),
        _cp("assistant.turn_start", {"turnId": "1", "interactionId": iid}, t + 2.2),
        _cp("assistant.message", {"content": "All tests pass.", "interactionId": iid, "turnId": "1",
                                  "toolRequests": []}, t + 3),
        _cp("assistant.turn_end", {"turnId": "1"}, t + 3.1),
    ])


def _pi(entry: dict, t: float) -> bytes:
    return json.dumps({"id": uuid.uuid4().hex[:8], "parentId": None, "timestamp": _iso(t), **entry}).encode() + b"\n"


def _pi_turn(t: float) -> bytes:
    msg = lambda role, **m: {"type": "message", "message": {"role": role, **m}}  # noqa: E731
    return b"".join([
        _pi(msg("user", content=[{"type": "text", "text": "Run the tests"}]), t),
        _pi(msg("assistant", content=[{"type": "toolCall", "id": "t1", "name": "bash", "arguments": {}}],
                stopReason="toolUse"), t + 1),
        _pi(msg("toolResult", toolCallId="t1", toolName="bash", content=[], isError=False), t + 2),
        _pi(msg("assistant", content=[{"type": "text", "text": "All tests pass."}], stopReason="stop"), t + 3),
    ])


def _append(path, data: bytes) -> None:
    for line in data.splitlines(keepends=True):
        with open(path, "ab") as f:
            f.write(line)
        time.sleep(0.05)


def test_history_line_cap_and_turns_ended_while_down(tmp_path):
    cp, pi = copilot_path(tmp_path, COPILOT_SID), pi_path(tmp_path, PI_SID)
    for path in (cp, pi):
        path.parent.mkdir(parents=True)
    cp.write_bytes(_cp("session.start", {"sessionId": COPILOT_SID, "copilotVersion": "1.0.78",
                                         "context": {"cwd": "/home/dev/copilotproj"}}, OLD) + _cp_turn(OLD + 1))
    pi.write_bytes(_pi({"type": "session", "version": 3, "id": PI_SID, "cwd": "/home/dev/piproj"}, OLD)
                   + _pi_turn(OLD + 1))
    for path in (cp, pi):
        os.utime(path, (OLD + 10, OLD + 10))
    receiver = Receiver()
    exp = Exporter(tmp_path, config={"sources": {"max_line_bytes": 64 * 1024}}, receiver=receiver).start()
    try:
        # history: followed, not decoded
        for prov in ("copilot_cli", "pi"):
            wait_for(lambda: exp.value("coding_agent_files_watched", provider=prov) == 1, what=f"{prov} followed")
            assert exp.value("coding_agent_transcript_lines_total", provider=prov) == 0
        assert exp.state(COPILOT_SID) is None and exp.state(PI_SID) is None
        # appended to: read from its end, one page each, named from the first line (session.start, header)
        _append(cp, _cp_turn(time.time(), big=100 * 1024))  # its tool result is over the line cap
        _append(pi, _pi_turn(time.time()))
        exp.wait_state(COPILOT_SID, "completed")
        exp.wait_state(PI_SID, "completed")
        wait_for(lambda: len(receiver.messages) == 2, what="one page per appended turn")
        assert sorted(m["title"] for m in receiver.messages) == ["Copilot CLI · copilotproj: your turn",
                                                                "Pi · piproj: your turn"], receiver.messages
        assert exp.value("coding_agent_transcript_skipped_lines_total", provider="copilot_cli",
                         reason="oversized") == 1
        # the series carry the provider label
        for prov, sid in (("copilot_cli", COPILOT_SID), ("pi", PI_SID)):
            assert exp.value("coding_agent_session_state", provider=prov, session_id=sid, state="completed") == 1
            assert exp.value("coding_agent_completions_total", provider=prov, evidence="explicit") == 1
            assert exp.value("coding_agent_transcript_lines_total", provider=prov) > 0

        # a Copilot turn answered, the exporter stopped before its turn_end, which is written while it is down
        turn = _cp_turn(time.time()).splitlines(keepends=True)
        _append(cp, b"".join(turn[:-1]))
        exp.wait_state(COPILOT_SID, "working")
        time.sleep(1.5)
        assert len(receiver.messages) == 2  # the answer alone is not the end: its turn_end is certain to come
        assert exp.stop() == 0
        _append(cp, turn[-1])
        exp.start()
        exp.wait_state(COPILOT_SID, "completed")
        wait_for(lambda: len(receiver.messages) == 3, what="the turn ended while down pages once")
        # and a restart with nothing new pages nothing
        assert exp.stop() == 0
        exp.start()
        exp.wait_state(COPILOT_SID, "completed")
        exp.wait_state(PI_SID, "completed")
        time.sleep(2.0)
        assert len(receiver.messages) == 3, receiver.messages
    finally:
        exp.stop()
        receiver.close()


# -- decisions of the decoders, in process ------------------------------------------
def _store_read(tmp_path, provider: str, name: str, data: bytes, at: float):
    from coding_agent_exporter.metrics import Metrics
    from coding_agent_exporter.reducer import Timing
    from coding_agent_exporter.files import FileTable
    from coding_agent_exporter.store import SessionStore

    store = SessionStore(Metrics(), Timing())
    files = FileTable(store, 1 << 20)
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (at - 200, at - 200))
    assert files.track(str(path), provider, tmp_path)
    files.refresh(str(path), live=True, final=True)
    _store_read.transitions = store.evaluate(at)
    return store.rows(at)


def test_copilot_decisions(tmp_path):
    t = time.time() - 1000
    start = _cp("session.start", {"sessionId": COPILOT_SID, "context": {"cwd": "/w/p"}}, t)
    done = start + _cp_turn(t + 1)
    # a subagent's permission prompt (top-level agentId) blocks the session: waiting
    sub = json.loads(_cp("permission.requested", {"requestId": "r1", "permissionRequest": {"kind": "write"}}, t + 10))
    sub["agentId"] = "call_task"
    (row,) = _store_read(tmp_path, "copilot_cli", "a/events.jsonl", done + json.dumps(sub).encode() + b"\n", t + 200)
    assert (row["state"], row["waiting_for"]) == ("waiting", {"reason": "permission", "tool": "write"})
    # a permission.completed for a prompt never seen, and a session.error long after the turn end: no change
    late = _cp("permission.completed", {"requestId": "zz", "result": {"kind": "approved"}}, t + 10) \
        + _cp("session.error", {"errorType": "rate_limit", "statusCode": 429}, t + 60)
    (row,) = _store_read(tmp_path, "copilot_cli", "b/events.jsonl", done + late, t + 200)
    assert (row["state"], row["session_id"], row["project"]) == ("completed", COPILOT_SID, "p")
    # an open ask_user call is a question; the flat layout and a copy under another name are sessions
    iid = "i-ask"
    ask = start + _cp("user.message", {"content": "x", "interactionId": iid}, t + 1) \
        + _cp("tool.execution_start", {"toolCallId": "q", "toolName": "ask_user"}, t + 2)
    (row,) = _store_read(tmp_path, "copilot_cli", f"{COPILOT_SID}.jsonl", ask, t + 200)
    assert (row["state"], row["waiting_for"]) == ("waiting", {"reason": "question", "tool": "ask_user"})
    from coding_agent_exporter.providers import copilot_cli

    assert copilot_cli.classify_path(tmp_path, tmp_path / COPILOT_SID / "events.jsonl") == (COPILOT_SID, False)
    assert copilot_cli.classify_path(tmp_path, tmp_path / COPILOT_SID / "other.jsonl") is None
    assert copilot_cli.classify_path(tmp_path, tmp_path / COPILOT_SID / "checkpoints" / "x.jsonl") is None
    assert copilot_cli.classify_path(tmp_path, tmp_path / COPILOT_SID / "workspace.yaml") is None
    assert copilot_cli.classify_path(tmp_path, tmp_path / "copies" / "v1.jsonl") == ("v1", False)


def test_pi_fork_copies_are_history_and_roots_follow_the_environment(tmp_path, monkeypatch):
    t = time.time() - 1000
    header = _pi({"type": "session", "version": 3, "id": PI_SID, "cwd": "/w/p", "parentSession": "/x.jsonl"}, t)
    copied = _pi_turn(t - 500)  # the parent's entries keep their older timestamps
    rows = _store_read(tmp_path, "pi", f"2026-01-01T00-00-00-000Z_{PI_SID}.jsonl", header + copied, t + 200)
    (row,) = rows
    assert (row["state"], row["session_id"]) == ("completed", PI_SID)
    assert not any(tr.new.live for tr in _store_read.transitions)  # read live, but never news: no page
    from coding_agent_exporter.providers import pi

    monkeypatch.setenv("PI_CODING_AGENT_DIR", "relative/ignored")
    monkeypatch.delenv("PI_CODING_AGENT_SESSION_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert pi.default_roots() == [tmp_path / ".pi" / "agent" / "sessions"]
    monkeypatch.setenv("PI_CODING_AGENT_DIR", "/opt/pi")
    assert pi.default_roots() == [Path("/opt/pi/sessions")]
    monkeypatch.setenv("PI_CODING_AGENT_SESSION_DIR", "/srv/sessions")
    assert pi.default_roots() == [Path("/srv/sessions")]
