"""The page decision (exporter.pager) on a fake clock: settle, supersede,
record-time standing, reminders, backfill, max age, and a restart against
the ledger (sent, seen, pending). No process, no sleeps: transitions and
times in, pages due out."""

from __future__ import annotations

from types import SimpleNamespace

from exporter.pager import Pager, Rules, alert_key
from exporter.reducer import Status

T0 = 1_800_000_000.0


def _session(sid="s1"):
    return SimpleNamespace(provider="claude_code", session_id=sid, hidden=False, cwd=None, status=Status("unknown"))


def _move(s, new: Status):
    """The transition a store would report, and the session now in ``new``."""
    t = SimpleNamespace(session=s, old=s.status, new=new)
    s.status = new
    return t


def done(turn, at, live=True):
    return Status("completed", turn=turn, evidence="explicit", since=at, live=live)


def working(turn, at, live=True):
    return Status("working", turn=turn, since=at, live=live)


def pager(**kw) -> Pager:
    return Pager(Rules(**{"settle_seconds": 2.0, **kw}))


def test_a_turn_end_pages_after_settle_once():
    p, s = pager(), _session()
    made, _dups, changed = p.observe([_move(s, working("t1", T0)), _move(s, done("t1", T0 + 5))], T0 + 5)
    assert len(made) == 1 and changed
    assert p.ledger[alert_key("completed", "claude_code", "s1", "t1")]["status"] == "pending"
    assert p.due(T0 + 6) == []  # still settling
    (page,) = p.due(T0 + 7.1)
    p.sent(page, T0 + 7.2)
    assert p.due(T0 + 100) == [] and p.pending == {}
    # the same turn end told again (turn_duration after end_turn, a re-read): nothing
    made, dups, _ = p.observe([SimpleNamespace(session=s, old=Status("working", turn="t1"), new=done("t1", T0 + 5))],
                              T0 + 8)
    assert made == [] and dups == ["completed"]


def test_superseded_within_settle_pages_nothing():
    p, s = pager(), _session()
    p.observe([_move(s, done("t1", T0))], T0)
    p.observe([_move(s, working("t2", T0 + 1))], T0 + 1)  # the next prompt within settle, in record time too
    assert p.due(T0 + 3) == []
    assert p.pending == {} and alert_key("completed", "claude_code", "s1", "t1") not in p.ledger


def test_superseded_later_in_record_time_stood():
    """A backlog read in one piece: the turn end was superseded on our clock
    at once, but in record time it stood for longer than settle: it pages."""
    p, s = pager(), _session()
    p.observe([_move(s, done("t1", T0)), _move(s, working("t2", T0 + 4))], T0 + 60)
    (page,) = p.due(T0 + 63)
    assert page.turn == "t1"


def test_backfill_never_pages_and_is_remembered():
    p, s = pager(), _session()
    made, _d, changed = p.observe([_move(s, done("t1", T0, live=False))], T0 + 1)
    assert made == [] and changed
    assert p.ledger[alert_key("completed", "claude_code", "s1", "t1")]["status"] == "seen"
    # read again live later (a re-read): already seen
    made, dups, _ = p.observe([SimpleNamespace(session=s, old=working("t1", T0), new=done("t1", T0))], T0 + 2)
    assert made == [] and dups == ["completed"]


def test_restart_against_the_ledger():
    """A new pager (the next run) on the saved ledger: a sent page is not
    sent again; a page pending at the crash is owed, and pages even though
    its turn end is now read as backfill."""
    p, s = pager(), _session()
    p.observe([_move(s, done("t1", T0))], T0)
    (page,) = p.due(T0 + 2.5)
    p.sent(page, T0 + 2.6)
    p.observe([_move(s, working("t2", T0 + 10)), _move(s, done("t2", T0 + 20))], T0 + 20)
    ledger = dict(p.ledger)  # crash here: t2 pending

    q, s2 = Pager(Rules(settle_seconds=2.0), ledger), _session()
    assert q.owed() == {("claude_code", "s1"): frozenset({"t2"})}
    made, dups, _ = q.observe([_move(s2, done("t1", T0, live=False)), _move(s2, working("t2", T0 + 10, live=False)),
                               _move(s2, done("t2", T0 + 20, live=False))], T0 + 30)
    assert [m.turn for m in made] == ["t2"] and dups == []
    (page,) = q.due(T0 + 32.5)
    assert page.turn == "t2"


def test_reminder_once_while_the_state_stands():
    p, s = pager(remind_after_seconds=60.0), _session()
    p.observe([_move(s, done("t1", T0))], T0)
    (page,) = p.due(T0 + 3)
    p.sent(page, T0 + 3)
    assert p.reminders(T0 + 30) == []
    (r,) = p.reminders(T0 + 64)
    assert r.reminder and r.turn == "t1"
    p.sent(r, T0 + 64)
    assert p.reminders(T0 + 200) == []  # one reminder only
    # no reminder once the user gave the next prompt
    q, s = pager(remind_after_seconds=60.0), _session("s2")
    q.observe([_move(s, done("t1", T0))], T0)
    (page,) = q.due(T0 + 3)
    q.sent(page, T0 + 3)
    _move(s, working("t2", T0 + 10))
    assert q.reminders(T0 + 100) == [] and q.remind == {}


def test_max_age_kind_off_and_subagent():
    p, s = pager(max_age_seconds=600.0), _session()
    made, *_ = p.observe([_move(s, done("t1", T0))], T0 + 601)
    assert made == []
    p, s = Pager(Rules(kinds=frozenset({"error"}))), _session()
    made, *_ = p.observe([_move(s, done("t1", T0))], T0)
    assert made == []
    p, s = pager(), _session()
    s.hidden = True
    made, *_ = p.observe([_move(s, done("t1", T0))], T0)
    assert made == []


def test_one_wait_one_page():
    p, s = pager(), _session()
    wait = Status("waiting", turn="t1", since=T0, live=True, reason="permission", tool="Bash", wait="w1")
    p.observe([_move(s, working("t1", T0 - 5)), _move(s, wait)], T0)
    again = Status("waiting", turn="t1", since=T0 + 1, live=True, reason="permission", tool="Bash", wait="w1")
    made, *_ = p.observe([_move(s, again)], T0 + 1)
    assert made == []
    (page,) = p.due(T0 + 2.5)
    assert page.kind == "waiting" and page.turn == "w1"
