"""The deployable stack: docker-compose.yml, Dockerfile, Prometheus config and
rules, Grafana provisioning and dashboard.

* Static checks: the compose file, Dockerfile, exporter config, Prometheus
  config and Grafana files agree with each other (ports, mounts, paths).
* promtool: ``check config``, ``check rules``, ``test rules``.
* Integration: a real exporter fed with real transcripts, scraped by a real
  Prometheus on loopback; every dashboard and rule expression is run through
  Prometheus's HTTP API and every panel must return data; ``promtool check
  metrics`` lints a scrape of the exporter.

promtool and prometheus come from Debian's ``prometheus`` package (.ci/run
installs it). Without them these tests skip locally, and fail in CI (CI=true).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from harness import Proc, listening_port

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "stack"
COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
DOCKER_CONFIG = REPO / "config" / "docker.yml"
PROM_CONFIG = REPO / "config" / "prometheus.yml"
RULES = REPO / "config" / "rules" / "coding-agent.rules.yml"
RULES_TEST = REPO / "config" / "rules" / "coding-agent.rules.test.yml"
GRAFANA_DS = REPO / "config" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
GRAFANA_DASH_PROVIDER = REPO / "config" / "grafana" / "provisioning" / "dashboards" / "dashboards.yml"
DASHBOARD = REPO / "dashboards" / "coding-agent-exporter.json"
EXPORTER_JOB = "coding-agent-exporter"

# Every metric the exporter exposes (the dashboard and rules may use no other).
EXPORTER_METRICS = {
    "coding_agent_sessions",
    "coding_agent_session_state",
    "coding_agent_session_state_since_timestamp_seconds",
    "coding_agent_session_last_event_timestamp_seconds",
    "coding_agent_files_watched",
    "coding_agent_transcript_lines_total",
    "coding_agent_transcript_bytes_total",
    "coding_agent_transcript_parse_errors_total",
    "coding_agent_transcript_skipped_lines_total",
    "coding_agent_transcript_read_errors_total",
    "coding_agent_duplicate_events_total",
    "coding_agent_completions_total",
    "coding_agent_turn_errors_total",
    "coding_agent_poll_recoveries_total",
    "coding_agent_alerts_total",
    "coding_agent_alerts_failed_total",
    "coding_agent_alerts_deduplicated_total",
    "coding_agent_session_series_dropped",
    "coding_agent_turn_duration_seconds",
    "coding_agent_alert_latency_seconds",
    "coding_agent_exporter_build_info",
    "coding_agent_exporter_info",
    "coding_agent_hook_events_total",
    "coding_agent_hook_errors_total",
    "coding_agent_user_wait_seconds",
    "coding_agent_tokens_total",
    "coding_agent_cost_usd_total",
    "coding_agent_unpriced_tokens_total",
    "coding_agent_session_cost_usd",
}
HISTOGRAMS = {"coding_agent_turn_duration_seconds", "coding_agent_alert_latency_seconds",
              "coding_agent_user_wait_seconds"}


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _need(binary: str) -> str:
    """Path of ``binary``; skip without it, except in CI where it must exist."""
    path = shutil.which(binary)
    if path is None:
        msg = f"{binary} not found (Debian: apt-get install prometheus)"
        if _in_ci():
            pytest.fail(msg + "; CI must install it (.ci/run)")
        pytest.skip(msg)
    return path


def _load_yaml(path: Path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def _load_dashboard() -> dict:
    with open(DASHBOARD, encoding="utf-8") as f:
        return json.load(f)


# --------------------------------------------------------------------------
# Compose file helpers


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)((?:[^{}]|\{[^{}]*\})*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def interpolate(value: str, env: dict[str, str]) -> str:
    """Docker Compose variable interpolation: ``$VAR``, ``${VAR}``,
    ``${VAR:-default}``, ``${VAR-default}``, defaults themselves interpolated
    (nested ``${A:-${B}/x}``)."""

    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(4)
        op, default = m.group(2), m.group(3)
        val = env.get(name)
        if op == ":-" and not val:
            return interpolate(default, env)
        if op == "-" and val is None:
            return interpolate(default, env)
        return val or ""

    return _VAR.sub(sub, value)


def _volumes(service: dict, env: dict[str, str]) -> list[tuple[str, str, bool]]:
    """(source, target, read_only) of a service's volumes (short syntax, or
    long bind syntax, which must not let Docker create a missing source)."""
    out = []
    for v in service.get("volumes", []):
        if isinstance(v, dict):
            assert v["type"] == "bind" and v["bind"]["create_host_path"] is False, v
            out.append((interpolate(v["source"], env), v["target"], v.get("read_only") is True))
            continue
        parts = interpolate(v, env).split(":")
        assert len(parts) in (2, 3), v
        src, dst = parts[0], parts[1]
        ro = len(parts) == 3 and "ro" in parts[2].split(",")
        out.append((src, dst, ro))
    return out


def _ports(service: dict) -> list[tuple[str | None, int, int]]:
    """(host_ip, host_port, container_port) of a service's short-syntax ports."""
    out = []
    for p in service.get("ports", []):
        parts = str(p).split("/")[0].split(":")
        if len(parts) == 3:
            out.append((parts[0], int(parts[1]), int(parts[2])))
        elif len(parts) == 2:
            out.append((None, int(parts[0]), int(parts[1])))
        else:
            raise AssertionError(f"publish the port explicitly as host:container: {p!r}")
    return out


def _flags(args: list[str]) -> dict[str, str]:
    """``--name=value`` / ``--name value`` flags of a command line."""
    out, i = {}, 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            if "=" in a:
                k, v = a[2:].split("=", 1)
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                k, v = a[2:], args[i + 1]
                i += 1
            else:
                k, v = a[2:], ""
            out[k] = v
        i += 1
    return out


def _host_port(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


def _mounted(path: str, mounts: list[tuple[str, str, bool]]) -> tuple[str, str, bool, str]:
    """The mount that holds container ``path`` (longest target wins), plus
    the path inside that mount."""
    best = None
    for src, dst, ro in mounts:
        d = dst.rstrip("/")
        if path == d or path.startswith(d + "/"):
            if best is None or len(d) > len(best[1]):
                best = (src, d, ro, path[len(d):].lstrip("/"))
    assert best is not None, f"{path} is not inside any mount: {mounts}"
    return best


def _repo_path(src: str) -> Path:
    assert src.startswith("./"), f"bind mount from the repository should be relative: {src}"
    return REPO / src[2:]


def _dockerfile() -> dict[str, list]:
    """Instructions of the Dockerfile (continuation lines joined)."""
    text = DOCKERFILE.read_text(encoding="utf-8")
    text = re.sub(r"\\\n", " ", text)
    out: dict[str, list] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instr, _, rest = line.partition(" ")
        out.setdefault(instr.upper(), []).append(rest.strip())
    return out


ENV = {"HOME": "/home/dev"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return _load_yaml(COMPOSE)


def test_compose_services(compose):
    assert set(compose["services"]) == {"exporter", "prometheus", "alertmanager", "grafana"}
    for name, svc in compose["services"].items():
        assert "image" in svc or "build" in svc, name
    assert compose["services"]["exporter"].get("build") in (".", {"context": "."})
    # Named volumes used by services are declared.
    declared = set(compose.get("volumes") or {})
    for name, svc in compose["services"].items():
        for src, dst, _ in _volumes(svc, ENV):
            if not src.startswith(("/", ".", "~")):
                assert src in declared, f"{name}: volume {src} is not declared"
            elif src.startswith("./"):
                assert _repo_path(src).exists(), f"{name}: {src} missing from the repository"


def test_compose_exporter_matches_flags_config_and_image(compose):
    svc = compose["services"]["exporter"]
    args = svc["command"]
    assert isinstance(args, list) and args[0] == "run"
    flags = _flags(args[1:])
    host, port = _host_port(flags["web.listen-address"])
    assert host in ("0.0.0.0", ""), "inside the container the exporter must listen beyond loopback"

    # Port published to the host on loopback, same port inside.
    assert any(c == port for _, _, c in _ports(svc)), _ports(svc)
    assert all(ip == "127.0.0.1" for ip, _, _ in _ports(svc)), "publish on loopback only (session ids are private)"

    mounts = _volumes(svc, ENV)
    # The exporter's config file is the repository's config/docker.yml.
    src, _, ro, rest = _mounted(flags["config.file"], mounts)
    assert ro and rest == "" and _repo_path(src) == DOCKER_CONFIG

    cfg = _load_yaml(DOCKER_CONFIG)
    assert cfg["sources"]["watch_events"] is False, "bind mounts deliver no file events: poll"
    # Transcript roots: read-only mounts of the host's default folders.
    expected_host = {"claude_code": "/home/dev/.claude/projects", "codex": "/home/dev/.codex/sessions"}
    for prov, host_dir in expected_host.items():
        paths = cfg["sources"][prov]["paths"]
        assert len(paths) == 1
        src, _, ro, rest = _mounted(paths[0], mounts)
        assert ro, f"{prov} transcripts must be mounted read-only"
        assert rest == "" and src == host_dir, (prov, src)
    # Overridable for CLAUDE_CONFIG_DIR / CODEX_HOME users.
    moved = _volumes(svc, {**ENV, "CLAUDE_PROJECTS_DIR": "/x/claude", "CODEX_SESSIONS_DIR": "/x/codex"})
    assert {s for s, _, _ in moved} >= {"/x/claude", "/x/codex"}
    # State dir: a named volume, writable.
    src, dst, ro, rest = _mounted(cfg["state_dir"], mounts)
    assert not ro and src in (compose.get("volumes") or {}) and rest == ""

    # Dockerfile: base image, entry point, default args = compose command,
    # the compose config also baked in at the --config.file path, port exposed.
    d = _dockerfile()
    assert d["FROM"][0].split()[0] == "python:3.12-slim"
    assert json.loads(d["ENTRYPOINT"][-1]) == ["coding-agent-exporter"]
    assert json.loads(d["CMD"][-1]) == args
    assert any(r.split()[-1] == flags["config.file"] and "config/docker.yml" in r for r in d["COPY"])
    assert str(port) in " ".join(d["EXPOSE"]).split()
    assert any("pip install ." in r for r in d["RUN"])
    # Everything the image copies from the build context is in the repository
    # (pyproject.toml names README.md as the readme: pip install needs it).
    for r in d["COPY"]:
        for src in r.split()[:-1]:
            if not src.startswith("--"):
                assert (REPO / src).exists(), f"Dockerfile copies {src}, missing from the repository"
    assert any(cfg["state_dir"] in r for r in d.get("VOLUME", []))
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^coding-agent-exporter\s*=\s*"coding_agent_exporter\.cli:main"', pyproject, re.M)

    # The exporter accepts the docker config (keys and types).
    r = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "check-config", "--config.file", str(DOCKER_CONFIG)],
                       cwd=REPO, capture_output=True, timeout=60)
    assert r.returncode == 0, (r.stdout + r.stderr).decode()


def test_compose_prometheus_matches_config(compose):
    exporter_flags = _flags(compose["services"]["exporter"]["command"][1:])
    _, exporter_port = _host_port(exporter_flags["web.listen-address"])

    svc = compose["services"]["prometheus"]
    flags = _flags(svc["command"])
    mounts = _volumes(svc, ENV)
    src, _, ro, rest = _mounted(flags["config.file"], mounts)
    assert ro and rest == "" and _repo_path(src) == PROM_CONFIG
    # TSDB on a named volume.
    src, _, ro, _ = _mounted(flags["storage.tsdb.path"], mounts)
    assert not ro and src in compose["volumes"]
    assert any(c == 9090 for _, _, c in _ports(svc))
    assert all(ip == "127.0.0.1" for ip, _, _ in _ports(svc))

    prom = _load_yaml(PROM_CONFIG)
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    job = jobs[EXPORTER_JOB]
    assert job.get("metrics_path", "/metrics") == exporter_flags.get("web.telemetry-path", "/metrics")
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == [f"exporter:{exporter_port}"]
    assert "exporter" in compose["services"]
    # Rule files resolve (relative to the config file) inside a mount that
    # holds them in the repository.
    config_dir = os.path.dirname(flags["config.file"])
    assert prom["rule_files"]
    for rf in prom["rule_files"]:
        in_container = os.path.normpath(os.path.join(config_dir, rf))
        src, _, _, rest = _mounted(in_container, mounts)
        assert (_repo_path(src) / rest).resolve() == RULES


def test_compose_pins_the_tested_prometheus_and_guards_transcript_mounts(compose):
    """Compose runs the Prometheus version the rules and queries are tested
    with here (Debian's package), and never lets Docker create a missing
    transcript folder (it would be root-owned)."""
    image = compose["services"]["prometheus"]["image"]
    m = re.fullmatch(r"prom/prometheus:v(\d+\.\d+\.\d+)", image)
    assert m, image
    out = subprocess.run([_need("prometheus"), "--version"], capture_output=True, text=True)
    tested = re.search(r"version (\d+\.\d+\.\d+)", out.stdout + out.stderr)
    assert tested and tested.group(1) == m.group(1), (image, out.stdout + out.stderr)
    assert f"v{m.group(1)}" in (REPO / "docs" / "deploy.md").read_text()
    binds = [v for v in compose["services"]["exporter"]["volumes"] if isinstance(v, dict)]
    assert {v["target"] for v in binds} == {"/data/claude/projects", "/data/codex/sessions"}
    assert all(v["bind"]["create_host_path"] is False and v["read_only"] is True for v in binds)


def test_compose_grafana_provisioning(compose):
    svc = compose["services"]["grafana"]
    mounts = _volumes(svc, ENV)
    assert any(c == 3000 for _, _, c in _ports(svc))
    assert all(ip == "127.0.0.1" for ip, _, _ in _ports(svc))
    src, _, ro, rest = _mounted("/etc/grafana/provisioning/datasources/prometheus.yml", mounts)
    assert ro and (_repo_path(src) / rest).resolve() == GRAFANA_DS
    src, _, _, rest = _mounted("/etc/grafana/provisioning/dashboards/dashboards.yml", mounts)
    assert (_repo_path(src) / rest).resolve() == GRAFANA_DASH_PROVIDER

    ds = _load_yaml(GRAFANA_DS)["datasources"]
    assert len(ds) == 1 and ds[0]["type"] == "prometheus" and ds[0]["uid"] == "prometheus"
    url = urllib.parse.urlsplit(ds[0]["url"])
    assert url.hostname == "prometheus" and url.port == 9090
    assert "prometheus" in compose["services"]
    dashboard = _load_dashboard()
    ds_var = next(v for v in dashboard["templating"]["list"] if v["name"] == "datasource")
    assert ds_var["current"]["value"] == ds[0]["uid"]

    providers = _load_yaml(GRAFANA_DASH_PROVIDER)["providers"]
    assert len(providers) == 1 and providers[0]["type"] == "file"
    path = providers[0]["options"]["path"]
    src, _, ro, rest = _mounted(path, mounts)
    assert ro and rest == ""
    assert (_repo_path(src) / DASHBOARD.name).resolve() == DASHBOARD
    home = svc["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    src, _, _, rest = _mounted(home, mounts)
    assert (_repo_path(src) / rest).resolve() == DASHBOARD


# --------------------------------------------------------------------------
# Dashboard structure


def _panels(dashboard: dict) -> list[dict]:
    out = []
    for p in dashboard["panels"]:
        if p["type"] == "row":
            out.extend(p.get("panels", []))
        else:
            out.append(p)
    return out


def _metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\b(coding_agent_[a-z0-9_]+)", expr))


def _base_metric(name: str) -> str:
    for suffix in ("_bucket", "_count", "_sum"):
        if name.endswith(suffix) and name[: -len(suffix)] in HISTOGRAMS:
            return name[: -len(suffix)]
    return name


def test_dashboard_structure():
    d = _load_dashboard()
    assert d["uid"] == "coding-agent-exporter"
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name, metric in (("instance", "coding_agent_exporter_build_info"), ("provider", "coding_agent_sessions")):
        v = variables[name]
        assert v["type"] == "query"
        assert v["datasource"]["uid"] == "${datasource}"
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        assert re.fullmatch(rf"label_values\({metric}(\{{.*\}})?, {name}\)", q), q
        assert v["includeAll"] and v["allValue"] == ".*"

    panels = _panels(d)
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    # No two panels overlap on the grid.
    cells = set()
    for p in d["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panel {p['title']!r} overlaps another"
                cells.add((x, y))

    used = set()
    for p in panels:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}"
            expr = t["expr"]
            assert 'instance=~"$instance"' in expr, (p["title"], expr)
            names = {_base_metric(n) for n in _metric_names(expr)}
            assert names, (p["title"], expr)
            assert names <= EXPORTER_METRICS, names - EXPORTER_METRICS
            used |= names
    # The dashboard shows every metric the exporter has (info-only excepted).
    assert EXPORTER_METRICS - used == set()

    titles = {p["title"] for p in panels}
    for want in ("Sessions by state", "Sessions by state over time", "Live sessions",
                 "Completions per hour by agent", "Turn errors per hour by agent",
                 "Turn duration (prompt to completion)", "Pages per hour", "Skipped lines",
                 "Duplicate events", "Poll recoveries", "Files watched", "Transcript lines read",
                 "Transcript bytes read", "Sessions waiting for you now", "How long agents wait for you",
                 "Cost per hour by model", "Cost per hour by project", "Tokens per hour by type",
                 "Top sessions by cost"):
        assert want in titles


def test_rules_use_known_metrics():
    rules = [r for g in _load_yaml(RULES)["groups"] for r in g["rules"]]
    names = {r["alert"] for r in rules}
    assert {"CodingAgentExporterDown", "CodingAgentTranscriptParseErrors", "CodingAgentAlertsFailing",
            "CodingAgentSessionStuckWorking", "CodingAgentSessionStalled", "CodingAgentRateLimited",
            "CodingAgentWaitingTooLong", "CodingAgentMachineSilent"} <= names
    for r in rules:
        assert {_base_metric(n) for n in _metric_names(r["expr"])} <= EXPORTER_METRICS
        assert r["labels"]["severity"] in ("info", "warning", "critical")
        assert r["annotations"]["summary"]
    # Every rule has a unit test.
    tested = {a["alertname"] for t in _load_yaml(RULES_TEST)["tests"] for a in t.get("alert_rule_test", [])}
    assert names <= tested, names - tested


# --------------------------------------------------------------------------
# promtool


def _promtool(*args: str, stdin: bytes | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([_need("promtool"), *args], input=stdin, cwd=cwd, capture_output=True, timeout=60)


def test_promtool_check_config():
    r = _promtool("check", "config", str(PROM_CONFIG))
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()


def test_promtool_check_rules():
    r = _promtool("check", "rules", str(RULES))
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()


def test_promtool_test_rules():
    r = _promtool("test", "rules", str(RULES_TEST))
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0 and "SUCCESS" in out, out


# --------------------------------------------------------------------------
# Integration: real exporter + real Prometheus


# Everything here is on loopback: never go through a proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str, timeout: float = 5) -> bytes:
    with _OPENER.open(url, timeout=timeout) as r:
        return r.read()


def _wait(what: str, pred, timeout: float, procs=()) -> None:
    deadline = time.monotonic() + timeout
    last_exc = None
    while time.monotonic() < deadline:
        for p, log in procs:
            if p.poll() is not None:
                raise AssertionError(f"{what}: process exited with {p.returncode}:\n{log.read_text()[-4000:]}")
        try:
            if pred():
                return
        except (OSError, urllib.error.URLError, ValueError, KeyError) as e:
            last_exc = e
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last error: {last_exc!r})")


class _Receiver(BaseHTTPRequestHandler):
    """Stands in for a notification service (Apprise json://)."""

    received: list[bytes] = []

    def do_POST(self):  # noqa: N802
        n = int(self.headers.get("Content-Length") or 0)
        type(self).received.append(self.rfile.read(n))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


CLAUDE_SID = {
    "v1.0.98_complete_session.jsonl": ("-home-dev-proj", "1af7fc5e-8455-4414-9ccd-011d40f70b2a"),
    "v2.1.38_short_interrupted.jsonl": ("-home-dev-spotter", "55604662-cf2a-4331-851a-ec234028f8ca"),
    "v2.1.39_turn_end_then_compact.lines1463-1496.jsonl": ("-home-dev-spotter", "ae4a77f8-aedd-4bc1-888f-c94edc91af04"),
    "v2.1.114_rate_limit_line.jsonl": ("-home-dev-oje", "fc456884-d0b4-45f8-9d53-9a64dbc663d6"),
}
CODEX_ID = {
    "synthesized_v0.123_complete_interrupted_error.jsonl": "019db1a0-6c2e-7d40-9a11-3f5e2b7c0a01",
    "v0.135_exec_complete.jsonl": "019e9625-802f-7e91-840a-cfe88d14117a",
    "v0.58_cli_session.lines1-20.jsonl": "019a93b9-f380-7600-98ff-940e6b99603c",
}


def _place_claude(root: Path, name: str) -> Path:
    project, sid = CLAUDE_SID[name]
    dst = root / project / f"{sid}.jsonl"
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(FIXTURES / "claude_code" / name, dst)
    return dst


def _place_codex(root: Path, name: str, data: bytes | None = None, sid: str | None = None) -> Path:
    sid = sid or CODEX_ID[name]
    dst = root / "2026" / "05" / "01" / f"rollout-2026-05-01T10-00-00-{sid}.jsonl"
    dst.parent.mkdir(parents=True, exist_ok=True)
    if data is None:
        shutil.copyfile(FIXTURES / "codex" / name, dst)
    else:
        dst.write_bytes(data)
    return dst


def _shift_to_now(name: str, new_id: str) -> bytes:
    """A Codex fixture moved in time so that its last record is a few
    seconds old (a live session whose turn ends now), under a new session id
    and new turn ids."""
    lines = (FIXTURES / "codex" / name).read_bytes().splitlines()
    objs = [json.loads(line) for line in lines]

    def iso(s: str) -> dt.datetime:
        return dt.datetime.fromisoformat(s.replace("Z", "+00:00"))

    last = max(iso(o["timestamp"]) for o in objs if "timestamp" in o)
    delta = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=2) - last

    def shift(o):
        if isinstance(o, dict):
            for k, v in o.items():
                if k == "timestamp" and isinstance(v, str):
                    o[k] = (iso(v) + delta).isoformat(timespec="milliseconds").replace("+00:00", "Z")
                elif k == "turn_id" and isinstance(v, str):
                    o[k] = v[:-4] + "0fff"  # new turns: a copy with the same turn ids would be a replay
                elif k in ("started_at", "completed_at") and isinstance(v, (int, float)):
                    o[k] = int(v + delta.total_seconds())
                else:
                    shift(v)
        elif isinstance(o, list):
            for v in o:
                shift(v)

    for o in objs:
        shift(o)
    text = b"".join(json.dumps(o, separators=(",", ":")).encode() + b"\n" for o in objs)
    return text.replace(CODEX_ID[name].encode(), new_id.encode())


def _scrape_value(text: str, name: str, **labels) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(4))
    return total


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """Exporter fed with transcripts + Prometheus scraping it every second.

    Phase 1: some transcripts exist before the exporter starts (start-up
    backfill). Phase 2, once Prometheus has scraped a few times: more
    sessions appear, lines are appended (a duplicate, a malformed line, an
    oversized line) and two sessions end live, so counters rise inside the
    scrape window and pages are sent to a local receiver.
    """
    prometheus = _need("prometheus")
    _need("promtool")
    tmp = tmp_path_factory.mktemp("stack")
    claude = tmp / "claude" / "projects"
    codex = tmp / "codex" / "sessions"
    claude.mkdir(parents=True)
    codex.mkdir(parents=True)

    _Receiver.received = []
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()

    procs: list[Proc] = []
    try:
        first = _place_claude(claude, "v1.0.98_complete_session.jsonl")
        _place_claude(claude, "v2.1.38_short_interrupted.jsonl")
        _place_codex(codex, "synthesized_v0.123_complete_interrupted_error.jsonl")

        cfg = {
            "sources": {
                "claude_code": {"paths": [str(claude)]},
                "codex": {"paths": [str(codex)]},
                "copilot_cli": {"paths": [str(tmp / "copilot" / "session-state")]},
                "pi": {"paths": [str(tmp / "pi" / "sessions")]},
                "gemini_cli": {"paths": [str(tmp / "gemini" / "tmp")]},
                "watch_events": False,  # as in the compose stack
                "poll_interval_seconds": 0.25,
                "max_line_bytes": 64 * 1024,
            },
            "reducer": {"inferred_settle_seconds": 1, "stall_after_seconds": 3600},
            "state_dir": str(tmp / "state"),
            "alerts": {
                "urls": [f"json://127.0.0.1:{receiver.server_address[1]}/"],
                "settle_seconds": 0.5,
                "retry": {"attempts": 1},
            },
        }
        cfg_path = tmp / "exporter.yml"
        cfg_path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
        exporter = Proc([sys.executable, "-m", "coding_agent_exporter", "run", "--config.file", str(cfg_path),
                          "--web.listen-address", "127.0.0.1:0", "--web.telemetry-path", "/metrics",
                          "--log.level", "info"], tmp / "exporter.log", REPO)
        procs.append(exporter)
        listen_url = tmp / "state" / "listen-url"  # the port it got
        _wait("exporter listen-url", lambda: listen_url.exists() and listen_url.read_text().strip(), 30,
              [(exporter.p, exporter.log)])
        eport = int(listen_url.read_text().strip().rsplit(":", 1)[1])
        metrics_url = f"http://127.0.0.1:{eport}/metrics"
        _wait("exporter /metrics", lambda: b"coding_agent_sessions" in _get(metrics_url), 30,
              [(exporter.p, exporter.log)])
        _wait("start-up scan", lambda: _scrape_value(_get(metrics_url).decode(), "coding_agent_files_watched") >= 3,
              30, [(exporter.p, exporter.log)])

        # Prometheus: the repository's config with test targets and intervals.
        prom_cfg = _load_yaml(PROM_CONFIG)
        prom_cfg["global"]["scrape_interval"] = "1s"
        prom_cfg["global"]["evaluation_interval"] = "1s"
        prom_cfg["rule_files"] = [str(RULES)]
        prom_cfg.pop("alerting", None)

        def write_prom_cfg(pport: int | None) -> Path:
            """The config with test targets; Prometheus's own job once it has its port (0 asked for)."""
            for job in prom_cfg["scrape_configs"]:
                target = f"127.0.0.1:{eport}" if job["job_name"] == EXPORTER_JOB else pport and f"127.0.0.1:{pport}"
                job["static_configs"] = [{"targets": [target] if target else []}]
            path = tmp / "prometheus.yml"
            path.write_text(yaml.safe_dump(prom_cfg), encoding="utf-8")
            check = _promtool("check", "config", str(path))
            assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()
            return path

        prom = Proc([prometheus, f"--config.file={write_prom_cfg(None)}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                     "--web.listen-address=127.0.0.1:0", "--log.level=info"], tmp / "prometheus.log", tmp)
        procs.append(prom)
        pport = listening_port(prom)
        write_prom_cfg(pport)
        prom.p.send_signal(signal.SIGHUP)  # reload: now it scrapes itself too
        base = f"http://127.0.0.1:{pport}"
        watched = [(exporter.p, exporter.log), (prom.p, prom.log)]
        _wait("prometheus ready", lambda: _get(f"{base}/-/ready") is not None, 30, watched)

        def scrapes() -> int:
            res = _query(base, f'count_over_time(up{{job="{EXPORTER_JOB}"}}[10m])')
            return int(float(res[0]["value"][1])) if res else 0

        def up() -> bool:
            res = _query(base, f'up{{job="{EXPORTER_JOB}"}}')
            return bool(res) and res[0]["value"][1] == "1"

        _wait("first scrapes", lambda: scrapes() >= 3 and up(), 30, watched)
        _wait("prometheus scraping itself (its port, after the reload)",
              lambda: [r["value"][1] for r in _query(base, 'up{job="prometheus"}')] == ["1"], 30, watched)

        # Phase 2.
        _place_claude(claude, "v2.1.39_turn_end_then_compact.lines1463-1496.jsonl")
        sub = claude / "-home-dev-spotter" / "ae4a77f8-aedd-4bc1-888f-c94edc91af04" / "subagents"
        sub.mkdir(parents=True)
        shutil.copyfile(FIXTURES / "claude_code" / "v2.1.39_subagent_agent-acompact-946d2b.jsonl",
                        sub / "agent-acompact-946d2b.jsonl")
        _place_claude(claude, "v2.1.114_rate_limit_line.jsonl")
        _place_codex(codex, "v0.58_cli_session.lines1-20.jsonl")
        # Live sessions: one ends with a completion, one with a usage-limit error.
        _place_codex(codex, "v0.135_exec_complete.jsonl",
                     _shift_to_now("v0.135_exec_complete.jsonl", "019f0000-0000-7000-8000-000000000001"),
                     "019f0000-0000-7000-8000-000000000001")
        _place_codex(codex, "synthesized_v0.123_complete_interrupted_error.jsonl",
                     _shift_to_now("synthesized_v0.123_complete_interrupted_error.jsonl",
                                   "019f0000-0000-7000-8000-000000000002"),
                     "019f0000-0000-7000-8000-000000000002")
        # Hooks, as Claude Code's HTTP hooks send them: one session stays
        # waiting on a permission prompt, one is answered (a user wait).
        for sid, events in (("hk000001-0000-4000-8000-000000000001", ["PermissionRequest"]),
                            ("hk000002-0000-4000-8000-000000000002", ["PermissionRequest", "PostToolUse"])):
            transcript = claude / "-home-dev-hooks" / f"{sid}.jsonl"  # a hook speaks only for a transcript on disk
            transcript.parent.mkdir(parents=True, exist_ok=True)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
            transcript.write_text(json.dumps({"type": "user", "sessionId": sid, "cwd": "/home/dev/hooks",
                                              "uuid": sid, "parentUuid": None, "isSidechain": False,
                                              "timestamp": stamp, "version": "2.1.150",
                                              "message": {"role": "user", "content": "make it"}}) + "\n")
            time.sleep(0.3)
            for event in events:
                body = {"session_id": sid, "transcript_path": str(transcript),
                        "cwd": "/home/dev/hooks", "permission_mode": "default", "hook_event_name": event,
                        "tool_name": "Bash", "tool_input": {"command": "make"}}
                req = urllib.request.Request(f"http://127.0.0.1:{eport}/hooks/claude_code", method="POST",
                                             data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json",
                                                      "X-Coding-Agent-Hook-Token":
                                                          (tmp / "state" / "hook-secret").read_text().strip()})
                urllib.request.urlopen(req, timeout=10).close()
                time.sleep(0.3)
        # A duplicate record, a malformed line, an oversized line, a blank line.
        lines = first.read_bytes().splitlines(keepends=True)
        with open(first, "ab") as f:
            f.write(lines[3])
            f.write(b'{"type": "user", "broken\n')
            f.write(b'{"type":"user","pad":"' + b"x" * (80 * 1024) + b'"}\n')
            f.write(b"\n")

        def phase2_read() -> bool:
            text = _get(metrics_url).decode()
            return (_scrape_value(text, "coding_agent_transcript_parse_errors_total") >= 1
                    and _scrape_value(text, "coding_agent_duplicate_events_total") >= 1
                    and _scrape_value(text, "coding_agent_transcript_skipped_lines_total", reason="oversized") >= 1
                    and _scrape_value(text, "coding_agent_files_watched") >= 9
                    and _scrape_value(text, "coding_agent_alerts_total") >= 2
                    and _scrape_value(text, "coding_agent_user_wait_seconds_count") >= 1)

        _wait("phase 2 read and paged", phase2_read, 30, watched)
        n = scrapes()
        _wait("scrapes after phase 2", lambda: scrapes() >= n + 3, 30, watched)
        yield {"prometheus": base, "metrics": metrics_url, "tmp": tmp, "procs": procs}
    finally:
        for p in reversed(procs):
            p.stop()
        receiver.shutdown()
        receiver.server_close()


def _api(base: str, path: str, **params) -> dict:
    url = f"{base}/api/v1/{path}?{urllib.parse.urlencode(params, doseq=True)}"
    try:
        body = _get(url, timeout=10)
    except urllib.error.HTTPError as e:
        body = e.read()
    doc = json.loads(body)
    if doc.get("status") != "success":
        raise AssertionError(f"{path} {params}: {doc.get('errorType')}: {doc.get('error')}")
    return doc["data"]


def _query(base: str, expr: str) -> list:
    data = _api(base, "query", query=expr)
    assert data["resultType"] in ("vector", "scalar", "matrix"), data
    if data["resultType"] == "scalar":
        return [{"metric": {}, "value": data["result"]}]
    return data["result"]


# Grafana's variables, as the dashboard would send them with "All" selected.
GRAFANA_VARS = {
    "instance": ".*",
    "provider": ".*",
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "1h",
}


def grafana_expr(expr: str) -> str:
    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        return GRAFANA_VARS[name]

    out = re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", sub, expr)
    assert "$" not in out, out
    return out


def _dashboard_targets():
    d = _load_dashboard()
    return [(p["title"], t) for p in _panels(d) for t in p["targets"]]


def test_dashboard_variables_return_values(stack):
    d = _load_dashboard()
    for v in d["templating"]["list"]:
        if v["type"] != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", q)
        assert m, q
        values = _api(stack["prometheus"], f"label/{m.group(2)}/values", **{"match[]": grafana_expr(m.group(1))})
        assert values, f"variable {v['name']}: no values"
    providers = _api(stack["prometheus"], "label/provider/values", **{"match[]": "coding_agent_sessions"})
    from coding_agent_exporter.providers import PROVIDER_MODULES

    assert set(providers) == set(PROVIDER_MODULES)  # every declared provider, pre-created at 0


def test_every_dashboard_panel_returns_data(stack):
    problems = []
    for title, t in _dashboard_targets():
        expr = grafana_expr(t["expr"])
        try:
            result = _query(stack["prometheus"], expr)
        except AssertionError as e:
            problems.append(f"{title} [{t['refId']}]: {e}")
            continue
        if not result:
            problems.append(f"{title} [{t['refId']}]: no data for {expr}")
    assert not problems, "\n".join(problems)


def test_dashboard_panels_show_the_fed_transcripts(stack):
    """Values, not just series: what the transcripts contain shows up."""
    base = stack["prometheus"]

    def val(expr: str, **labels) -> float:
        res = _query(base, expr)
        return sum(float(r["value"][1]) for r in res if all(r["metric"].get(k) == v for k, v in labels.items()))

    assert val('sum by (provider) (coding_agent_sessions)', provider="claude_code") >= 4
    assert val('sum by (provider) (coding_agent_sessions)', provider="codex") >= 4
    assert val('count(coding_agent_session_state == 1)') >= 8
    # Counters rose inside the scrape window (phase 2).
    for metric in ("coding_agent_transcript_lines_total", "coding_agent_transcript_bytes_total",
                   "coding_agent_transcript_parse_errors_total", "coding_agent_duplicate_events_total",
                   "coding_agent_alerts_total", "coding_agent_completions_total"):
        assert val(f"sum(increase({metric}[1h]))") > 0, metric
    assert val('sum(increase(coding_agent_transcript_skipped_lines_total{reason="oversized"}[1h]))') > 0
    assert val('sum(increase(coding_agent_turn_errors_total[1h]))') > 0
    # Usage: the fed transcripts' tokens and cost (docs/tokens.md).
    assert val('sum by (type) (coding_agent_tokens_total)', type="cache_read") > 0
    assert val('sum(coding_agent_cost_usd_total)') > 0
    assert val('topk(10, coding_agent_session_cost_usd)') > 0
    assert len(_Receiver.received) >= 2


def test_every_rule_expression_runs(stack):
    problems = []
    for group in _load_yaml(RULES)["groups"]:
        for rule in group["rules"]:
            try:
                _query(stack["prometheus"], rule["expr"])
            except AssertionError as e:
                problems.append(f"{rule['alert']}: {e}")
    assert not problems, "\n".join(problems)
    # Prometheus loaded the rule file too, and its evaluations succeed.
    groups = _api(stack["prometheus"], "rules")["groups"]
    loaded = [r for g in groups for r in g["rules"]]
    assert len(loaded) == sum(len(g["rules"]) for g in _load_yaml(RULES)["groups"])
    assert all(r["health"] in ("ok", "unknown") for r in loaded), [(r["name"], r.get("lastError")) for r in loaded]


def test_promtool_check_metrics_on_a_scrape(stack):
    body = _get(stack["metrics"])
    assert b"coding_agent_exporter_build_info" in body
    r = _promtool("check", "metrics", stdin=body)
    out = (r.stdout + r.stderr).decode()
    assert r.returncode == 0 and out.strip() == "", out
    # Every metric the dashboard and rules rely on is in the scrape.
    names = {_base_metric(n) for n in re.findall(r"^(coding_agent_\w+?)[{ ]", body.decode(), re.M)}
    assert EXPORTER_METRICS <= names, EXPORTER_METRICS - names
