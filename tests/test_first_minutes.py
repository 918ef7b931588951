"""What a new user meets first: scan's hints, check-config listing every
error with the effective state_dir and disabled providers, test-alert
saying why a URL failed. All through the real command line."""

from __future__ import annotations

import shutil
import subprocess
import sys

from harness import CASES, ROOT, Receiver


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "coding_agent_exporter", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=env)


def test_scan_says_how_many_lines_it_could_not_read(tmp_path):
    """A trial: garbage and a torn line were counted on /metrics only; `scan` showed the session as if
    whole. Now a hint under the table counts them (no line content)."""
    from harness import TRANSCRIPTS

    proj = tmp_path / "-home-dev-proj"
    proj.mkdir()
    dest = proj / "11111111-2222-4333-8444-555555555555.jsonl"
    dest.write_bytes((TRANSCRIPTS / "claude_code" / "v2.1.38_short_interrupted.jsonl").read_bytes()
                     + b"garbage secret-token-123\n{\"type\": \"user\",\n")
    out = _cli("scan", str(tmp_path), "--provider", "claude_code")
    assert out.returncode == 0, out
    assert "hint: lines not read in 1 session(s): 2 not valid records" in out.stderr, out.stderr
    assert "secret-token-123" not in out.stdout + out.stderr
    clean = _cli("scan", str(TRANSCRIPTS / "claude_code" / "v2.1.38_short_interrupted.jsonl"), "--provider",
                 "claude_code")
    assert "lines not read" not in clean.stderr


def test_scan_hint_for_only_subagent_files(tmp_path):
    sub = tmp_path / "-home-dev-proj" / "c0de" / "subagents"
    sub.mkdir(parents=True)
    shutil.copy(CASES / "14_subagent_file_end_turn_subagent.jsonl", sub / "agent-a1.jsonl")
    out = _cli("scan", str(tmp_path))
    assert out.returncode == 0 and out.stdout == ""
    assert "hint: no session in 1 file(s): they hold only subagent (sidechain) work" in out.stderr
    # With the parent next to it, the session shows and no hint.
    shutil.copy(CASES / "14_subagent_file_end_turn_parent_part1.jsonl", tmp_path / "-home-dev-proj" / "c0de.jsonl")
    out = _cli("scan", str(tmp_path))
    assert out.stdout.startswith("PROVIDER") and "hint:" not in out.stderr


def test_scan_hint_for_a_provider_that_matched_nothing():
    out = _cli("scan", "--provider", "codex", str(CASES / "15_rate_limit_error.jsonl"))
    assert out.returncode == 0 and out.stdout == ""  # no rows of "unknown" that were never that agent's
    assert "hint: no record of 1 file(s) read as codex (--provider)" in out.stderr
    out = _cli("scan", "--provider", "claude_code", str(CASES / "15_rate_limit_error.jsonl"))
    assert "hint:" not in out.stderr and "error" in out.stdout


def test_scan_hint_for_files_of_no_agent(tmp_path):
    (tmp_path / "notes.jsonl").write_text('{"hello": "world"}\n')
    out = _cli("scan", str(tmp_path))
    assert out.returncode == 0 and out.stdout == ""
    assert "hint: no record of a known agent in 1 file(s)" in out.stderr


def test_check_config_reports_every_error(tmp_path):
    cfg = tmp_path / "config.yml"
    cfg.write_text("sources:\n  poll_interval_seconds: soon\n  bogus: 1\nreducer:\n  stall_after_seconds: -5\n"
                   "metrics:\n  project_label: weird\nalerts:\n  tags: {paged: x}\n")
    out = _cli("check-config", "--config.file", str(cfg))
    assert out.returncode == 2
    assert "5 configuration errors" in out.stderr, out.stderr
    for key in ("sources.poll_interval_seconds", "sources.bogus", "reducer.stall_after_seconds",
                "metrics.project_label", "alerts.tags.paged"):
        assert f"{cfg}: {key}: " in out.stderr, key


def test_check_config_yaml_error_names_the_file(tmp_path):
    cfg = tmp_path / "config.yml"
    cfg.write_text("sources:\n  a: [1\n")
    out = _cli("check-config", "--config.file", str(cfg))
    assert out.returncode == 2 and f'in "{cfg}", line 2' in out.stderr and "<unicode string>" not in out.stderr


def test_check_config_prints_state_dir_and_disabled_providers(tmp_path):
    cfg = tmp_path / "config.yml"
    cfg.write_text(f"sources:\n  codex:\n    enabled: false\nstate_dir: {tmp_path / 'st'}\n")
    out = _cli("check-config", "--config.file", str(cfg))
    assert out.returncode == 0, out.stderr
    assert f"state_dir: {tmp_path / 'st'}" in out.stdout
    assert "codex: disabled (sources.codex.enabled: false)" in out.stdout
    # The default state_dir is the platform's (platformdirs honours XDG_STATE_HOME).
    import os

    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "xdg")}
    out = _cli("check-config", env=env)
    assert f"state_dir: {tmp_path / 'xdg' / 'coding-agent-exporter'}" in out.stdout


def test_test_alert_prints_apprise_reason(tmp_path):
    ok = Receiver()
    bad = Receiver(fail_first=100)
    try:
        cfg = tmp_path / "config.yml"
        cfg.write_text(f"alerts:\n  urls: ['{ok.url}', '{bad.url}']\n  retry: {{attempts: 1}}\n")
        out = _cli("test-alert", "--config.file", str(cfg))
    finally:
        ok.close()
        bad.close()
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert lines[0].startswith("ok ") and lines[1].startswith("FAILED ")
    assert "error=500" in lines[2] and "Internal server error" in lines[2], out.stdout
    assert len(ok.messages) == 1


def test_check_config_lists_every_url_error_and_an_unusable_state_dir(tmp_path):
    """Every Apprise URL that cannot be used is listed in one run, with a
    state_dir `run` could not use (a file in its place; a hook secret others
    may read)."""
    import os

    state = tmp_path / "state-file"
    state.write_text("not a folder")
    cfg = tmp_path / "config.yml"
    # (a trial: a port out of range and an ntfy URL with no topic parse, and can never deliver)
    cfg.write_text(f"state_dir: {state}\nalerts:\n  urls: ['nope://a', 'json://127.0.0.1:9/x', 'bogus://b', "
                   "'json://127.0.0.1:99999/', 'ntfys://', 'ntfys://ntfy.sh/my-topic']\n")
    out = _cli("check-config", "--config.file", str(cfg))
    assert out.returncode == 2, out
    assert "5 error(s)" in out.stdout
    assert "alerts.urls[0]: not an Apprise URL" in out.stdout and "alerts.urls[2]: not an Apprise URL" in out.stdout
    assert "alerts.urls[3]: port 99999 is out of range" in out.stdout
    assert "alerts.urls[4]: an ntfy URL names no topic" in out.stdout and "alerts.urls[5]" not in out.stdout
    assert f"state_dir: {state}: not a folder" in out.stdout
    folder = tmp_path / "st"
    folder.mkdir()
    (folder / "hook-secret").write_text("0" * 64 + "\n")
    os.chmod(folder / "hook-secret", 0o644)
    cfg.write_text(f"state_dir: {folder}\n")
    out = _cli("check-config", "--config.file", str(cfg))
    assert out.returncode == 2 and "hook-secret" in out.stdout and "chmod 600" in out.stdout, out


def test_scan_with_no_path_scans_the_configured_roots(tmp_path):
    """`scan` alone reads the folders `run` would read."""
    import json

    from harness import claude_path
    from test_hardening_support import ClaudeSession, write

    s = ClaudeSession("a5000000-0000-4000-8000-000000000022")
    write(claude_path(tmp_path, s.sid), s.prompt() + s.text() + s.turn_duration())
    cfg = tmp_path / "config.yml"
    cfg.write_text(json.dumps({"sources": {"claude_code": {"paths": [str(tmp_path / "claude" / "projects")]},
                                           "codex": {"paths": [str(tmp_path / "nothing-here")]}}}))
    out = _cli("scan", "--json", "--config.file", str(cfg))
    assert out.returncode == 0, out.stderr
    assert [json.loads(line)["session_id"] for line in out.stdout.splitlines()] == [s.sid]
    assert "scanning the configured folders" in out.stderr
    cfg.write_text(json.dumps({"sources": {"claude_code": {"paths": [str(tmp_path / "none")]},
                                           "codex": {"enabled": False}}}))
    out = _cli("scan", "--config.file", str(cfg))
    assert out.returncode == 0 and "none of the configured transcript folders exists" in out.stderr


def test_address_in_use_says_what_to_do(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        cfg = tmp_path / "config.yml"
        cfg.write_text(f"state_dir: {tmp_path / 'st'}\nsources: {{claude_code: {{paths: [{tmp_path}]}}, "
                       f"codex: {{enabled: false}}}}\n")
        with socket.socket() as nxt:  # the port after it is taken too: the hint must not suggest it
            try:
                nxt.bind(("127.0.0.1", port + 1))
                nxt.listen()
            except OSError:
                pass  # taken by someone else already: all the same
            out = _cli("run", "--config.file", str(cfg), "--web.listen-address", f"127.0.0.1:{port}")
    assert out.returncode == 1  # in use now: a restart may find it free
    assert "another exporter" in out.stderr and "--web.listen-address" in out.stderr, out.stderr
    import re

    suggested = re.search(r"e\.g\. 127\.0\.0\.1:(\d+), free now", out.stderr)
    assert suggested, out.stderr
    assert int(suggested.group(1)) not in (port, port + 1, 9878)
    with socket.socket() as s:  # free indeed
        s.bind(("127.0.0.1", int(suggested.group(1))))


def test_an_address_this_machine_cannot_serve_on_is_a_setting_to_change(tmp_path):
    """An address the machine does not have is a mistake in the settings: exit 2, which the systemd
    unit does not restart (RestartPreventExitStatus=2), not 1 and a restart every 5 s."""
    cfg = tmp_path / "config.yml"
    cfg.write_text(f"state_dir: {tmp_path / 'st'}\nsources: {{claude_code: {{paths: [{tmp_path}]}}}}\n")
    out = _cli("run", "--config.file", str(cfg), "--web.listen-address", "192.0.2.1:9877")  # TEST-NET-1
    assert out.returncode == 2, out.stderr
    assert "cannot listen on 192.0.2.1:9877" in out.stderr
    unit = (ROOT / "config" / "coding-agent-exporter.service").read_text()
    assert "RestartPreventExitStatus=2" in unit.splitlines()


def test_check_config_lists_key_url_and_state_dir_errors_in_one_run(tmp_path):
    """A bad key, two bad Apprise URLs and a state_dir that is a file: all
    four in one run of check-config."""
    state = tmp_path / "state-file"
    state.write_text("x")
    cfg = tmp_path / "config.yml"
    cfg.write_text(f"state_dir: {state}\nsources:\n  bogus: 1\nalerts:\n  urls: ['nope://a', 'bogus://b']\n")
    out = _cli("check-config", "--config.file", str(cfg))
    assert out.returncode == 2 and "4 configuration errors" in out.stderr, out.stderr
    for needle in ("sources.bogus", "alerts.urls[0]", "alerts.urls[1]", f"state_dir: {state}: not a folder"):
        assert needle in out.stderr, needle


def test_port_0_serves_on_the_port_it_got_and_says_where(tmp_path):
    """`--web.listen-address 127.0.0.1:0`: the system picks a free port; the start line names it with
    every route (status page, metrics, API, hooks), `state_dir/listen-url` holds the URL while it runs."""
    import re
    import signal
    import urllib.request

    from harness import wait_for

    cfg = tmp_path / "config.yml"
    cfg.write_text(f"state_dir: {tmp_path / 'st'}\nsources: {{claude_code: {{paths: [{tmp_path}]}}}}\n")
    log = tmp_path / "run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "coding_agent_exporter", "run", "--config.file", str(cfg),
                                 "--web.listen-address", "127.0.0.1:0"], cwd=tmp_path, stdout=out,
                                stderr=subprocess.STDOUT)
        try:
            url = wait_for(lambda: (tmp_path / "st" / "listen-url").exists()
                           and (tmp_path / "st" / "listen-url").read_text().strip(), timeout=30, what="listen-url")
            port = int(url.rsplit(":", 1)[1])
            assert url == f"http://127.0.0.1:{port}" and port != 0
            with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
                assert b"coding_agent_exporter_build_info" in r.read()
            line = next(x for x in log.read_text().splitlines() if "serving" in x)
            assert re.search(rf"serving http://127\.0\.0\.1:{port}: status page /, metrics /metrics, "
                             r"API /api/v1/sessions and /api/v1/health, hooks /hooks/<agent>", line), line
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
    assert not (tmp_path / "st" / "listen-url").exists()  # gone with the exporter: never a stale port
