"""Several machines (issue 25): who is who, the Alertmanager receiver, the
fleet view. Real exporter processes over HTTP; the full Prometheus +
Alertmanager run is tests/test_fleet_stack.py."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request

import pytest

from coding_agent_exporter.config import ConfigError, from_mapping
from harness import Exporter, Receiver, wait_for


@pytest.fixture
def receiver():
    rec = Receiver()
    yield rec
    rec.close()


def _get_json(exporter: Exporter, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}{path}", timeout=5) as r:
        return json.loads(r.read())


def test_machine_name_on_info_metric_and_api(tmp_path):
    with Exporter(tmp_path / "a", {"machine": "devbox-7"}) as ex:
        m = ex.metrics()
        info = [dict(lbls) for (n, lbls), v in m.items() if n == "coding_agent_exporter_info" and v == 1]
        from coding_agent_exporter import __version__
        assert info == [{"machine": "devbox-7", "version": __version__}]
        assert next(iter(_get_json(ex, "/api/v1/sessions"))) == "machine"
        assert _get_json(ex, "/api/v1/sessions")["machine"] == "devbox-7"
        assert _get_json(ex, "/api/v1/health")["machine"] == "devbox-7"
        assert _get_json(ex, "/api/v1/sessions")["fleet"] is False
        # No machine label stamped on other series: Prometheus's instance says where.
        assert not [n for (n, lbls), _ in m.items() if n != "coding_agent_exporter_info" and
                    "machine" in dict(lbls)]


def test_machine_defaults_to_the_host_name(tmp_path):
    with Exporter(tmp_path / "a") as ex:
        assert _get_json(ex, "/api/v1/health")["machine"] == socket.gethostname()
        assert ex.value("coding_agent_exporter_info", machine=socket.gethostname()) == 1


@pytest.mark.parametrize("data, key", [
    ({"machine": ""}, "machine"),
    ({"machine": "a\nb"}, "machine"),
    ({"fleet": {"peers": ["ftp://x"]}}, "fleet.peers[0]"),
    ({"fleet": {"peers": ["http://u:secret@x:9877"]}}, "fleet.peers[0]"),
    ({"fleet": {"poll_interval_seconds": 0}}, "fleet.poll_interval_seconds"),
    ({"fleet": {"max_concurrency": 0}}, "fleet.max_concurrency"),
    ({"fleet": {"password_file": "/x"}}, "fleet.password_file"),
])
def test_bad_machine_and_fleet_config_is_refused(data, key):
    with pytest.raises(ConfigError) as e:
        from_mapping(data, "c.yml")
    assert f"c.yml: {key}:" in str(e.value)
    assert "secret" not in str(e.value)


# -- POST /hooks/alertmanager ---------------------------------------------------
def am_payload(*alerts: dict, status: str = "firing", receiver: str = "exporter", group: str = "{}:{}") -> dict:
    """An Alertmanager webhook notification (version 4) as Alertmanager 0.2x sends it."""
    return {"version": "4", "groupKey": group, "truncatedAlerts": 0, "status": status, "receiver": receiver,
            "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
            "externalURL": "http://am-1:9093", "alerts": list(alerts)}


def am_alert(fingerprint: str = "5e1f7c0a9b3d2e41", starts: str = "2026-12-01T09:00:00.123456789Z",
             status: str = "firing", **labels) -> dict:
    labels = {"alertname": "CodingAgentWaitingTooLong", "severity": "info", "machine": "devbox",
              "project": "billing", "provider": "claude_code", **labels}
    return {"status": status, "labels": labels,
            "annotations": {"summary": "claude_code session in billing has waited for you for 31m",
                            "description": "Session 0199 on devbox is blocked until you answer it."},
            "startsAt": starts, "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph", "fingerprint": fingerprint}


def post(exporter: Exporter, body, path: str = "/hooks/alertmanager", headers: dict | None = None) -> int:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    secret = exporter.root / "state" / "alertmanager-secret"
    auth = {"Authorization": "Bearer " + secret.read_text().strip()} if secret.exists() else {}
    req = urllib.request.Request(f"http://127.0.0.1:{exporter.port}{path}", data=data, method="POST",
                                 headers={"Content-Type": "application/json", **auth, **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_alertmanager_alert_pages_once_across_resends_and_ha_members(tmp_path, receiver):
    with Exporter(tmp_path / "a", receiver=receiver) as ex:
        alert = am_alert()
        assert post(ex, am_payload(alert)) == 200
        wait_for(lambda: len(receiver.messages) == 1, what="the page")
        # repeat_interval re-send, the other HA member, a restart of Alertmanager: same fingerprint + startsAt
        assert post(ex, am_payload(alert)) == 200
        assert post(ex, am_payload(alert, receiver="exporter", group="{}:{other}")) == 200
        ex.stop()
        ex.start()
        assert post(ex, am_payload(alert)) == 200
        # the same alert firing again later (new startsAt) is a new page
        assert post(ex, am_payload(am_alert(starts="2026-12-01T11:00:00Z"))) == 200
        wait_for(lambda: len(receiver.messages) == 2, what="the second firing's page")
        time.sleep(1.0)
        assert len(receiver.messages) == 2
        msg = receiver.messages[0]
        assert msg["title"] == "claude_code session in billing has waited for you for 31m"
        assert msg["message"].splitlines() == ["Session 0199 on devbox is blocked until you answer it.",
                                               "machine: devbox", "project: billing", "provider: claude_code"]
        assert ex.value("coding_agent_alertmanager_notifications_total", status="accepted") == 2  # since restart
        assert ex.value("coding_agent_alerts_total", kind="alertmanager") == 1
        assert ex.value("coding_agent_alerts_deduplicated_total", kind="alertmanager") == 1


def test_resolved_pages_only_when_configured(tmp_path, receiver):
    alert = am_alert(fingerprint="aa01")
    done = dict(alert, status="resolved", endsAt="2026-12-01T09:10:00Z")
    with Exporter(tmp_path / "off", receiver=receiver) as ex:
        assert post(ex, am_payload(done, status="resolved")) == 200
        time.sleep(1.5)
        assert receiver.messages == []
    with Exporter(tmp_path / "on", {"alertmanager": {"send_resolved": True}}, receiver=receiver) as ex:
        assert post(ex, am_payload(alert)) == 200
        assert post(ex, am_payload(done, status="resolved")) == 200
        assert post(ex, am_payload(done, status="resolved", receiver="b")) == 200
        wait_for(lambda: len(receiver.messages) == 2, what="firing and resolved pages")
        time.sleep(1.0)
        assert len(receiver.messages) == 2
        assert {m["title"] for m in receiver.messages} == {
            "claude_code session in billing has waited for you for 31m",
            "Resolved: claude_code session in billing has waited for you for 31m"}


@pytest.mark.parametrize("body", [
    b"not json", b"[]", json.dumps({"version": "3", "alerts": []}).encode(),
    json.dumps(am_payload(dict(am_alert(), fingerprint=None))).encode(),
    json.dumps(am_payload(dict(am_alert(), labels={"a": 1}))).encode(),
    json.dumps(am_payload(dict(am_alert(), status="pending"))).encode(),
])
def test_malformed_notification_is_400_and_counted(tmp_path, receiver, body, am_exporter):
    assert post(am_exporter, body) == 400
    assert am_exporter.value("coding_agent_alertmanager_notifications_total", status="malformed") >= 1
    assert post(am_exporter, am_payload(am_alert(fingerprint="ok" + str(len(body))))) == 200


@pytest.fixture(scope="module")
def am_exporter(tmp_path_factory):
    rec = Receiver()
    ex = Exporter(tmp_path_factory.mktemp("am"), {"alertmanager": {"max_body_bytes": 4096}}, receiver=rec)
    ex.start()
    yield ex
    ex.stop()
    rec.close()


def test_oversized_notification_is_413(am_exporter):
    big = am_payload(*[am_alert(fingerprint=f"f{i}") for i in range(40)])
    assert post(am_exporter, big) == 413
    assert am_exporter.value("coding_agent_alertmanager_notifications_total", status="too_large") == 1


def test_ledger_not_writable_is_503_then_retried(tmp_path, receiver):
    with Exporter(tmp_path / "a", receiver=receiver) as ex:
        ledger = tmp_path / "a" / "state" / "alerts-ledger.json"
        if ledger.exists():
            ledger.unlink()
        ledger.mkdir()  # the atomic rename onto it fails, as on a full or read-only disk
        (ledger / "x").write_text("keep")
        assert post(ex, am_payload(am_alert())) == 503
        assert ex.value("coding_agent_alertmanager_notifications_total", status="unavailable") == 1
        time.sleep(1.0)
        assert receiver.messages == []
        (ledger / "x").unlink()
        ledger.rmdir()
        assert post(ex, am_payload(am_alert())) == 200  # Alertmanager's retry
        wait_for(lambda: len(receiver.messages) == 1, what="the page after the retry")
        assert json.loads(ledger.read_text())["alerts"]


def test_pages_route_by_alert_label_tags(tmp_path):
    crit, every = Receiver(), Receiver()
    try:
        cfg = {"alerts": {"urls": [f"critical={crit.url}", every.url]}}
        with Exporter(tmp_path / "a", cfg) as ex:
            assert post(ex, am_payload(am_alert(fingerprint="c1", severity="critical"),
                                       am_alert(fingerprint="i1", severity="info"))) == 200
            wait_for(lambda: len(every.messages) == 2, what="both pages on the untagged target")
            time.sleep(0.5)
            assert len(crit.messages) == 1
    finally:
        crit.close()
        every.close()


def authed_ready(ex: Exporter, headers: dict):
    """A readiness probe for an exporter behind basic auth."""
    def ready():
        if ex.proc.poll() is not None:
            raise AssertionError(f"exporter exited with {ex.proc.returncode}:\n{ex.log()}")
        req = urllib.request.Request(f"http://127.0.0.1:{ex.port}/-/ready", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=1) as r:
                return r.status == 200
        except OSError:
            return False
    return ready


def test_alertmanager_route_takes_the_same_basic_auth(tmp_path, receiver):
    import base64

    import bcrypt
    import yaml
    web = tmp_path / "web.yml"
    web.write_text(yaml.safe_dump({"basic_auth_users": {"am": bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()}}))
    ex = Exporter(tmp_path / "a", receiver=receiver, extra_args=["--web.config.file", str(web)])
    ok = {"Authorization": "Basic " + base64.b64encode(b"am:pw").decode()}

    ex.ready_check = authed_ready(ex, ok)
    with ex:
        assert post(ex, am_payload(am_alert())) == 401
        assert post(ex, am_payload(am_alert()), headers=ok) == 200
        wait_for(lambda: len(receiver.messages) == 1, what="the page")


# -- the fleet view ---------------------------------------------------------------
def claude_session(root, sid: str, cwd: str = "/home/dev/proj") -> None:
    """A Claude Code session on ``root`` with a prompt and a tool call in progress (working)."""
    from harness import claude_path
    from test_hardening_support import ClaudeSession, write
    s = ClaudeSession(sid, cwd)
    write(claude_path(root, sid), s.prompt() + s.tool_use())


def fleet_of(ex: Exporter) -> dict:
    return _get_json(ex, "/api/v1/fleet")


def by_machine(ex: Exporter) -> dict:
    return {m["machine"]: m for m in fleet_of(ex)["machines"]}


def test_fleet_view_lists_every_machine_and_keeps_a_stopped_one_as_down(tmp_path):
    b_root = tmp_path / "b"
    claude_session(b_root, "0b000000-0000-4000-8000-00000000000b", "/home/dev/api")
    from harness import closed_port
    with closed_port() as port, Exporter(b_root, {"machine": "bee"}) as b:
        dead = f"http://127.0.0.1:{port}"  # a port nothing listens on (held, so no other server gets it)
        claude_session(tmp_path / "a", "0a000000-0000-4000-8000-00000000000a")
        a = Exporter(tmp_path / "a", {"machine": "ay", "fleet": {
            "peers": [f"http://127.0.0.1:{b.port}", dead], "poll_interval_seconds": 0.3}})
        with a:
            assert _get_json(a, "/api/v1/sessions")["fleet"] is True
            ms = wait_for(lambda: (m := by_machine(a)).get("bee", {}).get("up") and m, what="bee polled")
            assert list(ms) == ["ay", "bee", "127.0.0.1"]
            assert ms["ay"]["local"] and [r["project"] for r in ms["ay"]["sessions"]] == ["proj"]
            assert [r["session_id"] for r in ms["bee"]["sessions"]] == ["0b000000-0000-4000-8000-00000000000b"]
            assert ms["bee"]["url"] == f"http://127.0.0.1:{b.port}" and ms["bee"]["health"]["machine"] == "bee"
            down = ms["127.0.0.1"]
            assert down["up"] is False and down["last_seen"] is None and down["error"] == "connection refused"
            seen = ms["bee"]["last_seen"]
            b.stop()
            gone = wait_for(lambda: (m := by_machine(a)["bee"])["error"] == "connection refused" and m,
                            what="bee down")
            assert gone["up"] is False and seen <= gone["last_seen"] < time.time()
            assert [r["session_id"] for r in gone["sessions"]] == ["0b000000-0000-4000-8000-00000000000b"]
            assert "fleet peer http://127.0.0.1:%d is down" % b.port in a.log()


def test_a_peer_that_never_answers_does_not_slow_the_local_page(tmp_path):
    hang = socket.socket()
    hang.bind(("127.0.0.1", 0))
    hang.listen(16)  # connections are taken by the kernel, never answered
    try:
        a = Exporter(tmp_path / "a", {"fleet": {"peers": [f"http://127.0.0.1:{hang.getsockname()[1]}"],
                                                "poll_interval_seconds": 0.2, "timeout_seconds": 3}})
        with a:
            for path in ("/", "/api/v1/sessions", "/api/v1/health", "/api/v1/fleet", "/metrics"):
                began = time.monotonic()
                a.scrape_text(path)
                assert time.monotonic() - began < 1.0, path
            peer = wait_for(lambda: (m := fleet_of(a)["machines"][1])["up"] is False and m, timeout=10,
                            what="the peer timed out")
            assert peer["error"] == "no answer within 3 s (fleet.timeout_seconds)"
    finally:
        hang.close()


def test_fleet_credentials_come_from_a_file_and_are_never_shown(tmp_path):
    import bcrypt
    import yaml
    secret = "s3cret-Pw-for-peers"
    web = tmp_path / "web.yml"
    web.write_text(yaml.safe_dump({"basic_auth_users": {
        "fleet": bcrypt.hashpw(secret.encode(), bcrypt.gensalt(4)).decode()}}))
    b = Exporter(tmp_path / "b", {"machine": "bee"}, extra_args=["--web.config.file", str(web)])
    import base64
    b.ready_check = authed_ready(b, {"Authorization": "Basic " + base64.b64encode(f"fleet:{secret}".encode()).decode()})
    (tmp_path / "pw").write_text(secret + "\n")
    (tmp_path / "bad").write_text("bad-Pw-77\n")
    with b:
        peers = [f"http://127.0.0.1:{b.port}"]
        good = Exporter(tmp_path / "a", {"fleet": {"peers": peers, "poll_interval_seconds": 0.3, "username": "fleet",
                                                   "password_file": str(tmp_path / "pw")}},
                        extra_args=["--log.level", "debug"])
        bad = Exporter(tmp_path / "c", {"fleet": {"peers": peers, "poll_interval_seconds": 0.3, "username": "fleet",
                                                  "password_file": str(tmp_path / "bad")}})
        with good, bad:
            wait_for(lambda: by_machine(good).get("bee", {}).get("up"), timeout=15, what="bee polled with the password")
            m = wait_for(lambda: fleet_of(bad)["machines"][1]["up"] is False and fleet_of(bad)["machines"][1],
                         what="a wrong password")
            assert m["error"] == "HTTP 401"
            body = good.scrape_text("/api/v1/fleet")
        for log_text in (good.log(), bad.log(), body):
            assert secret not in log_text and "bad-Pw-77" not in log_text
    missing = Exporter(tmp_path / "d", {"fleet": {"peers": peers, "username": "fleet",
                                                  "password_file": str(tmp_path / "nope")}})
    missing.start(wait_ready=False)
    assert missing.proc.wait(timeout=20) == 2
    assert "fleet.password_file: cannot read" in missing.log()


# -- what ships ---------------------------------------------------------------------
def test_compose_alertmanager_is_wired_to_the_exporter_receiver():
    import re
    import shutil
    import subprocess
    from urllib.parse import urlsplit

    import yaml
    from harness import ROOT
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    am = compose["services"]["alertmanager"]
    assert "./config/alertmanager.yml:/etc/alertmanager/alertmanager.yml:ro" in am["volumes"]
    assert "--config.file=/etc/alertmanager/alertmanager.yml" in am["command"]
    assert am["secrets"] == ["exporter_password"] and "exporter_password" in compose["secrets"]
    assert all(p.startswith("127.0.0.1:") for p in am["ports"])
    # The image is the version tested here (Debian's prometheus-alertmanager).
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.skip("prometheus-alertmanager not installed (.ci/run installs it)")
    out = subprocess.run([binary, "--version"], capture_output=True, text=True)
    tested = re.search(r"version (\d+\.\d+\.\d+)", out.stdout + out.stderr).group(1)
    assert am["image"] == f"prom/alertmanager:v{tested}"
    r = subprocess.run(["amtool", "check-config", str(ROOT / "config" / "alertmanager.yml")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    cfg = yaml.safe_load((ROOT / "config" / "alertmanager.yml").read_text())
    exporter_port = next(a.split(":")[-1] for a in compose["services"]["exporter"]["command"]
                         if a.startswith("--web.listen-address="))
    for rcv in cfg["receivers"]:
        for wh in rcv["webhook_configs"]:
            u = urlsplit(wh["url"])
            assert (u.hostname, str(u.port), u.path) == ("exporter", exporter_port, "/hooks/alertmanager")
            assert wh["http_config"]["basic_auth"]["password_file"] == "/run/secrets/exporter_password"
    assert cfg["time_intervals"][0]["name"] == "quiet-hours"
    prom = yaml.safe_load((ROOT / "config" / "prometheus.yml").read_text())
    targets = prom["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert targets == ["alertmanager:9093"] and any(p.endswith(":9093:9093") for p in am["ports"])


def test_recording_rules_for_long_retention_pass_promtool():
    import shutil
    import subprocess

    from harness import ROOT
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (.ci/run installs Debian's prometheus)")
    rules = ROOT / "config" / "rules"
    for args in (["check", "rules", "coding-agent.recording.yml"], ["test", "rules", "coding-agent.recording.test.yml"]):
        r = subprocess.run([promtool, *args], cwd=rules, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
    doc = (ROOT / "docs" / "deploy.md").read_text()
    assert "config/rules/coding-agent.recording.yml" in doc
    assert "machine_project_provider_state:coding_agent_session_state:count" in doc


def test_page_pending_at_a_stop_is_delivered_after_the_restart(tmp_path):
    rec = Receiver(fail_first=10**6)  # the notification service is down
    try:
        cfg = {"alerts": {"retry": {"attempts": 5, "initial_backoff_seconds": 30, "max_backoff_seconds": 30}}}
        with Exporter(tmp_path / "a", cfg, receiver=rec) as ex:
            assert post(ex, am_payload(am_alert())) == 200
            wait_for(lambda: rec.failed >= 1, what="a failed delivery")
        assert rec.messages == []
        rec.fail_first = 0  # the service is back
        with Exporter(tmp_path / "a", cfg, receiver=rec) as ex:
            wait_for(lambda: len(rec.messages) == 1, what="the page left pending")
            assert post(ex, am_payload(am_alert())) == 200  # a re-send still does not page again
            time.sleep(1.0)
            assert len(rec.messages) == 1
            assert "delivering a page left pending by the previous run" in ex.log()
    finally:
        rec.close()


def test_page_whose_delivery_failed_is_taken_again_on_the_next_resend(tmp_path):
    rec = Receiver(fail_first=5)  # every one of the 5 attempts fails
    try:
        with Exporter(tmp_path / "a", {"alerts": {"retry": {"attempts": 5, "initial_backoff_seconds": 0.1,
                                                            "max_backoff_seconds": 0.2}}}, receiver=rec) as ex:
            assert post(ex, am_payload(am_alert())) == 200
            wait_for(lambda: "delivery failed 5 times" in ex.log(), what="delivery given up")
            assert rec.messages == []
            assert post(ex, am_payload(am_alert())) == 200  # Alertmanager's repeat_interval
            wait_for(lambda: len(rec.messages) == 1, what="the page on the re-send")
    finally:
        rec.close()


def test_fleet_peer_over_tls_verified_with_fleet_ca_file(tmp_path):
    import ssl

    import yaml
    from test_hardening_access import _make_certs
    certs = _make_certs(tmp_path)
    web = tmp_path / "web.yml"
    web.write_text(yaml.safe_dump({"tls_server_config": {"cert_file": str(certs["server.crt"]),
                                                         "key_file": str(certs["server.key"])}}))
    b = Exporter(tmp_path / "b", {"machine": "tls-bee"}, extra_args=["--web.config.file", str(web)])
    ctx = ssl.create_default_context(cafile=str(certs["ca.crt"]))

    def ready():
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{b.port}/-/ready", timeout=1, context=ctx) as r:
                return r.status == 200
        except OSError:
            return False
    b.ready_check = ready
    with b:
        peers = [f"https://127.0.0.1:{b.port}"]
        good = Exporter(tmp_path / "a", {"fleet": {"peers": peers, "poll_interval_seconds": 0.3,
                                                   "ca_file": str(certs["ca.crt"])}})
        unverified = Exporter(tmp_path / "c", {"fleet": {"peers": peers, "poll_interval_seconds": 0.3}})
        with good, unverified:
            wait_for(lambda: by_machine(good).get("tls-bee", {}).get("up"), what="the TLS peer polled")
            m = wait_for(lambda: (m := fleet_of(unverified)["machines"][1])["up"] is False and m,
                         what="an unverified certificate refused")
            assert m["error"].startswith("TLS: ") and "CERTIFICATE_VERIFY_FAILED" in m["error"]


def test_page_taken_before_the_delivery_thread_starts_is_sent_once(tmp_path, receiver):
    """The HTTP server answers before the alerter starts: a page taken in
    between is not also taken for one the previous run left pending."""
    from coding_agent_exporter.alerts import Alerter
    from coding_agent_exporter.metrics import Metrics
    cfg = from_mapping({"state_dir": str(tmp_path), "alerts": {"urls": [receiver.url]}})
    first = Alerter.from_config(cfg, Metrics())
    assert first.page("alertmanager:left:1", "alertmanager", "left by the last run", "b") is True
    second = Alerter.from_config(cfg, Metrics())  # a restart: "left" is pending, never delivered
    assert second.page("alertmanager:new:1", "alertmanager", "new before start", "b") is True
    assert second.page("alertmanager:left:1", "alertmanager", "left by the last run", "b") is False
    second.start()
    try:
        wait_for(lambda: len(receiver.messages) == 2, what="both pages")
        time.sleep(0.5)
        assert sorted(m["title"] for m in receiver.messages) == ["left by the last run", "new before start"]
    finally:
        second.stop()
