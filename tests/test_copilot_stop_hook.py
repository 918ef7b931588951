"""Copilot CLI's ``Stop`` hook, with the body the real Copilot CLI 1.0.102
POSTs (fixtures/hooks/copilot_cli/Stop.json, captured offline in
tests/agents): its ``transcript_path`` is ``<sessionId>/events.jsonl``, a
file whose name never holds the session id, so the hook must be matched to
its session by the folder (the provider's layout), not by the file name.
Before that, every Copilot ``Stop`` was dropped as ``unknown_session``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

from harness import FIXTURES, TRANSCRIPTS, Exporter, Receiver, copilot_path, wait_for

REAL = TRANSCRIPTS / "copilot_cli" / "v1.0.102_print_tool_call_turn.jsonl"
SID = "59650680-d2a2-4d4d-9b1b-34424cb4d590"


def _post(exp: Exporter, body: dict) -> None:
    req = urllib.request.Request(f"http://127.0.0.1:{exp.port}/hooks/copilot_cli", data=json.dumps(body).encode(),
                                 headers=exp.hook_headers())
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status < 300


def _stop_body(sid: str, path) -> dict:
    raw = (FIXTURES / "hooks" / "copilot_cli" / "Stop.json").read_text()
    return json.loads(raw.replace("${SID}", sid).replace("${PATH}", str(path)))


def _working_turn(exp: Exporter, tmp_path):
    """The real turn's file up to its tool result (no answer on disk yet), written now: working.
    Returns the file."""
    lines = REAL.read_bytes().splitlines(keepends=True)
    cut = next(i for i, ln in enumerate(lines) if b'"tool.execution_complete"' in ln) + 1
    path = copilot_path(tmp_path, SID)
    path.parent.mkdir(parents=True)
    time.sleep(0.5)
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    with open(path, "ab") as f:
        for ln in lines[:cut]:
            obj = json.loads(ln)
            obj["timestamp"] = now
            f.write(json.dumps(obj).encode() + b"\n")
    exp.wait_state(SID, "working", timeout=10)
    return path


def _one_page(receiver: Receiver, sid: str) -> None:
    wait_for(lambda: len([m for m in receiver.messages if f"Session: {sid}" in m.get("message", "")]) == 1,
             timeout=10, what="one page")


def test_real_stop_hook_ends_the_turn(tmp_path):
    """The turn's file up to its tool result (no answer on disk yet: working);
    then Copilot's real Stop body: completed, one page, no hook error. A Stop
    naming another session for this file is still refused."""
    receiver = Receiver()
    with Exporter(tmp_path, receiver=receiver) as exp:
        path = _working_turn(exp, tmp_path)
        _post(exp, _stop_body("c0000000-0000-4000-8000-00000000dead", path))  # another session's id
        wait_for(lambda: exp.value("coding_agent_hook_errors_total", reason="unknown_session") == 1, timeout=5,
                 what="the foreign Stop refused")
        assert exp.state(SID) == "working"
        _post(exp, _stop_body(SID, path))
        exp.wait_state(SID, "completed", timeout=10)
        _one_page(receiver, SID)
        assert exp.value("coding_agent_hook_errors_total", reason="unknown_session") == 1
    receiver.close()


def test_installed_command_hook_delivers_the_real_stop_with_no_secret_in_its_file(tmp_path):
    """``hooks install --agent copilot_cli`` writes a command hook (Copilot CLI 1.0.102 runs the
    nested ``"type": "command"`` handler through a shell, the event's JSON on stdin): the file holds
    no hook secret, and the command it names, fed Copilot's real Stop body, ends the turn with one
    page: it read the secret from the exporter's state_dir."""
    receiver = Receiver()
    with Exporter(tmp_path, receiver=receiver) as exp:
        path = _working_turn(exp, tmp_path)
        hooks_file = tmp_path / "copilot-home" / "hooks" / "coding-agent-exporter.json"
        r = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "hooks", "install", "--agent", "copilot_cli",
                            "--url", f"http://127.0.0.1:{exp.port}", "--config.file", str(exp.config_path),
                            "--file", str(hooks_file)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert exp.secret() not in hooks_file.read_text()
        (group,) = json.loads(hooks_file.read_text())["hooks"]["Stop"]
        (handler,) = group["hooks"]
        assert handler["type"] == "command"
        body = json.dumps(_stop_body(SID, path))
        ran = subprocess.run(["/bin/bash", "-c", handler["command"]], input=body, capture_output=True, text=True,
                             timeout=handler["timeout"])
        assert ran.returncode == 0 and ran.stdout == "", ran.stderr  # (Copilot reads a Stop hook's stdout)
        exp.wait_state(SID, "completed", timeout=10)
        _one_page(receiver, SID)
        assert exp.value("coding_agent_hook_errors_total", reason="unauthorized") == 0
    receiver.close()


def _reason(exp: Exporter, sid: str):
    with urllib.request.urlopen(f"http://127.0.0.1:{exp.port}/api/v1/sessions", timeout=5) as r:
        rows = [x for x in json.load(r)["sessions"] if x["session_id"] == sid]
    return rows and rows[0]["state"], rows and (rows[0].get("waiting_for") or {}).get("reason")


def test_ask_user_is_a_question_whichever_comes_first(tmp_path):
    """Copilot CLI 1.0.102 writes the ``ask_user`` call and fires its
    ``Notification`` (``elicitation_dialog``, no transcript path) within
    ~20 ms, in either order on the exporter's side: the wait is a question
    either way, with one page."""
    receiver = Receiver()
    with Exporter(tmp_path, receiver=receiver) as exp:
        for n, hook_first in enumerate((True, False)):
            sid = f"c0000000-0000-4000-8000-00000000a5{n}0"
            path = copilot_path(tmp_path, sid)
            path.parent.mkdir(parents=True)
            now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
            ev = lambda t, d: (json.dumps({"type": t, "data": d, "id": f"{sid}:{t}", "timestamp": now,  # noqa: E731
                                           "parentId": None}) + "\n").encode()
            with open(path, "ab") as f:
                f.write(ev("session.start", {"sessionId": sid, "copilotVersion": "1.0.102",
                                             "context": {"cwd": "/home/dev/proj"}})
                        + ev("user.message", {"content": "x", "interactionId": "i1"})
                        + ev("assistant.turn_start", {"turnId": "0", "interactionId": "i1"}))
            exp.wait_state(sid, "working", timeout=10)
            call = ev("tool.execution_start", {"toolCallId": "toolu_1", "toolName": "ask_user"})
            note = {"sessionId": sid, "timestamp": int(time.time() * 1000), "cwd": "/home/dev/proj",
                    "hook_event_name": "Notification", "title": "Copilot needs information",
                    "message": "Copilot needs information", "notification_type": "elicitation_dialog"}
            if not hook_first:
                with open(path, "ab") as f:
                    f.write(call)
                exp.wait_state(sid, "waiting", timeout=10)
            _post(exp, note)
            if hook_first:
                with open(path, "ab") as f:
                    f.write(call)
            wait_for(lambda: _reason(exp, sid) == ("waiting", "question"), timeout=10,
                     what=f"a question (hook first: {hook_first})")
            wait_for(lambda: len([m for m in receiver.messages if f"Session: {sid}" in m.get("message", "")]) == 1,
                     timeout=10, what=f"one page (hook first: {hook_first})")
            time.sleep(1.5)
            assert _reason(exp, sid) == ("waiting", "question")
            assert len([m for m in receiver.messages if f"Session: {sid}" in m.get("message", "")]) == 1
    receiver.close()
