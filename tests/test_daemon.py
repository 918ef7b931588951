"""The daemon as a user meets it: started from the command line, scraped over
HTTP. Includes the eight seed tests of shared/cases/README.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from harness import (CASES, ROOT, TRANSCRIPTS, Exporter, Receiver, claude_path, codex_path,
                     session_id_of, wait_for)

SID = "c0de0000-0000-4000-8000-000000000001"


def rec(kind: str, n: int, ts: str, **extra) -> bytes:
    """A Claude Code 2.1.x record for hand-made sequences."""
    base = {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": "/home/dev/proj",
            "sessionId": SID, "version": "2.1.120", "uuid": f"c0de{n:04d}-0000-4000-8000-000000000000",
            "timestamp": ts}
    if kind == "prompt":
        base.update(type="user", message={"role": "user", "content": extra.pop("text", "do the thing")})
    elif kind == "text":
        base.update(type="assistant", message={"id": extra.pop("mid", f"msg_{n}"), "role": "assistant",
                                               "model": "claude-sonnet-4-5", "stop_reason": None,
                                               "content": [{"type": "text", "text": "done"}]})
    elif kind == "tool_use":
        base.update(type="assistant", message={"id": f"msg_{n}", "role": "assistant", "model": "claude-sonnet-4-5",
                                               "stop_reason": None,
                                               "content": [{"type": "tool_use", "id": f"t{n}", "name": "Bash",
                                                            "input": {}}]})
    elif kind == "turn_duration":
        base.update(type="system", subtype="turn_duration", durationMs=extra.pop("ms", 12000), isMeta=False)
    elif kind == "api_error":
        base.update(type="assistant", isApiErrorMessage=True, error="overloaded_error", apiErrorStatus=529,
                    message={"id": f"e{n}", "role": "assistant", "model": "<synthetic>", "stop_reason": "stop_sequence",
                             "content": [{"type": "text", "text": "API Error: overloaded"}]})
    base.update(extra)
    return json.dumps(base).encode() + b"\n"



def _append(path, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.write(data)


# -- seed tests ----------------------------------------------------------------
def test_seed1_malformed_lines_do_not_abort(exporter):
    p = claude_path(exporter.root, SID)
    _append(p, rec("prompt", 1, "2026-05-01T10:00:00Z") + b"\n" + b"{not json\n" + b"\xff\xfe\n"
            + rec("text", 2, "2026-05-01T10:00:01Z") + rec("turn_duration", 3, "2026-05-01T10:00:02Z"))
    exporter.wait_state(SID, "completed")
    assert exporter.value("coding_agent_transcript_parse_errors_total", reason="invalid_json") == 1
    assert exporter.value("coding_agent_transcript_parse_errors_total", reason="invalid_utf8") == 1
    assert exporter.value("coding_agent_transcript_skipped_lines_total", reason="blank") == 1


def test_seed2_partial_final_line_read_after_append(exporter):
    p = claude_path(exporter.root, SID)
    whole = rec("prompt", 1, "2026-05-01T10:00:00Z") + rec("turn_duration", 2, "2026-05-01T10:00:09Z")
    cut = len(whole) - 40
    _append(p, whole[:cut])
    exporter.wait_state(SID, "working")
    time.sleep(1.0)
    assert exporter.state(SID) == "working"
    assert exporter.value("coding_agent_transcript_parse_errors_total") == 0  # the tail was not parsed early
    _append(p, whole[cut:])
    exporter.wait_state(SID, "completed")
    assert exporter.value("coding_agent_transcript_parse_errors_total") == 0


def test_seed3_oversized_line_policy(tmp_path):
    """Lines over sources.max_line_bytes are skipped (counted) and reading
    stays line-aligned."""
    exp = Exporter(tmp_path, config={"sources": {"max_line_bytes": 64 * 1024}}).start()
    try:
        p = claude_path(tmp_path, SID)
        big = rec("text", 2, "2026-05-01T10:00:01Z", note="x" * 300_000)
        _append(p, rec("prompt", 1, "2026-05-01T10:00:00Z") + big[:100_000])
        time.sleep(0.5)
        _append(p, big[100_000:] + rec("turn_duration", 3, "2026-05-01T10:00:02Z"))
        exp.wait_state(SID, "completed")
        assert exp.value("coding_agent_transcript_skipped_lines_total", reason="oversized") == 1
        assert exp.value("coding_agent_transcript_parse_errors_total") == 0
    finally:
        exp.stop()


def test_seed4_duplicate_event_no_second_alarm(exporter):
    p = claude_path(exporter.root, SID)
    done = rec("text", 2, "2026-05-01T10:00:01Z") + rec("turn_duration", 3, "2026-05-01T10:00:02Z")
    _append(p, rec("prompt", 1, "2026-05-01T10:00:00Z") + done)
    wait_for(lambda: len(exporter.receiver.messages) == 1, what="1 alert")
    _append(p, done)  # the same records again
    time.sleep(1.0)
    assert len(exporter.receiver.messages) == 1
    assert exporter.value("coding_agent_duplicate_events_total") == 2
    assert exporter.state(SID) == "completed"


def test_seed5_later_prompt_supersedes_completion(exporter):
    p = claude_path(exporter.root, SID)
    _append(p, rec("prompt", 1, "2026-05-01T10:00:00Z") + rec("turn_duration", 2, "2026-05-01T10:00:05Z"))
    exporter.wait_state(SID, "completed")
    _append(p, rec("prompt", 3, "2026-05-01T10:01:00Z", text="and now the tests"))
    exporter.wait_state(SID, "working")
    # an older completion arriving late does not win over the newer prompt
    _append(p, rec("turn_duration", 4, "2026-05-01T10:00:30Z"))
    time.sleep(0.5)
    assert exporter.state(SID) == "working"


def test_seed6_api_error_envelope_is_not_completed(exporter):
    p = claude_path(exporter.root, SID)
    _append(p, rec("prompt", 1, "2026-05-01T10:00:00Z") + rec("api_error", 2, "2026-05-01T10:00:03Z"))
    exporter.wait_state(SID, "error")
    wait_for(lambda: exporter.receiver.messages, what="error alert")
    time.sleep(0.3)
    titles = [m["title"] for m in exporter.receiver.messages]
    assert titles == ["Claude Code · proj: stopped on overloaded"]
    assert exporter.value("coding_agent_completions_total") == 0
    assert exporter.value("coding_agent_turn_errors_total", kind="overloaded") == 1


def test_seed7_sidechain_finish_does_not_page(exporter):
    p = claude_path(exporter.root, SID)
    _append(p, rec("prompt", 1, "2026-05-01T10:00:00Z") + rec("tool_use", 2, "2026-05-01T10:00:01Z"))
    sub = p.parent / SID / "subagents" / "agent-a1.jsonl"
    side = rec("text", 3, "2026-05-01T10:00:05Z", isSidechain=True, agentId="a1",
               message={"id": "m3", "role": "assistant", "stop_reason": "end_turn", "model": "x",
                        "content": [{"type": "text", "text": "sub done"}]})
    _append(sub, side + rec("turn_duration", 4, "2026-05-01T10:00:06Z", isSidechain=True))
    _append(p, rec("text", 5, "2026-05-01T10:00:07Z", isSidechain=True))  # inline sidechain text
    time.sleep(1.5)
    assert exporter.state(SID) == "working"
    assert exporter.receiver.messages == []
    assert exporter.value("coding_agent_session_state", session_id="agent-a1") == 0  # not a session of its own


def test_seed8_missed_event_recovered_by_polling(tmp_path):
    """With file events switched off, polling finds appends (and counts
    nothing as a recovery, since there was no watcher to miss them); with
    events on, a change the watcher cannot see is recovered and counted."""
    exp = Exporter(tmp_path, config={"sources": {"watch_events": False, "poll_interval_seconds": 0.3}}).start()
    try:
        p = claude_path(tmp_path, SID)
        _append(p, rec("prompt", 1, "2026-05-01T10:00:00Z"))
        exp.wait_state(SID, "working", timeout=5)
        _append(p, rec("turn_duration", 2, "2026-05-01T10:00:09Z"))
        exp.wait_state(SID, "completed", timeout=5)
    finally:
        exp.stop()


def test_seed8_watcher_miss_counted(tmp_path):
    """With events on, an append the watcher cannot see (written through a
    hard link outside the watched tree: inotify reports only the link used)
    is recovered by polling and counted."""
    exp = Exporter(tmp_path, config={"sources": {"poll_interval_seconds": 0.3}}).start()
    try:
        real = claude_path(tmp_path, SID)
        real.parent.mkdir(parents=True)
        real.write_bytes(rec("prompt", 1, "2026-05-01T10:00:00Z"))
        exp.wait_state(SID, "working", timeout=5)
        outside = tmp_path / "hardlink.jsonl"
        os.link(real, outside)
        with open(outside, "ab") as f:
            f.write(rec("turn_duration", 2, "2026-05-01T10:00:09Z"))
        exp.wait_state(SID, "completed", timeout=5)
        assert exp.value("coding_agent_poll_recoveries_total", provider="claude_code") >= 1
    finally:
        exp.stop()


# -- the daemon ------------------------------------------------------------------
def test_appends_and_new_sessions_show_on_metrics(exporter):
    p = claude_path(exporter.root, SID)
    _append(p, rec("prompt", 1, "2026-05-01T10:00:00Z"))
    exporter.wait_state(SID, "working")
    assert exporter.value("coding_agent_sessions", provider="claude_code", state="working") == 1
    assert exporter.value("coding_agent_files_watched", provider="claude_code") == 1
    # a Codex session created after start
    src = CASES / "05_codex_invalid_utf8_line.jsonl"
    sid = session_id_of(src)
    codex_path(exporter.root, sid).parent.mkdir(parents=True, exist_ok=True)
    codex_path(exporter.root, sid).write_bytes(src.read_bytes())
    exporter.wait_state(sid, "completed")
    text = exporter.scrape_text()
    assert f'session_id="{sid}"' in text and 'project="proj"' in text
    assert exporter.value("coding_agent_completions_total", provider="codex", evidence="explicit") == 1
    assert exporter.value("coding_agent_transcript_lines_total", provider="codex") > 0
    assert exporter.value("coding_agent_exporter_build_info") == 1
    # OpenMetrics negotiation
    req = urllib.request.Request(f"http://127.0.0.1:{exporter.port}/metrics",
                                 headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    with urllib.request.urlopen(req) as r:
        assert r.headers["Content-Type"].startswith("application/openmetrics-text")
        assert r.read().decode().rstrip().endswith("# EOF")
    # a deleted session file leaves the metrics
    os.unlink(p)
    wait_for(lambda: exporter.value("coding_agent_files_watched", provider="claude_code") == 0, timeout=5,
             what="deleted file dropped")


def test_head_metrics_answers_like_get_without_a_body(exporter):
    """`HEAD /metrics` (uptime checkers, `curl -I`) is answered as GET is, without the body: not 405."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", exporter.port, timeout=5)
    try:
        conn.request("GET", "/metrics")
        get = conn.getresponse()
        get.read()
        conn.request("HEAD", "/metrics")
        head = conn.getresponse()
        assert head.status == 200 and head.read() == b""
        assert head.getheader("Content-Type") == get.getheader("Content-Type")
    finally:
        conn.close()


def test_inferred_completion_after_quiet(exporter):
    """Claude 2.1.x writes no marker for a short turn: quiet after assistant
    text is a completion (evidence inferred), paged once."""
    p = claude_path(exporter.root, SID)
    _append(p, rec("prompt", 1, "2026-05-01T10:00:00Z") + rec("text", 2, "2026-05-01T10:00:04Z"))
    exporter.wait_state(SID, "working")
    exporter.wait_state(SID, "completed", timeout=8)  # inferred_settle_seconds is 3 in the harness
    assert exporter.value("coding_agent_completions_total", evidence="inferred") == 1
    wait_for(lambda: len(exporter.receiver.messages) == 1, what="1 alert")
    assert "Detected: inferred" in exporter.receiver.messages[0]["message"]


def test_long_turn_waits_for_marker(exporter):
    """A Claude ≥2.1 turn already past 30 s will still write turn_duration:
    the text is not inferred complete after the short settle."""
    p = claude_path(exporter.root, SID)
    _append(p, rec("prompt", 1, "2026-05-01T10:00:00Z") + rec("text", 2, "2026-05-01T10:00:45Z"))
    time.sleep(4.5)  # past inferred_settle (3 s), before marker_wait (6 s)
    assert exporter.state(SID) == "working"
    _append(p, rec("turn_duration", 3, "2026-05-01T10:00:46Z", ms=46000))
    exporter.wait_state(SID, "completed")
    assert exporter.value("coding_agent_completions_total", evidence="explicit") == 1


def test_landing_health_ready(exporter):
    base = f"http://127.0.0.1:{exporter.port}"
    with urllib.request.urlopen(base + "/") as r:
        assert b"/metrics" in r.read()
    for path in ("/-/healthy", "/-/ready"):
        with urllib.request.urlopen(base + path) as r:
            assert r.status == 200
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(base + "/nope")
    assert e.value.code == 404


def test_readme_run_command_with_no_agent_folders(tmp_path):
    """`python3 -m coding_agent_exporter run` with default roots on a machine with no agent
    folders: starts, says what it waits for, serves /metrics on loopback."""
    env = {k: v for k, v in os.environ.items() if k not in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "COPILOT_HOME",
                                                            "PI_CODING_AGENT_DIR", "PI_CODING_AGENT_SESSION_DIR")}
    env.update(HOME=str(tmp_path), XDG_STATE_HOME=str(tmp_path / "state"))
    log = tmp_path / "log"
    listen_url = tmp_path / "state" / "coding-agent-exporter" / "listen-url"  # the port it got for port 0
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "coding_agent_exporter", "run", "--web.listen-address", "127.0.0.1:0"],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            port = int(wait_for(lambda: listen_url.is_file() and listen_url.read_text().strip(), timeout=20,
                                what="state_dir/listen-url").rpartition(":")[2])
            def up():
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
                        return b"coding_agent_sessions" in r.read()
                except OSError:
                    return False
            wait_for(up, timeout=20, what="/metrics")
            # (the start-up lines come from the reader thread, a moment after /metrics answers)
            wait_for(lambda: f"waiting for codex folder {tmp_path}/.codex/sessions" in log.read_text(),
                     timeout=10, what="the start-up lines")
            text = log.read_text()
            assert f"waiting for claude_code folder {tmp_path}/.claude/projects" in text
            assert f"waiting for codex folder {tmp_path}/.codex/sessions" in text
            assert f"waiting for copilot_cli folder {tmp_path}/.copilot/session-state" in text
            assert f"waiting for pi folder {tmp_path}/.pi/agent/sessions" in text
            assert "alerts off" in text
            # the folder appears later: read
            proj = tmp_path / ".claude" / "projects" / "-p"
            proj.mkdir(parents=True)
            (proj / f"{SID}.jsonl").write_bytes(rec("prompt", 1, "2026-05-01T10:00:00Z"))

            def seen():
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
                    return f'session_id="{SID}"'.encode() in r.read()
            wait_for(seen, timeout=10, what="session from the new folder")
        finally:
            proc.terminate()
            assert proc.wait(timeout=15) == 0


@pytest.mark.parametrize("content,key", [
    ("reducer:\n  stall_after_seconds: soon\n", "reducer.stall_after_seconds"),
    ("sources:\n  claud_code: {}\n", "sources.claud_code"),
    ("alerts: [1]\n", "alerts"),
    ("sources: {max_line_bytes: 12}\n", "sources.max_line_bytes"),
    ("{{{", "not valid YAML"),
    ("metrics: {max_sessions: .inf}\n", "metrics.max_sessions"),
    ("reducer: {stall_after_seconds: .nan}\n", "reducer.stall_after_seconds"),
    # a service manager starts the exporter in /: a relative folder would be looked for there
    ("sources: {codex: {paths: [rel/codex]}}\n", "sources.codex.paths[0]: 'rel/codex' is a relative path"),
    ("state_dir: state\n", "state_dir: 'state' is a relative path"),
    ("alerts: {config_file: apprise.yml}\n", "alerts.config_file: 'apprise.yml' is a relative path"),
    # PyYAML reads 1e9 as text (YAML 1.1 floats need a dot): say how to write it
    ("alerts: {presence_delay_seconds: 1e9}\n", "got '1e9' (YAML reads 1e9 as text: write it with a dot, as 1.0e9)"),
])
def test_bad_config_fails_with_file_and_key(tmp_path, content, key):
    cfg = tmp_path / "bad.yml"
    cfg.write_text(content)
    out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "run", "--config.file", str(cfg)], cwd=ROOT,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert str(cfg) in out.stderr and key in out.stderr


def test_check_config_and_example(tmp_path):
    out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "check-config", "--config.file",
                          str(ROOT / "config" / "config.example.yml")], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and "configuration OK" in out.stdout
    from coding_agent_exporter.config import Config, load

    assert load(ROOT / "config" / "config.example.yml") == Config()


def test_check_config_tries_a_state_dir_it_would_make(tmp_path):
    """Root may write anywhere as far as access() says; /proc takes no folder."""
    cfg = tmp_path / "c.yml"
    cfg.write_text("state_dir: /proc/cae-state\n")
    out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "check-config", "--config.file", str(cfg)],
                         cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "state_dir: /proc/cae-state: cannot be made" in out.stdout, out.stdout
    run = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "run", "--config.file", str(cfg),
                          "--web.listen-address", "127.0.0.1:0"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert run.returncode == 2 and "cannot use state_dir /proc/cae-state" in run.stderr  # 2: no restart loop


def test_telemetry_path_cannot_take_another_route(tmp_path):
    for path in ("/api/v1/sessions", "/", "/-/ready", "/hooks/claude_code"):
        out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "run", "--web.telemetry-path", path,
                              "--web.listen-address", "127.0.0.1:0"], cwd=ROOT, capture_output=True, text=True,
                             timeout=30, env={**os.environ, "HOME": str(tmp_path)})
        assert out.returncode == 2 and "choose another path" in out.stderr, (path, out.stderr)


def test_check_config_says_each_unusable_alert_url_once(tmp_path):
    """Apprise logs a URL it cannot parse every time it is asked: check-config asks once."""
    cfg = tmp_path / "c.yml"
    cfg.write_text(f"alerts: {{urls: ['foo://bar']}}\nstate_dir: {tmp_path / 'state'}\n")
    out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "check-config", "--config.file", str(cfg)],
                         cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert out.stdout.count("alerts.urls[0]: not an Apprise URL") == 1
    assert (out.stdout + out.stderr).count("Unparseable URL") <= 1


def test_listen_address_errors(tmp_path):
    out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "run", "--web.listen-address", "nonsense"], cwd=ROOT,
                         capture_output=True, text=True, timeout=30, env={**os.environ, "HOME": str(tmp_path)})
    assert out.returncode == 2 and "HOST:PORT" in out.stderr
    exp = Exporter(tmp_path / "a").start()
    try:
        taken = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "run", "--web.listen-address",
                                f"127.0.0.1:{exp.port}"], cwd=ROOT, capture_output=True, text=True, timeout=30,
                               env={**os.environ, "HOME": str(tmp_path)})
        assert taken.returncode == 1 and "cannot listen" in taken.stderr
    finally:
        exp.stop()


def test_real_transcripts_backfill_on_metrics(tmp_path):
    """The real transcripts, present before start: the right states on /metrics."""
    claude = tmp_path / "claude" / "projects" / "-proj"
    claude.mkdir(parents=True)
    for name in ("v1.0.98_complete_session.jsonl", "v2.1.114_rate_limit_line.jsonl",
                 "v2.1.38_tool_heavy.jsonl"):
        src = TRANSCRIPTS / "claude_code" / name
        sid = json.loads(src.read_text().splitlines()[-1])["sessionId"]
        (claude / f"{sid}.jsonl").write_bytes(src.read_bytes())
    codex = codex_path(tmp_path, "019e9625-802f-7e91-840a-cfe88d14117a")
    codex.parent.mkdir(parents=True)
    codex.write_bytes((TRANSCRIPTS / "codex" / "v0.135_exec_complete.jsonl").read_bytes())
    with Exporter(tmp_path) as exp:
        wait_for(lambda: exp.value("coding_agent_sessions", state="completed") == 2, timeout=10,
                 what="2 completed")
        assert exp.value("coding_agent_sessions", state="error") == 1
        assert exp.value("coding_agent_sessions", state="interrupted") == 1
        assert exp.state("019e9625-802f-7e91-840a-cfe88d14117a") == "completed"


def test_bad_alert_settings_stop_the_start(tmp_path):
    for alerts in ({"urls": ["notaurl://zzz", "json://127.0.0.1:9/x"]}, {"config_file": str(tmp_path / "none.yml")}):
        cfg = tmp_path / "c.yml"
        cfg.write_text(json.dumps({"alerts": alerts, "state_dir": str(tmp_path / "s")}))
        out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "run", "--config.file", str(cfg)], cwd=ROOT,
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 2 and "alerts." in out.stderr, out.stderr
        check = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "check-config", "--config.file", str(cfg)],
                               cwd=ROOT, capture_output=True, text=True, timeout=30)
        assert check.returncode == 2 and "configuration OK" not in check.stdout


def test_one_exporter_per_state_dir(tmp_path):
    first = Exporter(tmp_path).start()
    try:
        second = Exporter(tmp_path)
        second.config = first.config
        second.config_path = tmp_path / "config2.yml"
        second.start(wait_ready=False)
        assert second.proc.wait(timeout=20) == 1
        assert "is in use by another coding-agent-exporter" in second.log()
    finally:
        first.stop()


def test_cli_flag_and_path_mistakes(tmp_path):
    run = lambda *a, **kw: subprocess.run([sys.executable, "-m", "coding_agent_exporter", *a], cwd=ROOT, capture_output=True,
                                          text=True, timeout=30, **kw)
    out = run("run", "--web.listen-addres", "127.0.0.1:1")  # a typo is not taken for a prefix
    assert out.returncode == 2 and "unrecognized arguments" in out.stderr
    out = run("run", "--web.listen-address", ":99999")
    assert out.returncode == 2 and "out of range" in out.stderr
    afile = tmp_path / "afile"
    afile.write_text("x")
    cfg = tmp_path / "c.yml"
    cfg.write_text(json.dumps({"sources": {"claude_code": {"paths": [str(afile)]}}}))
    out = run("check-config", "--config.file", str(cfg))
    assert f"{afile} (is not a folder)" in out.stdout
    env = {**os.environ, "CLAUDE_CONFIG_DIR": str(tmp_path / "cc" / "projects")}
    out = run("check-config", env=env)
    assert "did you point CLAUDE_CONFIG_DIR at the projects folder itself" in out.stdout
