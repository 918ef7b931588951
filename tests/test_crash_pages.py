"""A page a crash kept from being sent is sent, exactly once (issue 19).

Whether a turn end still owes a page survives any kill -9: the page ledger
says "pending" before the checkpoint moves past the turn end's record, and
the next start judges that turn end again even when a later turn, read in
the same piece, has superseded it (record time decides: it stood for the
settle time).

- The sequence that lost the page every time: a prompt and a tool call;
  kill -9; the turn ends while the exporter is down; start; kill -9 again
  0.5 s after ready, inside ``alerts.settle_seconds``; the next prompt,
  written while it is down, past the settle time in record time; start
  again: one page. For both agents.
- A bounded random kill -9 loop over sessions of both agents whose turns
  end explicitly and stay the state for the settle time in record time:
  every turn end pages exactly once, wherever the kills fall (also right
  after ready and inside settle). Short by default; ``CAE_SLOW=1`` runs
  more rounds.
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest

from harness import claude_path, codex_path
from test_hardening_support import (SLOW, ClaudeSession, CodexSession, Daemon, Receiver, SessionWriter, alerts_for,
                                   kill9_rounds, owed_page_problems,
                                    wait_for, write)

SETTLE = 2.0
#: No page rate limit: the loop's sessions end more turns an hour than
#: alerts.max_pages_per_session allows, and the limit outlives restarts.
CONFIG = {"alerts": {"settle_seconds": SETTLE, "max_pages_per_session": 0}}


def _session(root: Path, agent: str, sid_tail: str):
    if agent == "claude_code":
        s = ClaudeSession(f"c0de0019-0000-4000-8000-{sid_tail}")
        return s, claude_path(root, s.sid)
    s = CodexSession(f"0196c0de-0019-7000-8000-{sid_tail}")
    path = codex_path(root, s.sid)
    write(path, s.meta())
    return s, path


@pytest.mark.parametrize("agent", ["claude_code", "codex"])
def test_kill9_inside_settle_then_next_prompt_while_down_pages_once(tmp_path, agent):
    receiver = Receiver()
    s, path = _session(tmp_path, agent, "000000000019")
    exp = Daemon(tmp_path, receiver=receiver, config=CONFIG).start()
    try:
        # 1. a prompt and a tool call; kill -9
        write(path, s.prompt() + s.tool_use() if agent == "claude_code" else s.start() + s.call())
        exp.wait_state(s.sid, "working")
        checkpoint = tmp_path / "state" / "checkpoint.json"
        wait_for(lambda: checkpoint.is_file() and str(path) in checkpoint.read_text(), timeout=10,
                 what="a checkpoint with the file read up to the tool call")
        exp.kill9()
        # 2. while down: the tool result, the answer and the turn's end
        if agent == "claude_code":
            write(path, s.tool_result() + s.text("done", stop="end_turn") + s.turn_duration())
        else:
            write(path, s.answer() + s.complete())
        ended = time.time()
        # 3. start; 0.5 s after ready, inside the settle time, kill -9 again
        exp.start()
        time.sleep(0.5)
        exp.kill9()
        assert receiver.messages == []  # it was still settling
        # 4. past the settle time in record time, the next prompt, while down
        time.sleep(max(0.0, ended + 2 * SETTLE - time.time()))
        write(path, s.prompt() if agent == "claude_code" else s.start())
        # 5. start again: the turn end pages, once
        exp.start()
        wait_for(lambda: len(alerts_for(receiver, s.sid, "completed")) >= 1, timeout=10,
                 what="the page the kill kept from being sent")
        time.sleep(SETTLE + 1.0)
        assert len(receiver.messages) == 1, receiver.messages
        exp.wait_state(s.sid, "working")
        # and a further restart repeats nothing
        exp.kill9()
        exp.start()
        time.sleep(SETTLE + 1.0)
        assert len(receiver.messages) == 1, receiver.messages
    finally:
        exp.stop()
        receiver.close()


class Writer(SessionWriter):
    """Turns of both agents at agent-like pace, each ended explicitly
    (completion or error) and left the state for ``hold`` seconds of record
    time before the next prompt, whether the exporter is up or not. Records
    what each session owes (its turn ends)."""

    def __init__(self, root: Path, n: int, seed: int, hold: float):
        super().__init__(seed)
        self.hold = hold
        for i in range(n):
            agent = "claude_code" if i % 2 == 0 else "codex"
            s, path = _session(root, agent, f"{seed:06d}{i:06d}")
            self.sessions.append((agent, s, path))
        self.owed = {s.sid: {"completed": 0, "error": 0} for _a, s, _p in self.sessions}
        self.final: dict[str, str] = {}
        self.lock = threading.Lock()

    def write_turns(self, entry):
        agent, s, path = entry
        rng = random.Random(self.rng.random())
        time.sleep(rng.uniform(0, 1))
        while not self.stop_flag.is_set():
            if agent == "claude_code":
                write(path, s.prompt())
                for _ in range(rng.randrange(1, 3)):
                    time.sleep(rng.uniform(0.05, 0.3))
                    write(path, s.tool_use())
                    time.sleep(rng.uniform(0.05, 0.3))
                    write(path, s.tool_result())
                time.sleep(rng.uniform(0.05, 0.3))
                if rng.random() < 0.8:
                    write(path, s.text("done", stop="end_turn") + s.turn_duration())
                    kind = "completed"
                else:
                    write(path, s.api_error())
                    kind = "error"
            else:
                write(path, s.start())
                for _ in range(rng.randrange(1, 3)):
                    time.sleep(rng.uniform(0.05, 0.3))
                    write(path, s.call())
                time.sleep(rng.uniform(0.05, 0.3))
                if rng.random() < 0.8:
                    write(path, s.answer() + s.complete())
                    kind = "completed"
                else:
                    write(path, s.error())
                    kind = "error"
            with self.lock:
                self.owed[s.sid][kind] += 1
                self.final[s.sid] = kind
            time.sleep(self.hold + rng.uniform(0, 1.0))


@pytest.mark.timeout(1200 if SLOW else 240)
def test_kill9_random_loop_every_turn_end_pages_once(tmp_path):
    rounds = 30 if SLOW else 6
    seed = int(os.environ.get("CAE_SEED", "19"))
    rng = random.Random(seed)
    receiver = Receiver()
    (tmp_path / "claude" / "projects").mkdir(parents=True)
    (tmp_path / "codex" / "sessions").mkdir(parents=True)
    writer = Writer(tmp_path, n=4, seed=seed, hold=SETTLE + 0.5)
    exp = Daemon(tmp_path, receiver=receiver, config=CONFIG).start()
    writer.start()
    try:
        kill9_rounds(exp, writer, rounds, rng, up=(0.1, 0.8, 0.5, 4.0))
        problems, total = owed_page_problems(exp, receiver, writer, SETTLE)
        print(f"\nkill -9 rounds: {rounds}; turn ends: {total}; pages: {len(receiver.messages)}")
        assert not problems, problems
        assert len(receiver.messages) == total
        assert total >= 2 * len(writer.sessions)
    finally:
        writer.stop_flag.set()
        exp.stop()
        receiver.close()


def test_a_page_whose_delivery_a_kill_interrupted_is_sent_again_and_says_so(tmp_path):
    """The receiver holds the first delivery open (the ledger says
    "sending"); kill -9; after the restart the page comes again, once, with
    the line that says it may have reached the user already. A turn end
    killed before its delivery began ("pending": it never went out) is
    paged without that line."""
    from coding_agent_exporter.courier import SENT_AGAIN

    release = threading.Event()
    held = Receiver()
    handler = held.server.RequestHandlerClass
    post = handler.do_POST

    def slow_post(self):
        release.wait(30)  # the delivery hangs until the exporter is gone
        post(self)
    handler.do_POST = slow_post
    receiver = Receiver()
    config = {"alerts": {"settle_seconds": 0.3}}
    s, t = ClaudeSession("e3190000-0000-4000-8000-000000000401"), ClaudeSession("e3190000-0000-4000-8000-000000000402")
    p, q = claude_path(tmp_path, s.sid), claude_path(tmp_path, t.sid)
    exp = Daemon(tmp_path, receiver=held, config=config).start()
    try:
        write(p, s.prompt() + s.text() + s.turn_duration())
        ledger = tmp_path / "state" / "alerts-ledger.json"
        wait_for(lambda: ledger.exists() and '"sending"' in ledger.read_text(), what="the ledger saying sending")
        exp.kill9()
        release.set()
        write(q, t.prompt() + t.text() + t.turn_duration())  # ended while down: never went out
        exp = Daemon(tmp_path, receiver=receiver, config=config).start()
        wait_for(lambda: alerts_for(receiver, s.sid) and alerts_for(receiver, t.sid), what="both pages")
        time.sleep(1.5)
        again, fresh = alerts_for(receiver, s.sid), alerts_for(receiver, t.sid)
        assert len(again) == 1 and SENT_AGAIN in again[0]["message"], again
        assert len(fresh) == 1 and SENT_AGAIN not in fresh[0]["message"], fresh
        assert "sent_again=True" in exp.log()
    finally:
        release.set()
        exp.stop()
        held.close()
        receiver.close()


@pytest.mark.parametrize("stop", ["term", "kill9"])
def test_a_fork_made_while_the_exporter_is_down_pages_none_of_its_copied_turns(tmp_path, stop):
    """A new-user trial: a session forked while the exporter was stopped (Claude Code 2.1.332
    ``--fork-session``: the same uuids and timestamps under the new sessionId), in a file whose path
    sorts before the original's, paged every copied turn end at the next start. The start-up reads
    every file's backfill before any news (exporter.files.FileTable.read_all): 0 pages for the copies,
    one for the fork's own next turn."""
    receiver = Receiver()
    s = ClaudeSession("f0f0f0f0-0000-4000-8000-000000000019")
    path = claude_path(tmp_path, s.sid)
    exp = Daemon(tmp_path, receiver=receiver, config={"alerts": {"settle_seconds": 0.5}}).start()
    try:
        for i in range(2):
            write(path, s.prompt() + s.text(f"done {i}", stop="end_turn") + s.turn_duration())
            wait_for(lambda: len(alerts_for(receiver, s.sid, "completed")) == i + 1, timeout=20,
                     what=f"the page of turn {i + 1}")
        checkpoint = tmp_path / "state" / "checkpoint.json"
        wait_for(lambda: checkpoint.is_file() and str(path) in checkpoint.read_text(), timeout=10,
                 what="a checkpoint with the file")
        exp.kill9() if stop == "kill9" else exp.stop()
        fork = ClaudeSession("0f0f0f0f-0000-4000-8000-000000000019")  # sorts before the original
        copy = Path(claude_path(tmp_path, fork.sid))
        copy.write_bytes(Path(path).read_bytes().replace(s.sid.encode(), fork.sid.encode()))
        exp.start()
        exp.wait_state(fork.sid, "completed")
        time.sleep(2.0)  # four settle times
        assert alerts_for(receiver, fork.sid) == [] and len(alerts_for(receiver, s.sid)) == 2, receiver.messages
        fork.n = 100  # the fork's own turn: new uuids
        write(copy, fork.prompt() + fork.text("forked", stop="end_turn") + fork.turn_duration())
        wait_for(lambda: len(alerts_for(receiver, fork.sid, "completed")) == 1, timeout=20, what="the fork's page")
        time.sleep(1.0)
        assert len(alerts_for(receiver, fork.sid)) == 1 and len(alerts_for(receiver, s.sid)) == 2
    finally:
        exp.stop()
        receiver.close()
