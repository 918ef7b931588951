"""Real recordings of current agent versions (Claude Code, Codex, Copilot CLI, Pi) (fixtures/transcripts, see
SOURCES.md there) replayed live at their own recorded pace: each line is
appended after the gap its timestamp shows (capped at ``CAP`` seconds, with
the time rules scaled to match: inferred settle 3 s, alert settle 1 s, API
retry grace 3 s), keeping its own timestamp. Every turn end pages once,
never before the record that ends the turn is written."""

from __future__ import annotations

import json
import time

import pytest

from coding_agent_exporter.decode import parse_timestamp
from harness import TRANSCRIPTS, Exporter, Receiver, claude_path, codex_path, copilot_path, pi_path

CAP = 2.5  # below the scaled inferred settle (3 s): a capped gap never ends a turn on its own
TIMING = {"reducer": {"inferred_settle_seconds": 3.0, "marker_wait_seconds": 30.0, "stall_after_seconds": 60.0,
                      "api_retry_grace_seconds": 3.0},
          "alerts": {"settle_seconds": 1.0}}

# file: [(1-based line that ends a turn, page kind)], in order
RECORDINGS = {
    "claude_code/v2.1.143_goal_stop_hook_continues_turn.jsonl": [(29, "completed")],  # not at the blocked end_turn (16)
    "claude_code/v2.1.156_background_agents_task_notification.jsonl": [],  # 3 background agents pending at 20
    "claude_code/v2.1.143_compact_boundary_then_turn.jsonl": [(8, "completed"), (25, "completed")],
    "claude_code/v2.1.123_real_session_turn_end.src-lines1294-1377.jsonl": [(7, "completed")],
    "claude_code/v2.1.148_api_error_message_then_turn_duration.jsonl": [(4, "error"), (8, "error")],
    # turn 1 ends at 5; the second prompt's retries stop: an error once the last retry is overdue
    "claude_code/v2.1.143_rate_limit_api_error_retries.jsonl": [(5, "completed"), (22, "error")],
    "codex/v0.147.0_tui_turn_complete_paginated.jsonl": [(14, "completed")],
    # Copilot closes a turn_end after every tool round (11): the user's turn is the second (14)
    "copilot_cli/v1.0.77_tool_call_splits_turn.jsonl": [(14, "completed")],
    # four turn_ends for one prompt, a subagent's own answer at 26: one page, at 32
    "copilot_cli/v1.0.78_subagent_failed_then_completed.jsonl": [(32, "completed")],
    # autopilot continues by itself after 15 and 26; session.task_complete (39) ends the run
    "copilot_cli/v1.0.78_autopilot_task_complete.jsonl": [(39, "completed")],
    # the failed turn's turn_end (12) does not page "your turn" before its session.error (13)
    "copilot_cli/v1.0.78_rate_limit_429_session_error.jsonl": [(8, "completed"), (13, "error")],
    "copilot_cli/v1.0.78_compaction_between_turns.jsonl": [(9, "completed"), (16, "completed")],
    "copilot_cli/v1.0.78_user_shell_escape_tool_user_requested.jsonl": [(9, "completed"), (17, "completed")],
    "copilot_cli/v1.0.77_permission_requested_pending.jsonl": [(9, "waiting")],  # then the CLI quits
    "pi/v0.70.0_tool_call_then_stop.jsonl": [(7, "completed")],  # not at toolUse (5)
    "pi/v0.70.0_esc_aborted_then_new_prompt.jsonl": [(7, "completed")],  # aborted (5) pages nothing
    "pi/v0.70.0_compaction_between_turns.jsonl": [(5, "completed"), (8, "completed")],
    "pi/v0.70.0_error_stopreason_unsupported_model.jsonl": [(5, "error")],
}


def _session_id(lines: list[bytes], provider: str) -> str:
    for line in lines:
        obj = json.loads(line)
        if provider == "codex" and obj.get("type") == "session_meta":
            return obj["payload"]["id"]
        if provider == "claude_code" and isinstance(obj.get("sessionId"), str):
            return obj["sessionId"]
        if provider == "copilot_cli" and obj.get("type") == "session.start":
            return obj["data"]["sessionId"]
        if provider == "pi" and obj.get("type") == "session":
            return obj["id"]
    raise AssertionError("no session id")


PATHS = {"claude_code": claude_path, "codex": codex_path, "copilot_cli": copilot_path, "pi": pi_path}


@pytest.mark.parametrize("name", list(RECORDINGS), ids=[n.split("/")[1] for n in RECORDINGS])
def test_recording_at_its_own_pace(name, tmp_path):
    lines = (TRANSCRIPTS / name).read_bytes().splitlines(keepends=True)
    provider = name.split("/")[0]
    sid = _session_id(lines, provider)
    path = PATHS[provider](tmp_path, sid)
    path.parent.mkdir(parents=True)
    receiver = Receiver()
    exp = Exporter(tmp_path, config=TIMING, receiver=receiver).start()
    written = {}
    try:
        prev = None
        for i, line in enumerate(lines, 1):
            ts = parse_timestamp(json.loads(line).get("timestamp"))
            if ts is not None:
                if prev is not None and ts > prev:
                    time.sleep(min(ts - prev, CAP))
                prev = ts if prev is None else max(prev, ts)
            with open(path, "ab") as f:
                f.write(line)
            written[i] = time.time()
        want = RECORDINGS[name]
        deadline = time.time() + 20
        while len(receiver.messages) < len(want) and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(3.0)  # and nothing more follows
        got = list(zip(receiver.received_at, receiver.messages))
        assert len(got) == len(want), (got, exp.log()[-3000:])
        for (at, msg), (line_no, kind) in zip(got, want):
            assert at >= written[line_no], f"paged before line {line_no} was written: {msg}"
            assert ("your turn" in msg["title"]) == (kind == "completed"), msg
            assert f"Session: {sid}" in msg["message"]
    finally:
        exp.stop()
        receiver.close()
