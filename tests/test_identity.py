"""Record identity in-process (exporter.identity through the store): which
records are duplicates, copies of earlier history (never news) or a
session's own (news when read live). No process, no sleeps: the store is
fed files and evaluated, the turn ends it reports are what the pager sees."""

from __future__ import annotations

import json
import time
from pathlib import Path

from exporter.identity import COPY, DUPLICATE, OWN, Identity
from exporter.metrics import Metrics
from exporter.reducer import Timing
from exporter.files import FileTable
from exporter.store import SessionStore

PROJECT = "-home-dev-proj"


def _rec(kind: str, sid: str, uuid: str, ts: float) -> dict:
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}Z"
    base = {"uuid": uuid, "sessionId": sid, "timestamp": iso, "cwd": "/home/dev/proj", "isSidechain": False}
    if kind == "prompt":
        return {**base, "type": "user", "message": {"role": "user", "content": "do it"}}
    if kind == "answer":
        return {**base, "type": "assistant", "message": {"role": "assistant", "id": "msg_" + uuid,
                                                          "stop_reason": "end_turn",
                                                          "content": [{"type": "text", "text": "done"}]}}
    return {**base, "type": "system", "subtype": "turn_duration", "durationMs": 1000}


def _turn(sid: str, prefix: str, t: float) -> list[dict]:
    return [_rec("prompt", sid, f"{prefix}-1", t), _rec("answer", sid, f"{prefix}-2", t + 1),
            _rec("done", sid, f"{prefix}-3", t + 1.1)]


class Files:
    """A Claude root in a temporary folder, read by one in-process store."""

    def __init__(self, tmp: Path):
        self.root = tmp / "projects"
        (self.root / PROJECT).mkdir(parents=True)
        self.store = SessionStore(Metrics(), Timing())
        self.files = FileTable(self.store, 1 << 20)

    def write(self, name: str, records: list[dict], live: bool = True, born: float | None = None) -> None:
        path = self.root / PROJECT / f"{name}.jsonl"
        with open(path, "ab") as f:
            f.write(b"".join(json.dumps(r).encode() + b"\n" for r in records))
        p = str(path)
        self.files.track(p, "claude_code", self.root, born=time.time() if born is None and live else born)
        while self.files.refresh(p, live=live):
            pass

    def ends(self) -> dict[str, list[bool]]:
        """Turn ends reported by one evaluation: session id → [live, …]."""
        out: dict[str, list[bool]] = {}
        for t in self.store.evaluate():
            if t.new.state == "completed" and (t.old.state, t.old.turn) != ("completed", t.new.turn):
                out.setdefault(t.session.session_id, []).append(t.new.live)
        return out


A = "aaaaaaaa-0000-4000-8000-000000000001"
B = "bbbbbbbb-0000-4000-8000-000000000002"
C = "cccccccc-0000-4000-8000-000000000003"


def test_judge_rules():
    ident = Identity()
    seen_a, seen_b = set(), set()
    assert ident.judge(seen_a, "u1", 10.0) == OWN
    assert ident.judge(seen_a, "u1", 10.0) == DUPLICATE
    assert ident.judge(seen_b, "u1", 10.0) == COPY  # the same record in another session
    assert ident.judge(set(), "u1", 11.0) == COPY  # the same id stamped anew: still a copy (issue 29)
    # naming another session: a copy only when older than the file's first write
    assert ident.judge(set(), "u2", 100.0, foreign=True, born=1000.0) == COPY
    assert ident.judge(set(), "u3", 990.0, foreign=True, born=1000.0) == OWN
    assert ident.judge(set(), "u4", 100.0, foreign=True, born=None) == OWN
    ident.forget(seen_a)
    assert "u1" not in ident.first


def test_new_file_under_an_older_session_id_is_its_own_live_session(tmp_path):
    """Field case 21 part 2b (anthropics/claude-code#8614): a new file whose
    records carry an older sessionId, with new uuids and live timestamps,
    is a session of its own keyed by its file, and its turn end is news."""
    fs = Files(tmp_path)
    now = time.time()
    fs.write(A, _turn(A, "a1", now - 120))
    assert fs.ends() == {A: [True]}
    fs.write(C, _turn(A, "c1", now))  # C's file, A's id in every record
    assert fs.ends() == {C: [True]}
    assert fs.store.session("claude_code", C).status.state == "completed"


def test_resumed_copies_are_not_news_but_new_turns_are(tmp_path):
    """A resumed (or forked) file that starts with copies of earlier records
    (same uuids, their original timestamps) under the new sessionId: the
    copied turn end is not news; the new session's own later turn is."""
    fs = Files(tmp_path)
    t0 = time.time() - 600
    old = _turn(A, "a1", t0)
    fs.write(A, old)
    assert fs.ends() == {A: [True]}
    copies = [{**r, "sessionId": B} for r in old]
    fs.write(B, copies)
    assert fs.ends() == {B: [False]}  # sets the state, never news
    assert fs.store.session("claude_code", B).status.state == "completed"
    fs.write(B, _turn(B, "b1", time.time()))
    assert fs.ends() == {B: [True]}


def test_copies_naming_the_old_session_of_history_never_decoded(tmp_path):
    """Copies still naming the old session, whose originals this exporter
    never read (left as history), are older than their file: not news."""
    fs = Files(tmp_path)
    fs.write(B, _turn(A, "a1", time.time() - 86400))
    assert fs.ends() == {B: [False]}


def test_shared_prompt_uuid_in_two_live_sessions_pages_each(tmp_path):
    """Field case 30: one prompt uuid in two live sessions, each acting on
    it (same record time even); each session's turn end is news once."""
    fs = Files(tmp_path)
    now = time.time()
    fs.write(B, _turn(B, "b1", now - 60))
    assert fs.ends() == {B: [True]}
    shared = "ffff-1"
    fs.write(A, [_rec("prompt", A, shared, now), _rec("answer", A, "a-2", now + 4), _rec("done", A, "a-3", now + 4.1)])
    fs.write(B, [_rec("prompt", B, shared, now), _rec("answer", B, "b-5", now + 6), _rec("done", B, "b-6", now + 6.1)])
    assert fs.ends() == {A: [True], B: [True]}
    # read again (a file replaced by a copy of itself): duplicates, no news
    fs.write(B, [_rec("done", B, "b-6", now + 6.1)])
    assert fs.ends() == {}
    assert fs.store.session("claude_code", B).counters.duplicates == 1


def test_backfill_is_never_news(tmp_path):
    fs = Files(tmp_path)
    fs.write(A, _turn(A, "a1", time.time()), live=False)
    assert fs.ends() == {A: [False]}


def test_resumed_copies_stamped_anew_are_not_news(tmp_path):
    """Issue 29: a resumed session's new file carries the earlier turns with
    the same record uuids under the new sessionId, stamped anew: a uuid seen
    under another session is a copy (no second page); the new turn pages."""
    fs = Files(tmp_path)
    t0 = time.time() - 600
    old = _turn(A, "a1", t0)
    fs.write(A, old)
    assert fs.ends() == {A: [True]}
    now = time.time()
    copies = [{**r, "sessionId": B} for r in _turn(B, "a1", now - 5)]  # A's uuids, B's id, new times
    fs.write(B, copies)
    assert fs.ends() == {B: [False]}  # sets the state, never news
    fs.write(B, _turn(B, "b1", now))
    assert fs.ends() == {B: [True]}
