"""The status page at ``/`` and its JSON (``/api/v1/sessions``,
``/api/v1/health``), against the real exporter process: fields and order as
``scan --json``, health numbers equal to ``/metrics``, ``metrics.project_label``,
errors for other methods and paths, the page shipped by a non-editable
install, and the page itself in headless Chromium (rendered states, a change
without reload, tab title, filters, dark mode, phone width, screenshots).

Auth/TLS and the planted secret for these routes: ``test_hardening_access.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from datetime import datetime, timezone

import pytest

from browser import Browser, chromium
from coding_agent_exporter.reducer import STATES
from harness import ROOT, Exporter, Receiver, claude_path, codex_path, wait_for
from test_hardening_support import ClaudeSession, CodexSession, write

#: Screenshots of the browser test, kept for people and CI (gitignored).
ARTIFACTS = ROOT / "test-artifacts"


def get_json(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        assert r.headers["Content-Type"] == "application/json"
        assert r.headers["Cache-Control"] == "no-store"
        return json.loads(r.read())


def ask(s: ClaudeSession, tool: str = "AskUserQuestion") -> bytes:
    """A Claude tool_use of a wait tool (a question, or ExitPlanMode's plan) with no result yet."""
    n = s.n + 1
    return s.line(s._base(type="assistant", message={
        "id": f"msg_{s.sid[:8]}_{n}", "role": "assistant", "model": "claude-sonnet-4-5", "stop_reason": None,
        "content": [{"type": "tool_use", "id": f"toolu_{n}", "name": tool,
                     "input": {"questions": [{"question": "Which database?"}]}}]}))


def aborted(s: CodexSession) -> bytes:
    return s.line("event_msg", type="turn_aborted", reason="interrupted", turn_id=f"{s.sid}-t{s.turn}")


def aged(data: bytes, seconds: float) -> bytes:
    """The same records with their timestamps moved ``seconds`` into the past."""
    when = datetime.fromtimestamp(time.time() - seconds, timezone.utc).isoformat(timespec="milliseconds")
    out = []
    for line in data.splitlines():
        rec = json.loads(line)
        rec["timestamp"] = when.replace("+00:00", "Z")
        out.append(json.dumps(rec).encode())
    return b"\n".join(out) + b"\n"


# -- the JSON endpoints ----------------------------------------------------------------
def test_sessions_and_health_api(tmp_path):
    receiver = Receiver(fail_first=1)  # the first delivery fails: alerts_failed counts it, the retry lands
    exp = Exporter(tmp_path, receiver=receiver, config={"metrics": {"project_label": "hashed"}}).start()
    try:
        t0 = time.time()
        a, b = ClaudeSession("a0000000-0000-4000-8000-00000000000a", "/home/dev/webshop"), \
            ClaudeSession("b0000000-0000-4000-8000-00000000000b", "/home/dev/api")
        c, d = CodexSession("0196c000-0000-7000-8000-00000000000c", "/home/dev/infra"), \
            ClaudeSession("d0000000-0000-4000-8000-00000000000d", "/home/dev/docs")
        result = a.tool_result()
        # in write order; a duplicate record in a, a malformed line in c
        write(claude_path(tmp_path, a.sid), a.prompt() + a.tool_use() + result + result + a.text() + a.turn_duration())
        time.sleep(0.05)
        write(claude_path(tmp_path, b.sid), b.prompt() + b.api_error())
        time.sleep(0.05)
        write(codex_path(tmp_path, c.sid), c.meta() + c.start() + b'{"type": "event_msg", "pay\n' + c.call())
        time.sleep(0.05)
        write(claude_path(tmp_path, d.sid), d.prompt() + ask(d))
        for s, state in ((a, "completed"), (b, "error"), (c, "working"), (d, "waiting")):
            exp.wait_state(s.sid, state)
        wait_for(lambda: len(receiver.messages) == 3, timeout=20, what="completed, error and waiting pages")

        sessions = get_json(exp.port, "/api/v1/sessions")
        assert sessions["states"] == list(STATES) and "waiting" in sessions["states"]
        assert sessions["agents"] == {"claude_code": "Claude Code", "codex": "Codex", "copilot_cli": "Copilot CLI",
                                      "pi": "Pi", "gemini_cli": "Gemini CLI"}
        assert sessions["ready"] is True and sessions["sessions_dropped"] == 0
        assert abs(sessions["now"] - time.time()) < 5
        rows = sessions["sessions"]
        # most recently written first
        assert [r["session_id"] for r in rows] == [d.sid, c.sid, b.sid, a.sid]
        by_id = {r["session_id"]: r for r in rows}
        assert by_id[a.sid]["state"] == "completed" and by_id[a.sid]["evidence"] == "explicit"
        assert by_id[b.sid]["state"] == "error" and by_id[b.sid]["error_kind"] == "rate_limit"
        assert by_id[c.sid]["state"] == "working" and by_id[c.sid]["waiting_for"] is None
        assert by_id[d.sid]["waiting_for"] == {"reason": "question", "tool": "AskUserQuestion"}
        # metrics.project_label applies: hashed, the folder name appears nowhere
        assert by_id[a.sid]["project"] == hashlib.sha256(b"/home/dev/webshop").hexdigest()[:8]
        raw = json.dumps(sessions)
        assert "webshop" not in raw and "/home/dev" not in raw
        assert "webshop" not in exp.scrape_text("/")

        # the fields of scan --json, with the same values where time plays no part
        out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "scan", "--json", "--config.file",
                              str(exp.config_path), str(tmp_path / "claude"), str(tmp_path / "codex")],
                             capture_output=True, text=True, check=True, cwd=ROOT).stdout
        scanned = {r["session_id"]: r for r in map(json.loads, out.splitlines())}
        assert set(scanned) == set(by_id)
        for sid, row in by_id.items():
            assert set(row) == set(scanned[sid]), sid
            for key in ("provider", "project", "state", "evidence", "error_kind", "waiting_for", "counters"):
                assert row[key] == scanned[sid][key], (sid, key)

        # health: the numbers /metrics has
        def same_as_metrics():
            h = get_json(exp.port, "/api/v1/health")
            m = exp.metrics()

            def metric(name, label):
                out = {}
                for (n, lbls), v in m.items():
                    if n == name:
                        k = dict(lbls)[label]
                        out[k] = out.get(k, 0) + v
                return out
            want = {"files_watched": metric("coding_agent_files_watched", "provider"),
                    "parse_errors": metric("coding_agent_transcript_parse_errors_total", "provider"),
                    "duplicates": metric("coding_agent_duplicate_events_total", "provider"),
                    "alerts_sent": metric("coding_agent_alerts_total", "kind"),
                    "alerts_failed": metric("coding_agent_alerts_failed_total", "kind")}
            return h if all(h[k] == v for k, v in want.items()) else None
        health = wait_for(same_as_metrics, what="health equal to /metrics")
        assert health["files_watched"] == {"claude_code": 3, "codex": 1, "copilot_cli": 0, "pi": 0, "gemini_cli": 0}
        assert health["parse_errors"]["codex"] == 1 and health["duplicates"]["claude_code"] == 1
        assert sum(health["alerts_sent"].values()) == 3 and sum(health["alerts_failed"].values()) == 1
        assert health["alerts_on"] is True
        last = health["last_alert"]
        assert last["kind"] in ("completed", "error", "waiting") and t0 <= last["at"] <= time.time()

        # the page, and what is not a route
        with urllib.request.urlopen(f"http://127.0.0.1:{exp.port}/", timeout=5) as r:
            page = r.read().decode()
            csp = r.headers["Content-Security-Policy"]
        assert "<script>" in page and "api/v1/sessions" in page and 'href="/metrics"' in page
        assert "default-src 'none'" in csp and "script-src 'sha256-" in csp
        for method, path, code in (("GET", "/api/v1/nothing", 404), ("POST", "/api/v1/sessions", 405),
                                   ("DELETE", "/", 405)):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{exp.port}{path}", method=method,
                                                              data=b"" if method == "POST" else None), timeout=5)
            assert e.value.code == code, (method, path)
    finally:
        exp.stop()
        receiver.close()


def test_no_alerts_configured_says_so(tmp_path):
    with Exporter(tmp_path) as exp:
        health = get_json(exp.port, "/api/v1/health")
        assert health["alerts_on"] is False and health["last_alert"] is None
        assert get_json(exp.port, "/api/v1/sessions")["sessions"] == []


def test_page_ships_in_the_wheel(tmp_path):
    """A non-editable install gets the page: it is package data of the wheel."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True, timeout=240)
    wheel = next(tmp_path.glob("coding_agent_exporter-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        page = z.read("coding_agent_exporter/statuspage.html").decode()
    assert page == (ROOT / "exporter" / "statuspage.html").read_text()


# -- the page in a real browser -----------------------------------------------------------
ROWS_JS = """[...document.querySelectorAll('#sessions tbody tr')].map(tr => ({
  session: tr.dataset.session, text: tr.innerText, state: tr.querySelector('.state').innerText}))"""


def rows(page) -> dict[str, dict]:
    return {r["session"]: r for r in page.js(ROWS_JS)}


@pytest.mark.skipif(chromium() is None, reason="Debian's chromium is not installed (apt-get install chromium)")
def test_page_in_headless_chromium(tmp_path):
    receiver = Receiver()
    web = ClaudeSession("a1000000-0000-4000-8000-00000000000a", "/home/dev/webshop")
    api = ClaudeSession("b1000000-0000-4000-8000-00000000000b", "/home/dev/api-server")
    docs = ClaudeSession("d1000000-0000-4000-8000-00000000000d", "/home/dev/docs")
    infra = CodexSession("0196c100-0000-7000-8000-00000000000c", "/home/dev/infra")
    mobile = CodexSession("0196c100-0000-7000-8000-00000000000f", "/home/dev/mobile-app")
    old = ClaudeSession("e0000000-0000-4000-8000-00000000000e", "/home/dev/old-prototype")
    # there before the exporter starts, written 3 days, 2 hours and 25 minutes ago
    for path, data, age in ((claude_path(tmp_path, old.sid), old.prompt() + old.text() + old.turn_duration(), 3 * 86400),
                            (codex_path(tmp_path, mobile.sid),
                             mobile.meta() + mobile.start() + mobile.call() + aborted(mobile), 7200),
                            (claude_path(tmp_path, web.sid), web.prompt() + web.tool_use() + web.tool_result()
                             + web.text() + web.turn_duration(), 1500)):
        write(path, aged(data, age))
        os.utime(path, (time.time() - age,) * 2)
    # sessions leave the store after metrics.session_ttl_seconds (a day by default): keep a week here
    exp = Exporter(tmp_path, receiver=receiver, config={"metrics": {"session_ttl_seconds": 7 * 86400}}).start()
    art = tmp_path / "screenshots"
    art.mkdir()
    try:
        # written while it runs
        write(claude_path(tmp_path, api.sid), api.prompt() + api.api_error())
        write(claude_path(tmp_path, docs.sid), docs.prompt() + ask(docs))
        write(codex_path(tmp_path, infra.sid), infra.meta() + infra.start() + infra.call())
        want = {web.sid: ("completed", "explicit"), api.sid: ("error", "rate limit"),
                docs.sid: ("waiting", "question · AskUserQuestion"), infra.sid: ("working", ""),
                mobile.sid: ("interrupted", ""), old.sid: ("completed", "explicit")}
        for sid, (state, _) in want.items():
            exp.wait_state(sid, state)
        wait_for(lambda: len(receiver.messages) == 2, timeout=20, what="pages for api and docs")

        with Browser(chromium(), tmp_path / "chromium.log") as browser:
            page = browser.open(f"http://127.0.0.1:{exp.port}/")
            # the rendered DOM (built by the page's script from the JSON) shows each session's state and reason
            shown = wait_for(lambda: len(rows(page)) == 5 and rows(page), timeout=20, what="five sessions rendered")
            assert old.sid not in shown  # idle for more than a day: hidden by default
            for sid, (state, reason) in want.items():
                if sid != old.sid:
                    assert shown[sid]["state"].startswith(state) and reason in shown[sid]["state"], shown[sid]
            assert "webshop" in shown[web.sid]["text"] and web.sid[-8:] in shown[web.sid]["text"]
            assert wait_for(lambda: page.js("document.title") == "(2) coding agents", what="title (2)")
            summary = page.js("Object.fromEntries([...document.querySelectorAll('#summary button')]"
                              ".map(b => [b.dataset.state, +b.querySelector('b').innerText]))")
            assert list(summary) == list(STATES)
            assert summary["waiting"] == 1 and summary["completed"] == 1 and summary["working"] == 1
            files = page.js("document.querySelector('[data-health=files_watched] dd').innerText")
            assert files == str(int(exp.value("coding_agent_files_watched")))
            assert page.js("document.querySelector('[data-health=alerts_sent] dd').innerText") == "2"
            assert shown[web.sid]["text"].endswith("25 min") and shown[mobile.sid]["text"].endswith("2 h")
            light_bg = page.js("getComputedStyle(document.body).backgroundColor")
            page.screenshot(art / "status-page.png")

            # a session changes state: the open page shows it without a reload
            page.js("window.sameDocument = true")
            write(codex_path(tmp_path, infra.sid), infra.answer() + infra.complete())
            wait_for(lambda: rows(page)[infra.sid]["state"].startswith("completed"), timeout=15,
                     what="infra completed on the page")
            assert page.js("window.sameDocument") is True
            assert wait_for(lambda: page.js("document.title") == "(3) coding agents", what="title (3)")

            # filters: idle sessions on demand, one state, one agent
            page.js("document.getElementById('f-idle').click()")
            wait_for(lambda: old.sid in rows(page), what="the idle session shown")
            page.js("(s => { s.value = 'waiting'; s.dispatchEvent(new Event('change')); })"
                    "(document.getElementById('f-state'))")
            assert set(wait_for(lambda: len(rows(page)) == 1 and rows(page))) == {docs.sid}
            assert "state=waiting" in page.js("location.hash")
            page.js("history.replaceState(null, '', '#agent=codex'); dispatchEvent(new HashChangeEvent('hashchange'))")
            assert set(wait_for(lambda: len(rows(page)) == 2 and rows(page))) == {infra.sid, mobile.sid}
            page.js("history.replaceState(null, '', '#'); dispatchEvent(new HashChangeEvent('hashchange'))")
            wait_for(lambda: len(rows(page)) == 5, what="default filters back")

            # dark mode follows prefers-color-scheme
            page.color_scheme("dark")
            dark_bg = page.js("getComputedStyle(document.body).backgroundColor")
            assert dark_bg != light_bg and _luminance(dark_bg) < 0.2 < 0.8 < _luminance(light_bg)
            page.screenshot(art / "status-page-dark.png")

            # a phone: nothing wider than the screen, every session still there
            page.color_scheme("light")
            page.viewport(390, 844, mobile=True)
            assert page.js("document.documentElement.scrollWidth") <= 390
            assert len(rows(page)) == 5
            page.screenshot(art / "status-page-phone.png")
    finally:
        exp.stop()
        receiver.close()
        if any(art.iterdir()):
            ARTIFACTS.mkdir(exist_ok=True)
            for png in art.iterdir():
                shutil.copy(png, ARTIFACTS / png.name)
    for png in art.iterdir():
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def _luminance(css: str) -> float:
    """0 (black) … 1 (white) of a computed ``rgb(r, g, b)`` colour."""
    r, g, b = (int(v) for v in css[css.index("(") + 1:css.index(")")].split(",")[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


@pytest.mark.skipif(chromium() is None, reason="Debian's chromium is not installed (apt-get install chromium)")
def test_a_hostile_web_page_pages_nothing_and_reads_nothing(tmp_path):
    """Issue 22, in a real browser: a page served from another origin posts
    hook events with ``fetch(..., {mode: "no-cors"})`` (the one kind of
    request a browser sends anywhere without asking) and tries a CORS POST
    with the JSON type; a DNS-rebinding name (``evil.example`` resolved to
    127.0.0.1) asks for the sessions. Nothing pages, nothing changes state,
    nothing is read. A real hook whose tool name is markup shows it as text:
    no script runs, and it is no page title."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    import threading

    receiver = Receiver()
    victim = ClaudeSession("c2200000-0000-4000-8000-000000000022", "/home/dev/bank")
    exp = Exporter(tmp_path, receiver=receiver).start()

    class Evil(BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"<!doctype html><title>cute cats</title><p>cats"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    evil = ThreadingHTTPServer(("127.0.0.1", 0), Evil)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        path = claude_path(tmp_path, victim.sid)
        write(path, victim.prompt() + victim.tool_use())
        exp.wait_state(victim.sid, "working")
        forged = json.dumps({"session_id": victim.sid, "transcript_path": str(path), "cwd": "/home/dev/bank",
                             "hook_event_name": "PermissionRequest",
                             "tool_name": "BANK-LOGIN-EXPIRED (visit evil.example)", "tool_input": {}})
        hooks = f"http://127.0.0.1:{exp.port}/hooks/claude_code"
        with Browser(chromium(), tmp_path / "chromium.log",
                     ["--host-resolver-rules=MAP evil.example 127.0.0.1"]) as browser:
            page = browser.open(f"http://evil.example:{evil.server_address[1]}/")
            wait_for(lambda: page.js("document.title") == "cute cats", what="the hostile page loaded")
            for _ in range(3):
                assert page.js(f"fetch({hooks!r}, {{method: 'POST', mode: 'no-cors', body: {forged!r}}})"
                               ".then(r => r.type)") == "opaque"
                assert page.js(f"fetch({hooks!r}, {{method: 'POST', mode: 'no-cors', body: new Blob([{forged!r}], "
                               "{type: 'application/json'})}).then(r => r.type)") == "opaque"
            cors = page.js(f"fetch({hooks!r}, {{method: 'POST', body: {forged!r}, headers: {{'Content-Type': "
                           "'application/json'}}).then(r => 'read ' + r.status, e => 'refused')")
            assert cors == "refused"
            # DNS rebinding: the attacker's own name, now resolving to the exporter
            rebound = browser.open(f"http://evil.example:{exp.port}/api/v1/sessions")
            text = wait_for(lambda: page.js("1") and rebound.js("document.body && document.body.innerText"),
                            what="the rebound page")
            assert victim.sid not in text and "Host not allowed" in text
            time.sleep(2.0)  # past alerts.settle_seconds
            assert receiver.messages == []
            assert exp.state(victim.sid) == "working"
            assert exp.value("coding_agent_hook_events_total") == 0
            assert exp.value("coding_agent_http_requests_refused_total", reason="origin") >= 6
            assert exp.value("coding_agent_http_requests_refused_total", reason="host") >= 1

            # the real hook (with the secret), its tool name markup: data on the page, no title
            markup = "<img src=x onerror=window.pwned=1>"
            req = urllib.request.Request(hooks, data=forged.replace("BANK-LOGIN-EXPIRED (visit evil.example)",
                                                                    markup).encode(), headers=exp.hook_headers())
            urllib.request.urlopen(req, timeout=5).close()
            exp.wait_state(victim.sid, "waiting")
            wait_for(lambda: len(receiver.messages) == 1, what="the real waiting page")
            status = browser.open(f"http://127.0.0.1:{exp.port}/")
            shown = wait_for(lambda: rows(status).get(victim.sid), what="the session rendered")
            assert markup in shown["state"] or markup in shown["text"], shown
            assert status.js("typeof window.pwned") == "undefined"
            assert status.js("document.querySelectorAll('img').length") == 0
    finally:
        evil.shutdown()
        exp.stop()
        receiver.close()
    assert receiver.messages[0]["title"] == "Claude Code · bank: needs your approval"
    assert json.dumps(markup)[1:-1] in receiver.messages[0]["message"]
