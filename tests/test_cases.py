"""Every field case in ``fixtures/cases`` (copied from shared/cases), played
against the running exporter in live mode (files appended step by step) and
in backfill mode (files present before start), with alerts delivered through
Apprise to a loopback receiver. Expected behaviour: ``cases/README.md``."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness import CASES, Exporter, Receiver, claude_path, codex_path, session_id_of, wait_for

LINE_DELAY = 0.1  # the README says about 200 ms; half keeps the suite quick


@dataclass
class Step:
    part: str  # file in CASES
    dest: str = "main"  # "main" or "subagent:<agent file name>"
    pause_after: float = 0.0
    state: str | None = None  # expected after this step (once settled)
    alerts: int | None = None  # cumulative alerts for this session


@dataclass
class Case:
    name: str
    provider: str
    steps: list[Step]
    final: str
    alert_kinds: dict = field(default_factory=dict)  # kind → count at the end (live)
    sid_from: str | None = None


CASE_TABLE = [
    Case("01_torn_glued_line", "claude_code", [Step("01_torn_glued_line.jsonl", state="completed", alerts=1)],
         "completed"),
    Case("03_malformed_midfile", "claude_code", [Step("03_malformed_midfile.jsonl", state="completed", alerts=2)],
         "completed"),
    Case("04_nul_padding_line", "claude_code", [Step("04_nul_padding_line.jsonl", state="completed", alerts=2)],
         "completed"),
    Case("05_codex_invalid_utf8_line", "codex",
         [Step("05_codex_invalid_utf8_line.jsonl", state="completed", alerts=1)], "completed"),
    Case("08_oversized_line", "claude_code", [Step("08_oversized_line.jsonl", state="completed", alerts=1)],
         "completed"),
    Case("09_huge_progress_lines", "claude_code",
         [Step("09_huge_progress_lines.jsonl", state="completed", alerts=1)], "completed"),
    Case("10_split_and_duplicated_rows", "claude_code",
         [Step("10_split_and_duplicated_rows.jsonl", state="completed", alerts=1)], "completed"),
    Case("11_streaming_text_then_tool", "claude_code", [
        # The case waits 15 s against a 30 s default settle; here 1.5 s against 3 s.
        Step("11_streaming_text_then_tool_part1.jsonl", pause_after=1.5, state="working", alerts=0),
        Step("11_streaming_text_then_tool_part2.jsonl", state="completed", alerts=1)], "completed"),
    Case("12_schema_drift_unknown_types", "claude_code",
         [Step("12_schema_drift_unknown_types.jsonl", state="completed", alerts=1)], "completed"),
    Case("13_inline_sidechain_end_turn", "claude_code", [
        Step("13_inline_sidechain_end_turn_part1.jsonl", pause_after=1.0, state="working", alerts=0),
        Step("13_inline_sidechain_end_turn_part2.jsonl", state="completed", alerts=1)], "completed"),
    Case("14_subagent_file_end_turn", "claude_code", [
        Step("14_subagent_file_end_turn_parent_part1.jsonl"),
        Step("14_subagent_file_end_turn_subagent.jsonl", dest="subagent:agent-a7f3c21.jsonl", pause_after=1.0,
             state="working", alerts=0),
        Step("14_subagent_file_end_turn_parent_part2.jsonl", state="completed", alerts=1)], "completed",
        sid_from="14_subagent_file_end_turn_parent_part1.jsonl"),
    Case("15_rate_limit_error", "claude_code", [Step("15_rate_limit_error.jsonl", state="error", alerts=1)],
         "error", alert_kinds={"error": 1, "completed": 0}),
    Case("16_synthetic_no_response", "claude_code",
         [Step("16_synthetic_no_response.jsonl", state="error", alerts=1)], "error"),
    Case("19_codex_turn_aborted", "codex", [
        Step("19_codex_turn_aborted_part1.jsonl", pause_after=0.5, state="working", alerts=0),
        Step("19_codex_turn_aborted_part2.jsonl", state="interrupted", alerts=0)], "interrupted"),
    Case("24_one_turn_many_end_markers", "claude_code",
         [Step("24_one_turn_many_end_markers.jsonl", state="completed", alerts=1)], "completed"),
]


def _sid(case: Case) -> str:
    return session_id_of(CASES / (case.sid_from or case.steps[0].part))


def _dest(root: Path, case: Case, step: Step) -> Path:
    sid = _sid(case)
    if case.provider == "codex":
        return codex_path(root, sid)
    main = claude_path(root, sid)
    if step.dest.startswith("subagent:"):
        return main.parent / sid / "subagents" / step.dest.split(":", 1)[1]
    return main


def _alerts_for(receiver: Receiver, sid: str, kind: str | None = None) -> list[dict]:
    out = []
    for m in receiver.messages:
        body = m.get("message", "")
        if f"Session: {sid}" not in body:
            continue
        if kind == "error" and "stopped on" not in m.get("title", ""):
            continue
        if kind == "completed" and "your turn" not in m.get("title", ""):
            continue
        out.append(m)
    return out


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = tmp_path_factory.mktemp("live")
    receiver = Receiver()
    exp = Exporter(root, receiver=receiver).start()
    yield exp, receiver
    exp.stop()
    receiver.close()


@pytest.mark.parametrize("case", CASE_TABLE, ids=[c.name for c in CASE_TABLE])
def test_case_live(case: Case, live):
    exp, receiver = live
    sid = _sid(case)
    for step in case.steps:
        append = (CASES / step.part).read_bytes()
        append_path = _dest(exp.root, case, step)
        from harness import append_lines

        append_lines(append_path, append, LINE_DELAY)
        if step.pause_after:
            time.sleep(step.pause_after)
        if step.state:
            exp.wait_state(sid, step.state)
        if step.alerts is not None:
            # settle time (1 s) plus delivery; then make sure no extra alert follows
            wait_for(lambda: len(_alerts_for(receiver, sid)) >= step.alerts, timeout=10,
                     what=f"{step.alerts} alerts for {case.name}")
            time.sleep(0.5)
            got = _alerts_for(receiver, sid)
            assert len(got) == step.alerts, f"{case.name} after {step.part}: {got}"
            assert exp.state(sid) == step.state
    for kind, n in case.alert_kinds.items():
        assert len(_alerts_for(receiver, sid, kind)) == n, kind
    agent = "Claude Code" if case.provider == "claude_code" else "Codex"
    for m in _alerts_for(receiver, sid):
        title, body = m["title"], m["message"]
        if case.final == "completed":
            assert title == f"{agent} · proj: your turn"
            assert "Detected: explicit" in body
        else:
            assert title.startswith(f"{agent} · proj: stopped on ")
            assert "Error: " in body
        assert body.startswith(f"Session: {sid}\n")


@pytest.fixture(scope="module")
def backfill(tmp_path_factory):
    """Every case file laid out before the exporter starts."""
    root = tmp_path_factory.mktemp("backfill")
    for case in CASE_TABLE:
        for step in case.steps:
            dest = _dest(root, case, step)
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "ab") as f:
                f.write((CASES / step.part).read_bytes())
    # 23 too (its live form is tested separately)
    sid23 = session_id_of(CASES / "23_codex_open_fd_appends_part1.jsonl")
    p = codex_path(root, sid23)
    p.write_bytes((CASES / "23_codex_open_fd_appends_part1.jsonl").read_bytes()
                  + (CASES / "23_codex_open_fd_appends_part2.jsonl").read_bytes())
    # files last written an hour ago, as a real backlog would be
    old = time.time() - 3600
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            os.utime(os.path.join(dirpath, name), (old, old))
    receiver = Receiver()
    exp = Exporter(root, receiver=receiver).start()
    time.sleep(1.0)  # several evaluation rounds and settle times
    yield exp, receiver, sid23
    exp.stop()
    receiver.close()


@pytest.mark.parametrize("case", CASE_TABLE, ids=[c.name for c in CASE_TABLE])
def test_case_backfill(case: Case, backfill):
    exp, receiver, _ = backfill
    sid = _sid(case)
    exp.wait_state(sid, case.final, timeout=5)
    assert _alerts_for(receiver, sid) == []


def test_case_23_backfill(backfill):
    exp, receiver, sid = backfill
    exp.wait_state(sid, "completed", timeout=5)
    assert receiver.messages == []


# -- counters the cases name -------------------------------------------------
def test_case_counters(live):
    """Malformed lines are counted by reason, duplicates counted, the big
    progress file read once (bytes ≈ file size)."""
    exp, _ = live
    m = exp.value
    assert m("coding_agent_transcript_parse_errors_total", reason="nul_bytes") >= 1  # 04
    assert m("coding_agent_transcript_parse_errors_total", reason="invalid_utf8") >= 1  # 05
    assert m("coding_agent_transcript_parse_errors_total", reason="invalid_json") >= 3  # 01, 03
    assert m("coding_agent_duplicate_events_total", provider="claude_code") >= 1  # 10
    size = sum((CASES / c).stat().st_size for c in os.listdir(CASES) if c.endswith(".jsonl") and c[:2] != "05"
               and not c.startswith(("19", "23")))
    read = m("coding_agent_transcript_bytes_total", provider="claude_code")
    assert read <= size * 1.01, "bytes were read more than once"


# -- 23: appends through one long-open file descriptor ------------------------
@pytest.mark.parametrize("watch_events", [True, False], ids=["events", "polling-only"])
def test_case_23_codex_open_fd_appends(tmp_path, watch_events):
    receiver = Receiver()
    exp = Exporter(tmp_path, config={"sources": {"watch_events": watch_events, "poll_interval_seconds": 0.3}},
                   receiver=receiver).start()
    try:
        sid = session_id_of(CASES / "23_codex_open_fd_appends_part1.jsonl")
        path = codex_path(tmp_path, sid)
        path.parent.mkdir(parents=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, (CASES / "23_codex_open_fd_appends_part1.jsonl").read_bytes())
            exp.wait_state(sid, "working", timeout=5)
            time.sleep(1.0)
            for line in (CASES / "23_codex_open_fd_appends_part2.jsonl").read_bytes().splitlines(keepends=True):
                os.write(fd, line)
                time.sleep(0.3)
            exp.wait_state(sid, "completed", timeout=5)  # before the file is closed
            wait_for(lambda: len(_alerts_for(receiver, sid)) == 1, timeout=5, what="1 alert")
        finally:
            os.close(fd)
        time.sleep(0.5)
        assert len(_alerts_for(receiver, sid)) == 1
        if not watch_events:
            assert exp.value("coding_agent_poll_recoveries_total") == 0  # polling is the only path, not a recovery
    finally:
        exp.stop()
        receiver.close()


def test_case_24_duplicated_file_events(tmp_path):
    """Extra file events (touches, rewrites of the same bytes' mtime) and a
    re-read after the file is replaced by an identical copy page once."""
    receiver = Receiver()
    exp = Exporter(tmp_path, receiver=receiver).start()
    try:
        src = CASES / "24_one_turn_many_end_markers.jsonl"
        sid = session_id_of(src)
        path = claude_path(tmp_path, sid)
        from harness import append_lines

        append_lines(path, src.read_bytes(), 0.05)
        for _ in range(5):
            os.utime(path)
            time.sleep(0.05)
        exp.wait_state(sid, "completed")
        wait_for(lambda: len(_alerts_for(receiver, sid)) == 1, what="1 alert")
        # the same content under a new inode: read again from the start, deduplicated
        tmp = path.with_suffix(".tmp")
        shutil.copy(path, tmp)
        os.replace(tmp, path)
        time.sleep(1.5)
        assert len(_alerts_for(receiver, sid)) == 1
        assert exp.value("coding_agent_duplicate_events_total", provider="claude_code") >= 3
    finally:
        exp.stop()
        receiver.close()
