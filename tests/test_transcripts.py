"""Real Claude Code, Codex, Copilot CLI and Pi transcripts (fixtures/transcripts,
from public repositories; see SOURCES.md there): ``scan`` gives the right final state of
each whole session, and reading in arbitrary pieces equals reading whole."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coding_agent_exporter.metrics import Metrics
from coding_agent_exporter.reducer import Timing
from coding_agent_exporter.files import FileTable
from coding_agent_exporter.store import SessionStore
from harness import ROOT, TRANSCRIPTS

CC = TRANSCRIPTS / "claude_code"
CX = TRANSCRIPTS / "codex"
CP = TRANSCRIPTS / "copilot_cli"
PI = TRANSCRIPTS / "pi"
PARENT = "ae4a77f8-aedd-4bc1-888f-c94edc91af04"


def _sid_in(path: Path) -> str | None:
    for line in path.read_text().splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj.get("sessionId"), str):
            return obj["sessionId"]
    return None


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    """The real files laid out as the agents do: Claude main files named by
    their sessionId, the 2.1.39 subagent files under <sessionId>/subagents/,
    Codex rollouts under sessions/YYYY/MM/DD/."""
    root = tmp_path_factory.mktemp("real")
    claude = root / "claude" / "projects"
    codex = root / "codex" / "sessions" / "2026" / "05" / "01"
    codex.mkdir(parents=True)
    names = {}
    for f in sorted(CC.glob("*.jsonl")):
        sid = _sid_in(f)
        if "subagent" in f.name:
            agent = f.name.split("_subagent_")[1]
            dest = claude / "-home-user-projects-spotter" / sid / "subagents" / agent
        elif "2.1.39" in f.name:
            dest = claude / "-home-user-projects-spotter" / f"{sid}.jsonl"  # two excerpts, one session
        else:
            dest = claude / "-proj" / f"{sid}.jsonl"
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "ab") as out:
            out.write(f.read_bytes())
        names[f.name] = sid
    for i, f in enumerate(sorted(CX.glob("*.jsonl"))):
        dest = codex / f"rollout-2026-05-01T10-00-0{i}-{f.stem[:20]}.jsonl"
        dest.write_bytes(f.read_bytes())
        names[f.name] = None
    return root, names


def _scan(*paths, at: float | None = None, provider: str | None = None) -> list[dict]:
    at = at or time.time() + 86400  # a day later: every time-based rule has fired
    forced = ["--provider", provider] if provider else []
    out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "scan", "--json", "--at", str(at), *forced,
                          *map(str, paths)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


EXPECTED_CLAUDE = {
    # file: (state, evidence or error kind)
    "v1.0.98_complete_session.jsonl": ("completed", "explicit"),  # final line stop_reason end_turn
    "v1.0.108_inline_sidechains.jsonl": ("completed", "inferred"),  # main text last, stop_reason null
    "v1.0.98_summary_parallel_tasks.lines1-30.jsonl": ("stalled", None),  # cut inside parallel Tasks
    "v2.1.114_rate_limit_line.jsonl": ("error", "rate_limit"),
    "v2.1.38_short_interrupted.jsonl": ("interrupted", None),  # then /model: a local command
    "v2.1.38_tool_heavy.jsonl": ("interrupted", None),
    # lines 1–104 and 1463–1496 of one session: ends mid-turn after /compact
    "v2.1.39_session_start_task.lines1-104.jsonl": ("stalled", None),
}


def test_scan_real_claude_sessions(layout):
    root, names = layout
    rows = {r["session_id"]: r for r in _scan(root / "claude" / "projects")}
    for fname, (state, how) in EXPECTED_CLAUDE.items():
        row = rows[names[fname]]
        assert row["state"] == state, (fname, row)
        assert how in (None, row["evidence"], row["error_kind"]), (fname, row)
        assert row["provider"] == "claude_code"
        assert row["counters"]["parse_errors"] == 0
    # subagent files are part of their parent, never sessions of their own
    assert all(not r["session_id"].startswith("agent-") for r in rows.values())
    assert rows[PARENT]["files"] == 3  # the main file (two excerpts) and two subagent files
    assert rows[PARENT]["project"] == "spotter-4te"


def test_scan_real_codex_sessions(layout):
    root, _ = layout
    rows = {r["session_id"]: r for r in _scan(root / "codex" / "sessions")}
    assert rows["019e9625-802f-7e91-840a-cfe88d14117a"]["state"] == "completed"  # 0.135 exec, task_complete
    assert rows["019e9625-802f-7e91-840a-cfe88d14117a"]["evidence"] == "explicit"
    synth = rows["019db1a0-6c2e-7d40-9a11-3f5e2b7c0a01"]  # completed, interrupted, then usage limit
    assert (synth["state"], synth["error_kind"]) == ("error", "usage_limit")
    assert rows["019a93b9-f380-7600-98ff-940e6b99603c"]["state"] == "stalled"  # 0.58, cut mid-turn
    assert rows["4d26a132-34a6-4eb8-a1f4-6ef44c0b4a4c"]["state"] == "stalled"  # pre-envelope, mid-turn
    assert rows["019fc8be-3658-7ca3-9e29-000000000000"]["state"] in ("stalled", "completed", "interrupted")
    for r in rows.values():
        assert r["provider"] == "codex" and r["counters"]["parse_errors"] == 0


def test_scan_at_a_turn_end(tmp_path):
    """Cut the 2.1.39 excerpt right after its turn end (text, Stop hook,
    stop_hook_summary, turn_duration): completed, explicit."""
    lines = (CC / "v2.1.39_turn_end_then_compact.lines1463-1496.jsonl").read_bytes().splitlines(keepends=True)
    f = tmp_path / f"{PARENT}.jsonl"
    f.write_bytes(b"".join(lines[:16]))
    (row,) = _scan(f)
    assert (row["state"], row["evidence"], row["detail"]) == ("completed", "explicit", "turn_duration")
    # the /compact that follows (boundary, summary, local command) does not reopen the turn
    f.write_bytes(b"".join(lines[:28]))
    (row,) = _scan(f)
    assert (row["state"], row["evidence"]) == ("completed", "explicit")
    # the next prompt does
    f.write_bytes(b"".join(lines[:30]))
    (row,) = _scan(f, at=time.time())
    assert row["state"] == "working"


def test_scan_provider_from_content_and_flag(tmp_path):
    f = tmp_path / "anything.jsonl"
    f.write_bytes((CX / "v0.135_exec_complete.jsonl").read_bytes())
    (row,) = _scan(f)
    assert row["provider"] == "codex" and row["state"] == "completed"
    out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "scan", "--provider", "claude_code", str(f)],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0
    missing = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "scan", str(tmp_path / "nope")],
                             cwd=ROOT, capture_output=True, text=True)
    assert missing.returncode == 2 and "no such file" in missing.stderr
    bad_at = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "scan", "--at", "tomorrow", str(f)],
                            cwd=ROOT, capture_output=True, text=True)
    assert bad_at.returncode == 2 and "--at" in bad_at.stderr


def test_scan_human_output(layout):
    root, _ = layout
    out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "scan", str(root)], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0
    header, *lines, total = out.stdout.splitlines()
    assert header.split() == ["PROVIDER", "SESSION", "PROJECT", "STATE", "HOW", "SINCE", "LAST", "EVENT", "TOKENS",
                              "COST"]
    # tokens at a glance (input + output + cache, "-" for none) and the cost (USD, "<$0.01" below a cent,
    # "unpriced" for tokens of no known price, "-" for no tokens, "+" where unpriced tokens are left out of
    # it), right-aligned under their headers
    toks = [line.rsplit(None, 2)[1] for line in lines + [total]]
    costs = [line.rsplit(None, 1)[1] for line in lines]
    assert all(re.fullmatch(r"\d{1,3}|\d\.\dk|\d+k|\d\.\dM|\d+M|-", t) for t in toks), toks
    assert all(re.fullmatch(r"\$[\d,]+\.\d\d|<\$0\.01|unpriced|-", c) for c in costs), costs  # one model each
    assert total.split()[-1].endswith("+")
    assert all((t == "-") == (c == "-") for t, c in zip(toks, costs))
    assert {"unpriced", "<$0.01", "-"} <= set(costs) and any(c.startswith("$") for c in costs)
    assert all(len(line) == len(header) for line in lines + [total])  # the cost column's right edge
    assert total.split()[:3] == ["TOTAL", str(len(lines)), "sessions"]
    assert float(total.split()[-1].strip("$+").replace(",", "")) == pytest.approx(
        sum(float(c.strip("$").replace(",", "")) for c in costs if c.startswith("$")), abs=0.01 * len(lines))
    # the unpriced tokens are named, and where to give their prices
    assert re.search(r"hint: [\d,]+ tokens are of models with no known price, in no cost \(.*unknown.*\); "
                     r"add prices under usage\.prices", out.stderr), out.stderr
    claude = [p for p in CC.glob("*.jsonl") if "subagent" not in p.name]
    # one line per session: the two 2.1.39 excerpts are one session, subagent files belong to it
    assert len(lines) == len(claude) - 1 + len(list(CX.glob("*.jsonl")))
    assert any("claude_code" in line and "completed" in line for line in lines)
    assert any(re.search(r"waiting +plan \(ExitPlanMode\)", line) for line in lines)  # the wait's reason, tool
    # Aligned columns: each column starts where its header does.
    for col in ("STATE", "LAST EVENT"):
        i = header.index(col)
        assert all(line[i - 2:i] == "  " and line[i] != " " for line in lines), col
    # Readable times: local date and minutes, and the age.
    assert all(re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d \(\d+[smhd] ago\) +\S+ +\S+$", line) for line in lines), lines


def test_scan_by_day_reads_well(tmp_path):
    """``scan --by day`` on the real live-agent runs (Claude Code priced, Codex on a stand-in model that
    no price list knows): aligned columns, a total-tokens column as ccusage's, the day's own total
    where it has two models, "unpriced" never $0, a total line, and a hint naming the unpriced model;
    Codex alone: nothing is priced, and the hint says so."""
    live = ROOT / "tests" / "fixtures" / "live-agents"

    def by_day(path):
        out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "scan", "--by", "day", str(path)],
                             cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "TZ": "UTC"})
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines(), out.stderr

    (header, *lines, total), err = by_day(live)
    assert header.split() == ["DATE", "MODEL", "INPUT", "OUTPUT", "CACHE", "READ", "CACHE", "WRITE", "REASONING",
                              "TOTAL", "TOKENS", "COST"]
    assert all(len(line) == len(header) for line in lines + [total])  # right-aligned numbers
    rows = {line.split()[1]: line.split() for line in lines}
    assert set(rows) == {"claude-opus-5-5", "gpt-fake", "(all"}
    assert rows["gpt-fake"][-1] == "unpriced" and rows["claude-opus-5-5"][-1].startswith("$")
    num = lambda v: int(v.replace(",", ""))
    for i in range(2, 8):  # the day's total is its models' sum; total tokens: input + output + cache
        assert num(rows["(all"][i + 2]) == num(rows["gpt-fake"][i]) + num(rows["claude-opus-5-5"][i])
    for r in rows.values():
        r = r[2:] if r[1] != "(all" else r[4:]
        assert num(r[5]) == num(r[0]) + num(r[1]) + num(r[2]) + num(r[3])
    # what is priced, marked "+": the unpriced tokens are not in it
    assert rows["(all"][-1] == total.split()[-1] == rows["claude-opus-5-5"][-1] + "+"
    assert total.split()[:3] == ["TOTAL", "1", "day"]
    assert "hint: 1,540 tokens are of models with no known price, in no cost (gpt-fake)" in err

    (header, *lines, total), err = by_day(live / "codex-0.171.0")
    assert [line.split()[-1] for line in lines + [total]] == ["unpriced", "unpriced"]
    assert "hint: no model here has a known price (gpt-fake); add prices under usage.prices" in err


# -- reading in pieces equals reading whole -----------------------------------
ALL = sorted(CC.glob("*.jsonl")) + sorted(CX.glob("*.jsonl")) + sorted(CP.glob("*.jsonl")) + sorted(PI.glob("*.jsonl"))


def _read(path: Path, provider: str, data: bytes, cuts: list[int]) -> list[dict]:
    store = SessionStore(Metrics(), Timing())
    files = FileTable(store, 16 << 20)
    path.write_bytes(b"")
    files.track(str(path), provider, path.parent)
    prev = 0
    for c in sorted(set(cuts)) + [len(data)]:
        with open(path, "ab") as f:
            f.write(data[prev:c])
        os.utime(path, (1.7e9, 1.7e9))  # the same last-write time for both readings
        prev = c
        files.refresh(str(path), live=True)
    store.evaluate(time.time() + 86400)
    rows = store.rows(time.time())
    return [{k: r[k] for k in ("session_id", "state", "evidence", "error_kind", "turn", "since", "last_event_at",
                               "counters")} for r in rows]


@pytest.mark.parametrize("src", ALL, ids=[p.name for p in ALL])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_pieces_equal_whole(src, tmp_path, data):
    raw = src.read_bytes()
    provider = src.parent.name  # the folder is named for the provider
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=12))
    whole = _read(tmp_path / "whole.jsonl", provider, raw, [])
    pieces = _read(tmp_path / "pieces.jsonl", provider, raw, cuts)
    for w, p in zip(whole, pieces):
        w.pop("session_id"), p.pop("session_id")
    assert pieces == whole


# -- every real file at its last record + 120 s ---------------------------------------
# file: (state, evidence or error kind or None). What a user looking at the
# session two minutes after its last record would call right.
AT_LAST_PLUS_120 = {
    "claude_code": {
        "v1.0.108_inline_sidechains.jsonl": ("completed", "inferred"),  # main text last, stop_reason null
        "v1.0.98_complete_session.jsonl": ("completed", "explicit"),
        "v1.0.98_summary_parallel_tasks.lines1-30.jsonl": ("working", None),  # cut inside parallel Tasks
        "v2.1.114_rate_limit_line.jsonl": ("error", "rate_limit"),
        "v2.1.123_real_session_turn_end.src-lines1294-1377.jsonl": ("completed", "explicit"),
        "v2.1.143_compact_boundary_then_turn.jsonl": ("completed", "explicit"),
        "v2.1.143_esc_interrupt_synthetic_partial.jsonl": ("interrupted", None),
        "v2.1.143_goal_stop_hook_continues_turn.jsonl": ("completed", "explicit"),  # at turn_duration
        "v2.1.143_permission_prompt_no_tool_use_line.jsonl": ("working", None),  # dialog open, nothing written
        "v2.1.143_rate_limit_api_error_retries.jsonl": ("error", "rate_limit"),  # retry overdue
        "v2.1.148_api_error_message_then_turn_duration.jsonl": ("error", "api_error"),
        "v2.1.149_plan_mode_exitplanmode_pending.jsonl": ("waiting", None),  # ExitPlanMode awaits approval
        "v2.1.156_background_agents_task_notification.jsonl": ("working", None),  # notifications restarted it
        "v2.1.233_sdk_cli_reduced_turn.jsonl": ("completed", "explicit"),  # sdk-cli: end_turn, no turn_duration
        "v2.1.38_short_interrupted.jsonl": ("interrupted", None),
        "v2.1.38_tool_heavy.jsonl": ("interrupted", None),
        "v2.1.39_session_start_task.lines1-104.jsonl": ("working", None),  # cut mid-turn
        "v2.1.39_subagent_agent-aac57f5.jsonl": (None, None),  # a subagent: never a session of its own
        "v2.1.39_subagent_agent-acompact-946d2b.jsonl": (None, None),
        "v2.1.39_turn_end_then_compact.lines1463-1496.jsonl": ("working", None),  # work resumed after /compact
    },
    "codex": {
        "pre_envelope_2025-08.lines1-11.jsonl": ("working", None),  # cut mid-turn
        "synthesized_v0.123_complete_interrupted_error.jsonl": ("error", "usage_limit"),
        "v0.135_exec_complete.jsonl": ("completed", "explicit"),
        "v0.146_record_shapes_not_chronological.jsonl": ("working", None),
        "v0.147.0_approval_pending_custom_tool_call.jsonl": ("working", None),  # approval dialog open
        "v0.147.0_tui_turn_complete_paginated.jsonl": ("completed", "explicit"),
        "v0.156.1_tui_turn_then_compact.excerpt.jsonl": ("completed", "explicit"),
        "v0.160.0_task_complete_with_error.excerpt.jsonl": ("error", "server_error"),  # HTTP 500 as task_complete
        "v0.160.0_turn_never_ends_after_prior_turn.excerpt.jsonl": ("working", None),
        "v0.58_cli_session.lines1-20.jsonl": ("working", None),
        "v0.58_cli_session_ends_midturn.lines272-279.jsonl": ("working", None),
    },
    "copilot_cli": {
        "v1.0.77_abort_user_initiated.excerpt.jsonl": ("interrupted", None),  # Esc Esc: abort, no turn_end
        "v1.0.77_basic_turn_complete.jsonl": ("completed", "explicit"),
        # the CLI was killed mid-turn and still wrote session.shutdown: the turn is over, not done
        "v1.0.77_killed_mid_turn_shutdown_no_turn_end.lines22-29.jsonl": ("interrupted", None),
        # the permission prompt was open when the driver quit (session.shutdown)
        "v1.0.77_permission_requested_pending.jsonl": ("interrupted", None),
        "v1.0.77_question_in_text_turn_end.jsonl": ("completed", "explicit"),  # a question in text ends a turn
        "v1.0.77_tool_call_splits_turn.jsonl": ("completed", "explicit"),  # at the second turn_end, not the first
        "v1.0.78_autopilot_task_complete.jsonl": ("completed", "explicit"),  # session.task_complete
        "v1.0.78_compaction_between_turns.jsonl": ("completed", "explicit"),  # /compact after it changes nothing
        "v1.0.78_hook_start_end_agentStop.excerpt.jsonl": ("unknown", None),  # hook runs only: no turn
        "v1.0.78_rate_limit_429_session_error.jsonl": ("error", "rate_limit"),  # session.error after turn_end
        "v1.0.78_subagent_failed_then_completed.jsonl": ("completed", "explicit"),  # subagent lines never end it
        "v1.0.78_user_shell_escape_tool_user_requested.jsonl": ("completed", "explicit"),  # ! is not a turn
    },
    "pi": {
        "v0.70.0_basic_turn_stop.jsonl": ("completed", "explicit"),
        "v0.70.0_compaction_between_turns.jsonl": ("completed", "explicit"),
        "v0.70.0_error_stopreason_unsupported_model.jsonl": ("error", "api_error"),  # stopReason error
        "v0.70.0_esc_aborted_then_new_prompt.jsonl": ("completed", "explicit"),  # aborted, then a new turn
        "v0.70.0_question_in_text_stop.jsonl": ("completed", "explicit"),
        "v0.70.0_tool_call_then_stop.jsonl": ("completed", "explicit"),  # toolUse goes on, stop ends
        "v0.70.0_user_bash_execution.jsonl": ("completed", "explicit"),  # bashExecution after it: not a turn
        "vunknown-2026-04_everyday_session_start.lines1-6.jsonl": ("unknown", None),  # no prompt yet
    },
}


def _last_record_time(path: Path) -> float:
    from coding_agent_exporter.decode import parse_timestamp

    last = None
    for line in path.read_bytes().splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        t = parse_timestamp(obj.get("timestamp")) if isinstance(obj, dict) else None
        if t is not None and (last is None or t > last):
            last = t
    return last


def _at_120_params():
    out = []
    for prov, table in AT_LAST_PLUS_120.items():
        for name, want in table.items():
            out.append(pytest.param(prov, name, want, id=name))
    return out


def test_every_real_file_is_in_the_table():
    on_disk = {(p.parent.name, p.name) for p in ALL}
    assert on_disk == {(prov, name) for prov, t in AT_LAST_PLUS_120.items() for name in t}


@pytest.mark.parametrize("prov,name,want", _at_120_params())
def test_real_file_at_last_record_plus_120s(prov, name, want, tmp_path):
    """``scan --json --at <last record + 120 s>`` on a copy whose modification
    time is now (later than --at): what was known at that time decides."""
    src = TRANSCRIPTS / prov / name
    f = tmp_path / name
    shutil.copy(src, f)  # mtime now: after --at
    last = _last_record_time(src)
    rows = _scan(f, at=None if last is None else last + 120, provider=prov)  # no time at all: a day later
    state, how = want
    if state is None:
        assert all(r["state"] == "unknown" for r in rows) or rows == [], rows
        return
    (row,) = rows
    assert row["state"] == state, row
    assert how in (None, row["evidence"], row["error_kind"]), row


# -- Copilot CLI and Pi cut where a reader meets them mid-session ------------------------
# (provider, file, lines kept, (state, evidence / error kind / wait reason, tool)) at the
# last kept record + 120 s.
CUTS = [
    # a turn_end after a tool round is not the user's turn: the next turn_start follows
    ("copilot_cli", "v1.0.77_tool_call_splits_turn.jsonl", 11, ("working", None, None)),
    ("copilot_cli", "v1.0.78_subagent_failed_then_completed.jsonl", 19, ("working", None, None)),
    # a subagent's own final answer (top-level agentId) does not end the parent's turn
    ("copilot_cli", "v1.0.78_subagent_failed_then_completed.jsonl", 27, ("working", None, None)),
    # the permission prompt, open: waiting, for the tool whose tool.execution_start came first
    ("copilot_cli", "v1.0.77_permission_requested_pending.jsonl", 9, ("waiting", "permission", "bash")),
    # the failed turn's turn_end (no answer in it) before its session.error: not "your turn"
    ("copilot_cli", "v1.0.78_rate_limit_429_session_error.jsonl", 12, ("working", None, None)),
    # autopilot: an answer's turn_end is followed by Copilot's own continuation
    ("copilot_cli", "v1.0.78_autopilot_task_complete.jsonl", 18, ("working", None, None)),
    # the first prompt answered, before the ! command
    ("copilot_cli", "v1.0.78_user_shell_escape_tool_user_requested.jsonl", 12, ("completed", "explicit", None)),
    ("pi", "v0.70.0_tool_call_then_stop.jsonl", 6, ("working", None, None)),  # toolUse, toolResult
    ("pi", "v0.70.0_esc_aborted_then_new_prompt.jsonl", 5, ("interrupted", None, None)),  # stopReason aborted
]


@pytest.mark.parametrize("prov,name,keep,want", CUTS, ids=[f"{c[1]}:{c[2]}" for c in CUTS])
def test_cut_at_last_kept_record_plus_120s(prov, name, keep, want, tmp_path):
    lines = (TRANSCRIPTS / prov / name).read_bytes().splitlines(keepends=True)[:keep]
    f = tmp_path / name
    f.write_bytes(b"".join(lines))
    (row,) = _scan(f, at=_last_record_time(f) + 120, provider=prov)
    state, how, tool = want
    assert row["state"] == state, row
    assert how in (None, row["evidence"], row["error_kind"], (row.get("waiting_for") or {}).get("reason")), row
    if tool:
        assert row["waiting_for"]["tool"] == tool, row
