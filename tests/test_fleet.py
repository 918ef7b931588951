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

from exporter.config import ConfigError, from_mapping
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
        from exporter import __version__
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
    req = urllib.request.Request(f"http://127.0.0.1:{exporter.port}{path}", data=data, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
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


def test_alertmanager_route_takes_the_same_basic_auth(tmp_path, receiver):
    import base64

    import bcrypt
    import yaml
    web = tmp_path / "web.yml"
    web.write_text(yaml.safe_dump({"basic_auth_users": {"am": bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()}}))
    ex = Exporter(tmp_path / "a", receiver=receiver, extra_args=["--web.config.file", str(web)])
    ok = {"Authorization": "Basic " + base64.b64encode(b"am:pw").decode()}

    def ready():
        req = urllib.request.Request(f"http://127.0.0.1:{ex.port}/-/ready", headers=ok)
        try:
            with urllib.request.urlopen(req, timeout=1) as r:
                return r.status == 200
        except OSError:
            return False
    ex.ready_check = ready
    with ex:
        assert post(ex, am_payload(am_alert())) == 401
        assert post(ex, am_payload(am_alert()), headers=ok) == 200
        wait_for(lambda: len(receiver.messages) == 1, what="the page")
