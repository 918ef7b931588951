"""Hardening, restarts and crashes, against the running exporter.

- kill -9 at random moments (half of them right after a turn ended, while
  its page is due) while sessions of both agents keep appending: after each
  restart the states are right, and at the receiver every turn end paged
  exactly once (none lost, none repeated).
- corrupt, foreign and half-written state files in ``state_dir`` are set
  aside with a warning; the exporter starts and works.
- SIGTERM and SIGINT stop it cleanly (exit 0, checkpoint written), also in
  the middle of a large start-up scan; the next start repeats no page.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from harness import claude_path, codex_path
from test_hardening_support import (SENT_AGAIN, SLOW, ClaudeSession, CodexSession, Daemon, Receiver, SessionWriter, alerts_for,
                                    owed_page_problems, wait_for, write)

# -- kill -9 -------------------------------------------------------------------
QUIET_AFTER_END = 2.0  # a turn end stays the state this long while the exporter is up


class Writer(SessionWriter):
    """Appends turns to sessions of both agents at agent-like pace and
    records what each session's turn ends were (the pages they owe)."""

    ENDINGS = ("explicit", "inferred", "error", "codex_complete", "codex_error")

    def __init__(self, root: Path, n: int, seed: int):
        super().__init__(seed)
        self.turn_ended = threading.Event()
        #: When the exporter last became ready (None while it is down). A turn
        #: end must stay the session's state until the exporter has been up
        #: for a while after it: one superseded while nobody watched is, by
        #: design, not paged (under load a restart can take many seconds).
        self.up_since: float | None = None
        for i in range(n):
            if i % 2 == 0:
                s = ClaudeSession(f"kill{i:04d}-0000-4000-8000-{seed:012d}", cwd=f"/home/dev/p{i}")
                self.sessions.append(("claude_code", s, claude_path(root, s.sid)))
            else:
                s = CodexSession(f"0196{i:04d}-0000-7000-8000-{seed:012d}", cwd=f"/home/dev/p{i}")
                self.sessions.append(("codex", s, codex_path(root, s.sid)))
                write(self.sessions[-1][2], s.meta())
        self.owed: dict[str, dict[str, int]] = {s.sid: {"completed": 0, "error": 0} for _p, s, _f in self.sessions}
        self.final: dict[str, str] = {}
        self.ends: list[tuple[float, str, str]] = []  # (time, session, kind) of every turn end
        self.lock = threading.Lock()

    def write_turns(self, entry):
        prov, s, path = entry
        rng = random.Random(self.rng.random())
        time.sleep(rng.uniform(0, 2))
        while not self.stop_flag.is_set():
            steps = rng.randrange(1, 4)
            if prov == "claude_code":
                write(path, s.prompt())
                for _ in range(steps):
                    time.sleep(rng.uniform(0.05, 0.4))
                    write(path, s.tool_use())
                    time.sleep(rng.uniform(0.05, 0.4))
                    write(path, s.tool_result())
                ending = rng.choice(("explicit", "inferred", "error"))
                time.sleep(rng.uniform(0.05, 0.3))
                if ending == "explicit":
                    write(path, s.text("done") + s.turn_duration())
                    kind, wait = "completed", QUIET_AFTER_END
                elif ending == "inferred":
                    write(path, s.text("done"))
                    kind, wait = "completed", QUIET_AFTER_END + 3.5  # 3 s inferred settle in these runs
                else:
                    write(path, s.api_error())
                    kind, wait = "error", QUIET_AFTER_END
            else:
                write(path, s.start())
                for _ in range(steps):
                    time.sleep(rng.uniform(0.05, 0.4))
                    write(path, s.call())
                time.sleep(rng.uniform(0.05, 0.3))
                if rng.random() < 0.7:
                    write(path, s.answer() + s.complete())
                    kind = "completed"
                else:
                    write(path, s.error())
                    kind = "error"
                wait = QUIET_AFTER_END
            with self.lock:
                self.owed[s.sid][kind] += 1
                self.final[s.sid] = kind
                self.ends.append((time.time(), s.sid, kind))
            self.turn_ended.set()
            ended = time.time()
            while True:
                up = self.up_since
                if up is not None and time.time() - max(ended, up) >= wait:
                    break
                time.sleep(0.05)
            # once told to stop, end on this turn end (no half-written turn)
            if self.stop_flag.is_set():
                return


@pytest.mark.timeout(1200 if SLOW else 300)
def test_kill9_at_random_moments_loses_and_repeats_no_page(tmp_path):
    rounds = 40 if SLOW else 8
    seed = int(os.environ.get("CAE_SEED", "9"))
    rng = random.Random(seed)
    receiver = Receiver()
    root = tmp_path
    (root / "claude" / "projects").mkdir(parents=True)
    (root / "codex" / "sessions").mkdir(parents=True)
    writer = Writer(root, n=6, seed=seed)
    unlimited = {"alerts": {"max_pages_per_session": 0}}  # more turn ends an hour than the limit; it outlives restarts
    exp = Daemon(root, receiver=receiver, config=unlimited).start()
    writer.up_since = time.time()
    writer.start()
    kills = []
    began = time.monotonic()
    try:
        for r in range(rounds):
            if r >= 4 and time.monotonic() - began > (600 if SLOW else 40):
                break  # a slow machine: fewer rounds
            if rng.random() < 0.5:
                writer.turn_ended.clear()
                writer.turn_ended.wait(timeout=8)
                time.sleep(rng.uniform(0, 0.3))  # while its page is settling or being sent
            else:
                time.sleep(rng.uniform(0.2, 3.0))
            exp.kill9()
            writer.up_since = None
            kills.append(time.time())
            time.sleep(rng.uniform(0, 1.0))  # down a moment; the sessions go on
            exp = Daemon(root, receiver=receiver, config=unlimited).start()
            writer.up_since = time.time()
        writer.stop_flag.set()
        writer.join(timeout=60)
        assert not writer.is_alive()
        # the last turn ends settle and page
        time.sleep(1.0)
        problems, total = owed_page_problems(exp, receiver, writer, 1.0)
        print(f"\nkill -9 rounds: {len(kills)}; turn ends paged: {total}; messages: {len(receiver.messages)}")
        if problems:
            t0 = kills[0] - 10
            got = [(round(t - t0, 2), m.get("message", "").split("\n")[0][9:], m.get("title", ""))
                   for t, m in zip(receiver.received_at, receiver.messages)]
            ends = [(round(t - t0, 2), sid, kind) for t, sid, kind in writer.ends]
            raise AssertionError(f"{problems}\nkills at {[round(k - t0, 2) for k in kills]}\n"
                                 f"turn ends {ends}\npages {got}")
        again = sum(SENT_AGAIN in m.get("message", "") for m in receiver.messages)  # a kill during a delivery
        assert total <= len(receiver.messages) <= total + again, (total, len(receiver.messages), again)
        assert total >= len(writer.sessions)  # every session ended turns (fewer rounds on a slow machine)
    finally:
        writer.stop_flag.set()
        exp.stop()
        receiver.close()


def test_crash_before_the_first_periodic_checkpoint(tmp_path):
    """Killed a moment after its first start, before any periodic
    checkpoint: what was written meanwhile is still news to the next start
    (it used to take everything for old history and page none of it)."""
    receiver = Receiver()
    (tmp_path / "claude" / "projects").mkdir(parents=True)
    exp = Daemon(tmp_path, receiver=receiver).start()
    cc = ClaudeSession("crsh0000-0000-4000-8000-000000000001")
    path = claude_path(tmp_path, cc.sid)
    try:
        write(path, cc.prompt() + cc.tool_use())
        exp.wait_state(cc.sid, "working")
        exp.kill9()
        write(path, cc.tool_result() + cc.text("ok") + cc.turn_duration())
        exp = Daemon(tmp_path, receiver=receiver).start()
        exp.wait_state(cc.sid, "completed")
        wait_for(lambda: len(alerts_for(receiver, cc.sid)) == 1, what="the page")
    finally:
        exp.stop()
        receiver.close()


def test_crash_while_an_inferred_completion_settles(tmp_path):
    """The answer was read and checkpointed, the quiet time that makes it a
    completion had not passed yet, then kill -9: after the restart the
    completion still pages (the checkpoint remembers the session was open)."""
    receiver = Receiver()
    exp = Daemon(tmp_path, receiver=receiver, config={"reducer": {"inferred_settle_seconds": 7.0}}).start()
    cc = ClaudeSession("crsh0000-0000-4000-8000-000000000002")
    path = claude_path(tmp_path, cc.sid)
    try:
        write(path, cc.prompt() + cc.tool_use() + cc.tool_result() + cc.text("here you go"))
        cp = tmp_path / "state" / "checkpoint.json"

        def checkpointed():
            try:
                return json.loads(cp.read_bytes())["files"][str(path)][1] == path.stat().st_size
            except (OSError, ValueError, KeyError):
                return False
        wait_for(checkpointed, timeout=8, what="the answer checkpointed")
        assert exp.state(cc.sid) == "working"
        exp.kill9()
        exp = Daemon(tmp_path, receiver=receiver, config={"reducer": {"inferred_settle_seconds": 7.0}}).start()
        exp.wait_state(cc.sid, "completed", timeout=15)
        wait_for(lambda: len(alerts_for(receiver, cc.sid)) == 1, what="the page")
        assert "inferred" in alerts_for(receiver, cc.sid)[0]["message"]
    finally:
        exp.stop()
        receiver.close()


# -- state files -----------------------------------------------------------------
BAD_STATE = {
    "empty": b"",
    "binary": os.urandom(64).replace(b"{", b"x"),
    "truncated": b'{"version": 1, "files": {"/x": [1, ',
    "array": b"[1, 2, 3]",
    "foreign_version": b'{"version": 2, "files": {}, "alerts": {}}',
    "wrong_types": b'{"version": 1, "files": "nope", "open": 5, "alerts": {"k": {"at": "soon", "status": 7}}}',
    "wrong_entry_types": b'{"version": 1, "files": {"/x": ["a", "b"]}, "alerts": {"k": [1], "j": {"at": null}}}',
    "nul": b"\x00" * 100,
}


def test_corrupt_or_foreign_state_files_set_aside(tmp_path):
    """Each kind of bad state file (both the checkpoint and the ledger, plus
    a temp file of an interrupted write), one exporter per kind, all at once:
    no crash, a warning, the file set aside (or its unusable entries
    dropped), pages work; the next start loads what was written, silently."""
    kinds = [*BAD_STATE, "folder"]
    receiver = Receiver()
    runs = {}
    try:
        for kind in kinds:
            root = tmp_path / kind
            state = root / "state"
            state.mkdir(parents=True)
            for name in ("checkpoint.json", "alerts-ledger.json"):
                if kind == "folder":
                    (state / name).mkdir()
                    (state / name / "x").write_text("x")
                else:
                    (state / name).write_bytes(BAD_STATE[kind])
                (state / f"{name}.k2j3h4.tmp").write_bytes(b'{"version": 1')  # an interrupted write
            runs[kind] = Daemon(root, receiver=receiver).start(wait_ready=False)
        sids = {}
        for i, kind in enumerate(kinds):
            exp = runs[kind]
            wait_for(exp.ready, timeout=30, what=f"exporter ready ({kind})")
            cc = ClaudeSession(f"state{i:03d}-0000-4000-8000-000000000001")
            sids[kind] = cc.sid
            write(claude_path(exp.root, cc.sid), cc.prompt() + cc.text("ok") + cc.turn_duration())
        for kind in kinds:
            exp, sid, state = runs[kind], sids[kind], runs[kind].root / "state"
            exp.wait_state(sid, "completed")
            wait_for(lambda: len(alerts_for(receiver, sid)) == 1, what=f"one page ({kind})")
            log = exp.log()
            assert "Traceback" not in log, (kind, log)
            names = sorted(p.name for p in state.iterdir())
            assert not [n for n in names if "k2j3h4" in n], (kind, names)  # interrupted writes cleaned up
            assert any(n.startswith("checkpoint.json.corrupt-") for n in names), (kind, names)
            if kind in ("wrong_types", "wrong_entry_types"):
                assert "unusable entries" in log, kind  # the ledger: the right shape, bad entries dropped
            else:
                assert any(n.startswith("alerts-ledger.json.corrupt-") for n in names), (kind, names)
            assert "set it aside" in log, kind
        for exp in runs.values():
            assert exp.stop() == 0
        runs = {kind: Daemon(runs[kind].root, receiver=receiver).start(wait_ready=False) for kind in kinds}
        for kind in kinds:
            exp = runs[kind]
            wait_for(exp.ready, timeout=30, what=f"second start ready ({kind})")
            exp.wait_state(sids[kind], "completed")
            assert "set it aside" not in exp.log() and "unusable" not in exp.log(), kind
            for name in ("checkpoint.json", "alerts-ledger.json"):
                assert json.loads((exp.root / "state" / name).read_bytes())["version"] == 1
        time.sleep(0.5)
        assert len(receiver.messages) == len(kinds)  # the second starts repeated no page
    finally:
        for exp in runs.values():
            exp.stop()
        receiver.close()


# -- graceful shutdown -------------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_graceful_shutdown_writes_checkpoint_and_repeats_nothing(tmp_path, sig):
    receiver = Receiver()
    exp = Daemon(tmp_path, receiver=receiver).start()
    cc = ClaudeSession("term0000-0000-4000-8000-000000000001")
    cx = CodexSession("0196aaaa-0000-7000-8000-000000000001")
    cpath, xpath = claude_path(tmp_path, cc.sid), codex_path(tmp_path, cx.sid)
    try:
        write(cpath, cc.prompt() + cc.tool_use() + cc.tool_result() + cc.text("ok") + cc.turn_duration())
        write(xpath, cx.meta() + cx.start() + cx.call() + cx.answer() + cx.complete())
        exp.wait_state(cc.sid, "completed")
        exp.wait_state(cx.sid, "completed")
        wait_for(lambda: len(receiver.messages) == 2, what="two pages")
        write(cpath, cc.prompt())  # a turn under way at shutdown
        exp.wait_state(cc.sid, "working")
        t0 = time.monotonic()
        exp.send(sig)
        rc = exp.wait_exit(20)
        took = time.monotonic() - t0
        assert rc == 0, exp.log()[-2000:]
        assert took < 5, took
        log = exp.log()
        assert f"received {signal.Signals(sig).name}; shutting down" in log and "stopped" in log
        assert "Traceback" not in log
        cp = json.loads((tmp_path / "state" / "checkpoint.json").read_bytes())
        assert cp["files"][str(cpath)][1] == cpath.stat().st_size
        assert cp["files"][str(xpath)][1] == xpath.stat().st_size
        # the turn under way ends while the exporter is down: paged after the
        # restart, and nothing else is
        write(cpath, cc.text("ok") + cc.turn_duration())
        exp = Daemon(tmp_path, receiver=receiver).start()
        exp.wait_state(cc.sid, "completed")
        wait_for(lambda: len(receiver.messages) == 3, what="the page of the turn that ended while down")
        time.sleep(1.0)
        assert len(receiver.messages) == 3
        assert len(alerts_for(receiver, cc.sid)) == 2 and len(alerts_for(receiver, cx.sid)) == 1
    finally:
        exp.stop()
        receiver.close()


def _log_time(log: str, needle: str) -> float:
    """The time (Unix seconds) of the first log line holding ``needle``."""
    from datetime import datetime

    line = next(line for line in log.splitlines() if needle in line)
    return datetime.fromisoformat(line.split("time=", 1)[1].split()[0].replace("Z", "+00:00")).timestamp()


def test_signal_during_large_startup_scan(tmp_path):
    """SIGTERM while the start-up scan is in the middle of reading one ~240 MB
    file of tool calls: the scan stops within a second (it looks at the stop
    between reads of at most 4 MiB, not only between files), the exporter
    exits 0 at once; the next start reads it all again as old history (no
    page for the turn that ended long ago)."""
    cc = ClaudeSession("scan0000-0000-4000-8000-000000000001")
    path = claude_path(tmp_path, cc.sid)
    path.parent.mkdir(parents=True)
    with open(path, "wb") as f:
        f.write(cc.prompt())
        for _ in range(100):
            f.write(b"".join(cc.tool_use("x" * 500) + cc.tool_result("y" * 500) for _ in range(1000)))
        f.write(cc.text("ok") + cc.turn_duration())
    exp = Daemon(tmp_path)
    exp.start(wait_ready=False)
    def reading():
        try:
            return exp.value("coding_agent_transcript_bytes_total") > 0
        except OSError:  # not serving yet
            return False

    try:
        wait_for(reading, timeout=30, interval=0.05, what="the read of the large file under way")
        t0 = time.monotonic()
        exp.send(signal.SIGTERM)
        rc = exp.wait_exit(20)
        took = time.monotonic() - t0
    finally:
        exp.stop("kill")  # (gone already, unless the test failed before it)
    log = exp.log()
    assert rc == 0, log[-2000:]
    assert "start-up scan stopped" in log, log[-2000:]
    assert "start-up scan done" not in log, "the scan ended before the signal: make the file larger"
    stopped_in = _log_time(log, "start-up scan stopped") - _log_time(log, "received SIGTERM")
    assert stopped_in < 1.0, f"the start-up scan stopped {stopped_in:.2f} s after SIGTERM"
    assert took < 3, f"took {took:.1f} s to exit"
    receiver = Receiver()
    exp = Daemon(tmp_path, receiver=receiver).start(ready_timeout=90)  # ready after 240 MB, on a busy machine too
    try:
        exp.wait_state(cc.sid, "completed", timeout=90)
        assert exp.value("coding_agent_transcript_bytes_total") == path.stat().st_size
        time.sleep(0.5)
        assert receiver.messages == []
    finally:
        assert exp.stop() == 0
        receiver.close()
