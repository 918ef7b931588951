"""Several machines (issue 25): who is who, the Alertmanager receiver, the
fleet view. Real exporter processes over HTTP; the full Prometheus +
Alertmanager run is tests/test_fleet_stack.py."""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest

from exporter.config import ConfigError, from_mapping
from harness import Exporter


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
