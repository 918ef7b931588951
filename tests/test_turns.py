"""Whose move is it (issue 21): what is pending is named in the state's detail,
turns the agent did not work on are not turns, teammates are the lead's work.

In-process: the session store reads the field case files at a fake clock, as
``scan --json`` and ``/api/v1/sessions`` show them (``rows``)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from harness import CASES
from coding_agent_exporter.metrics import Metrics
from coding_agent_exporter.providers import claude_code, codex
from coding_agent_exporter.reducer import SessionReducer, Timing
from coding_agent_exporter.files import FileTable
from coding_agent_exporter.store import SessionStore


@pytest.fixture(autouse=True)
def _no_team_leads():
    claude_code._TEAM_LEADS.clear()  # the provider's lead registry is per process
    yield
    claude_code._TEAM_LEADS.clear()


class Files:
    """Case files appended under a root and read by one store."""

    def __init__(self, root: Path, provider: str, timing: Timing | None = None):
        self.root, self.provider = root, provider
        self.store = SessionStore(Metrics(), timing or Timing())
        self.files = FileTable(self.store, 1 << 24)

    def add(self, rel: str, *parts: str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_bytes(b"")
            self.files.track(str(path), self.provider, self.root)
        with open(path, "ab") as f:
            for p in parts:
                f.write((CASES / p).read_bytes())
        self.files.refresh(str(path), live=True)
        return path

    def rows(self, at: float) -> dict[str, dict]:
        self.store.evaluate(at)
        return {r["session_id"]: r for r in self.store.rows(at)}


def _last_ts(*parts: str) -> float:
    from coding_agent_exporter.decode import parse_timestamp

    out = 0.0
    for p in parts:
        for line in (CASES / p).read_text().splitlines():
            t = parse_timestamp(json.loads(line).get("timestamp"))
            out = max(out, t or 0.0)
    return out


def test_desktop_background_agents_named_until_each_reports_back(tmp_path):
    sid = "c0000047-0260-4700-8000-000000000047"
    f = Files(tmp_path, "claude_code")
    rel = f"-home-dev-proj/{sid}.jsonl"
    f.add(rel, "47_claude_desktop_background_agents_part1.jsonl")
    row = f.rows(time.time())[sid]
    assert (row["state"], row["detail"]) == ("working", "background_agents_pending:2")  # no turn_duration on Desktop
    f.add(rel, "47_claude_desktop_background_agents_part2.jsonl")
    row = f.rows(time.time())[sid]
    assert (row["state"], row["detail"]) == ("working", "background_agents_pending:1")
    f.add(rel, "47_claude_desktop_background_agents_part3.jsonl")
    row = f.rows(time.time())[sid]
    assert (row["state"], row["detail"]) == ("completed", "end_turn")


def test_wakeup_holds_while_due_soon_and_a_far_one_says_when(tmp_path):
    sid = "c0000048-0143-4800-8000-000000000048"
    t = Timing(wakeup_hold=900, retry_grace=30)
    f = Files(tmp_path, "claude_code", t)
    rel = f"-home-dev-proj/{sid}.jsonl"
    path = f.add(rel, "48_claude_wakeup_armed_part1.jsonl")
    end = _last_ts("48_claude_wakeup_armed_part1.jsonl")
    import os

    os.utime(path, (end, end))
    f.store.sessions[("claude_code", sid)].last_write = end
    row = f.rows(end + 10)[sid]
    assert row["state"] == "working" and row["detail"].startswith("wakeup_armed:"), row
    # the wakeup did not come: past its time and the grace, the turn end stands, saying when it was due
    row = f.rows(end + 60 + 31)[sid]
    assert row["state"] == "completed" and row["detail"].startswith("wakeup_armed:"), row
    f.add(rel, "48_claude_wakeup_armed_part2.jsonl")
    end2 = _last_ts("48_claude_wakeup_armed_part2.jsonl")
    row = f.rows(end2 + 1)[sid]
    assert row["state"] == "completed"  # an hour away: beyond wakeup_hold, pages at once
    want = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(end2 - 1 + 3600))  # the result record + 3600 s
    assert row["detail"].startswith("wakeup_armed:" + want), row


def test_codex_compact_task_leaves_the_state_and_turn(tmp_path):
    sid = "019f9000-0049-7000-8000-000000000049"
    f = Files(tmp_path, "codex")
    rel = f"2026/07/20/rollout-2026-07-20T10-00-00-{sid}.jsonl"
    f.add(rel, "49_codex_manual_compact_part1.jsonl")
    before = f.rows(time.time())[sid]
    f.add(rel, "49_codex_manual_compact_part2_compact.jsonl")
    after = f.rows(time.time())[sid]
    assert (after["state"], after["turn"], after["detail"]) == (before["state"], before["turn"], before["detail"])
    f.add(rel, "49_codex_manual_compact_part3.jsonl")
    last = f.rows(time.time())[sid]
    assert last["state"] == "completed" and last["turn"] == "019f9000-0049-7001-8000-000000000003"


def test_codex_user_shell_task_is_not_a_turn(tmp_path):
    sid = "019f9000-2471-7000-8000-000000002471"
    f = Files(tmp_path, "codex")
    rel = f"2026/06/03/rollout-2026-06-03T10-00-00-{sid}.jsonl"
    f.add(rel, "40_codex_user_shell_command_part1.jsonl")
    before = f.rows(time.time())[sid]
    f.add(rel, "40_codex_user_shell_command_part2_user_shell.jsonl")
    after = f.rows(time.time())[sid]
    assert (after["state"], after["turn"]) == (before["state"], before["turn"]) == \
        ("completed", "019f9000-2471-7001-8000-000000000001")


@pytest.mark.parametrize("lead_first", [True, False])
def test_teammates_are_never_sessions_of_their_own(tmp_path, lead_first):
    lead = "c0000042-4118-4600-8000-000000041186"
    f = Files(tmp_path, "claude_code")
    mates = [("-home-dev-proj/c0000042-4118-4600-8000-0000000000a1.jsonl", "42_claude_teammate_sessions_tester.jsonl"),
             ("-home-dev-proj/c0000042-4118-4600-8000-0000000000a2.jsonl",
              "42_claude_teammate_sessions_reviewer.jsonl")]
    if lead_first:
        f.add(f"-home-dev-proj/{lead}.jsonl", "42_claude_teammate_sessions_lead_part1.jsonl")
    for rel, part in mates:
        f.add(rel, part)
    if not lead_first:  # a start-up scan in name order: the teammates first
        f.add(f"-home-dev-proj/{lead}.jsonl", "42_claude_teammate_sessions_lead_part1.jsonl")
    rows = f.rows(time.time())
    assert list(rows) == [lead], rows
    assert rows[lead]["state"] == "working" and rows[lead]["detail"] == "background_agents_pending:2"
    if lead_first:  # the teammates' files are the lead's
        assert len(f.store.sessions[("claude_code", lead)].files) == 3


def test_synthetic_reply_to_own_meta_prompt_is_bookkeeping_not_to_yours_an_error():
    dec, r = claude_code.FileDecoder(), SessionReducer(Timing())
    recs = [line for p in ("38_claude_resume_after_shutdown_part1.jsonl", "38_claude_resume_after_shutdown_part2.jsonl",
                           "38_claude_resume_after_shutdown_part3_shutdown.jsonl",
                           "38_claude_resume_after_shutdown_part4_resume.jsonl")
            for line in (CASES / p).read_text().splitlines()]
    for i, line in enumerate(recs):
        ev = dec.project(json.loads(line))
        if ev is not None:
            r.apply(ev, i, True, f"k{i}")
    st = r.status(time.time() * 2, 0)
    assert (st.state, st.detail) == ("interrupted", "shutdown")
    dec, r = claude_code.FileDecoder(), SessionReducer(Timing())
    for i, line in enumerate((CASES / "16_synthetic_no_response.jsonl").read_text().splitlines()):
        r.apply(dec.project(json.loads(line)), i, True, f"k{i}")
    assert r.status(time.time() * 2, 0).state == "error"


def test_codex_interrupt_hook_ends_an_open_permission_prompt():
    r = SessionReducer(Timing())
    dec = codex.FileDecoder()
    for i, line in enumerate((CASES / "39_codex_interrupt_hook_part1.jsonl").read_text().splitlines()):
        r.apply(dec.project(json.loads(line)), i, True, f"k{i}")
    turn = "019f9000-2625-7001-8000-000000000001"
    now = time.time()
    r.apply(codex.project_hook("PermissionRequest", {"turn_id": turn, "tool_name": "Bash"}, now), 100, True, "h1")
    assert r.status(now, now).state == "waiting"
    r.apply(codex.project_hook("Interrupt", {"turn_id": turn}, now + 1), 101, True, "h2")
    st = r.status(now + 2, now + 1)
    assert (st.state, st.turn) == ("interrupted", turn)


def test_codex_stop_hook_mid_turn_ends_nothing_and_the_turn_keeps_its_id():
    r = SessionReducer(Timing())
    dec = codex.FileDecoder()
    turn = "019f9000-0051-7001-8000-000000000001"
    for i, line in enumerate((CASES / "51_codex_stop_hook_mid_turn_part1.jsonl").read_text().splitlines()):
        r.apply(dec.project(json.loads(line)), i, True, f"k{i}")
    now = time.time()
    r.apply(codex.project_hook("Stop", {"turn_id": turn}, now), 100, True, "h1")
    assert r.status(now, now).state == "working"
    for i, line in enumerate((CASES / "51_codex_stop_hook_mid_turn_part2.jsonl").read_text().splitlines()):
        ev = dec.project(json.loads(line))
        ev.ts = now + 1 + i  # after the hook, as live
        r.apply(ev, 200 + i, True, f"m{i}")
    st = r.status(now + 100, now + 10)
    assert (st.state, st.turn) == ("completed", turn) and r.passed == []


LIVE = Path(__file__).resolve().parent.parent.parent / "shared" / "live-agents" / "codex-0.171.0"


@pytest.mark.skipif(not (LIVE / "tui_esc_interrupt_streaming").is_dir(), reason="shared/live-agents not here")
def test_real_codex_interrupt_hook_is_interrupted_at_once():
    """Codex 0.171.0 (real, offline): Esc mid-stream; the ``Interrupt`` hook
    arrives between the rollout's ``<turn_aborted>`` marker and its
    ``turn_aborted`` event. The hook alone (on the rollout as it was 50 ms
    before) already says ``interrupted``, and the next turn is a turn again."""
    from coding_agent_exporter.decode import parse_timestamp

    folder = LIVE / "tui_esc_interrupt_streaming"
    (rollout,) = folder.glob("codex_sessions/*/*/*/*.jsonl")
    (hook,) = [json.loads(l) for l in (folder / "hooks.jsonl").read_text().splitlines()
               if json.loads(l)["event_arg"] == "Interrupt"]
    dec, r = codex.FileDecoder(), SessionReducer(Timing())
    lines = [json.loads(l) for l in rollout.read_text().splitlines()]
    before = [o for o in lines if parse_timestamp(o.get("timestamp")) < hook["recv_time"] - 0.05]
    for i, o in enumerate(before):
        r.apply(dec.project(o), i, True, f"k{i}")
    assert r.status(hook["recv_time"], hook["recv_time"]).state == "working"
    p = hook["payload"]
    r.apply(codex.project_hook(p["hook_event_name"], p, hook["recv_time"]), 1000, True, "hook")
    st = r.status(hook["recv_time"] + 0.001, hook["recv_time"])
    assert (st.state, st.turn) == ("interrupted", p["turn_id"])
    for i, o in enumerate(lines[len(before):]):
        r.apply(dec.project(o), 2000 + i, True, f"m{i}")
    assert r.status(time.time(), time.time()).state == "completed"


def test_codex_goal_holds_the_turn_end_until_the_goal_stops():
    """While a /goal is ``active`` a ``task_complete`` is Codex's, not yours
    (``detail`` ``goal_active``); the update that stops the goal (here
    ``budget_limited``, with no further turn) is that turn's end."""
    dec, r = codex.FileDecoder(), SessionReducer(Timing())
    lines = (CASES / "55_codex_goal_continuation_part1.jsonl").read_text().splitlines()
    for i, line in enumerate(lines):
        r.apply(dec.project(json.loads(line)), i, True, f"k{i}")
    st = r.status(time.time(), time.time())
    assert (st.state, st.detail) == ("working", "goal_active")
    last = json.loads(lines[-1])
    update = {"timestamp": last["timestamp"][:-4] + "900Z", "type": "event_msg",
              "payload": {"type": "thread_goal_updated", "goal": {"status": "budget_limited"}}}
    r.apply(dec.project(update), 100, True, "g")
    st = r.status(time.time(), time.time())
    assert (st.state, st.turn, st.detail) == ("completed", "019f9000-0055-7001-8000-000000000001", "goal_budget_limited")
