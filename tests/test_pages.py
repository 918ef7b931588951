"""Pages people keep on (issue 33), through the real exporter with real
Apprise ``json://`` deliveries to loopback receivers on two tags:
min_turn_seconds, presence_delay_seconds, a quiet window that ends during
the test and its one digest, a muted session beside one that pages, the
mute API's refusals, a route that sends a project's pages to its tag only,
and the page's own words (first line, resume command, directory, link)."""

from __future__ import annotations

import json
import os
import random
import time
import urllib.error
import urllib.request
from datetime import datetime

from coding_agent_exporter.courier import SENT_AGAIN
from harness import Exporter, Receiver, claude_path, codex_path, wait_for
from test_hardening_support import SLOW, ClaudeSession, CodexSession, SessionWriter, kill9_rounds, write


def claude(root, tail: str, project: str):
    s = ClaudeSession(f"c0de0033-0000-4000-8000-{tail:0>12}", cwd=f"/home/dev/{project}")
    return s, claude_path(root, s.sid, f"-home-dev-{project}")


def codex(root, tail: str, project: str):
    s = CodexSession(f"0196c0de-0033-7000-8000-{tail:0>12}", cwd=f"/home/dev/{project}")
    path = codex_path(root, s.sid)
    write(path, s.meta())
    return s, path


def claude_turn(s, path, ms: int, prompt: bool = True) -> None:
    write(path, (s.prompt() if prompt else b"") + s.tool_use())
    write(path, s.tool_result() + s.text("done", stop="end_turn") + s.turn_duration(ms))


def pages_for(receiver: Receiver, sid: str) -> list[dict]:
    return [m for m in list(receiver.messages) if f"Session: {sid}" in m.get("message", "")]


def request(exp: Exporter, method: str, path: str, body=None, headers=None):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(f"http://127.0.0.1:{exp.port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_min_turn_and_a_route_to_one_tag(tmp_path):
    phone, desk = Receiver(), Receiver()
    exp = Exporter(tmp_path, config={"alerts": {
        "urls": [f"phone={phone.url}", f"completed,waiting,error={desk.url}"],
        "min_turn_seconds": 10, "link_base_url": "https://box.example/agents",
        "routes": [{"match": {"project": "webapp"}, "tags": ["phone"]}]}}).start()
    try:
        short, p1 = claude(tmp_path, "1", "webapp")
        long_, p2 = claude(tmp_path, "2", "webapp")
        other, p3 = codex(tmp_path, "3", "api")
        claude_turn(short, p1, 3000)     # 3 s: you were watching
        claude_turn(long_, p2, 252000)   # 4 min 12 s
        write(p3, other.start() + other.call() + other.answer())
        write(p3, other.line("event_msg", type="task_complete", turn_id=f"{other.sid}-t1",
                             last_agent_message="done", duration_ms=60000))
        wait_for(lambda: pages_for(phone, long_.sid) and pages_for(desk, other.sid), timeout=20,
                 what="the long turn's and the other project's pages")
        exp.wait_state(short.sid, "completed")
        time.sleep(2.0)  # settle (1 s) and more: the short turn stays silent
        assert pages_for(phone, short.sid) == [] and pages_for(desk, short.sid) == []
        # the route: webapp's page reached its tag only; api's page the kind's tag only
        assert len(phone.messages) == 1 and len(desk.messages) == 1, (phone.messages, desk.messages)
        body = phone.messages[0]["message"].splitlines()
        assert body[0] == "webapp: Claude Code finished after 4 min 12 s"
        assert body[1] == f"Resume: claude --resume {long_.sid}"
        assert body[2] == "Directory: /home/dev/webapp"
        assert body[3] == f"Status page: https://box.example/agents/#session=claude_code/{long_.sid}"
        assert desk.messages[0]["message"].splitlines()[:2] == ["api: Codex finished after 1 min",
                                                                f"Resume: codex resume {other.sid}"]
        assert "done" not in json.dumps(phone.messages + desk.messages)  # no transcript text
        assert exp.value("coding_agent_alerts_suppressed_total", kind="completed", reason="min_turn") == 1
        assert any(short.sid in line and "min_turn" in line and "page not sent" in line
                   for line in exp.log().splitlines())
    finally:
        exp.stop()
        phone.close()
        desk.close()


def test_presence_delay_drops_a_page_when_you_prompt_and_sends_one_after_it(tmp_path):
    receiver = Receiver()
    delay = 3.0
    exp = Exporter(tmp_path, receiver=receiver, config={"alerts": {"presence_delay_seconds": delay}}).start()
    try:
        there, p1 = claude(tmp_path, "11", "webapp")
        away, p2 = codex(tmp_path, "12", "api")
        claude_turn(there, p1, 60000)
        write(p2, away.start() + away.call() + away.answer() + away.complete())
        ended = time.time()
        exp.wait_state(there.sid, "completed")
        time.sleep(1.5)
        write(p1, there.prompt("next"))  # back at the terminal within the delay
        exp.wait_state(there.sid, "working")
        wait_for(lambda: pages_for(receiver, away.sid), timeout=15, what="the page after the delay")
        assert receiver.received_at[0] - ended >= delay - 0.2, "sent before the delay passed"
        time.sleep(delay + 1.0)
        assert len(pages_for(receiver, away.sid)) == 1 and pages_for(receiver, there.sid) == []
        assert len(receiver.messages) == 1
        assert exp.value("coding_agent_alerts_suppressed_total", kind="completed", reason="presence") == 1
    finally:
        exp.stop()
        receiver.close()


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%H:%M:%S")


def test_quiet_window_ending_during_the_test_sends_one_digest_of_who_still_waits(tmp_path):
    waiting_tag, error_tag = Receiver(), Receiver()
    start = time.time()
    end = float(int(start) + 12)  # the window names whole seconds
    exp = Exporter(tmp_path, config={"alerts": {
        "urls": [f"completed,waiting={waiting_tag.url}", f"error={error_tag.url}"],
        "quiet_hours": [{"start": _clock(start - 60), "end": _clock(end)}]}}).start()
    try:
        still, p1 = claude(tmp_path, "21", "webapp")
        answered, p2 = claude(tmp_path, "22", "webapp")
        also, p3 = codex(tmp_path, "23", "api")
        failing, p4 = claude(tmp_path, "24", "shop")
        claude_turn(still, p1, 60000)
        claude_turn(answered, p2, 60000)
        write(p3, also.start() + also.call() + also.answer() + also.complete())
        write(p4, failing.prompt() + failing.api_error())
        # errors page through quiet hours
        wait_for(lambda: pages_for(error_tag, failing.sid), timeout=15, what="the error page")
        exp.wait_state(answered.sid, "completed")
        time.sleep(1.5)
        assert waiting_tag.messages == []  # held
        write(p2, answered.prompt("next"))  # answered inside the window: left out of the digest
        exp.wait_state(answered.sid, "working")
        assert exp.value("coding_agent_alerts_suppressed_total", reason="quiet_hours") == 3
        wait_for(lambda: waiting_tag.messages, timeout=max(5.0, end - time.time() + 10), what="the digest")
        assert waiting_tag.received_at[0] >= end - 0.5
        time.sleep(2.0)
        assert len(waiting_tag.messages) == 1, waiting_tag.messages
        digest = waiting_tag.messages[0]
        assert digest["title"] == "Quiet hours over: 2 sessions wait for you"
        assert still.sid in digest["message"] and also.sid in digest["message"]
        assert answered.sid not in digest["message"]
        assert f"Resume: claude --resume {still.sid}" in digest["message"]
        assert "(completed, waiting " in digest["message"]
        assert len(error_tag.messages) == 1
    finally:
        exp.stop()
        waiting_tag.close()
        error_tag.close()


def test_a_muted_session_stays_silent_and_foreign_or_plain_text_mutes_change_nothing(tmp_path):
    receiver = Receiver()
    exp = Exporter(tmp_path, receiver=receiver).start()
    try:
        muted, p1 = claude(tmp_path, "31", "webapp")
        loud, p2 = codex(tmp_path, "32", "api")
        write(p1, muted.prompt() + muted.tool_use())
        write(p2, loud.start() + loud.call())
        exp.wait_state(muted.sid, "working")
        exp.wait_state(loud.sid, "working")
        base = f"/api/v1/sessions/codex/{loud.sid}/mute"
        # refused: another origin, a text/plain body (what a no-cors fetch or a form can send)
        code, _ = request(exp, "POST", base, {"seconds": 600}, {"Origin": "http://evil.example"})
        assert code == 403
        code, _ = request(exp, "POST", base, b'{"seconds": 600}', {"Content-Type": "text/plain"})
        assert code == 415
        code, _ = request(exp, "POST", base, {"seconds": "soon"})
        assert code == 400
        assert request(exp, "POST", "/api/v1/sessions/codex/nope/mute", {"seconds": 60})[0] == 404
        code, body = request(exp, "POST", f"/api/v1/sessions/claude_code/{muted.sid}/mute",
                             {"until": "next_prompt"}, {"Origin": f"http://127.0.0.1:{exp.port}"})
        assert code == 200, body
        code, body = request(exp, "GET", "/api/v1/mutes")
        mutes = json.loads(body)
        assert list(mutes["sessions"]) == [f"claude_code/{muted.sid}"], mutes
        status = json.loads(request(exp, "GET", "/api/v1/sessions")[1])
        assert status["mutes"] == mutes
        assert json.loads((tmp_path / "state" / "mutes.json").read_text())["sessions"]
        # both turns end: only the unmuted one pages
        write(p1, muted.tool_result() + muted.text("done", stop="end_turn") + muted.turn_duration(60000))
        write(p2, loud.answer() + loud.complete())
        wait_for(lambda: pages_for(receiver, loud.sid), timeout=15, what="the unmuted session's page")
        exp.wait_state(muted.sid, "completed")
        time.sleep(2.0)
        assert pages_for(receiver, muted.sid) == [] and len(receiver.messages) == 1
        assert exp.value("coding_agent_alerts_suppressed_total", kind="completed", reason="muted") == 1
        # the next prompt ends the mute: its turn pages
        claude_turn(muted, p1, 60000)
        wait_for(lambda: pages_for(receiver, muted.sid), timeout=15, what="the page after the next prompt")
        # a project mute, then DELETE
        assert request(exp, "POST", "/api/v1/projects/api/mute", {"seconds": 600})[0] == 200
        assert request(exp, "POST", "/api/v1/projects/api/mute", {"until": "next_prompt"})[0] == 400
        write(p2, loud.start() + loud.call() + loud.answer() + loud.complete())
        time.sleep(3.0)
        assert len(pages_for(receiver, loud.sid)) == 1
        code, body = request(exp, "DELETE", "/api/v1/projects/api/mute")
        assert code == 200 and json.loads(body) == {"unmuted": True}
        assert json.loads(request(exp, "GET", "/api/v1/mutes")[1])["projects"] == {}
    finally:
        exp.stop()
        receiver.close()


# -- kill -9 with held pages ------------------------------------------------------
class PresenceWriter(SessionWriter):
    """Turns of both agents; after each turn end the user either comes back
    within the delay (a prompt at a third of it: "acted") or stays away long
    enough that the held page is owed whatever the kills did ("owed"; the
    next prompt comes ``away`` seconds after the turn end, and not before
    the page came, 60 s at most: on a busy machine a restart can take longer
    than ``away``, and a page after the user is back would be one too late).
    ``pages(sid)``: the pages received so far for session ``sid``. Records
    every turn end as ``(end time, "acted" | "owed", next prompt time or
    None)``."""

    def __init__(self, root, n: int, seed: int, delay: float, away: float, pages):
        super().__init__(seed)
        self.delay, self.away, self.pages = delay, away, pages
        for i in range(n):
            make = claude if i % 2 == 0 else codex
            s, path = make(root, f"4{seed:04d}{i:04d}", f"proj{i}")
            self.sessions.append((s, path))
        self.turns: dict[str, list] = {s.sid: [] for s, _ in self.sessions}

    def write_turns(self, entry):
        s, path = entry
        rng = random.Random(self.rng.random())
        time.sleep(rng.uniform(0, 1))
        first = True
        while not self.stop_flag.is_set():
            if isinstance(s, ClaudeSession):
                if first:
                    write(path, s.prompt())
                write(path, s.tool_use())
                time.sleep(rng.uniform(0.05, 0.3))
                write(path, s.tool_result() + s.text("done", stop="end_turn") + s.turn_duration(30000))
            else:
                if first:
                    write(path, s.start())
                write(path, s.call())
                time.sleep(rng.uniform(0.05, 0.3))
                write(path, s.answer() + s.complete())
            first = False
            ended, before = time.time(), self.pages(s.sid)
            acted = rng.random() < 0.5
            if not acted:
                if self.stop_flag.wait(self.away):
                    self.turns[s.sid].append((ended, "owed", None))
                    return
                while self.pages(s.sid) == before and time.time() < ended + 60:
                    if self.stop_flag.wait(0.2):  # the test's last wait covers this page
                        self.turns[s.sid].append((ended, "owed", None))
                        return
            else:
                time.sleep(self.delay / 3)
            write(path, s.prompt("next") if isinstance(s, ClaudeSession) else s.start("next"))
            self.turns[s.sid].append((ended, "acted" if acted else "owed", time.time()))


def test_kill9_loop_with_presence_delay_loses_no_held_page_and_sends_none_twice_or_late(tmp_path):
    from test_hardening_support import Daemon

    delay, settle = 2.0, 0.5
    rounds = 12 if SLOW else 5
    seed = int(os.environ.get("CAE_SEED", "33"))
    rng = random.Random(seed)
    receiver = Receiver()
    (tmp_path / "claude" / "projects").mkdir(parents=True)
    (tmp_path / "codex" / "sessions").mkdir(parents=True)
    writer = PresenceWriter(tmp_path, n=4, seed=seed, delay=delay, away=delay + 9.0,
                            pages=lambda sid: len(pages_for(receiver, sid)))
    exp = Daemon(tmp_path, receiver=receiver, config={"alerts": {"presence_delay_seconds": delay,
                                                                 "settle_seconds": settle}}).start()
    writer.start()
    try:
        kill9_rounds(exp, writer, rounds, rng, up=(0.2, 1.0, 1.0, 4.0))
        last_owed = [sid for sid, turns in writer.turns.items() if turns and turns[-1][1] == "owed"]
        try:
            wait_for(lambda: all(len(pages_for(receiver, sid)) >= sum(k == "owed" for _e, k, _n in writer.turns[sid])
                                 for sid in last_owed), timeout=30, what="the last held pages")
        except AssertionError:
            pass  # the count below names the turn
        time.sleep(delay + 2.0)  # a page too many would come by now
        problems, owed = [], 0
        pages = list(zip(receiver.received_at, receiver.messages))
        again = 0
        for sid, turns in writer.turns.items():
            got = [(t, SENT_AGAIN in m.get("message", "")) for t, m in pages if f"Session: {sid}" in m.get("message", "")]
            per, per_again = [0] * len(turns), [0] * len(turns)
            for t, flagged in got:
                # A page sent again (a kill came during its delivery; it says so) belongs to the
                # last owed turn before it: it comes after a restart, whatever the user did since.
                i = max((j for j, (end, k, _n) in enumerate(turns) if end <= t and (k == "owed" or not flagged)),
                        default=None)
                if i is None:
                    problems.append(f"{sid}: a page before any turn end")
                    continue
                per[i] += 1
                per_again[i] += flagged
                end, kind, nxt = turns[i]
                if nxt is not None and t > nxt and not flagged:
                    problems.append(f"{sid} turn {i}: paged {t - nxt:.1f} s after the user's next prompt")
                if t < end + delay - 0.3:
                    problems.append(f"{sid} turn {i}: paged {t - end:.1f} s after its end, inside the delay")
            for i, (_end, kind, _nxt) in enumerate(turns):
                owed += kind == "owed"
                again += per_again[i]
                ok = 1 <= per[i] <= 1 + per_again[i] if kind == "owed" else per[i] == 0
                if not ok:
                    problems.append(f"{sid} turn {i} ({kind}): {per[i]} pages ({per_again[i]} marked as sent again), "
                                    f"want {1 if kind == 'owed' else 0}")
        acted = sum(k == "acted" for turns in writer.turns.values() for _e, k, _n in turns)
        print(f"\nkill -9 rounds: {rounds}; turn ends: owed {owed}, acted {acted}; pages: {len(pages)}, "
              f"{again} of them sent again after a kill during their delivery (and marked so)")
        assert not problems, problems
        assert owed >= 2 and acted >= 2
    finally:
        writer.stop_flag.set()
        exp.stop()
        receiver.close()


def test_the_mute_api_needs_the_status_pages_basic_auth(tmp_path):
    import base64

    import bcrypt
    import yaml

    web = tmp_path / "web.yml"
    web.write_text(yaml.safe_dump({"basic_auth_users": {"bob": bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()}}))
    exp = Exporter(tmp_path, extra_args=["--web.config.file", str(web)])

    def answers() -> bool:
        try:
            return request(exp, "GET", "/-/ready")[0] == 401
        except OSError:
            return False
    exp.ready_check = answers
    auth = {"Authorization": "Basic " + base64.b64encode(b"bob:pw").decode()}
    try:
        exp.start()
        s, path = claude(tmp_path, "41", "webapp")
        write(path, s.prompt() + s.tool_use())
        wait_for(lambda: request(exp, "GET", "/api/v1/sessions", headers=auth)[0] == 200 and s.sid in
                 request(exp, "GET", "/api/v1/sessions", headers=auth)[1].decode(), what="the session")
        url = f"/api/v1/sessions/claude_code/{s.sid}/mute"
        assert request(exp, "POST", url, {"seconds": 60})[0] == 401
        assert request(exp, "POST", url, {"seconds": 60}, {"Authorization": "Basic " + base64.b64encode(
            b"bob:wrong").decode()})[0] == 401
        assert json.loads(request(exp, "GET", "/api/v1/mutes", headers=auth)[1])["sessions"] == {}
        assert request(exp, "POST", url, {"seconds": 60}, auth)[0] == 200
        assert list(json.loads(request(exp, "GET", "/api/v1/mutes", headers=auth)[1])["sessions"]) == \
            [f"claude_code/{s.sid}"]
    finally:
        exp.stop()
