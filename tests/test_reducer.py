"""The reducer in-process: normalized events in, states out (docs/states.md), on a fake clock; no files, no process."""

from __future__ import annotations

from exporter.events import COMPLETE, END, ERROR, OUTPUT, START, WAIT, WORK, Event
from exporter.reducer import SessionReducer, Timing

T0 = 1_800_000_000.0
TIMING = Timing(inferred_settle=30.0, marker_wait=300.0, stall_after=600.0, retry_grace=30.0)


def run(*events, live=True):
    r = SessionReducer(TIMING)
    for seq, ev in enumerate(events, 1):
        r.apply(ev, seq, live, f"k{seq}")
    return r


def test_prompt_work_end_is_an_explicit_completion_of_the_turn():
    r = run(Event(START, T0), Event(WORK, T0 + 1), Event(OUTPUT, T0 + 2), Event(COMPLETE, T0 + 2.1, detail="end_turn"))
    st = r.status(T0 + 3, T0 + 2.1)
    assert (st.state, st.evidence, st.turn, st.live, st.detail) == ("completed", "explicit", "k1", True, "end_turn")
    assert abs(st.duration - 2.1) < 1e-6  # from the turn start


def test_output_that_stays_last_is_inferred_after_settle_unless_a_marker_is_certain():
    r = run(Event(START, T0), Event(OUTPUT, T0 + 1))
    assert r.status(T0 + 20, T0 + 1).state == "working"
    assert (r.status(T0 + 31, T0 + 1).state, r.status(T0 + 31, T0 + 1).evidence) == ("completed", "inferred")
    r = run(Event(START, T0), Event(OUTPUT, T0 + 1, marker_certain=True))
    assert r.status(T0 + 31, T0 + 1).state == "working"
    assert r.status(T0 + 602, T0 + 1).state == "stalled"


def test_sidechain_never_completes_nor_supersedes():
    r = run(Event(START, T0), Event(COMPLETE, T0 + 1, sidechain=True))
    assert r.status(T0 + 2, T0 + 1).state == "working"
    r = run(Event(START, T0), Event(COMPLETE, T0 + 1), Event(WORK, T0 + 2, sidechain=True))
    assert r.status(T0 + 3, T0 + 2).state == "completed"


def test_errors_retries_and_the_completion_after_an_error():
    r = run(Event(START, T0), Event(ERROR, T0 + 1, error_kind="rate_limit"), Event(COMPLETE, T0 + 2))
    st = r.status(T0 + 3, T0 + 2)
    assert (st.state, st.error_kind) == ("error", "rate_limit")
    r = run(Event(START, T0), Event(ERROR, T0 + 1, error_kind="overloaded", retry_in=10.0))
    assert r.status(T0 + 20, T0 + 1).state == "working"  # the agent retries
    assert r.status(T0 + 42, T0 + 1).state == "error"  # overdue by the grace


def test_a_wait_then_the_next_record_and_end_interrupts():
    r = run(Event(START, T0), Event(WAIT, T0 + 1, reason="question", tool="AskUserQuestion"))
    st = r.status(T0 + 900, T0 + 1)
    assert (st.state, st.reason, st.wait) == ("waiting", "question", "k2")  # never stalled
    r.apply(Event(WORK, T0 + 5), 3, True, "k3")
    assert r.status(T0 + 6, T0 + 5).state == "working"
    r.apply(Event(END, T0 + 7), 4, True, "k4")
    assert r.status(T0 + 8, T0 + 7).state == "interrupted"


def test_order_is_record_time_and_older_records_change_nothing():
    r = run(Event(START, T0), Event(COMPLETE, T0 + 5), Event(WORK, T0 + 3))
    assert r.status(T0 + 6, T0 + 5).state == "completed"


def test_turn_ends_passed_within_one_read_are_kept_with_what_superseded_them():
    r = run(Event(START, T0), Event(COMPLETE, T0 + 5), Event(START, T0 + 20), Event(COMPLETE, T0 + 25),
            Event(START, T0 + 40))
    assert [(p.state, p.turn, p.since) for p in r.passed] == [
        ("completed", "k1", T0 + 5), ("working", "k3", T0 + 20), ("completed", "k3", T0 + 25), ("working", "k5", T0 + 40)]
    # backfill passes nothing, unless the ledger says the turn still owes its page
    assert run(Event(START, T0), Event(COMPLETE, T0 + 5), Event(START, T0 + 20), live=False).passed == []
    r = SessionReducer(TIMING)
    r.owed = frozenset({"k1"})
    for seq, ev in enumerate((Event(START, T0), Event(COMPLETE, T0 + 5), Event(START, T0 + 20)), 1):
        r.apply(ev, seq, False, f"k{seq}")
    assert [(p.state, p.turn) for p in r.passed] == [("completed", "k1"), ("working", "k3")]


def test_a_wait_told_late_by_its_transcript_gives_its_reason():
    """Claude Code 2.1.332: the registry's permission prompt (source registry)
    is applied before the transcript's ExitPlanMode line, stamped 68 ms
    earlier, reaches the disk: the same wait, and its reason is the plan. A
    wait from long before the one in progress changes nothing."""
    r = run(Event(START, T0), Event(WAIT, T0 + 1.062, reason="permission", source="registry"),
            Event(WAIT, T0 + 0.994, reason="plan", tool="ExitPlanMode"))
    st = r.status(T0 + 2, T0 + 2)
    assert (st.state, st.reason, st.tool, st.wait) == ("waiting", "plan", "ExitPlanMode", "k2")
    r = run(Event(START, T0), Event(WAIT, T0 + 60, reason="permission", source="registry"),
            Event(WAIT, T0 + 1, reason="plan", tool="ExitPlanMode"))
    assert r.status(T0 + 61, T0 + 61).reason == "permission"
