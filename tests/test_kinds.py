"""Each field case's whole kind, beyond the case file itself: variants for the
other agent, other versions and other layouts. Reduced in-process by the same
store the daemon uses; states and counters are what ``scan`` and ``/metrics``
show."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from coding_agent_exporter.metrics import Metrics
from coding_agent_exporter.reducer import Timing
from coding_agent_exporter.files import FileTable
from coding_agent_exporter.store import SessionStore

T0 = 1_777_629_600  # 2026-05-01T10:00:00Z
CSID = "c1a0de00-0000-4000-8000-000000000001"
XSID = "0196a000-0000-7000-8000-0000000000aa"


def iso(sec: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(T0 + sec)) + f".{int((sec % 1) * 1000):03d}Z"


def c(kind: str, n: int, sec: float, **kw) -> dict:
    """A Claude Code record."""
    r = {"parentUuid": None, "isSidechain": False, "sessionId": kw.pop("sid", CSID), "cwd": "/home/dev/proj",
         "version": kw.pop("version", "2.1.120"), "uuid": f"u-{n}", "timestamp": iso(sec)}
    if kind == "prompt":
        r.update(type="user", message={"role": "user", "content": kw.pop("text", "go")})
    elif kind == "text":
        r.update(type="assistant", message={"id": kw.pop("mid", f"m{n}"), "role": "assistant", "model": "claude-x",
                                            "stop_reason": kw.pop("stop", None),
                                            "content": [{"type": "text", "text": kw.pop("text", "ok")}]})
    elif kind == "tool_use":
        r.update(type="assistant", message={"id": kw.pop("mid", f"m{n}"), "role": "assistant", "model": "claude-x",
                                            "stop_reason": None, "content": [{"type": "tool_use", "id": f"t{n}",
                                                                              "name": "Task", "input": {}}]})
    elif kind == "tool_result":
        r.update(type="user", message={"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                                                    "content": "ok"}]})
    elif kind == "system":
        r.update(type="system", subtype=kw.pop("subtype"))
    elif kind == "error":
        r.update(type="assistant", isApiErrorMessage=True, error=kw.pop("error", "overloaded"),
                 apiErrorStatus=kw.pop("status", 529),
                 message={"id": f"e{n}", "role": "assistant", "model": "<synthetic>", "stop_reason": "stop_sequence",
                          "content": [{"type": "text", "text": "API Error"}]})
    r.update(kw)
    return r


def x(etype: str, sec: float, **payload) -> dict:
    """A Codex envelope record."""
    return {"timestamp": iso(sec), "type": etype, "payload": payload}


def meta(sec: float = 0, sid: str = XSID, **kw) -> dict:
    return x("session_meta", sec, id=sid, timestamp=iso(sec), cwd="/home/dev/proj", source=kw.pop("source", "cli"),
             **kw)


def dump(records) -> bytes:
    out = b""
    for r in records:
        out += r if isinstance(r, bytes) else json.dumps(r).encode() + b"\n"
    return out


class Run:
    """Lay files out under a tmp root and reduce them as the daemon does."""

    def __init__(self, tmp: Path, max_line_bytes: int = 16 << 20, timing: Timing | None = None):
        self.tmp = tmp
        self.metrics = Metrics()
        self.store = SessionStore(self.metrics, timing or Timing(inferred_settle=30, marker_wait=300,
                                                                 stall_after=600))
        self.files = FileTable(self.store, max_line_bytes)
        self.claude_root = tmp / "claude"
        self.codex_root = tmp / "codex"

    def claude(self, records, rel: str | None = None) -> Path:
        return self._write(self.claude_root / (rel or f"-proj/{CSID}.jsonl"), "claude_code", self.claude_root,
                           records)

    def codex(self, records, sid: str = XSID) -> Path:
        return self._write(self.codex_root / f"2026/05/01/rollout-2026-05-01T10-00-00-{sid}.jsonl", "codex",
                           self.codex_root, records)

    def _write(self, path: Path, provider: str, root: Path, records) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as f:
            f.write(dump(records))
        self.files.track(str(path), provider, root)
        self.files.refresh(str(path), live=True)
        return path

    def state(self, sid: str = CSID, after: float = 0.0) -> dict:
        """The session's row, evaluated ``after`` seconds past its last write."""
        s = next(s for s in self.store.sessions.values() if s.session_id == sid)
        self.store.evaluate(s.last_write + after)
        return next(r for r in self.store.rows(s.last_write) if r["session_id"] == sid)

    def metric(self, name: str, **labels) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


# -- 01/03/04/05: malformed lines of every reason, both agents ----------------
def test_codex_torn_glued_and_malformed_lines(tmp_path):
    r = Run(tmp_path)
    good = dump([meta(), x("event_msg", 1, type="task_started", turn_id="t1")])
    torn = b'{"timestamp":"2026-05-01T10:00:02Z","type":"event_msg","payl' + dump(
        [x("response_item", 3, type="function_call", name="shell", arguments="{}", call_id="c1")])
    rest = dump([x("response_item", 4, type="function_call_output", call_id="c1", output="ok"),
                 x("event_msg", 5, type="agent_message", message="done")]) + b"\x00" * 300 + b"\n" + \
        b'{"timestamp":"2026-05-01T10:00:06Z","type":"event_msg","payload":{"type":"x","m":"\xe2\x82"}}\n' + \
        b"[1,2]\n" + dump([x("event_msg", 7, type="task_complete", turn_id="t1")])
    r.codex([good + torn + rest])
    row = r.state(XSID)
    assert (row["state"], row["evidence"]) == ("completed", "explicit")
    # (the torn line's whole record after the torn one is read: counted as torn_record, not invalid_json)
    for reason in ("torn_record", "nul_bytes", "invalid_utf8", "not_object"):
        assert r.metric("coding_agent_transcript_parse_errors_total", provider="codex", reason=reason) == 1, reason


def test_claude_invalid_utf8_and_crlf(tmp_path):
    r = Run(tmp_path)
    r.claude([c("prompt", 1, 0), b'{"type":"user","text":"\xc3"}\n',
              json.dumps(c("text", 2, 1, stop="end_turn")).encode() + b"\r\n"])
    assert r.state()["state"] == "completed"
    assert r.metric("coding_agent_transcript_parse_errors_total", provider="claude_code", reason="invalid_utf8") == 1


def test_unicode_line_separators_inside_strings(tmp_path):
    """U+2028, U+2029 and U+0085 are legal inside JSON strings; lines split on
    \\n only."""
    r = Run(tmp_path)
    r.claude([c("prompt", 1, 0, text="a\u2028b\u0085c\u2029d"), c("text", 2, 1, text="x\u2028y", stop="end_turn")])
    row = r.state()
    assert row["state"] == "completed" and row["counters"]["parse_errors"] == 0 and row["counters"]["lines"] == 2


# -- 08: oversized lines, Codex too ----------------------------------------------
def test_codex_oversized_line_skipped_line_aligned(tmp_path):
    r = Run(tmp_path, max_line_bytes=4096)
    r.codex([meta(), x("event_msg", 1, type="task_started", turn_id="t1"),
             x("response_item", 2, type="function_call_output", call_id="c", output="z" * 50_000),
             x("event_msg", 3, type="task_complete", turn_id="t1")])
    assert r.state(XSID)["state"] == "completed"
    assert r.metric("coding_agent_transcript_skipped_lines_total", provider="codex", reason="oversized") == 1


# -- 09: long activity between a call and its result -----------------------------
def test_codex_long_tool_run_stays_working(tmp_path):
    r = Run(tmp_path)
    recs = [meta(), x("event_msg", 1, type="task_started", turn_id="t1"),
            x("response_item", 2, type="function_call", name="shell", arguments="{}", call_id="c")]
    recs += [x("event_msg", 3 + i, type="token_count", info=None) for i in range(50)]
    r.codex(recs)
    assert r.state(XSID, after=5)["state"] == "working"
    assert r.state(XSID, after=700)["state"] == "stalled"  # nothing written for stall_after


# -- 10: duplicates --------------------------------------------------------------
def test_codex_exact_duplicate_lines_counted(tmp_path):
    r = Run(tmp_path)
    done = x("event_msg", 5, type="task_complete", turn_id="t1")
    r.codex([meta(), x("event_msg", 1, type="task_started", turn_id="t1"), done, done])
    assert r.state(XSID)["state"] == "completed"
    assert r.metric("coding_agent_duplicate_events_total", provider="codex") == 1
    assert r.metric("coding_agent_completions_total", provider="codex", evidence="explicit") == 1


def test_claude_split_rows_are_not_duplicates(tmp_path):
    r = Run(tmp_path)
    r.claude([c("prompt", 1, 0), c("text", 2, 1, mid="M"), c("tool_use", 3, 2, mid="M"), c("tool_result", 4, 3)])
    assert r.state(after=100)["state"] == "working"  # the tool_use of the same response counts
    assert r.metric("coding_agent_duplicate_events_total", provider="claude_code") == 0


# -- 11: text first, tool call later in the same turn -----------------------------
def test_codex_pre_0_100_text_then_call_not_completed_early(tmp_path):
    """Codex before 0.100 writes no task events: an agent_message followed by
    more work is not a completion until the transcript stays quiet."""
    r = Run(tmp_path, timing=Timing(inferred_settle=30, marker_wait=300, stall_after=600))
    r.codex([meta(), x("event_msg", 1, type="user_message", message="hi"),
             x("response_item", 2, type="message", role="assistant", content=[{"type": "output_text", "text": "a"}])])
    assert r.state(XSID, after=10)["state"] == "working"
    r.codex([x("response_item", 12, type="function_call", name="shell", arguments="{}", call_id="c")])
    assert r.state(XSID, after=40)["state"] == "working"  # a call is pending
    r.codex([x("response_item", 13, type="function_call_output", call_id="c", output="ok"),
             x("response_item", 14, type="message", role="assistant", content=[{"type": "output_text", "text": "b"}])])
    row = r.state(XSID, after=31)
    assert (row["state"], row["evidence"]) == ("completed", "inferred")


# -- 12: schema drift -------------------------------------------------------------
def test_unknown_records_and_odd_shapes_ignored(tmp_path):
    r = Run(tmp_path)
    r.claude([{"type": "future-kind", "sessionId": CSID}, c("prompt", 1, 0),
              {"type": "assistant", "uuid": "u-odd", "sessionId": CSID, "message": None, "timestamp": iso(1)},
              {"type": "assistant", "uuid": "u-odd2", "sessionId": CSID, "message": {"content": {"weird": 1}},
               "timestamp": "not a time"},
              c("text", 2, 2, stop="end_turn")])
    assert r.state()["state"] == "completed"
    r.codex([meta(), x("brand_new_type", 1, whatever=[1]), x("event_msg", 2, type="new_event"),
             {"timestamp": iso(3), "type": "event_msg", "payload": None}, x("event_msg", 4, type="task_started"),
             x("event_msg", 5, type="turn_complete")])
    assert r.state(XSID)["state"] == "completed"


# -- 13/14: sidechains in every layout ----------------------------------------------
def test_inline_sidechain_error_does_not_error_parent(tmp_path):
    r = Run(tmp_path)
    r.claude([c("prompt", 1, 0), c("tool_use", 2, 1), c("error", 3, 2, isSidechain=True)])
    assert r.state(after=5)["state"] == "working"


def test_claude_2_0_sibling_agent_file(tmp_path):
    """2.0.x wrote subagents as sibling agent-*.jsonl files carrying the
    parent's sessionId: sidechain work of the parent, never a session."""
    r = Run(tmp_path)
    r.claude([c("prompt", 1, 0), c("tool_use", 2, 1)])
    r.claude([c("prompt", 10, 2, isSidechain=True), c("text", 11, 3, isSidechain=True, stop="end_turn")],
             rel="-proj/agent-1234abcd.jsonl")
    assert r.state(after=5)["state"] == "working"
    assert [row["session_id"] for row in r.store.rows(time.time())] == [CSID]


def test_codex_subagent_rollout_is_sidechain_of_parent(tmp_path):
    r = Run(tmp_path)
    r.codex([meta(), x("event_msg", 1, type="task_started", turn_id="t1"),
             x("response_item", 2, type="function_call", name="spawn_agent", arguments="{}", call_id="c")])
    child = "0196a000-0000-7000-8000-0000000000bb"
    r.codex([meta(3, sid=child, source={"subagent": {"thread_spawn": {"parent_thread_id": XSID, "depth": 1}}}),
             x("event_msg", 4, type="task_started", turn_id="t9"), x("event_msg", 5, type="task_complete",
                                                                    turn_id="t9")], sid=child)
    assert r.state(XSID, after=5)["state"] == "working"
    assert {row["session_id"] for row in r.store.rows(time.time())} == {XSID}
    # a review subagent without a parent id: hidden, never paging
    other = "0196a000-0000-7000-8000-0000000000cc"
    r.codex([meta(6, sid=other, source={"subagent": "review"}), x("event_msg", 7, type="task_complete")], sid=other)
    assert {row["session_id"] for row in r.store.rows(time.time())} == {XSID}
    assert r.metric("coding_agent_completions_total", provider="codex", evidence="explicit") == 0


def test_codex_fork_replay_is_not_new_work(tmp_path):
    r = Run(tmp_path)
    r.codex([meta(100, forked_from_id="0196a000-0000-7000-8000-000000000001"),
             # replayed parent history, older than the fork
             x("event_msg", 1, type="task_started", turn_id="p1"), x("event_msg", 2, type="user_message"),
             x("event_msg", 3, type="task_complete", turn_id="p1"), x("event_msg", 4, type="task_started", turn_id="p2")])
    assert r.state(XSID, after=1)["state"] == "unknown"
    r.codex([x("event_msg", 101, type="task_started", turn_id="f1"), x("event_msg", 102, type="task_complete",
                                                                      turn_id="f1")])
    assert r.state(XSID)["state"] == "completed"


# -- 15/16: errors -----------------------------------------------------------------
@pytest.mark.parametrize("error,status,kind", [("rate_limit", 429, "rate_limit"), ("overloaded_error", 529,
                                                                                    "overloaded"),
                                               ("authentication_failed", 401, "auth"), ("invalid_request", 400,
                                                                                        "api_error")])
def test_claude_error_kinds(tmp_path, error, status, kind):
    r = Run(tmp_path)
    r.claude([c("prompt", 1, 0), c("error", 2, 1, error=error, status=status)])
    row = r.state(after=1000)
    assert (row["state"], row["error_kind"]) == ("error", kind)
    assert r.metric("coding_agent_turn_errors_total", provider="claude_code", kind=kind) == 1


def test_claude_retried_api_error_keeps_working(tmp_path):
    r = Run(tmp_path)
    r.claude([c("prompt", 1, 0), c("system", 2, 1, subtype="api_error", level="error")])
    assert r.state(after=5)["state"] == "working"


def test_claude_retried_api_error_that_answered_is_completed(tmp_path):
    """Claude Code 2.1.332 ``-p`` (``entrypoint: sdk-cli``, shared/live-agents p_error_429_recovers):
    two 429 retries, then the answer and ``stop_hook_summary``: the turn succeeded."""
    r = Run(tmp_path)
    err = {"status": 429, "error": {"type": "error", "error": {"type": "rate_limit_error"}}}
    r.claude([c("prompt", 1, 0, version="2.1.332", entrypoint="sdk-cli"),
              *(c("system", n, n, subtype="api_error", level="error", version="2.1.332", entrypoint="sdk-cli",
                  error=err, retryAttempt=n - 1, maxRetries=10, retryInMs=1200) for n in (2, 3)),
              c("text", 4, 4.5, stop="end_turn", version="2.1.332", entrypoint="sdk-cli"),
              c("system", 5, 4.6, subtype="stop_hook_summary", version="2.1.332", entrypoint="sdk-cli",
                hasOutput=False, preventedContinuation=False)])
    row = r.state(after=120)
    assert (row["state"], row["error_kind"], row["evidence"]) == ("completed", None, "explicit")
    assert r.metric("coding_agent_completions_total", provider="claude_code", evidence="explicit") == 1
    # the last retry failing (the envelope) still reads error
    r2 = Run(tmp_path / "b")
    r2.claude([c("prompt", 1, 0, version="2.1.332", entrypoint="sdk-cli"),
               c("system", 2, 1, subtype="api_error", level="error", version="2.1.332", entrypoint="sdk-cli",
                 error=err, retryAttempt=1, maxRetries=2, retryInMs=1200),
               c("error", 3, 3, error="rate_limit", status=429, version="2.1.332", entrypoint="sdk-cli")])
    row = r2.state(after=120)
    assert (row["state"], row["error_kind"]) == ("error", "rate_limit")


def test_claude_error_envelope_read_after_its_stop_failure_hook_names_the_kind(tmp_path):
    """Claude Code 2.1.332, a persistent 529 (tests/test_real_agents.py claude_529_persistent): the
    StopFailure hook (``error: server_error``) arrives before the exporter reads the envelope
    (``error: server_error``, ``apiErrorStatus: 529``, written earlier): the kind is overloaded."""
    from coding_agent_exporter.hooks import parse

    r = Run(tmp_path)
    path = r.claude([c("prompt", 1, 0, version="2.1.332", entrypoint="cli")])
    body = {"session_id": CSID, "transcript_path": str(path), "cwd": "/home/dev/proj",
            "hook_event_name": "StopFailure", "error": "server_error"}
    r.store.apply_hook(parse("claude_code", json.dumps(body).encode(), T0 + 5))
    assert (r.state()["state"], r.state()["error_kind"]) == ("error", "api_error")
    r.claude([c("error", 2, 3, error="server_error", status=529, version="2.1.332", entrypoint="cli")])
    row = r.state(after=60)
    assert (row["state"], row["error_kind"]) == ("error", "overloaded")


def test_codex_usage_limit_then_task_complete_is_error(tmp_path):
    r = Run(tmp_path)
    r.codex([meta(), x("event_msg", 1, type="task_started", turn_id="t1"),
             x("event_msg", 2, type="error", message="You've hit your usage limit.",
               codex_error_info="usage_limit_exceeded"),
             x("event_msg", 3, type="task_complete", turn_id="t1", last_agent_message=None)])
    row = r.state(XSID)
    assert (row["state"], row["error_kind"]) == ("error", "usage_limit")
    assert r.metric("coding_agent_completions_total", provider="codex", evidence="explicit") == 0
    # a new turn after the error is work again
    r.codex([x("event_msg", 60, type="task_started", turn_id="t2"), x("event_msg", 61, type="task_complete",
                                                                     turn_id="t2")])
    assert r.state(XSID)["state"] == "completed"


def test_synthetic_reply_with_list_content(tmp_path):
    r = Run(tmp_path)
    r.claude([c("prompt", 1, 0), {**c("text", 2, 1), "message": {"id": "s", "role": "assistant", "model": "<synthetic>",
                                                                  "content": [{"type": "text",
                                                                               "text": "No response requested."}]}}])
    row = r.state(after=1000)
    assert (row["state"], row["error_kind"]) == ("error", "no_response")


# -- 19: interrupts ------------------------------------------------------------------
def test_claude_interrupt_for_tool_use_and_plain(tmp_path):
    r = Run(tmp_path)
    r.claude([c("prompt", 1, 0), c("tool_use", 2, 1),
              {**c("prompt", 3, 2), "message": {"role": "user", "content": [
                  {"type": "text", "text": "[Request interrupted by user for tool use]"}]}}])
    assert r.state(after=1000)["state"] == "interrupted"
    r.claude([c("prompt", 4, 10), c("prompt", 5, 11, text="[Request interrupted by user]")])
    assert r.state(after=1000)["state"] == "interrupted"


def test_codex_turn_aborted_marker_only(tmp_path):
    """Older rollouts have only the <turn_aborted> user marker."""
    r = Run(tmp_path)
    r.codex([meta(), x("event_msg", 1, type="user_message", message="x"),
             x("response_item", 2, type="function_call", name="shell", arguments="{}", call_id="c"),
             x("response_item", 3, type="message", role="user",
               content=[{"type": "input_text", "text": "<turn_aborted>\nThe user interrupted.\n</turn_aborted>"}])])
    assert r.state(XSID, after=1000)["state"] == "interrupted"
    # turn_aborted with reason "replaced" is not the user at the keyboard stopping it
    r2 = Run(tmp_path / "b")
    r2.codex([meta(), x("event_msg", 1, type="task_started", turn_id="t1"),
              x("event_msg", 2, type="turn_aborted", turn_id="t1", reason="replaced"),
              x("event_msg", 2.1, type="task_started", turn_id="t2")])
    assert r2.state(XSID, after=1)["state"] == "working"


# -- 24: many end markers of one turn ------------------------------------------------
def test_many_markers_one_completion(tmp_path):
    r = Run(tmp_path)
    r.codex([meta(), x("event_msg", 1, type="task_started", turn_id="t1"),
             x("event_msg", 2, type="task_complete", turn_id="t1"), x("event_msg", 2.1, type="turn_complete",
                                                                     turn_id="t1")])
    r.claude([c("prompt", 1, 0), c("text", 2, 1, stop="end_turn"), c("system", 3, 2, subtype="stop_hook_summary"),
              c("system", 4, 3, subtype="turn_duration", durationMs=3000)])
    r.state(XSID), r.state()
    assert r.metric("coding_agent_completions_total", provider="codex", evidence="explicit") == 1
    assert r.metric("coding_agent_completions_total", provider="claude_code", evidence="explicit") == 1
    assert r.metric("coding_agent_turn_duration_seconds_count", provider="claude_code") == 1
    assert r.metric("coding_agent_turn_duration_seconds_sum", provider="claude_code") == 3.0


# -- what must never move the state ---------------------------------------------------
def test_metadata_after_completion_does_not_supersede(tmp_path):
    r = Run(tmp_path)
    r.claude([c("prompt", 1, 0), c("text", 2, 1, stop="end_turn"),
              {"type": "file-history-snapshot", "messageId": "x", "snapshot": {}},
              {"type": "summary", "summary": "title", "leafUuid": "u-2"},
              {"type": "custom-title", "customTitle": "t", "sessionId": CSID},
              {"type": "queue-operation", "operation": "enqueue", "timestamp": iso(2), "sessionId": CSID},
              c("prompt", 3, 3, text="<bash-input>ls</bash-input>"),
              c("prompt", 4, 3.1, text="<bash-stdout>a b</bash-stdout><bash-stderr></bash-stderr>"),
              c("prompt", 5, 4, text="<command-name>/cost</command-name>"),
              c("prompt", 6, 4.1, text="<local-command-stdout>$0.12</local-command-stdout>"),
              c("prompt", 7, 5, isMeta=True, text="Caveat: The messages below were generated by the user"),
              c("system", 8, 6, subtype="compact_boundary"),
              c("prompt", 9, 6.1, isCompactSummary=True, text="This session is being continued"),
              c("progress", 10, 7, type="progress", data={"type": "hook_progress", "hookEvent": "SessionStart"})])
    row = r.state()
    assert (row["state"], row["evidence"]) == ("completed", "explicit")


def test_out_of_order_records(tmp_path):
    """File order is not time order: the newest record by timestamp decides."""
    r = Run(tmp_path)
    r.claude([c("prompt", 1, 0), c("prompt", 3, 60, text="next"), c("system", 2, 30, subtype="turn_duration")])
    assert r.state()["state"] == "working"
    assert r.state()["last_event_at"] == T0 + 60


def test_expired_sessions_are_forgotten_and_restart_fresh(tmp_path):
    r = Run(tmp_path)
    r.store.session_ttl = 3600
    path = r.claude([c("prompt", 1, 0), c("text", 2, 1, stop="end_turn")])
    s = r.store.sessions[("claude_code", CSID)]
    assert r.files.expire(s.last_write + 10) == 0
    assert r.files.expire(s.last_write + 4000) == 1
    assert r.store.sessions == {}
    with open(path, "ab") as f:
        f.write(dump([c("prompt", 3, 100, text="back again")]))
    r.files.refresh(str(path), live=True)
    assert r.state(after=1)["state"] == "working"


def test_deleted_files_take_their_session_along(tmp_path):
    r = Run(tmp_path)
    main = r.claude([c("prompt", 1, 0), c("tool_use", 2, 1)])
    sub = r.claude([c("text", 3, 2, isSidechain=True)], rel=f"-proj/{CSID}/subagents/agent-1.jsonl")
    r.files.forget(str(sub))
    assert ("claude_code", CSID) in r.store.sessions
    r.files.forget(str(main))
    assert r.store.sessions == {}


def test_flat_copied_subagent_file_joins_its_parent(tmp_path):
    """A subagent file copied out of its layout (any name) whose records are
    sidechain and name another session belongs to that session."""
    r = Run(tmp_path)
    r.claude([c("prompt", 1, 0), c("tool_use", 2, 1)])
    r.claude([c("prompt", 3, 2, isSidechain=True), c("text", 4, 3, isSidechain=True, stop="end_turn")],
             rel="-proj/some-copy-of-a-subagent.jsonl")
    assert [row["session_id"] for row in r.store.rows(time.time())] == [CSID]
    assert r.state(after=5)["state"] == "working"


def test_lone_surrogate_escape_keeps_the_record(tmp_path):
    r = Run(tmp_path)
    r.claude([c("prompt", 1, 0), b'{"type":"assistant","uuid":"u-2","sessionId":"' + CSID.encode()
              + b'","timestamp":"' + iso(1).encode() + b'","message":{"id":"m2","role":"assistant","stop_reason":'
              b'"end_turn","content":[{"type":"text","text":"cut emoji \\ud83d"}]}}\n'])
    row = r.state()
    assert row["state"] == "completed" and row["counters"]["parse_errors"] == 0


def test_unprojectable_record_is_counted_and_reading_goes_on(tmp_path, monkeypatch):
    from coding_agent_exporter.providers import claude_code

    orig = claude_code.FileDecoder.project

    def flaky(self, obj):
        if obj.get("uuid") == "u-2":
            raise TypeError("a shape nobody foresaw")
        return orig(self, obj)

    monkeypatch.setattr(claude_code.FileDecoder, "project", flaky)
    r = Run(tmp_path)
    r.claude([c("prompt", 1, 0), c("text", 2, 1), c("text", 3, 2, stop="end_turn")])
    assert r.state()["state"] == "completed"
    assert r.metric("coding_agent_transcript_parse_errors_total", provider="claude_code",
                    reason="unexpected_shape") == 1


def test_overlong_session_ids_are_bounded(tmp_path):
    r = Run(tmp_path)
    long_id = "x" * 5000
    r.codex([meta(sid=long_id), x("event_msg", 1, type="task_started", turn_id="t1")], sid=XSID)
    (row,) = r.store.rows(time.time())
    assert row["session_id"].startswith("sha256:") and len(row["session_id"]) < 40


# -- 27: a question or plan pending in the transcript (waiting) ---------------
@pytest.mark.parametrize("tool,reason", [("AskUserQuestion", "question"), ("ExitPlanMode", "plan")])
def test_claude_pending_question_or_plan_is_waiting_never_stalled(tmp_path, tool, reason):
    run = Run(tmp_path)
    call = c("prompt", 1, 0)
    use = c("tool_use", 2, 1)
    use["message"]["content"][0]["name"] = tool
    run.claude([call, use])
    row = run.state(after=3600)  # long past stall_after: a wait is never stalled
    assert (row["state"], row["waiting_for"]) == ("waiting", {"reason": reason, "tool": tool})
    answer = c("tool_result", 3, 90)
    run.claude([answer, c("text", 4, 95, stop="end_turn")])
    assert run.state()["state"] == "completed"


def test_codex_request_user_input_is_waiting_until_its_output(tmp_path):
    """Codex plan mode asks through a ``request_user_input`` function call;
    its ``function_call_output`` is the answer."""
    run = Run(tmp_path)
    run.codex([meta(), x("event_msg", 1, type="task_started", turn_id="t1"),
               x("response_item", 2, type="function_call", name="request_user_input", call_id="call_q",
                 arguments=json.dumps({"questions": [{"question": "Which database?"}]}))])
    row = run.state(XSID, after=3600)
    assert (row["state"], row["waiting_for"]) == ("waiting", {"reason": "question", "tool": "request_user_input"})
    run.codex([x("response_item", 60, type="function_call_output", call_id="call_q", output="Postgres"),
               x("event_msg", 61, type="agent_message", message="Using Postgres."),
               x("event_msg", 62, type="task_complete", turn_id="t1", last_agent_message="Using Postgres.")])
    assert run.state(XSID)["state"] == "completed"
    assert run.metric("coding_agent_user_wait_seconds_count", provider="codex", reason="question") == 1
