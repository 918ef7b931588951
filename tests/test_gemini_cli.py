"""Gemini CLI (issue 35): every recorded run of the real CLI 0.61.0 (tests/fixtures/gemini_cli, from
shared/live-agents/gemini-cli-0.61.0 and runs recorded the same way) replayed at its recorded times,
from the session files alone and with the hooks the CLI ran: the state at each screen the run
captured, the pages, and nothing paged as a backfill. Then the provider's pieces a user meets: the
roots, the hook route and command, ``hooks install``, ``scan``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from coding_agent_exporter.events import COMPLETE, END, ERROR, INTERRUPT, META, OUTPUT, SESSION, START, WAIT, WORK
from coding_agent_exporter.providers import gemini_cli, sniff
from coding_agent_exporter.usage import BAD
from gemini_replay import FIXTURES, backfill, replay, runs
from harness import Exporter, Receiver, wait_for

W, C, E, I, U = ({"state": "working"}, {"state": "completed"}, {"state": "error"}, {"state": "interrupted"},
                 {"state": "unknown"})
PERM = {"state": "waiting", "reason": "permission"}
ASK = {"state": "waiting", "reason": "question"}


def err(kind):
    return {"state": "error", "error_kind": kind}


# run -> (pages from the files alone, pages with hooks, {screen: (state from the files alone, with hooks)})
# Screens taken before the session file exists show no session (None). "files cannot tell": the
# answer before a dialog is written before the dialog opens, and nothing more until it closes.
EXPECT = {
    "p_text": (["completed"], ["completed"], {}),
    "p_text_stream_json": (["completed"], ["completed"], {}),
    "p_text_default_privacy": (["completed"], ["completed"], {}),
    "p_list_dir": (["completed"], ["completed"], {}),
    "p_shell_default": (["completed"], ["completed"], {}),  # the shell is not offered in -p: it says so
    "p_touch_yolo": (["completed"], ["completed"], {}),
    "p_subagent": (["completed"], ["completed"], {}),  # the subagent's file never pages
    "p_err429_recovers": (["completed"], ["completed"], {}),  # retried, then answered: not an error
    # -p writes only a rollback of the prompt (and exits 1): an error once the file stays
    "p_err400": (["error"], ["error"], {}),
    "tui_text_two_turns": (["completed"] * 2, ["completed"] * 2,
                           {"ready": (U, U), "turn1_done": (C, C), "turn2_done": (C, C), "exit": (C, C)}),
    "tui_touch_allow": (["completed"], ["waiting", "completed"],
                        {"ready": (U, U), "dialog_open": (W, PERM),
                         "dialog_still_open": (C, PERM),  # files cannot tell (one page, at the dialog)
                         "turn_done": (C, C), "exit": (C, C)}),
    "tui_touch_deny": (["completed", "completed"], ["waiting", "completed"],
                       {"ready": (None, None),
                        "dialog_open": (C, PERM),  # files cannot tell (this run wrote its answer 2.6 s before)
                        "after_esc": (I, I), "turn2_done": (C, C), "exit": (C, C)}),
    "tui_write_allow": (["completed"], ["waiting", "completed"],
                        {"ready": (U, U), "dialog_open": (W, PERM), "turn_done": (C, C), "exit": (C, C)}),
    "tui_shell_ls": (["completed"], ["completed"],
                     {"ready": (U, U), "after_call": (W, W), "turn_done": (C, C), "exit": (C, C)}),
    "tui_ask_user": (["completed"], ["waiting", "completed"],
                     {"ready": (U, U), "question_open": (W, ASK), "after_enter": (W, C), "turn_done": (C, C),
                      "exit": (C, C)}),
    "tui_subagent": (["completed"], ["completed"],
                     {"ready": (U, U), "after_call": (W, C), "turn_done": (C, C), "exit": (C, C)}),
    "tui_esc_streaming": (["completed"], ["completed"],
                          {"ready": (U, U), "streaming": (W, W), "after_esc": (I, I), "turn2_done": (C, C),
                           "exit": (C, C)}),
    "tui_err429_recovers": (["completed"], ["completed"],
                            {"ready": (U, U), "retrying": (W, W), "turn_done": (C, C), "exit": (C, C)}),
    "tui_err400": (["error", "completed"], ["error", "completed"],
                   {"ready": (U, U), "after_error": (err("api_error"), err("api_error")), "turn2_done": (C, C),
                    "exit": (C, C)}),
    # retried for ever with nothing written: working (stalled after reducer.stall_after_seconds); Esc;
    # /quit deletes the file (no prompt survived): the session is gone, nothing paged
    "tui_err500_retrying": ([], [],
                            {"ready": (U, U), "retrying_10s": (W, W), "retrying_40s": (W, W), "after_esc": (I, I),
                             "exit": (None, None)}),
    # the "high demand" dialog: no hook, nothing written (working); Stop: the error; the file deleted at /quit
    "tui_err500_verbose": (["error"], ["error"],
                           {"ready": (None, None), "dialog_open": (W, W), "dialog_still_open": (W, W),
                            "after_stop": (err("server_error"), err("server_error")), "exit": (None, None)}),
    "tui_resume": (["completed"] * 2, ["completed"] * 2,
                   {"ready": (U, U), "turn1_done": (C, C), "exit": (C, C), "resumed": (C, C), "turn2_done": (C, C)}),
    # resumed in a later minute: a stub file with the same sessionId (one session); the run's second
    # prompt was typed before the resume had loaded and never reached the CLI
    "tui_resume_next_minute": (["completed"], ["completed"],
                               # (files alone: the stub is written 0.6 s before this screen, the old file's
                               # resume record just after it; an inferred end waits for the files to be quiet)
                               {"ready": (U, U), "turn1_done": (C, C), "exit": (C, C), "resumed": (W, C)}),
    "tui_ctrl_c_exit": (["completed"], ["completed"],
                        {"ready": (U, U), "after_first_ctrl_c": (C, C), "exit": (C, C)}),
}


def test_every_recorded_run_has_its_expectations():
    assert sorted(EXPECT) == runs()


@pytest.mark.parametrize("hooks", [False, True], ids=["files", "hooks"])
@pytest.mark.parametrize("run", runs())
def test_recorded_run_states_and_pages(run, hooks, tmp_path):
    """At each screen the run captured the session shows what a careful user expects, and the run pages
    exactly its turn ends, waits and errors, in order."""
    files_pages, hook_pages, screens = EXPECT[run]
    r = replay(run, tmp_path / ".gemini" / "tmp", hooks)
    want = {label: pair[1 if hooks else 0] for label, pair in screens.items()}
    assert r.snaps == want
    assert r.pages == (hook_pages if hooks else files_pages)
    assert r.sessions <= 1  # a resume's stub file and a subagent's file are the same session


@pytest.mark.parametrize("run", runs())
def test_recorded_run_read_as_backfill_pages_nothing(run, tmp_path):
    """Every turn end of the run read at once as history (a start-up backfill): shown, never paged."""
    pages, row = backfill(run, tmp_path / ".gemini" / "tmp")
    assert pages == []
    assert row is not None and row["state"] in ("completed", "error", "interrupted")


# -- the record log -----------------------------------------------------------------------
def _ev(dec, obj):
    return dec.project(obj)


def test_same_id_rewritten_is_work_once_and_the_tools_cancelled_are_not():
    dec = gemini_cli.FileDecoder()
    assert _ev(dec, {"sessionId": "s1", "projectHash": "h", "startTime": "2026-12-01T19:00:00Z"}).kind == SESSION
    assert _ev(dec, {"id": "u1", "type": "user", "content": [{"text": "Do it"}]}).kind == START
    first = _ev(dec, {"id": "g1", "type": "gemini", "content": "I will use a tool."})
    assert first.kind == OUTPUT
    again = _ev(dec, {"id": "g1", "type": "gemini", "content": "I will use a tool.",
                      "toolCalls": [{"name": "run_shell_command", "status": "success"}]})
    assert (again.kind, again.ident) == (WORK, "g1#toolCalls")
    assert _ev(dec, {"id": "g1", "type": "gemini", "content": "I will use a tool.",
                     "toolCalls": [{"status": "success"}]}).kind == META  # the same again: nothing new
    _ev(dec, {"id": "g2", "type": "gemini", "content": "x"})
    denied = _ev(dec, {"id": "g2", "type": "gemini", "content": "x", "toolCalls": [{"status": "cancelled"}]})
    assert denied.kind == META  # the cancel's own record ("Request cancelled.") decides
    assert _ev(dec, {"id": "i1", "type": "info", "content": "Request cancelled."}).kind == INTERRUPT
    assert _ev(dec, {"id": "i2", "type": "info", "content": "This request failed. Press F12"}).kind == META


def test_prompts_are_typed_text_only():
    dec = gemini_cli.FileDecoder()
    for content in ([{"text": "<session_context>\nThis is the Gemini CLI."}, {"text": "Again"}],
                    [{"functionResponse": {"id": "x", "name": "ls", "response": {"output": ""}}}],
                    [{"text": "/quit"}], [{"text": "  "}], [{"text": "<hook_context>x"}]):
        kind = _ev(dec, {"id": str(content), "type": "user", "content": content}).kind
        assert kind in (META, WORK)
    assert _ev(dec, {"id": "p", "type": "user", "content": [{"text": "Fix the bug"}]}).kind == START


def test_rollback_of_the_open_prompt_is_an_error_only_without_a_cancel_or_error_record():
    dec = gemini_cli.FileDecoder()
    _ev(dec, {"sessionId": "s", "projectHash": "h"})
    _ev(dec, {"id": "u1", "type": "user", "content": [{"text": "Hi"}]})
    rb = _ev(dec, {"$set": {"messages": [{"id": "ctx", "type": "user", "content": [{"text": "<session_context>"}]}]}})
    assert (rb.kind, rb.error_kind, rb.retry_in) == (ERROR, "api_error", 0.0)
    dec = gemini_cli.FileDecoder()
    _ev(dec, {"id": "u1", "type": "user", "content": [{"text": "Hi"}]})
    _ev(dec, {"id": "i", "type": "info", "content": "Request cancelled."})
    assert _ev(dec, {"$set": {"messages": []}}).kind == META
    dec = gemini_cli.FileDecoder()
    _ev(dec, {"id": "u1", "type": "user", "content": [{"text": "Hi"}]})
    keep = _ev(dec, {"$set": {"messages": [{"id": "u1", "type": "user", "content": [{"text": "Hi"}]}]}})
    assert keep.kind == META  # the prompt survived: not a rollback


def test_resume_ends_what_the_previous_process_left():
    meta = {"sessionId": "s", "projectHash": "h", "startTime": "2026-12-01T19:00:00Z"}
    dec = gemini_cli.FileDecoder()
    _ev(dec, meta)
    _ev(dec, {"id": "u1", "type": "user", "content": [{"text": "Hi"}]})
    _ev(dec, {"id": "g1", "type": "gemini", "content": "Hello"})
    assert _ev(dec, dict(meta, startTime="2026-12-01T19:00:09Z")).kind == COMPLETE  # it answered, then quit
    assert _ev(dec, {"$set": {"sessionId": "s"}}).kind == META
    dec = gemini_cli.FileDecoder()
    _ev(dec, meta)
    _ev(dec, {"id": "u1", "type": "user", "content": [{"text": "Hi"}]})
    assert _ev(dec, {"$set": {"sessionId": "s"}}).kind == END  # killed mid-turn, resumed in a later minute


def test_rewind_and_memory_stay_bounded():
    dec = gemini_cli.FileDecoder()
    for i in range(5000):
        _ev(dec, {"id": f"m{i}", "type": "gemini", "content": "x"})
    assert len(dec._ids) == gemini_cli._MAX_IDS
    _ev(dec, {"$rewindTo": "m4990"})
    assert list(dec._ids)[-1] == "m4989"
    _ev(dec, {"$rewindTo": "unknown"})
    assert not dec._ids
    big = {"$set": {"messages": [{"id": f"h{i}", "type": "user", "content": [{"text": "q"}]} for i in range(9000)]}}
    _ev(dec, big)
    assert len(dec._ids) == gemini_cli._MAX_IDS


def test_subagent_files_are_sidechain_of_their_parent():
    root = Path("/r/.gemini/tmp")
    parent = "050bf0fb-0a1b-4afe-ac44-9a32bb7d9d90"
    assert gemini_cli.classify_path(root, root / "proj/chats/session-2026-12-01T19-19-050bf0fb.jsonl") == (None, False)
    assert gemini_cli.classify_path(root, root / f"proj/chats/{parent}/2427e93b.jsonl") == (parent, True)
    for other in ("proj/logs/session-x.jsonl", "proj/chats/notes.jsonl", "proj/chats/session-x.json",
                  "proj/tool-outputs/session-1/a.jsonl"):
        assert gemini_cli.classify_path(root, root / other) is None
    dec = gemini_cli.FileDecoder(sidechain_file=True, file_session=parent)
    head = _ev(dec, {"sessionId": "2427", "projectHash": "h", "kind": "subagent", "directories": ["/home/dev/proj"]})
    assert (head.kind, head.subagent, head.parent_id, head.cwd) == (SESSION, True, parent, "/home/dev/proj")
    out = _ev(dec, {"id": "g", "type": "gemini", "content": "done"})
    assert out.sidechain


def test_error_kinds_from_the_api_error_text():
    assert gemini_cli.error_kind('[API Error: {"error":{"code":400,"status":"INVALID_ARGUMENT"}}]') == "api_error"
    assert gemini_cli.error_kind('[API Error: {"error":{"code":500,"status":"INTERNAL"}}]') == "server_error"
    assert gemini_cli.error_kind('[API Error: {"error":{"code":503,"status":"UNAVAILABLE"}}]') == "overloaded"
    assert gemini_cli.error_kind('[API Error: {"error":{"code":429,"status":"RESOURCE_EXHAUSTED"}}]') == "rate_limit"
    assert gemini_cli.error_kind('[API Error: {"error":{"code":429,"message":"Quota exceeded, limit: 0"}}]') \
        == "usage_limit"
    assert gemini_cli.error_kind('[API Error: {"error":{"code":403}}]') == "auth"


def test_tokens_per_response_counted_once(tmp_path):
    """A ``gemini`` message's ``tokens`` go into the token accounting once, although the CLI writes the
    message twice (without, then with ``toolCalls``); ``scan`` shows the session's tokens."""
    (f,) = (FIXTURES / "tui_touch_allow" / "files").rglob("session-*.jsonl")
    recs = [json.loads(ln) for ln in f.read_text().splitlines()]
    dec = gemini_cli.FileDecoder()
    got = []
    for r in recs:
        dec.project(r)
        got += dec.usage
        dec.usage.clear()
    assert got[0] == ("gemini:0920af1a-0194-4758-9bda-7a523e8398f9", "gemini-3.8-flash", (120, 20, 0, 0, 0, 0))
    assert got[0] == got[1]  # the same response again, with its toolCalls: one key
    assert gemini_cli.usage({"type": "gemini", "id": "x", "tokens": {"input": 100, "output": 5, "cached": 40,
                                                                      "thoughts": 7, "tool": 3}, "model": "m"}) \
        == ("gemini:x", "m", (63, 12, 40, 0, 7, 0))
    assert gemini_cli.usage({"type": "gemini", "id": "x", "tokens": "many"}) is BAD
    dec.project({"type": "user", "id": "u", "tokens": {"input": 1}})
    assert dec.usage == []  # only gemini messages carry usage
    root = tmp_path / ".gemini" / "tmp"
    path = _place("tui_touch_allow", root)
    os.utime(path, (time.time() - 3600, time.time() - 3600))
    p = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "scan", "--provider", "gemini_cli", "--json",
                        str(root)], capture_output=True, text=True, timeout=60)
    (row,) = [json.loads(ln) for ln in p.stdout.splitlines()]
    use = {k: v for k, v in row["usage"]["gemini-3.8-flash"].items() if k != "cost_usd"}
    assert use == {"input": 240, "output": 24, "cache_read": 0, "cache_write": 0, "reasoning": 0}  # two responses


def test_sniff_tells_gemini_lines_from_the_others():
    assert sniff(str(next((FIXTURES / "p_text" / "files").rglob("*.jsonl")))) == "gemini_cli"
    assert not gemini_cli.sniff({"type": "user", "uuid": "x", "id": "y", "sessionId": "s"})
    assert not gemini_cli.sniff({"type": "message", "id": "ab12cd34", "parentId": None})


def test_default_root_follows_gemini_cli_home(monkeypatch, tmp_path):
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    assert gemini_cli.default_roots() == [tmp_path / ".gemini" / "tmp"]
    monkeypatch.delenv("GEMINI_CLI_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert gemini_cli.default_roots() == [tmp_path / "h" / ".gemini" / "tmp"]


def test_hook_names_its_transcript_by_the_first_8_characters():
    sid = "d8ca1e79-445c-4dd8-b35d-172c47776074"
    assert gemini_cli.transcript_names(sid, "/x/chats/session-2026-12-01T19-25-d8ca1e79.jsonl")
    assert not gemini_cli.transcript_names(sid, "/x/chats/session-2026-12-01T19-25-00000000.jsonl")
    assert gemini_cli.transcript_names(sid, f"/x/chats/p/{sid}.jsonl")


def test_hook_projection():
    p = gemini_cli.project_hook
    assert p("AfterAgent", {}, 1.0).kind == COMPLETE and p("AfterAgent", {}, 1.0).open_only
    assert (p("Notification", {"notification_type": "ToolPermission", "details": {"type": "ask_user"}}, 1).reason
            == "question")
    w = p("Notification", {"notification_type": "ToolPermission", "details": {"type": "exec"}}, 1)
    assert (w.kind, w.reason, w.tool) == (WAIT, "permission", "run_shell_command")
    assert p("Notification", {"notification_type": "Other"}, 1) is None
    assert p("BeforeModel", {}, 1) is None and p("PreCompress", {}, 1) is None
    assert p("SessionEnd", {}, 1).kind == END and p("AfterTool", {}, 1).kind == WORK


# -- what the user runs ---------------------------------------------------------------------
def _body(run: str, event: str, root: Path, n: int = 0) -> dict:
    tl = json.loads((FIXTURES / run / "timeline.json").read_text())
    bodies = [e[2] for e in tl["events"] if e[1] == "hook" and e[2]["hook_event_name"] == event]
    body = dict(bodies[n])
    body["transcript_path"] = body["transcript_path"].replace("/home/dev/.gemini/tmp/", str(root) + "/")
    return body


def _place(run: str, root: Path, upto: int | None = None) -> Path:
    (src,) = [p for p in (FIXTURES / run / "files").rglob("session-*.jsonl")]
    dest = root / src.relative_to(FIXTURES / run / "files")
    dest.parent.mkdir(parents=True, exist_ok=True)
    lines = src.read_bytes().splitlines(keepends=True)
    dest.write_bytes(b"".join(lines[:upto]))
    return dest


def test_live_dialog_pages_waiting_through_the_hook_route_and_command(tmp_path):
    """The real exporter: the session file as it was when the approval dialog opened, the CLI's own
    ``Notification`` body POSTed to ``/hooks/gemini_cli`` (and ``AfterTool``/``AfterAgent`` through
    ``coding-agent-exporter hook --agent gemini_cli``): one waiting page, then one "your turn"."""
    receiver = Receiver()
    exp = Exporter(tmp_path, receiver=receiver, config={"reducer": {"inferred_settle_seconds": 30},
                                                        "alerts": {"settle_seconds": 0.3, "max_age_seconds": 0}})
    root = tmp_path / "gemini" / "tmp"
    path = _place("tui_touch_allow", root, upto=6)  # the prompt and the answer written before the dialog
    exp.start()
    try:
        url = f"http://127.0.0.1:{exp.port}"
        sid = "d8ca1e79-445c-4dd8-b35d-172c47776074"
        wait_for(lambda: exp.state(sid) == "working", what="working")
        body = json.dumps(_body("tui_touch_allow", "Notification", root)).encode()
        req = urllib.request.Request(f"{url}/hooks/gemini_cli", data=body, method="POST",
                                     headers={"Content-Type": "application/json", **exp.hook_headers()})
        assert urllib.request.urlopen(req, timeout=20).status == 200
        wait_for(lambda: len(receiver.messages) == 1, what="waiting page")
        assert receiver.messages[0]["title"].endswith("needs your approval")
        lines = (FIXTURES / "tui_touch_allow" / "files").rglob("session-*.jsonl").__next__().read_bytes()
        path.write_bytes(lines)  # the tool ran and the closing text came
        for event in ("AfterTool", "AfterAgent"):
            p = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "hook", "--agent", "gemini_cli",
                                "--url", url, "--config.file", str(exp.config_path)],
                               input=json.dumps(_body("tui_touch_allow", event, root)), text=True,
                               capture_output=True, timeout=30)
            assert (p.returncode, p.stdout) == (0, "")  # Gemini CLI reads a hook's stdout as its decision
        wait_for(lambda: len(receiver.messages) == 2, what="completed page")
        assert receiver.messages[1]["title"].endswith("your turn")
        time.sleep(1.0)
        assert len(receiver.messages) == 2
        assert exp.value("coding_agent_hook_events_total", provider="gemini_cli", event="AfterAgent") == 1
        rows = json.load(urllib.request.urlopen(f"{url}/api/v1/sessions", timeout=20))["sessions"]
        assert [(r["provider"], r["project"], r["state"]) for r in rows] == [("gemini_cli", "proj", "completed")]
        page = urllib.request.urlopen(f"{url}/", timeout=20).read().decode()
        assert "Gemini CLI" in page or "agents" in page
    finally:
        exp.stop()
        receiver.close()


def test_hook_for_another_sessions_file_is_refused(tmp_path):
    exp = Exporter(tmp_path).start()
    try:
        root = tmp_path / "gemini" / "tmp"
        _place("tui_touch_allow", root)
        body = _body("tui_touch_allow", "Notification", root)
        body["session_id"] = "00000000-445c-4dd8-b35d-172c47776074"  # not the file's
        req = urllib.request.Request(f"http://127.0.0.1:{exp.port}/hooks/gemini_cli", data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json",
                                                             **exp.hook_headers()})
        assert urllib.request.urlopen(req, timeout=20).status == 200
        wait_for(lambda: exp.value("coding_agent_hook_errors_total", reason="unknown_session") >= 1,
                 what="refused")
        assert exp.state("00000000-445c-4dd8-b35d-172c47776074") is None
    finally:
        exp.stop()


def test_hooks_install_writes_command_hooks_into_gemini_settings(tmp_path):
    gh = tmp_path / "gh"
    (gh / ".gemini").mkdir(parents=True)
    settings = gh / ".gemini" / "settings.json"
    settings.write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}},
                                    "hooks": {"AfterAgent": [{"hooks": [{"type": "command", "command": "mine"}]}]}}))
    env = {**os.environ, "GEMINI_CLI_HOME": str(gh), "XDG_STATE_HOME": str(tmp_path / "xdg")}
    p = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "hooks", "install", "--agent", "gemini_cli"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "trusted folders" in p.stdout
    got = json.loads(settings.read_text())
    assert got["security"] == {"auth": {"selectedType": "gemini-api-key"}}
    assert set(got["hooks"]) == {"BeforeAgent", "AfterAgent", "Notification", "BeforeTool", "AfterTool", "SessionEnd"}
    assert got["hooks"]["AfterAgent"][0]["hooks"] == [{"type": "command", "command": "mine"}]  # the user's stays
    ours = got["hooks"]["AfterAgent"][1]["hooks"][0]
    assert ours["type"] == "command" and ours["timeout"] == 10000 and "hook --agent gemini_cli" in ours["command"]
    again = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "hooks", "install", "--agent",
                            "gemini_cli"], capture_output=True, text=True, env=env, timeout=60)
    assert "nothing changed" in again.stdout


def test_scan_provider_gemini_cli(tmp_path):
    root = tmp_path / ".gemini" / "tmp"
    path = _place("tui_err400", root)
    os.utime(path, (time.time() - 3600, time.time() - 3600))  # an hour old: its last answer has settled
    p = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "scan", "--provider", "gemini_cli",
                        "--json", str(root)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(ln) for ln in p.stdout.splitlines()]
    assert [(r["provider"], r["project"], r["state"]) for r in rows] == [("gemini_cli", "proj", "completed")]


def test_print_mode_rollback_is_an_error_once_the_process_ended():
    """``-p`` writes only a rollback of its prompt and exits 1: the turn reads ``working`` while the file
    may still be deleted (no prompt survived), ``error`` at once when ``SessionEnd`` says the CLI is gone,
    else after ``api_retry_grace_seconds``."""
    from coding_agent_exporter.reducer import SessionReducer, Timing

    r, dec = SessionReducer(Timing(retry_grace=30.0)), gemini_cli.FileDecoder()
    recs = [{"sessionId": "s", "projectHash": "h", "startTime": "2026-12-01T19:00:00Z"},
            {"id": "u1", "timestamp": "2026-12-01T19:00:01Z", "type": "user", "content": [{"text": "Hi"}]},
            {"$set": {"messages": []}}]
    for i, o in enumerate(recs):
        ev = dec.project(o)
        ev.ts = ev.ts or 1796151602.0
        r.apply(ev, i, True, f"k{i}")
    assert r.status(1796151603.0, 1796151602.0).state == "working"
    assert r.status(1796151640.0, 1796151602.0).state == "error"
    r.apply(gemini_cli.project_hook("SessionEnd", {}, 1796151602.5), 9, True, "end")
    st = r.status(1796151603.0, 1796151602.5)
    assert (st.state, st.error_kind) == ("error", "api_error")


@pytest.mark.parametrize("run", ["tui_esc_streaming", "tui_err400"])
def test_recorded_run_played_live_against_the_exporter(run, tmp_path):
    """The real exporter (file events, the hook route), the run's files written and its hooks POSTed at
    their recorded pace: the screens' states and the pages as in the replay."""
    from gemini_replay import live

    receiver = Receiver()
    exp = Exporter(tmp_path, receiver=receiver, config={
        "reducer": {"inferred_settle_seconds": 1.5, "api_retry_grace_seconds": 1.5},
        "alerts": {"settle_seconds": 1.0, "max_age_seconds": 0}}).start()
    url = f"http://127.0.0.1:{exp.port}"

    def post(body):
        req = urllib.request.Request(f"{url}/hooks/gemini_cli", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **exp.hook_headers()})
        urllib.request.urlopen(req, timeout=20).read()

    _, hook_pages, screens = EXPECT[run]

    def state(label):
        """The row within a few seconds of the screen (a new folder's watch and the file event take a
        moment, longer on a busy machine); at once when it is the one expected."""
        deadline = time.time() + 5.0
        while True:
            rows = json.load(urllib.request.urlopen(f"{url}/api/v1/sessions", timeout=20))["sessions"]
            rows = [r for r in rows if r["provider"] == "gemini_cli"]
            out = None
            if rows:
                out = {"state": rows[0]["state"]}
                if rows[0]["error_kind"]:
                    out["error_kind"] = rows[0]["error_kind"]
            if out == screens[label][1] or time.time() > deadline:
                return out
            time.sleep(0.05)

    try:
        snaps = live(run, tmp_path / "gemini" / "tmp", exp, post, state)
        time.sleep(4)
        assert snaps == {k: v[1] for k, v in screens.items()}
        kinds = ["completed" if m["title"].endswith("your turn") else "error" if ": stopped on " in m["title"]
                 else "waiting" for m in receiver.messages]
        assert kinds == hook_pages
    finally:
        exp.stop()
        receiver.close()


def test_records_of_unforeseen_shapes_are_skipped_not_raised(tmp_path):
    """Bad lines in a session file: counted and skipped; the session's state goes on."""
    root = tmp_path / ".gemini" / "tmp"
    path = _place("tui_text_two_turns", root, upto=6)
    with open(path, "ab") as f:
        for bad in (b'{"$set": 7}', b'{"$set": {"messages": "x"}}', b'{"$rewindTo": 3}', b'{"id": 5, "type": "user"}',
                    b'{"id": "z", "type": "bogus", "content": {"a": 1}, "toolCalls": "no"}', b'[1, 2]', b'{"id'):
            f.write(bad + b"\n")
    os.utime(path, (time.time() - 3600, time.time() - 3600))
    p = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "scan", "--provider", "gemini_cli", "--json",
                        str(root)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    (row,) = [json.loads(ln) for ln in p.stdout.splitlines()]
    assert row["state"] == "completed" and row["counters"]["parse_errors"] >= 2
