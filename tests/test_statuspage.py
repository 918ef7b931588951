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


def billed(line: bytes, request: str, **usage) -> bytes:
    """A Claude assistant record with the ``message.usage`` and ``requestId``
    of its API response (Claude Code 2.1.x fields)."""
    rec = json.loads(line)
    rec["requestId"] = request
    rec["message"]["usage"] = {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0,
                               "cache_creation_input_tokens": 0, **usage}
    return json.dumps(rec).encode() + b"\n"


def codex_usage(s: CodexSession, model: str, input_tokens: int, cached: int, output: int, reasoning: int = 0) -> bytes:
    """A Codex ``turn_context`` naming the model and one ``token_count`` of a
    response (Codex 0.1xx: input includes the cached tokens, output the reasoning)."""
    last = {"input_tokens": input_tokens, "cached_input_tokens": cached, "output_tokens": output,
            "reasoning_output_tokens": reasoning, "total_tokens": input_tokens + output}
    return (s.line("turn_context", cwd=s.cwd, model=model, approval_policy="never")
            + s.line("event_msg", type="token_count", info={"total_token_usage": last, "last_token_usage": last},
                     rate_limits=None))


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
        write(claude_path(tmp_path, a.sid), a.prompt() + billed(a.tool_use(), "req_a1", input_tokens=40, output_tokens=900,
                                                                 cache_read_input_tokens=120_000,
                                                                 cache_creation_input_tokens=8_000)
              + result + result + billed(a.text(), "req_a2", input_tokens=2, output_tokens=300) + a.turn_duration())
        time.sleep(0.05)
        write(claude_path(tmp_path, b.sid), b.prompt() + b.api_error())
        time.sleep(0.05)
        write(codex_path(tmp_path, c.sid), c.meta() + c.start() + b'{"type": "event_msg", "pay\n' + c.call()
              + codex_usage(c, "local-llama-70b", 5_000, 3_000, 250, 100))
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
        # tokens and cost per session, and their total over the sessions of the view
        assert by_id[a.sid]["usage"]["claude-sonnet-4-5"] | {"cost_usd": None} == {
            "input": 42, "output": 1200, "cache_read": 120_000, "cache_write": 8_000, "reasoning": 0, "cost_usd": None}
        a_cost = by_id[a.sid]["cost_usd"]
        assert a_cost == pytest.approx(42 * 3e-6 + 1200 * 15e-6 + 120_000 * 0.3e-6 + 8_000 * 3.75e-6)
        assert by_id[c.sid]["usage"] == {"local-llama-70b": {"input": 2_000, "output": 250, "cache_read": 3_000,
                                                             "cache_write": 0, "reasoning": 100, "cost_usd": None}}
        assert by_id[c.sid]["cost_usd"] is None and by_id[b.sid]["usage"] == {} and by_id[b.sid]["cost_usd"] is None
        assert sessions["usage_total"] == {
            "input": 2_042, "output": 1_450, "cache_read": 123_000, "cache_write": 8_000, "reasoning": 100,
            "tokens": 2_042 + 1_450 + 123_000 + 8_000, "cost_usd": a_cost,
            "unpriced_tokens": 2_000 + 250 + 3_000, "unpriced_models": ["local-llama-70b"]}
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
        sessions = get_json(exp.port, "/api/v1/sessions")
        assert sessions["sessions"] == []
        assert sessions["usage_total"] == {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0, "reasoning": 0,
                                           "tokens": 0, "cost_usd": 0.0, "unpriced_tokens": 0, "unpriced_models": []}


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
  session: tr.dataset.session, text: tr.innerText, state: tr.querySelector('.state').innerText,
  since: tr.querySelector('[data-label=Since]').innerText,
  tokens: tr.querySelector('[data-label=Tokens]').innerText, cost: tr.querySelector('[data-label=Cost]').innerText,
  tokens_title: tr.querySelector('[data-label=Tokens]').title, cost_title: tr.querySelector('[data-label=Cost]').title}))"""


def rows(page) -> dict[str, dict]:
    return {r["session"]: r for r in page.js(ROWS_JS)}


def total(page) -> dict:
    """The total row of the sessions shown: its label, tokens and cost as the page shows them."""
    return page.js("(([l, t, c]) => ({label: l.firstChild.textContent, tokens: t.innerText, cost: c.innerText,"
                   " note: l.querySelector('.reason')?.innerText ?? null}))([...document.querySelectorAll('#total td')])")


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
    # with the usage of their API responses: web 1.22 M tokens in six responses (priced), mobile on gpt-5.5 (priced), old
    # 40 k; infra's model is one no price list knows, api has none (an API error)
    for path, data, age in ((claude_path(tmp_path, old.sid), old.prompt() + billed(old.text(), "req_o", input_tokens=9,
                                                                                    output_tokens=2_000,
                                                                                    cache_read_input_tokens=38_000)
                             + old.turn_duration(), 3 * 86400),
                            (codex_path(tmp_path, mobile.sid), mobile.meta() + mobile.start() + mobile.call()
                             + codex_usage(mobile, "gpt-5.5", 21_000, 14_336, 640, 200) + aborted(mobile), 7200),
                            (claude_path(tmp_path, web.sid), web.prompt() + b"".join(
                                billed(web.tool_use(), f"req_w{i}", input_tokens=205, output_tokens=8_000,
                                       cache_read_input_tokens=185_000, cache_creation_input_tokens=10_667)
                                + web.tool_result() for i in range(6)) + web.text() + web.turn_duration(), 1500)):
        write(path, aged(data, age))
        os.utime(path, (time.time() - age,) * 2)
    # sessions leave the store after metrics.session_ttl_seconds (a day by default): keep a week here
    exp = Exporter(tmp_path, receiver=receiver, config={"metrics": {"session_ttl_seconds": 7 * 86400}}).start()
    art = tmp_path / "screenshots"
    art.mkdir()
    try:
        # written while it runs
        write(claude_path(tmp_path, api.sid), api.prompt() + api.api_error())
        write(claude_path(tmp_path, docs.sid), docs.prompt() + billed(ask(docs), "req_d1", input_tokens=3, output_tokens=90))
        write(codex_path(tmp_path, infra.sid), infra.meta() + infra.start() + infra.call()
              + codex_usage(infra, "local-llama-70b", 300_000, 250_000, 4_000, 1_000))
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
            # the head of a Claude Code id, as `claude --resume` lists it; the tail of a Codex UUIDv7
            assert "webshop" in shown[web.sid]["text"] and f"{web.sid[:8]}…" in shown[web.sid]["text"]
            assert f"…{infra.sid[-8:]}" in shown[infra.sid]["text"]
            assert wait_for(lambda: page.js("document.title") == "(2) coding agents", what="title (2)")
            summary = page.js("Object.fromEntries([...document.querySelectorAll('#summary button')]"
                              ".map(b => [b.dataset.state, +b.querySelector('b').innerText]))")
            assert list(summary) == list(STATES)
            assert summary["waiting"] == 1 and summary["completed"] == 1 and summary["working"] == 1
            files = page.js("document.querySelector('[data-health=files_watched] dd').innerText")
            assert files == str(int(exp.value("coding_agent_files_watched")))
            assert page.js("document.querySelector('[data-health=alerts_sent] dd').innerText") == "2"
            assert shown[web.sid]["since"] == "25 min" and shown[mobile.sid]["since"] == "2 h"
            # tokens and cost per session at a glance: compact, "<$0.01" below a cent, "—" where no price is
            # known (never $0), "–" without usage; the breakdown in the tooltips
            api_rows = {r["session_id"]: r for r in get_json(exp.port, "/api/v1/sessions")["sessions"]}
            web_cost = api_rows[web.sid]["cost_usd"]
            assert web_cost == pytest.approx(6 * (205 * 3e-6 + 8_000 * 15e-6 + 185_000 * 0.3e-6 + 10_667 * 3.75e-6))
            assert (shown[web.sid]["tokens"], shown[web.sid]["cost"]) == ("1.2 M tok", f"${web_cost:.2f}")
            assert (shown[docs.sid]["tokens"], shown[docs.sid]["cost"]) == ("93 tok", "<$0.01")
            assert (shown[infra.sid]["tokens"], shown[infra.sid]["cost"]) == ("304 k tok", "—")
            assert (shown[api.sid]["tokens"], shown[api.sid]["cost"]) == ("–", "–")
            assert shown[mobile.sid]["tokens"] == "22 k tok"
            assert shown[mobile.sid]["cost"] == f"${api_rows[mobile.sid]['cost_usd']:.2f}" != "$0.00"
            assert shown[web.sid]["tokens_title"] == ("input 1,230 · output 48,000 · cache read 1,110,000 · "
                                                      "cache write 64,002 · reasoning 0")
            assert shown[infra.sid]["cost_title"].startswith("local-llama-70b: no price known")
            # the total of the sessions shown: the idle one left out, the unpriced tokens marked "+"
            five = sum(api_rows[sid]["cost_usd"] or 0 for sid in shown)
            assert total(page) == {"label": "Total of 5 sessions", "tokens": "1.5 M tok", "cost": f"${five:.2f}+",
                                   "note": "cost without 304 k tok of no known price"}
            assert "304 k tok of no known price" in page.js("document.querySelector('#total td:last-child').title")
            assert page.js("[...document.querySelectorAll('#sessions th')].map(t => t.innerText)")[-2:] == [
                "Tokens", "Cost"]
            # the usage columns right-aligned under their headers, the total under them
            edges = page.js("[...document.querySelectorAll('#sessions tr')].map(tr => [...tr.children].slice(-2)"
                            ".map(td => Math.round(td.getBoundingClientRect().right)))")
            assert len({tuple(e) for e in edges}) == 1, edges
            aligned = page.js("[...document.querySelectorAll('#sessions td.num, #sessions th.num')]"
                              ".every(td => getComputedStyle(td).textAlign === 'right')")
            assert aligned is True
            # the Pages column's button mutes the session through the mute API (JSON, same origin)
            page.js(f"[...document.querySelector('tr[data-session=\"{web.sid}\"]').querySelectorAll('button')]"
                    ".find(b => b.textContent === 'mute 1 h').click()")
            wait_for(lambda: "muted until" in rows(page)[web.sid]["text"], timeout=10, what="the mute shown")
            with urllib.request.urlopen(f"http://127.0.0.1:{exp.port}/api/v1/mutes", timeout=5) as r:
                assert list(json.load(r)["sessions"]) == [f"claude_code/{web.sid}"]
            page.js(f"[...document.querySelector('tr[data-session=\"{api.sid}\"]').querySelectorAll('button')]"
                    ".find(b => b.textContent === 'project 1 h').click()")
            wait_for(lambda: "project muted until" in rows(page)[api.sid]["text"], timeout=10,
                     what="the project mute shown")
            with urllib.request.urlopen(f"http://127.0.0.1:{exp.port}/api/v1/mutes", timeout=5) as r:
                assert list(json.load(r)["projects"]) == ["api-server"]
            # a page's link (alerts.link_base_url) opens the page on that one session
            page.js(f"history.replaceState(null, '', '#session=claude_code/{web.sid}'); "
                    "dispatchEvent(new HashChangeEvent('hashchange'))")
            assert set(wait_for(lambda: len(rows(page)) == 1 and rows(page), what="the linked session")) == {web.sid}
            page.js("history.replaceState(null, '', '#'); dispatchEvent(new HashChangeEvent('hashchange'))")
            wait_for(lambda: len(rows(page)) == 5, what="all sessions back")
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
            # every session shown: the total is the API's usage_total for the view
            whole = get_json(exp.port, "/api/v1/sessions")["usage_total"]
            assert whole["unpriced_models"] == ["local-llama-70b"] and whole["tokens"] == 1_588_974
            assert wait_for(lambda: total(page)["label"] == "Total of 6 sessions" and total(page)) == {
                "label": "Total of 6 sessions", "tokens": "1.6 M tok", "cost": f"${whole['cost_usd']:.2f}+",
                "note": "cost without 304 k tok of no known price"}
            page.js("(s => { s.value = 'waiting'; s.dispatchEvent(new Event('change')); })"
                    "(document.getElementById('f-state'))")
            assert set(wait_for(lambda: len(rows(page)) == 1 and rows(page))) == {docs.sid}
            assert total(page) == {"label": "Total of 1 session", "tokens": "93 tok", "cost": "<$0.01", "note": None}
            assert "state=waiting" in page.js("location.hash")
            page.js("history.replaceState(null, '', '#agent=codex&state=completed&idle=show');"
                    "dispatchEvent(new HashChangeEvent('hashchange'))")
            assert set(wait_for(lambda: len(rows(page)) == 1 and rows(page))) == {infra.sid}
            # nothing priced in the view: no cost, never $0 (the tokens still shown)
            assert total(page) == {"label": "Total of 1 session", "tokens": "304 k tok", "cost": "—", "note": None}
            page.js("history.replaceState(null, '', '#agent=codex'); dispatchEvent(new HashChangeEvent('hashchange'))")
            assert set(wait_for(lambda: len(rows(page)) == 2 and rows(page))) == {infra.sid, mobile.sid}
            assert total(page)["tokens"] == "326 k tok" and total(page)["cost"].endswith("+")
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
            assert page.js("document.querySelector('#total').offsetHeight") > 0  # the total, a card of its own
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


@pytest.mark.skipif(chromium() is None, reason="Debian's chromium is not installed (apt-get install chromium)")
def test_fleet_page_totals_the_sessions_of_every_machine(tmp_path):
    """With ``fleet.peers`` the page's total is over every machine's sessions
    shown (the Machine column in front), under the Tokens and Cost columns."""
    a, b = ClaudeSession("a3000000-0000-4000-8000-00000000000a", "/home/dev/shop"), \
        ClaudeSession("b3000000-0000-4000-8000-00000000000b", "/home/dev/billing")
    write(claude_path(tmp_path / "b", b.sid), b.prompt() + billed(b.tool_use(), "req_b", input_tokens=10,
                                                                    output_tokens=2_000, cache_read_input_tokens=90_000))
    write(claude_path(tmp_path / "a", a.sid), a.prompt() + billed(a.tool_use(), "req_a", input_tokens=20,
                                                                    output_tokens=6_000, cache_read_input_tokens=150_000))
    with Exporter(tmp_path / "b", {"machine": "bee"}) as peer:
        with Exporter(tmp_path / "a", {"machine": "ay", "fleet": {"peers": [f"http://127.0.0.1:{peer.port}"],
                                                                  "poll_interval_seconds": 0.3}}) as local, \
                Browser(chromium(), tmp_path / "chromium.log") as browser:
            costs = [get_json(e.port, "/api/v1/sessions")["usage_total"]["cost_usd"] for e in (local, peer)]
            page = browser.open(f"http://127.0.0.1:{local.port}/")
            shown = wait_for(lambda: len(rows(page)) == 2 and rows(page), timeout=20, what="both machines' sessions")
            assert (shown[a.sid]["tokens"], shown[b.sid]["tokens"]) == ("156 k tok", "92 k tok")
            assert total(page) == {"label": "Total of 2 sessions", "tokens": "248 k tok",
                                   "cost": f"${sum(costs):.2f}", "note": None}
            edges = page.js("[...document.querySelectorAll('#sessions tr')].map(tr => [...tr.children].slice(-2)"
                            ".map(td => Math.round(td.getBoundingClientRect().right)))")
            assert len({tuple(e) for e in edges}) == 1, edges
            assert page.js("document.querySelector('#total td').colSpan") == 7  # Machine … Since, Pages
            page.screenshot(tmp_path / "fleet.png")
            ARTIFACTS.mkdir(exist_ok=True)
            shutil.copy(tmp_path / "fleet.png", ARTIFACTS / "status-page-fleet.png")
