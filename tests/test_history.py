"""Heavy histories (issue 13): files not written for the horizon
(``metrics.session_ttl_seconds``) are not decoded at start-up, but followed
from their end; active sessions come out as ``scan`` says; an append to an
old file pages once; a resumed session replaying an old one pages nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from harness import CASES, ROOT, Exporter, Receiver, append_lines, claude_path, codex_path, session_id_of, wait_for

OLD = time.time() - 3 * 86400  # older than the one-day horizon

CODEX_OLD_ID = "0196a000-0000-7000-8000-0000000000aa"  # the session_meta id; the file name says another
CODEX_FILE_ID = "0196a000-0000-7000-8000-0000000000ff"


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def _codex(rtype: str, payload: dict, t: float) -> bytes:
    return json.dumps({"timestamp": _iso(t), "type": rtype, "payload": payload}).encode() + b"\n"


def _codex_turn(turn: str, t: float) -> bytes:
    return (_codex("event_msg", {"type": "task_started", "turn_id": turn}, t)
            + _codex("event_msg", {"type": "agent_message", "message": "done"}, t + 1)
            + _codex("event_msg", {"type": "task_complete", "turn_id": turn, "last_agent_message": "done"}, t + 2))


def _write(path: Path, data: bytes, mtime: float | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def _scan(paths: list[Path]) -> dict:
    out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "scan", "--json", *map(str, paths)],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return {r["session_id"]: r for r in map(json.loads, out.stdout.splitlines())}


def test_old_sessions_skipped_active_right_append_pages_once(tmp_path):
    receiver = Receiver()
    # History: a Claude session and a Codex rollout last written three days ago,
    # each with a malformed line (decoding them would count it).
    claude_old = session_id_of(CASES / "24_one_turn_many_end_markers.jsonl")
    old_claude = claude_path(tmp_path, claude_old)
    _write(old_claude, (CASES / "24_one_turn_many_end_markers.jsonl").read_bytes() + b"{not json\n", OLD)
    old_codex = codex_path(tmp_path, CODEX_FILE_ID)
    t0 = time.time() - 3 * 86400 - 600
    _write(old_codex, _codex("session_meta", {"id": CODEX_OLD_ID, "timestamp": _iso(t0), "cwd": "/home/dev/rollouts",
                                              "source": "cli"}, t0)
           + _codex_turn("old-turn-1", t0 + 10) + b"{not json either\n", OLD)
    # Active: two sessions written now.
    active = [CASES / "03_malformed_midfile.jsonl", CASES / "19_codex_turn_aborted_part1.jsonl"]
    new_claude = claude_path(tmp_path, session_id_of(active[0]))
    new_codex = codex_path(tmp_path, session_id_of(active[1]))
    _write(new_claude, active[0].read_bytes())
    _write(new_codex, active[1].read_bytes())
    new_lines = sum(p.read_bytes().count(b"\n") for p in (new_claude, new_codex))

    exp = Exporter(tmp_path, receiver=receiver).start()
    try:
        # old sessions not decoded: no lines, no parse errors, no series from them
        scanned = _scan([new_claude, new_codex])
        errors = sum(r["counters"]["parse_errors"] for r in scanned.values())
        assert exp.value("coding_agent_transcript_lines_total") == new_lines
        assert exp.value("coding_agent_transcript_parse_errors_total") == errors
        assert exp.state(claude_old) is None and exp.state(CODEX_OLD_ID) is None
        # history files are followed too (taken up right after ready)
        wait_for(lambda: exp.value("coding_agent_files_watched") == 4, what="4 files followed")
        skipped = old_claude.stat().st_size + old_codex.stat().st_size
        assert re.search(r"start-up scan done in [\d.]+ s: read 2 files \([\d.]+ kB in [\d.]+ s\), skipped 2 files "
                         r"\(%.1f kB\) as history \(not written for 86400 s\)" % (skipped / 1e3), exp.log()), exp.log()
        # active states at ready: as scan says for their files
        assert len(scanned) == 2
        for sid, row in scanned.items():
            assert exp.state(sid) == row["state"], (sid, row)

        # A resumed Claude session whose new file starts with a copy of the old
        # conversation (same records, still naming the old session) replays
        # old news: no page, although the old file was never decoded.
        replay_sid = "c0000024-2424-4424-8424-00000000beef"
        append_lines(claude_path(tmp_path, replay_sid), old_claude.read_bytes(), 0.01)
        wait_for(lambda: exp.value("coding_agent_files_watched") == 5, what="the resumed session's file followed")

        # Appends to the old files are read from where they ended and page once.
        now = time.time()
        append_lines(old_codex, _codex_turn("new-turn-2", now), 0.05)
        more = (b'{"type":"user","uuid":"h1","sessionId":"%s","cwd":"/home/dev/proj","timestamp":"%s",'
                b'"message":{"role":"user","content":"next"}}\n'
                b'{"type":"system","subtype":"turn_duration","durationMs":1000,"uuid":"h2","sessionId":"%s",'
                b'"cwd":"/home/dev/proj","timestamp":"%s"}\n') % (claude_old.encode(), _iso(now).encode(),
                                                                   claude_old.encode(), _iso(now + 1).encode())
        append_lines(old_claude, more, 0.05)
        exp.wait_state(CODEX_OLD_ID, "completed")
        exp.wait_state(claude_old, "completed")
        wait_for(lambda: len(receiver.messages) == 2, what="one page per appended turn")
        time.sleep(1.5)
        titles = sorted(msg["title"] for msg in receiver.messages)
        assert titles == ["Claude Code · proj: your turn", "Codex · rollouts: your turn"], receiver.messages
        assert any(f"Session: {CODEX_OLD_ID}" in msg["message"] for msg in receiver.messages)
        # only what was appended was decoded: of the old malformed lines, only
        # the copy in the replay was
        assert exp.value("coding_agent_transcript_parse_errors_total") == errors + 1
    finally:
        exp.stop()
        receiver.close()


def test_skip_history_off_reads_everything(tmp_path):
    old = claude_path(tmp_path, session_id_of(CASES / "24_one_turn_many_end_markers.jsonl"))
    _write(old, (CASES / "24_one_turn_many_end_markers.jsonl").read_bytes(), OLD)
    exp = Exporter(tmp_path, config={"sources": {"skip_history": False},
                                     "metrics": {"session_ttl_seconds": 0}}).start()
    try:
        assert exp.value("coding_agent_transcript_lines_total") == 5
        assert re.search(r"read 1 files .* skipped 0 files", exp.log())
    finally:
        exp.stop()


def test_history_file_appended_while_down_pages_once_from_its_old_end(tmp_path):
    """A file left as history by one run and appended to while the exporter
    was down (a resumed Codex session) is read at the next start from where
    it ended: its new turn pages once, and only its new lines count."""
    receiver = Receiver()
    old_codex = codex_path(tmp_path, CODEX_FILE_ID)
    t0 = time.time() - 3 * 86400
    _write(old_codex, _codex("session_meta", {"id": CODEX_OLD_ID, "timestamp": _iso(t0), "cwd": "/home/dev/rollouts",
                                              "source": "cli"}, t0)
           + _codex_turn("old-turn-1", t0 + 10) + b"{not json either\n", OLD)
    exp = Exporter(tmp_path, receiver=receiver).start()
    try:
        wait_for(lambda: "start-up scan done" in exp.log(), what="start-up line")
        assert "skipped 1 files" in exp.log()
        time.sleep(1.0)  # a checkpoint is written at ready and at stop
    finally:
        assert exp.stop() == 0
    new = _codex_turn("resumed-turn-2", time.time())
    with open(old_codex, "ab") as f:  # written while the exporter is down
        f.write(new)
    exp = Exporter(tmp_path, receiver=receiver).start()
    try:
        exp.wait_state(CODEX_OLD_ID, "completed")
        wait_for(lambda: len(receiver.messages) == 1, what="one page for the resumed turn")
        time.sleep(1.5)
        assert len(receiver.messages) == 1, receiver.messages
        assert f"Session: {CODEX_OLD_ID}" in receiver.messages[0]["message"]
        assert exp.value("coding_agent_transcript_lines_total") == new.count(b"\n")
        assert exp.value("coding_agent_transcript_parse_errors_total") == 0  # the old bad line was not read
    finally:
        exp.stop()
        receiver.close()


def test_old_subagent_file_of_an_active_session_is_read(tmp_path):
    """A Claude session written now whose subagent file is days old: the
    subagent file is read with it at start-up (the session is whole), while
    an unrelated old file is left as history."""
    case = CASES / "24_one_turn_many_end_markers.jsonl"
    sid = session_id_of(case)
    main = claude_path(tmp_path, sid)
    _write(main, case.read_bytes())
    sub = main.parent / sid / "subagents" / "agent-a1.jsonl"
    sub_lines = (b'{"type":"user","uuid":"s1","isSidechain":true,"agentId":"a1","sessionId":"%s","cwd":"/home/dev/proj",'
                 b'"timestamp":"%s","message":{"role":"user","content":"look"}}\n') % (sid.encode(), _iso(OLD).encode())
    _write(sub, sub_lines, OLD)
    other = claude_path(tmp_path, "c0000000-0000-4000-8000-00000000dead")
    _write(other, case.read_bytes().replace(sid.encode(), b"c0000000-0000-4000-8000-00000000dead"), OLD)
    exp = Exporter(tmp_path).start()
    try:
        assert exp.value("coding_agent_transcript_lines_total") == case.read_bytes().count(b"\n") + 1
        assert re.search(r"read 2 files .* skipped 1 files", exp.log()), exp.log()
        assert exp.state(sid) == _scan([main, sub])[sid]["state"]
        wait_for(lambda: exp.value("coding_agent_files_watched") == 3, what="3 files followed")
    finally:
        exp.stop()


def test_history_index_saved_and_loaded_and_refuses_garbage(tmp_path):
    """The index written beside the checkpoint comes back as it was (taken
    entries gone); a truncated or foreign file is refused with ValueError."""
    from coding_agent_exporter.history import HistoryIndex

    files = []
    for i in range(50):
        p = tmp_path / f"f{i}.jsonl"
        p.write_bytes(b"{}\n" * i)
        files.append(p)
    idx = HistoryIndex()
    for p in files:
        st = p.stat()
        idx.add(str(p), "codex", st.st_ino, st.st_size, st.st_mtime_ns)
    idx.seal()
    assert idx.take(str(files[7])) is not None
    saved = tmp_path / "state" / "history-index.bin"
    idx.save(saved)
    back = HistoryIndex.load(saved)
    assert back.get(str(files[7])) is None
    for p in files[:7] + files[8:]:
        st = p.stat()
        assert back.get(str(p))[1][:2] == (st.st_ino, st.st_size)
    assert back.get(str(tmp_path / "other.jsonl")) is None
    for bad in (saved.read_bytes()[:-5], b"not an index at all", b""):
        saved.write_bytes(bad)
        try:
            HistoryIndex.load(saved)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad[:20]!r}")


def _old_rollout(tmp_path: Path) -> Path:
    path = codex_path(tmp_path, CODEX_FILE_ID)
    t0 = time.time() - 3 * 86400
    _write(path, _codex("session_meta", {"id": CODEX_OLD_ID, "timestamp": _iso(t0), "cwd": "/home/dev/rollouts",
                                         "source": "cli"}, t0) + _codex_turn("old-turn-1", t0 + 10), OLD)
    return path


def _run_once(tmp_path: Path, config: dict | None = None) -> None:
    exp = Exporter(tmp_path, config=config).start()
    try:
        wait_for(lambda: "start-up scan done" in exp.log(), what="start-up line")
        time.sleep(0.5)
    finally:
        assert exp.stop() == 0


def test_skip_history_turned_off_after_a_run_reads_the_old_files_whole(tmp_path):
    old = _old_rollout(tmp_path)
    _run_once(tmp_path)
    exp = Exporter(tmp_path, config={"sources": {"skip_history": False}}).start()
    try:
        assert exp.value("coding_agent_transcript_lines_total") == old.read_bytes().count(b"\n")
    finally:
        exp.stop()


def test_history_file_rewritten_in_place_while_down_is_read_whole(tmp_path):
    """Same name, same inode (rewritten in place), other content: not the
    old file grown, so it is read from its start."""
    old = _old_rollout(tmp_path)
    _run_once(tmp_path)
    t1 = time.time()
    new = (_codex("session_meta", {"id": CODEX_OLD_ID, "timestamp": _iso(t1), "cwd": "/home/dev/rollouts",
                                   "source": "cli", "note": "x" * 40}, t1) + _codex_turn("new-turn-1", t1 + 1)
           + _codex_turn("new-turn-2", t1 + 5))
    assert len(new) > old.stat().st_size and new[old.stat().st_size - 1:old.stat().st_size] != b"\n"
    with open(old, "r+b") as f:  # the same inode
        f.truncate(0)
        f.write(new)
    exp = Exporter(tmp_path).start()
    try:
        assert exp.value("coding_agent_transcript_lines_total") == new.count(b"\n")
    finally:
        exp.stop()


def test_deleted_history_file_leaves_files_watched_with_one_root_missing(tmp_path):
    """Only the Claude folder exists (a Claude-only user): a history file
    deleted after start stops being counted as followed."""
    case = CASES / "24_one_turn_many_end_markers.jsonl"
    old = claude_path(tmp_path, session_id_of(case))
    _write(old, case.read_bytes(), OLD)
    exp = Exporter(tmp_path).start()
    try:
        wait_for(lambda: exp.value("coding_agent_files_watched") == 1, what="1 file followed")
        old.unlink()
        wait_for(lambda: exp.value("coding_agent_files_watched") == 0, what="the deleted file forgotten")
    finally:
        exp.stop()


def test_walk_process_dying_after_the_files_to_read_leaves_a_whole_index(tmp_path):
    """The start-up walk runs in a forked process that sends the files to
    read first and the history index after them (built while they are
    read). Should it die in between, the daemon walks again itself: the old
    file is in the index, the file it read is not, and ``files_watched``
    counts each once."""
    from coding_agent_exporter.config import load
    from coding_agent_exporter.daemon import Daemon
    from coding_agent_exporter.history import horizon, split_start_up
    from coding_agent_exporter.roots import configured_roots
    from coding_agent_exporter.parallel import Forked

    old = _old_rollout(tmp_path)
    case = CASES / "24_one_turn_many_end_markers.jsonl"
    recent = claude_path(tmp_path, session_id_of(case))
    _write(recent, case.read_bytes())
    cfg_file = tmp_path / "config.yml"
    cfg_file.write_text(json.dumps({
        "sources": {"claude_code": {"paths": [str(tmp_path / "claude" / "projects")]},
                    "codex": {"paths": [str(tmp_path / "codex" / "sessions")]}, "watch_events": False},
        "state_dir": str(tmp_path / "state")}))
    cfg = load(cfg_file)

    def dies_after_the_first():
        yield next(split_start_up(configured_roots(cfg), horizon(cfg), time.time()))
        os._exit(3)

    daemon = Daemon(cfg, early_split=Forked(dies_after_the_first))
    daemon.start()
    try:
        assert daemon.ready.wait(30)
        from coding_agent_exporter.providers import PROVIDER_MODULES

        none = dict.fromkeys(PROVIDER_MODULES, 0)  # every declared provider
        wait_for(lambda: daemon.history.count == {**none, "codex": 1}, what="the index taken")
        assert daemon.history.get(str(old)) is not None and daemon.history.get(str(recent)) is None
        assert str(recent) in daemon.files.files
        watched = {s.labels["provider"]: s.value for m in daemon.metrics.registry.collect()
                   if m.name == "coding_agent_files_watched" for s in m.samples}
        assert watched == {**none, "claude_code": 1, "codex": 1}
    finally:
        daemon.stop()


def test_killed_at_once_after_ready_an_append_to_history_pages_once(tmp_path):
    """The first checkpoint and the history index are written before
    ``/-/ready``: a first run killed the moment it is ready still tells the
    next start where each history file ended."""
    receiver = Receiver()
    old = _old_rollout(tmp_path)
    exp = Exporter(tmp_path, receiver=receiver).start()
    exp.stop("kill")
    try:
        assert (tmp_path / "state" / "checkpoint.json").exists()
        assert (tmp_path / "state" / "history-index.bin").exists()
        append_lines(old, _codex_turn("resumed-turn", time.time()), 0)
        exp.start()
        wait_for(lambda: len(receiver.messages) == 1, what="the page")
        time.sleep(1.0)
        assert len(receiver.messages) == 1
    finally:
        exp.stop()
        receiver.close()


def test_a_stop_during_a_slow_start_up_walk_takes_effect_at_once(tmp_path, caplog):
    """The forked start-up walk of a huge tree can take many seconds: a stop
    meanwhile does not wait for it (the walk's process is killed), and says
    that the start-up scan stopped."""
    import logging

    from coding_agent_exporter.config import load
    from coding_agent_exporter.daemon import Daemon
    from coding_agent_exporter.parallel import Forked

    cfg_file = tmp_path / "config.yml"
    cfg_file.write_text(json.dumps({
        "sources": {"claude_code": {"paths": [str(tmp_path / "claude" / "projects")]},
                    "codex": {"paths": [str(tmp_path / "codex" / "sessions")]}, "watch_events": False},
        "state_dir": str(tmp_path / "state")}))
    cfg = load(cfg_file)

    def slow_walk():
        time.sleep(60)
        yield None

    walk = Forked(slow_walk)
    daemon = Daemon(cfg, early_split=walk)
    with caplog.at_level(logging.INFO):
        daemon.start()
        time.sleep(0.3)  # the reader thread waits for the walk
        t0 = time.monotonic()
        daemon.stop()
        took = time.monotonic() - t0
    assert took < 1.0, f"stop took {took:.2f} s"
    assert "start-up scan stopped" in caplog.text
    assert walk._pid is None  # the walk's process is gone, reaped
