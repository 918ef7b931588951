"""Hardening of the routes added since issue 22 (issue 31): slow bodies
cannot hold the threads that answer scrapes and hooks; a hook's 2xx means
the delivery is on disk; the Alertmanager receiver takes a credential and
bounded notifications.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

from harness import claude_path
from test_hardening_support import ClaudeSession, Daemon, Receiver, alerts_for, wait_for, write


class Tricklers:
    """``n`` connections that each send a whole POST head to ``path`` (with
    ``headers``) promising a 1,000-byte body, then one byte of it a second."""

    def __init__(self, port: int, n: int, path: str, headers: dict):
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{head}"
                     "Content-Length: 1000\r\n\r\n").encode()
        self.port, self.n = port, n
        self.stop = threading.Event()
        self.replies: list[bytes] = []
        self.threads = [threading.Thread(target=self._one, daemon=True) for _ in range(n)]

    def _one(self):
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
            s.sendall(self.head)
            s.setblocking(False)
            got = b""
            while not self.stop.is_set():
                try:  # read first: a byte sent after the exporter closed would reset the reply away
                    chunk = s.recv(4096)
                    got += chunk
                    if not chunk or got.endswith(b"\n"):
                        break
                except BlockingIOError:
                    pass
                except OSError:
                    break
                try:
                    s.send(b" ")
                except OSError:
                    break
                self.stop.wait(1.0)
            self.replies.append(got)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=5)


def _timed(req: urllib.request.Request | str) -> tuple[int, float]:
    t = time.monotonic()
    with urllib.request.urlopen(req, timeout=20) as r:
        r.read()
        return r.status, time.monotonic() - t


def test_slow_bodies_hold_no_thread(tmp_path):
    """16 connections trickling a hook body a byte a second (twice the
    exporter's 8 application threads): /metrics answers within 1 s and a
    hook within 2 s all along; each slow body gets 408 once its deadline
    (three quarters of web.request_timeout_seconds: 6 s) has passed, and
    is counted."""
    receiver = Receiver()
    exp = Daemon(tmp_path, receiver=receiver, config={"web": {"request_timeout_seconds": 8.0}}).start()
    try:
        s = ClaudeSession("e3100000-0000-4000-8000-000000000031")
        path = claude_path(tmp_path, s.sid)
        write(path, s.prompt() + s.tool_use())
        exp.wait_state(s.sid, "working")
        body = json.dumps({"session_id": s.sid, "transcript_path": str(path), "cwd": "/home/dev/proj",
                           "hook_event_name": "PermissionRequest", "tool_name": "Bash"}).encode()
        hook = urllib.request.Request(f"http://127.0.0.1:{exp.port}/hooks/claude_code", data=body,
                                      headers=exp.hook_headers())
        with Tricklers(exp.port, 16, "/hooks/claude_code", exp.hook_headers()) as slow:
            time.sleep(1.5)
            scrapes, hooks = [], []
            for _ in range(4):
                scrapes.append(_timed(f"http://127.0.0.1:{exp.port}/metrics"))
                hooks.append(_timed(hook))
                time.sleep(0.5)
            exp.wait_state(s.sid, "waiting")
            for t in slow.threads:
                t.join(timeout=15)
        print(f"slow bodies: /metrics max {max(t for _, t in scrapes):.3f} s, hook max {max(t for _, t in hooks):.3f} s")
        assert all(code == 200 for code, _ in scrapes + hooks)
        assert max(t for _, t in scrapes) < 1.0, scrapes
        assert max(t for _, t in hooks) < 2.0, hooks
        assert len(slow.replies) == 16 and all(r.startswith(b"HTTP/1.1 408") for r in slow.replies), sorted({r[:13] for r in slow.replies})
        assert exp.value("coding_agent_http_requests_refused_total", reason="body_timeout") == 16
    finally:
        exp.stop()
        receiver.close()
    assert "Traceback" not in exp.log(), exp.log()[-3000:]


def test_a_hook_answered_2xx_outlives_a_kill(tmp_path):
    """Ten sessions working; a permission prompt told only by a hook for
    each, all at once; kill -9 the moment the last 200 is in. After the
    restart every one of the ten is waiting: a 2xx means the delivery is
    on disk (state_dir/hook-journal.jsonl), and it pages."""
    from concurrent.futures import ThreadPoolExecutor

    receiver = Receiver()
    exp = Daemon(tmp_path, receiver=receiver, config={"alerts": {"settle_seconds": 0.0}}).start()
    sessions = [ClaudeSession(f"e3100000-0000-4000-8000-0000000002{n:02d}") for n in range(10)]
    try:
        for s in sessions:
            write(claude_path(tmp_path, s.sid), s.prompt() + s.tool_use())
        for s in sessions:
            exp.wait_state(s.sid, "working")
        headers = exp.hook_headers()

        def hook(s):
            body = json.dumps({"session_id": s.sid, "transcript_path": str(claude_path(tmp_path, s.sid)),
                               "cwd": "/home/dev/proj", "hook_event_name": "PermissionRequest",
                               "tool_name": "Bash", "tool_input": {"command": "ls"}}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{exp.port}/hooks/claude_code", data=body,
                                         headers=headers)
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status

        with ThreadPoolExecutor(10) as pool:
            codes = list(pool.map(hook, sessions))
        exp.kill9()
        assert codes == [200] * 10
        exp.start()
        waiting = [s.sid for s in sessions if exp.state(s.sid) == "waiting"]
        assert len(waiting) == 10, f"{len(waiting)} of 10 waiting after the kill"
    finally:
        exp.stop()
        receiver.close()


def _am_post(exp, body, token: str | None) -> int:
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    req = urllib.request.Request(f"http://127.0.0.1:{exp.port}/hooks/alertmanager", data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_alertmanager_route_takes_a_credential_and_bounded_notifications(tmp_path):
    """A real Alertmanager with the shipped recipe's bearer token
    (``http_config.authorization.credentials_file`` = the exporter's
    state_dir/alertmanager-secret) pages; a local process without it gets
    401 and pages nothing; a notification of more than
    ``alertmanager.max_alerts`` alerts is 413 and counted; 30 firings of one
    alert name page ``alerts.max_pages_per_session`` times (the rest counted
    as rate-limited), with one summary log line, not one per alert."""
    import shutil
    import subprocess

    import yaml
    from harness import Proc, listening_port
    from test_fleet import am_alert, am_payload

    alertmanager = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    receiver = Receiver()
    exp = Daemon(tmp_path, receiver=receiver, config={
        "alertmanager": {"max_alerts": 20},
        "alerts": {"max_pages_per_session": 5, "page_rate_window_seconds": 3600}}).start()
    am = None
    try:
        secret_file = tmp_path / "state" / "alertmanager-secret"
        token = secret_file.read_text().strip()
        forged = am_payload(am_alert(fingerprint="f0f0", summary="x"))
        forged["alerts"][0]["annotations"]["summary"] = "Claude Code · shop: needs your approval"
        assert _am_post(exp, forged, None) == 401
        assert _am_post(exp, forged, "0" * 64) == 401
        assert exp.value("coding_agent_alertmanager_notifications_total", status="unauthorized") == 2

        big = am_payload(*[am_alert(fingerprint=f"b{i:03d}", alertname=f"Big{i}") for i in range(21)])
        assert _am_post(exp, big, token) == 413
        assert exp.value("coding_agent_alertmanager_notifications_total", status="too_many_alerts") == 1

        flood = am_payload(*[am_alert(fingerprint=f"c{i:03d}", alertname="Flapping") for i in range(20)])
        flood2 = am_payload(*[am_alert(fingerprint=f"d{i:03d}", alertname="Flapping") for i in range(10)])
        assert _am_post(exp, flood, token) == 200 and _am_post(exp, flood2, token) == 200
        assert _am_post(exp, flood, token) == 200  # Alertmanager's re-send: nothing new
        wait_for(lambda: len(receiver.messages) >= 5, what="five pages of the flapping alert")

        # a real Alertmanager, the recipe of config/alertmanager.yml with the bearer token
        cfg = {"route": {"receiver": "exporter", "group_by": ["alertname"], "group_wait": "1s",
                         "group_interval": "1s", "repeat_interval": "1h"},
               "receivers": [{"name": "exporter", "webhook_configs": [{
                   "url": f"http://127.0.0.1:{exp.port}/hooks/alertmanager", "max_alerts": 20,
                   "http_config": {"authorization": {"type": "Bearer", "credentials_file": str(secret_file)}}}]}]}
        am_path = tmp_path / "am.yml"
        am_path.write_text(yaml.safe_dump(cfg))
        r = subprocess.run(["amtool", "check-config", str(am_path)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        am = Proc([alertmanager, f"--config.file={am_path}", f"--storage.path={tmp_path / 'am'}",
                   "--web.listen-address=127.0.0.1:0", "--cluster.listen-address=127.0.0.1:0", "--log.level=info"],
                  tmp_path / "am.log", tmp_path)
        port = listening_port(am)  # bound by Alertmanager itself: no port another xdist worker may take

        def post_alert():
            data = json.dumps([{"labels": {"alertname": "RealOne", "machine": "alpha", "severity": "critical"},
                                "annotations": {"summary": "sent through a real Alertmanager"}}]).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{port}/api/v2/alerts", data=data,
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=2) as resp:
                    return resp.status == 200
            except OSError:
                return False

        wait_for(post_alert, timeout=20, what="Alertmanager up")
        wait_for(lambda: any("real Alertmanager" in m.get("title", "") for m in receiver.messages), timeout=20,
                 what="the page through the real Alertmanager")
        titles = [m.get("title", "") for m in receiver.messages]
        assert not any("needs your approval" in t for t in titles), titles
        assert sum("waited for you" in t for t in titles) == 5, titles
        assert exp.value("coding_agent_alerts_rate_limited_total", kind="alertmanager") == 25
        log = exp.log()
        assert log.count("Alertmanager notifications since the last summary") <= 2, log[-3000:]
        assert log.count("already in the ledger") == 0
    finally:
        if am is not None:
            am.stop()
        exp.stop()
        receiver.close()


def test_a_route_takes_only_its_own_agents_transcripts(tmp_path):
    """A hook to /hooks/codex that names a Claude Code transcript and its
    session id (Codex's hook envelope, PermissionRequest) changes nothing
    and is counted as unknown_session; the same event on /hooks/claude_code
    makes the session wait."""
    receiver = Receiver()
    exp = Daemon(tmp_path, receiver=receiver).start()
    try:
        s = ClaudeSession("e3100000-0000-4000-8000-000000000305")
        path = claude_path(tmp_path, s.sid)
        write(path, s.prompt() + s.tool_use())
        exp.wait_state(s.sid, "working")
        body = json.dumps({"session_id": s.sid, "transcript_path": str(path), "cwd": "/home/dev/proj",
                           "hook_event_name": "PermissionRequest", "turn_id": "t1", "model": "gpt-5",
                           "tool_name": "Bash", "tool_input": {"command": "rm -rf /"}}).encode()
        for route in ("codex", "claude_code"):
            req = urllib.request.Request(f"http://127.0.0.1:{exp.port}/hooks/{route}", data=body,
                                         headers=exp.hook_headers())
            with urllib.request.urlopen(req, timeout=10) as r:
                assert r.status == 200
            if route == "codex":
                time.sleep(1.0)
                assert exp.state(s.sid) == "working"
                assert exp.value("coding_agent_hook_errors_total", reason="unknown_session") == 1
        exp.wait_state(s.sid, "waiting")
    finally:
        exp.stop()
        receiver.close()


def test_a_wrong_password_flood_does_not_slow_real_scrapes(tmp_path):
    """32 clients sending wrong basic-auth passwords as fast as they can
    (bcrypt cost 11) while Prometheus scrapes with the right one: every
    scrape answers within 0.5 s (the right header is remembered as a keyed
    digest; at most two bcrypt checks run at once, outside the threads that
    answer scrapes), and every wrong one is still refused with 401."""
    import base64
    from concurrent.futures import ThreadPoolExecutor

    import bcrypt
    import yaml

    web = tmp_path / "web.yml"
    web.write_text(yaml.safe_dump({"basic_auth_users": {
        "prom": bcrypt.hashpw(b"right-password", bcrypt.gensalt(11)).decode()}}))
    exp = Daemon(tmp_path, extra_args=["--web.config.file", str(web)])
    good = "Basic " + base64.b64encode(b"prom:right-password").decode()

    def ready():
        try:
            req = urllib.request.Request(f"http://127.0.0.1:{exp.port}/-/ready", headers={"Authorization": good})
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status == 200
        except OSError:
            return False
    exp.ready_check = ready
    exp.start()
    stop = threading.Event()
    refused = []
    # One bcrypt check at cost 11 on this machine now (a busy one is slower): a scrape that queued
    # behind the flood's checks would take many of them; one that does not takes less than three.
    hashed = bcrypt.hashpw(b"right-password", bcrypt.gensalt(11))
    t = time.monotonic()
    bcrypt.checkpw(b"wrong", hashed)
    budget = max(1.0, 3 * (time.monotonic() - t))  # queued behind 32 clients' checks: 16 of them, or more

    def flood(i):
        n = 0
        while not stop.is_set():
            bad = "Basic " + base64.b64encode(f"prom:wrong{i}-{n}".encode()).decode()
            req = urllib.request.Request(f"http://127.0.0.1:{exp.port}/metrics", headers={"Authorization": bad})
            try:
                urllib.request.urlopen(req, timeout=30).close()
                refused.append(200)
            except urllib.error.HTTPError as e:
                refused.append(e.code)
            except OSError:
                pass
            n += 1

    try:
        with ThreadPoolExecutor(32) as pool:
            for i in range(32):
                pool.submit(flood, i)
            time.sleep(1.0)
            took = []
            for _ in range(10):
                req = urllib.request.Request(f"http://127.0.0.1:{exp.port}/metrics", headers={"Authorization": good})
                took.append(_timed(req)[1])
                time.sleep(0.3)
            stop.set()
        print(f"wrong-password flood: scrape max {max(took):.3f} s (budget {budget:.2f} s), {len(refused)} wrong tries")
        assert max(took) < budget, (budget, took)
        assert refused and set(refused) == {401}, set(refused)
    finally:
        stop.set()
        exp.stop()


def _hostile_peer(kind: str):
    """A loopback server standing in for a peer gone bad: ``trickle`` (a
    head, then a byte a second), ``huge`` (3 MiB of tiny sessions),
    ``many`` (600 sessions in a small answer), ``redirect`` (to ftp://)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    # Made once: a busy machine takes seconds to encode 3 MiB, and the peer is to answer at once.
    rows = {"huge": [{}] * (3 << 19), "many": [{"id": str(i)} for i in range(600)]}.get(kind, [])
    answer = json.dumps({"machine": kind, "ready": True, "sessions": rows}).encode()

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            body = answer
            if kind == "redirect":
                self.send_response(302)
                self.send_header("Location", "ftp://192.0.2.1/x")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if kind == "trickle":
                for b in body:
                    self.wfile.write(bytes([b]))
                    self.wfile.flush()
                    time.sleep(1.0)
            else:
                self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_fleet_peers_are_bounded_polled_apart_and_shown_stale(tmp_path):
    """Beside a good peer (a real exporter): one trickling its answer, one
    sending 3 MiB, one 600 sessions (metrics.max_sessions 500), one
    redirecting to ftp://. The good peer stays fresh (polled on its own
    schedule) while the others show as down or dropped, with no rows of
    theirs; once the good peer stops, it shows as stale with its age."""
    from harness import Exporter
    from test_fleet import fleet_of

    bad = {k: _hostile_peer(k) for k in ("trickle", "huge", "many", "redirect")}
    good = Exporter(tmp_path / "good", {"machine": "good"}).start()
    peers = [f"http://127.0.0.1:{good.port}"] + [f"http://127.0.0.1:{s.server_address[1]}" for s in bad.values()]
    exp = Exporter(tmp_path / "a", {"fleet": {"peers": peers, "poll_interval_seconds": 1.0,
                                              "timeout_seconds": 1.5}}).start()
    try:
        def machines():
            return {m["url"]: m for m in fleet_of(exp)["machines"] if m["url"]}

        wait_for(lambda: all(m["up"] is not None for m in machines().values()), timeout=20, what="every peer polled")
        for _ in range(8):  # 4 s: the trickling peer never lets a round end
            m = machines()[peers[0]]
            assert m["up"] and not m["stale"] and m["age_seconds"] <= 2.0, m
            time.sleep(0.5)
        now = machines()
        assert now[peers[1]]["up"] is False and "no answer" in now[peers[1]]["error"], now[peers[1]]
        assert now[peers[2]]["error"].startswith("dropped: answer larger than 2 MiB"), now[peers[2]]
        assert now[peers[3]]["error"].startswith("dropped: more than 500 sessions"), now[peers[3]]
        assert now[peers[4]]["error"].startswith("dropped: redirect refused"), now[peers[4]]
        assert all(now[p]["sessions"] == [] for p in peers[1:])
        assert len(json.dumps(fleet_of(exp))) < 100_000
        good.stop()
        m = wait_for(lambda: (m := machines()[peers[0]])["stale"] and m, timeout=10, what="the stopped peer stale")
        assert m["age_seconds"] >= 2.0 and m["error"], m  # "connection refused", beside stale and its age
    finally:
        exp.stop()
        good.stop()
        for s in bad.values():
            s.shutdown()


def test_the_page_rate_limit_outlives_a_restart(tmp_path):
    """``alerts.max_pages_per_session`` 2 per hour: a session pages twice,
    the exporter restarts (kill -9 and a clean stop alike), and its third
    turn end is refused by the limit, counted; the ledger shows no page
    left "sending"."""
    receiver = Receiver()
    config = {"alerts": {"max_pages_per_session": 2, "page_rate_window_seconds": 3600, "settle_seconds": 0.2}}
    exp = Daemon(tmp_path, receiver=receiver, config=config).start()
    s = ClaudeSession("e3100000-0000-4000-8000-000000000306")
    path = claude_path(tmp_path, s.sid)
    try:
        for n in range(2):
            write(path, s.prompt(f"turn {n}") + s.text() + s.turn_duration())
            wait_for(lambda: len(alerts_for(receiver, s.sid)) == n + 1, what=f"page {n + 1}")
        time.sleep(0.5)
        exp.kill9()
        exp = Daemon(tmp_path, receiver=receiver, config=config).start()
        write(path, s.prompt("turn 2") + s.text() + s.turn_duration())
        wait_for(lambda: exp.value("coding_agent_alerts_rate_limited_total", kind="completed") == 1,
                 what="the third page refused by the limit")
        assert len(alerts_for(receiver, s.sid)) == 2
        ledger = json.loads((tmp_path / "state" / "alerts-ledger.json").read_text())["alerts"]
        assert not [k for k, v in ledger.items() if v["status"] == "sending"], ledger
    finally:
        exp.stop()
        receiver.close()
