"""Hook events (issue 10): the JSON Claude Code and Codex hooks really send,
over the routes the agents use — Claude Code's HTTP hook POSTs to
``/hooks/claude_code``, a command hook pipes it to ``coding-agent-exporter
hook`` — joined to the transcript's session, paged through Apprise to a
loopback receiver. Payload shapes: tests/fixtures/hooks (from both agents'
hook references)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from harness import ROOT, Exporter, Receiver, claude_path, codex_path, wait_for

SID = "d0000010-0000-4000-8000-000000000001"
CODEX_SID = "019f1000-0000-7000-8000-0000000000aa"
T0 = time.time() - 30


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def claude_line(kind: str, n: int, t: float, **extra) -> bytes:
    base = {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": "/home/dev/shop",
            "sessionId": SID, "version": "2.1.150", "uuid": f"d0000010-{n:04d}-4000-8000-000000000000",
            "timestamp": _iso(t)}
    if kind == "prompt":
        base.update(type="user", message={"role": "user", "content": "rebuild it"})
    elif kind == "tool_use":
        base.update(type="assistant", message={"id": f"msg_{n}", "role": "assistant", "model": "claude-sonnet-4-5",
                                               "content": [{"type": "tool_use", "id": f"toolu_{n}",
                                                            "name": extra.get("name", "Bash"),
                                                            "input": {"command": "make"}}],
                                               "stop_reason": "tool_use"})
    elif kind == "tool_result":
        base.update(type="user", message={"role": "user", "content": [
            {"tool_use_id": f"toolu_{extra['of']}", "type": "tool_result", "content": "ok"}]})
    elif kind == "text":
        base.update(type="assistant", message={"id": f"msg_{n}", "role": "assistant", "model": "claude-sonnet-4-5",
                                               "content": [{"type": "text", "text": extra.get("text", "Done.")}],
                                               "stop_reason": None})
    elif kind == "turn_duration":
        base.update(type="system", subtype="turn_duration", durationMs=9000, isMeta=False)
    return json.dumps(base).encode() + b"\n"


def post(exp: Exporter, provider: str, body, headers: dict | None = None) -> tuple[int, bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{exp.port}/hooks/{provider}", data=data, method="POST",
                                 headers={**exp.hook_headers(), **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def hook_cli(exp: Exporter | None, provider: str, body: dict, url: str | None = None,
             config: Path | None = None) -> subprocess.CompletedProcess:
    url = url or f"http://127.0.0.1:{exp.port}"
    args = [sys.executable, "-m", "coding_agent_exporter", "hook", "--agent", provider, "--url", url]
    if config is not None or exp is not None:
        args += ["--config.file", str(config or exp.config_path)]
    return subprocess.run(args, input=json.dumps(body).encode(), capture_output=True, cwd=ROOT, timeout=30)


def claude_hook(event: str, path: Path, **fields) -> dict:
    return {"session_id": SID, "transcript_path": str(path), "cwd": "/home/dev/shop",
            "permission_mode": "default", "hook_event_name": event, **fields}


@pytest.fixture
def exp(exporter):
    return exporter


def test_permission_prompt_waits_and_pages_then_stop_hook_completes(exp):
    """HK1's kind: PermissionRequest → waiting (reason permission, tool Bash)
    and one page naming it; the tool's result ends the wait; the Stop hook is
    explicit completion at once (no 30 s inference); the transcript's later
    turn_duration is the same completion: no second page."""
    path = claude_path(exp.root, SID, "-home-dev-shop")
    path.parent.mkdir(parents=True)
    now = time.time()
    path.write_bytes(claude_line("prompt", 1, now - 2) + claude_line("tool_use", 2, now - 1))
    exp.wait_state(SID, "working")
    status, _ = post(exp, "claude_code", claude_hook("PermissionRequest", path, tool_name="Bash",
                                                     tool_input={"command": "rm -rf build && make"},
                                                     permission_suggestions=[]))
    assert status == 200
    exp.wait_state(SID, "waiting")
    wait_for(lambda: len(exp.receiver.messages) == 1, what="the waiting page")
    page = exp.receiver.messages[0]
    assert page["title"] == "Claude Code · shop: needs your approval"
    assert f"Session: {SID}" in page["message"] and "rm -rf" not in json.dumps(page)
    assert "Waiting for: permission (tool \"Bash\")" in page["message"]
    assert exp.value("coding_agent_sessions", provider="claude_code", state="waiting") == 1
    assert exp.value("coding_agent_hook_events_total", provider="claude_code", event="PermissionRequest") == 1
    time.sleep(0.3)
    with open(path, "ab") as f:
        f.write(claude_line("tool_result", 3, time.time(), of=2))
    post(exp, "claude_code", claude_hook("PostToolUse", path, tool_name="Bash", tool_input={"command": "make"},
                                         tool_response={"stdout": "ok"}, tool_use_id="toolu_2"))
    exp.wait_state(SID, "working")
    assert exp.value("coding_agent_user_wait_seconds_count", provider="claude_code", reason="permission") == 1
    with open(path, "ab") as f:
        f.write(claude_line("text", 4, time.time(), text="Rebuilt."))
    post(exp, "claude_code", claude_hook("Stop", path, stop_hook_active=False, last_assistant_message="Rebuilt."))
    exp.wait_state(SID, "completed", timeout=5)  # inferred_settle is longer than this in the harness
    wait_for(lambda: len(exp.receiver.messages) == 2, what="the completion page")
    assert exp.receiver.messages[1]["title"] == "Claude Code · shop: your turn"
    with open(path, "ab") as f:
        f.write(claude_line("turn_duration", 5, time.time()))
    time.sleep(2.5)
    assert len(exp.receiver.messages) == 2
    assert exp.value("coding_agent_completions_total", provider="claude_code") == 1


def test_stop_hook_before_the_transcript_flush(exp):
    """Claude's Stop can fire before the final answer is written: the answer
    flushed afterwards does not reopen the turn or page again."""
    path = claude_path(exp.root, SID, "-home-dev-shop")
    path.parent.mkdir(parents=True)
    now = time.time()
    path.write_bytes(claude_line("prompt", 1, now - 2) + claude_line("tool_use", 2, now - 1.5)
                     + claude_line("tool_result", 3, now - 1, of=2))
    exp.wait_state(SID, "working")
    answer_time = time.time()
    post(exp, "claude_code", claude_hook("Stop", path, stop_hook_active=False, last_assistant_message="x"))
    exp.wait_state(SID, "completed", timeout=5)
    with open(path, "ab") as f:
        f.write(claude_line("text", 4, answer_time, text="All done."))
    wait_for(lambda: len(exp.receiver.messages) == 1, what="one page")
    time.sleep(4)  # past the harness's inferred settle time
    assert exp.state(SID) == "completed"
    assert len(exp.receiver.messages) == 1


def test_prompt_answered_within_settle_sends_nothing(exp):
    """A permission prompt answered at the keyboard within the settle time
    pages nothing; a wait raised by a subagent (agent_id) is the session's."""
    path = claude_path(exp.root, SID, "-home-dev-shop")
    path.parent.mkdir(parents=True)
    now = time.time()
    path.write_bytes(claude_line("prompt", 1, now - 2) + claude_line("tool_use", 2, now - 1))
    exp.wait_state(SID, "working")
    post(exp, "claude_code", claude_hook("PermissionRequest", path, tool_name="Bash", agent_id="a1b2c3",
                                         agent_type="general-purpose", tool_input={"command": "ls"}))
    exp.wait_state(SID, "waiting")
    post(exp, "claude_code", claude_hook("PostToolUse", path, tool_name="Bash", agent_id="a1b2c3",
                                         tool_input={"command": "ls"}, tool_response={"stdout": ""}))
    exp.wait_state(SID, "working")
    time.sleep(2.0)  # past the settle time (1 s in the harness)
    assert exp.receiver.messages == []


def test_notification_only_route_and_stop_failure(exp):
    """Hosts without PermissionRequest: Notification permission_prompt is the
    wait; idle_prompt adds nothing; StopFailure is an error of its kind."""
    path = claude_path(exp.root, SID, "-home-dev-shop")
    path.parent.mkdir(parents=True)
    now = time.time()
    path.write_bytes(claude_line("prompt", 1, now - 2) + claude_line("tool_use", 2, now - 1))
    exp.wait_state(SID, "working")
    post(exp, "claude_code", claude_hook("Notification", path, message="Claude needs your permission to use Bash",
                                         notification_type="permission_prompt"))
    exp.wait_state(SID, "waiting")
    wait_for(lambda: len(exp.receiver.messages) == 1, what="the waiting page")
    assert exp.receiver.messages[0]["title"] == "Claude Code · shop: needs your approval"
    with open(path, "ab") as f:
        f.write(claude_line("tool_result", 3, time.time(), of=2))
    exp.wait_state(SID, "working")  # the transcript's next record ends the wait
    post(exp, "claude_code", claude_hook("StopFailure", path, error="rate_limit",
                                         error_details="429 Too Many Requests"))
    exp.wait_state(SID, "error")
    wait_for(lambda: len(exp.receiver.messages) == 2, what="the error page")
    assert exp.receiver.messages[1]["title"] == "Claude Code · shop: stopped on rate limit"
    post(exp, "claude_code", claude_hook("Notification", path, message="Claude is waiting for your input",
                                         notification_type="idle_prompt"))
    time.sleep(1.5)
    assert exp.state(SID) == "error" and len(exp.receiver.messages) == 2


def test_codex_hook_command_and_spool(tmp_path):
    """The ``hook`` command (Codex runs command hooks only): delivered while
    the exporter runs; spooled under state_dir while it is down and delivered
    when it is back; exits 0 and prints nothing either way."""
    receiver = Receiver()
    exp = Exporter(tmp_path, receiver=receiver)
    path = codex_path(tmp_path, CODEX_SID)
    path.parent.mkdir(parents=True)
    now = time.time()
    meta = {"timestamp": _iso(now - 3), "type": "session_meta",
            "payload": {"id": CODEX_SID, "timestamp": _iso(now - 3), "cwd": "/home/dev/api", "originator": "codex_cli_rs",
                        "cli_version": "0.150.0", "source": "cli"}}
    started = {"timestamp": _iso(now - 2), "type": "event_msg",
               "payload": {"type": "task_started", "turn_id": "t-1", "model_context_window": 200000}}
    call = {"timestamp": _iso(now - 1), "type": "response_item",
            "payload": {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "call_1"}}
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in (meta, started, call)))
    body = {"session_id": CODEX_SID, "transcript_path": str(path), "cwd": "/home/dev/api",
            "hook_event_name": "PermissionRequest", "model": "gpt-5.2", "permission_mode": "default",
            "turn_id": "t-1", "tool_name": "Bash", "tool_input": {"command": "git push --force"}}
    exp.config_path.parent.mkdir(parents=True, exist_ok=True)
    import yaml

    exp.config_path.write_text(yaml.safe_dump(exp.config))
    t = time.monotonic()
    # the exporter is down: nothing listens there (it takes the spool from its state_dir, on any port)
    from harness import closed_port

    with closed_port() as port:
        out = hook_cli(None, "codex", body, url=f"http://127.0.0.1:{port}", config=exp.config_path)
    assert out.returncode == 0 and out.stdout == b""
    assert time.monotonic() - t < 10
    assert len(os.listdir(tmp_path / "state" / "hook-spool")) == 1
    try:
        exp.start()
        exp.wait_state(CODEX_SID, "waiting", timeout=10)
        wait_for(lambda: len(receiver.messages) == 1, what="the waiting page")
        assert receiver.messages[0]["title"] == "Codex · api: needs your approval"
        assert os.listdir(tmp_path / "state" / "hook-spool") == []
        out = hook_cli(exp, "codex", {**body, "hook_event_name": "PostToolUse", "tool_response": "done",
                                      "tool_use_id": "call_1"})
        assert out.returncode == 0 and out.stdout == b""
        exp.wait_state(CODEX_SID, "working")
        assert exp.value("coding_agent_hook_events_total", provider="codex", event="PostToolUse") == 1
    finally:
        exp.stop()
        receiver.close()


def test_bad_deliveries_are_counted_never_5xx(exp):
    """Malformed, oversized, unknown-agent and wrong-method deliveries get a
    4xx and a count; the exporter keeps serving."""
    assert post(exp, "claude_code", b"{not json")[0] == 400
    assert post(exp, "claude_code", b"[1,2]")[0] == 400
    assert post(exp, "claude_code", {"hook_event_name": "Stop"})[0] == 400  # no session
    assert post(exp, "gemini", {"session_id": "x"})[0] == 404
    big = json.dumps({"session_id": SID, "hook_event_name": "PostToolUse", "x": "a" * (5 << 20)}).encode()
    assert post(exp, "claude_code", big)[0] == 413
    assert post(exp, "codex", {"session_id": CODEX_SID, "hook_event_name": "FutureEvent"})[0] == 200
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{exp.port}/hooks/codex", timeout=5)
    assert e.value.code == 405
    m = exp.value
    assert m("coding_agent_hook_errors_total", reason="invalid_json") == 1
    assert m("coding_agent_hook_errors_total", reason="not_object") == 1
    assert m("coding_agent_hook_errors_total", reason="no_session") == 1
    assert m("coding_agent_hook_errors_total", reason="unknown_agent") == 1
    assert m("coding_agent_hook_errors_total", reason="too_large") == 1
    assert m("coding_agent_hook_events_total", provider="codex", event="other") == 1
    assert exp.ready()


def test_transcript_question_pages_once_then_one_reminder(tmp_path):
    """No hooks: an AskUserQuestion call with no result yet is ``waiting``
    (reason question) and pages once; with ``alerts.remind_after_seconds``
    one reminder follows while it is still unanswered, never a second; the
    answer ends the wait."""
    receiver = Receiver()
    exp = Exporter(tmp_path, receiver=receiver, config={"alerts": {"remind_after_seconds": 1.5}}).start()
    try:
        path = claude_path(exp.root, SID, "-home-dev-shop")
        path.parent.mkdir(parents=True)
        now = time.time()
        path.write_bytes(claude_line("prompt", 1, now - 2) + claude_line("tool_use", 2, now - 1,
                                                                          name="AskUserQuestion"))
        exp.wait_state(SID, "waiting")
        wait_for(lambda: len(receiver.messages) == 1, what="the question page")
        assert receiver.messages[0]["title"] == "Claude Code · shop: asks you a question"
        wait_for(lambda: len(receiver.messages) == 2, what="the reminder")
        assert receiver.messages[1]["title"] == "Reminder: Claude Code · shop: asks you a question"
        time.sleep(2.5)
        assert len(receiver.messages) == 2
        rows = exp.value("coding_agent_session_state", session_id=SID, state="waiting")
        assert rows == 1
        with open(path, "ab") as f:
            f.write(claude_line("tool_result", 3, time.time(), of=2))
        exp.wait_state(SID, "working")
        assert exp.value("coding_agent_user_wait_seconds_count", provider="claude_code", reason="question") == 1
    finally:
        exp.stop()
        receiver.close()


def test_unknown_sessions_dropped_and_cut_emoji_kept(exp):
    """A hook for a session this exporter does not follow (no transcript of
    it under a watched root) neither pages nor lingers; a body with a lone
    surrogate escape (text cut inside an emoji, as Claude Code writes it)
    is still a hook event."""
    for n in range(3):
        body = {"session_id": f"ghost{n}", "cwd": "/home/dev/ghost", "hook_event_name": "Stop",
                "transcript_path": f"/elsewhere/ghost{n}.jsonl"}
        assert post(exp, "claude_code", body)[0] == 200
    path = claude_path(exp.root, SID, "-home-dev-shop")
    path.parent.mkdir(parents=True)
    now = time.time()
    path.write_bytes(claude_line("prompt", 1, now - 2) + claude_line("tool_use", 2, now - 1))
    exp.wait_state(SID, "working")
    raw = json.dumps(claude_hook("Stop", path, stop_hook_active=False, last_assistant_message="XX"))
    status, _ = post(exp, "claude_code", raw.replace('"XX"', '"cut emoji \\ud83d"').encode())
    assert status == 200
    exp.wait_state(SID, "completed", timeout=5)
    wait_for(lambda: len(exp.receiver.messages) == 1, what="one page, for the real session")
    time.sleep(1.5)
    assert len(exp.receiver.messages) == 1 and f"Session: {SID}" in exp.receiver.messages[0]["message"]
    assert exp.value("coding_agent_hook_errors_total", reason="unknown_session") == 3
    assert exp.state("ghost0") is None


def test_hook_command_never_fails_the_agent(tmp_path):
    """Whatever its options, the ``hook`` command exits 0 with nothing on
    stdout (exit 2 would make the agent deny a tool or keep a Stop going),
    and never logs the password of a ``user:password@`` URL."""
    cfg = tmp_path / "c.yml"
    cfg.write_text(f"state_dir: {tmp_path / 'state'}\n")
    for args in (["--agent", "gemini"], [], ["--agent", "codex", "--timeout", "soon"], ["--bogus"]):
        r = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "hook", *args], input=b"{}",
                           capture_output=True, cwd=ROOT, timeout=30)
        assert (r.returncode, r.stdout) == (0, b""), args
    r = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "hook", "--agent", "codex", "--url",
                        "http://alice:s3cret-pw@127.0.0.1:9", "--config.file", str(cfg), "--log.level", "debug"],
                       input=b'{"session_id": "x", "hook_event_name": "Stop"}', capture_output=True, cwd=ROOT,
                       timeout=30)
    assert (r.returncode, r.stdout) == (0, b"")
    assert b"spooled" in r.stderr and b"s3cret-pw" not in r.stderr and b"alice" not in r.stderr


def test_a_wait_only_a_hook_reported_outlives_restarts(tmp_path):
    """A permission prompt is in no transcript: the exporter keeps the hook
    with its checkpoint, so after a restart (SIGTERM, then kill -9 at once
    after the hook) the session still waits, with no second page; when the
    user answered while the exporter was down, the records written since
    decide: the turn's completion pages once."""
    receiver = Receiver()
    exp = Exporter(tmp_path, receiver=receiver).start()
    path = claude_path(tmp_path, SID, "-home-dev-shop")
    path.parent.mkdir(parents=True)
    now = time.time()
    path.write_bytes(claude_line("prompt", 1, now - 2) + claude_line("tool_use", 2, now - 1))
    try:
        exp.wait_state(SID, "working")
        post(exp, "claude_code", claude_hook("PermissionRequest", path, tool_name="Bash",
                                             tool_input={"command": "make"}, permission_suggestions=[]))
        exp.wait_state(SID, "waiting")
        wait_for(lambda: len(receiver.messages) == 1, what="the waiting page")
        time.sleep(0.3)
        exp.stop("kill")
        exp.start()
        assert exp.state(SID) == "waiting"
        assert exp.value("coding_agent_sessions", provider="claude_code", state="waiting") == 1
        assert exp.stop() == 0
        # damaged entries beside the good one: dropped with a warning, the start goes on
        cp_path = tmp_path / "state" / "checkpoint.json"
        cp = json.loads(cp_path.read_bytes())
        good = cp["hooks"][0]
        cp["hooks"] = [{**good, "session_id": [], "transcript_path": None}, {**good, "session_id": 0},
                       {**good, "ts": 1e300}, "x", good]
        cp_path.write_text(json.dumps(cp))
        exp.start()
        assert exp.state(SID) == "waiting"
        assert "4 saved hook event(s) in the checkpoint were unusable" in exp.log()
        time.sleep(1.0)
        assert len(receiver.messages) == 1
        # the wait ends by a hook, then kill -9 at once: it stays ended
        post(exp, "claude_code", claude_hook("PostToolUse", path, tool_name="Bash", tool_input={"command": "make"},
                                             tool_response={"stdout": "ok"}, tool_use_id="toolu_2"))
        exp.wait_state(SID, "working")
        exp.stop("kill")
        exp.start()
        assert exp.state(SID) == "working"
        post(exp, "claude_code", claude_hook("PermissionRequest", path, tool_name="Bash",
                                             tool_input={"command": "make install"}, permission_suggestions=[]))
        exp.wait_state(SID, "waiting")
        wait_for(lambda: len(receiver.messages) == 2, what="the second wait's page")
        exp.stop()
        # answered while the exporter was down
        with open(path, "ab") as f:
            t = time.time()
            f.write(claude_line("tool_result", 3, t, of=2) + claude_line("text", 4, t + 0.1, text="Built.")
                    + claude_line("turn_duration", 5, t + 0.2))
        exp.start()
        exp.wait_state(SID, "completed")
        wait_for(lambda: len(receiver.messages) == 3, what="the completion page")
        assert receiver.messages[2]["title"] == "Claude Code · shop: your turn"
        time.sleep(1.0)
        assert len(receiver.messages) == 3
        # a deleted session does not come back from its saved hooks
        assert exp.stop() == 0
        path.unlink()
        exp.start()
        time.sleep(0.5)
        assert exp.state(SID) is None
    finally:
        exp.stop()
        receiver.close()


def test_saved_hook_deliveries_round_trip_and_garbage_is_refused():
    """What the checkpoint keeps of a delivery comes back equal, through
    JSON; a damaged entry is refused, never raised."""
    from coding_agent_exporter.hooks import from_record, parse, to_record

    body = json.dumps(claude_hook("PermissionRequest", Path("/x/t.jsonl"), tool_name="Bash",
                                  tool_input={"command": "secret-token"})).encode()
    d = parse("claude_code", body, 1_780_000_000.25)
    rec = json.loads(json.dumps(to_record(d)))
    now = 1_780_000_100.0
    assert from_record(rec, now) == d
    codex = parse("codex", json.dumps({"session_id": CODEX_SID, "hook_event_name": "PermissionRequest",
                                       "turn_id": "019db1a0-" + "1" * 300, "tool_name": "Bash"}).encode(), now - 5)
    assert from_record(json.loads(json.dumps(to_record(codex))), now) == codex  # a long turn id, as Codex wrote it
    assert "secret-token" not in json.dumps(rec)
    for bad in (None, [], "x", {}, {**rec, "kind": 99}, {**rec, "ts": "soon"}, {**rec, "ts": True},
                {**rec, "ts": 1e300}, {**rec, "provider": "vim"}, {**rec, "tool": ["Bash"]}, {**rec, "tool": "x" * 5000},
                {**rec, "final": 1}, {**rec, "session_id": []}, {**rec, "session_id": 0},
                {**rec, "session_id": None, "transcript_path": None}, {**rec, "reason": "because"},
                {k: v for k, v in rec.items() if k != "ident"}):
        assert from_record(bad, now) is None, bad


def test_the_checkpoint_keeps_the_newest_hooks_of_the_sessions_hooked_last(tmp_path, monkeypatch):
    """A session waiting for an hour keeps its wait however many hooks a
    busy session sends meanwhile: the checkpoint keeps the newest few of
    each session, for the sessions hooked most recently."""
    from types import SimpleNamespace

    from coding_agent_exporter import daemon as daemon_mod
    from coding_agent_exporter.config import Config
    from coding_agent_exporter.hooks import parse

    d = daemon_mod.Daemon(Config(state_dir=str(tmp_path)))
    d.evidence.kept.sessions = 2
    now = time.time()

    def hook(sid, event, t):
        body = json.dumps({"session_id": sid, "hook_event_name": event, "tool_name": "Bash"}).encode()
        return SimpleNamespace(provider="claude_code", session_id=sid), parse("claude_code", body, t)

    d.evidence.kept.keep(*hook("waits", "PermissionRequest", now - 3600))
    for i in range(500):
        d.evidence.kept.keep(*hook("busy", "PostToolUse", now - 3000 + i))
    d._save_checkpoint(force=True)
    saved = json.loads((tmp_path / "checkpoint.json").read_bytes())["hooks"]
    assert [(r["session_id"], r["name"]) for r in saved] == [("waits", "PermissionRequest")] + [("busy", "PostToolUse")] * 3
    assert [r["ts"] for r in saved[1:]] == [now - 3000 + i for i in (497, 498, 499)]
    d.evidence.kept.keep(*hook("third", "Stop", now))
    assert [k[1] for k in d.evidence.kept.kept] == ["busy", "third"]  # the session hooked longest ago left


# -- the spool (issue 22, part 3) ----------------------------------------------------
def _inbox():
    from coding_agent_exporter.hooks import HookInbox
    from coding_agent_exporter.metrics import Metrics

    return HookInbox(Metrics())


def _errors(inbox, reason: str) -> float:
    return inbox.metrics.hook_errors.labels(reason)._value.get()


def test_the_spool_reads_only_small_regular_files_without_blocking(tmp_path):
    """A FIFO named like a spooled event used to freeze all reading and
    paging; a symlink to a 1 GB file took 2 GB of memory. Now: only regular
    files, opened without following links and without blocking, read up to
    hooks.max_body_bytes; the rest removed and counted; a temp file a full
    disk left behind is cleaned up after a minute."""
    spool = tmp_path / "hook-spool"
    spool.mkdir(mode=0o700)
    now = time.time()
    stamp = f"{int(now * 1e9):020d}"
    body = json.dumps({"session_id": SID, "transcript_path": "/x.jsonl", "hook_event_name": "Stop"}).encode()
    (spool / f"{stamp}-claude_code-1-good.json").write_bytes(body)
    os.mkfifo(spool / f"{stamp}-claude_code-2-fifo.json")
    big = tmp_path / "big"
    big.write_bytes(b"x" * (8 << 20))
    (spool / f"{stamp}-claude_code-3-link.json").symlink_to(big)
    (spool / f"{stamp}-claude_code-4-large.json").write_bytes(b'{"a": "' + b"y" * 5000 + b'"}')
    old_tmp, new_tmp = spool / ".old-partial", spool / ".new-partial"
    old_tmp.write_bytes(b"{")
    new_tmp.write_bytes(b"{")
    os.utime(old_tmp, (now - 120, now - 120))
    inbox = _inbox()
    t = time.monotonic()
    assert inbox.take_spool(tmp_path, 3600, max_body_bytes=1000) == 1
    assert time.monotonic() - t < 2
    assert [d.session_id for d in inbox.take()] == [SID]
    assert _errors(inbox, "unreadable_spool") == 2 and _errors(inbox, "too_large") == 1
    assert sorted(os.listdir(spool)) == [".new-partial"]  # the fresh temp file may still be being written
    assert big.stat().st_size == 8 << 20  # the link's target is untouched


def test_a_spool_that_is_not_the_users_own_is_refused(tmp_path):
    """Group- or world-writable, or a symlink planted in its place: the
    exporter reads nothing from it (one error in the log) and the hook
    command writes nothing into it (a warning, exit 0)."""
    from coding_agent_exporter.hooks import spool, spool_folder

    other = tmp_path / "someone-else"
    other.mkdir(mode=0o777)
    state = tmp_path / "state"
    state.mkdir()
    (state / "hook-spool").symlink_to(other)
    with pytest.raises(PermissionError, match="symlink"):
        spool_folder(state)
    assert spool(state, "codex", b"{}", time.time()) is False and os.listdir(other) == []
    cfg = tmp_path / "c.yml"
    cfg.write_text(f"state_dir: {state}\n")
    r = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "hook", "--agent", "codex", "--url",
                        "http://127.0.0.1:9", "--config.file", str(cfg)], input=b'{"session_id": "x"}',
                       capture_output=True, cwd=ROOT, timeout=30)
    assert (r.returncode, r.stdout) == (0, b"") and os.listdir(other) == []
    assert b"level=WARN " in r.stderr and b"symlink" in r.stderr and b"dropped" in r.stderr, r.stderr
    (state / "hook-spool").unlink()
    (state / "hook-spool").mkdir(mode=0o700)
    os.chmod(state / "hook-spool", 0o777)
    stamp = f"{int(time.time() * 1e9):020d}"
    (state / "hook-spool" / f"{stamp}-codex-1-planted.json").write_bytes(b'{"session_id": "x"}')
    inbox = _inbox()
    assert inbox.take_spool(state, 3600) == 0 and inbox.take() == []
    assert len(os.listdir(state / "hook-spool")) == 1  # left alone
    with pytest.raises(PermissionError, match="mode 777"):
        spool_folder(state)


def test_a_full_disk_leaves_no_temp_file(tmp_path, monkeypatch):
    """The write of a spooled event fails (ENOSPC): no half-written temp file stays."""
    import errno

    from coding_agent_exporter import hooks

    real = os.fdopen

    class Full:
        def __init__(self, fd):
            self.f = real(fd, "wb")

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(hooks.os, "fdopen", lambda fd, mode: Full(fd))
    assert hooks.spool(tmp_path, "codex", b"{}", time.time()) is False
    assert os.listdir(tmp_path / "hook-spool") == []


def test_the_hook_command_without_a_config_file_finds_the_running_exporter(tmp_path):
    """Hooks installed without --config.file, an exporter whose config moves
    state_dir: the hook command still finds its secret (delivered, not
    refused) and, when the exporter is down, spools where it reads."""
    receiver = Receiver()
    xdg = tmp_path / "xdg"
    exp = Exporter(tmp_path, receiver=receiver, env={"XDG_STATE_HOME": str(xdg)})
    path = claude_path(tmp_path, SID, "-home-dev-shop")
    path.parent.mkdir(parents=True)
    now = time.time()
    path.write_bytes(claude_line("prompt", 1, now - 2) + claude_line("tool_use", 2, now - 1))
    env = {**os.environ, "XDG_STATE_HOME": str(xdg)}

    def run(event):
        return subprocess.run([sys.executable, "-m", "coding_agent_exporter", "hook", "--agent", "claude_code",
                               "--url", f"http://127.0.0.1:{exp.port}"], input=json.dumps(claude_hook(
                                   event, path, tool_name="Bash")).encode(), capture_output=True, cwd=ROOT,
                              timeout=30, env=env)

    try:
        exp.start()
        assert (xdg / "coding-agent-exporter" / "exporter-state-dir").read_text().strip() == str(tmp_path / "state")
        r = run("PermissionRequest")
        assert r.returncode == 0 and b"refused" not in r.stderr, r.stderr
        exp.wait_state(SID, "waiting")
        exp.stop()
        assert run("PostToolUse").returncode == 0
        assert len(os.listdir(tmp_path / "state" / "hook-spool")) == 1
    finally:
        exp.stop()
        receiver.close()
