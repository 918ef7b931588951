"""Several machines with real parts (issue 25): three exporters as three
machines on 127.0.0.2/3/4, a real Prometheus scraping them (file_sd, the
shipped rules with short ``for``), a real Alertmanager HA pair (two members
gossiping on loopback, the shipped config/alertmanager.yml with short
intervals) paging through one exporter's ``POST /hooks/alertmanager`` and
its Apprise URL (a loopback receiver), and that exporter's fleet page in
headless Chromium. Everything behind basic auth, as docs/deploy.md "Several
machines" sets it up.

Needs Debian's prometheus, prometheus-alertmanager and chromium (.ci/run).
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import bcrypt
import pytest
import yaml

from browser import Browser, chromium
from harness import ROOT, Exporter, Proc, Receiver, claude_path, listening_port, wait_for
from test_hardening_support import ClaudeSession, write

RULES = ROOT / "config" / "rules" / "coding-agent.rules.yml"
AM_CONFIG = ROOT / "config" / "alertmanager.yml"
PASSWORD = "fleet-test-pw"
AUTH = {"Authorization": "Basic " + base64.b64encode(f"ops:{PASSWORD}".encode()).decode()}
#: The rules this test makes fire, with their ``for`` shortened (the rest keep theirs, so they stay quiet).
SHORT_FOR = {"CodingAgentExporterDown": "2s", "CodingAgentWaitingTooLong": "1s", "CodingAgentMachineSilent": "2s"}

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _binary(*names: str) -> str:
    for n in names:
        if shutil.which(n):
            return shutil.which(n)
    pytest.skip(f"{names[0]} not installed (.ci/run installs it)")


def get(url: str, headers: dict | None = None, timeout: float = 5) -> bytes:
    req = urllib.request.Request(url, headers=headers or {})
    with _OPENER.open(req, timeout=timeout) as r:
        return r.read()


def metric(url: str, name: str, headers: dict | None = None, **labels) -> float:
    """Sum of the samples of ``name`` on a /metrics page whose labels include ``labels``."""
    try:
        text = get(url, headers).decode()
    except OSError:
        return float("nan")
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(4))
    return total


def _am_status(base: str) -> dict | None:
    """Alertmanager's ``/api/v2/status`` (its cluster's peers with their gossip addresses), or None while down."""
    try:
        return json.loads(get(base + "/api/v2/status"))
    except OSError:
        return None


class Machine(Exporter):
    """An exporter on its own loopback address (127.0.0.N), behind basic auth."""

    def __init__(self, root: Path, host: str, name: str, web: Path, config: dict | None = None):
        super().__init__(root, {"machine": name, **(config or {})}, extra_args=["--web.config.file", str(web)])
        self.host, self.name = host, name
        self.listen = f"{host}:0"  # the port it got: self.port (from state_dir/listen-url)
        self.ready_check = self._ready

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"exporter {self.name} exited with {self.proc.returncode}:\n{self.log()}")
        try:
            return get(self.base + "/-/ready", AUTH, timeout=1) == b"Ready\n"
        except OSError:
            return False

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}"


def waiting_session(root: Path, sid: str, cwd: str) -> None:
    """A Claude Code 2.1.x session whose agent asked the user a question (AskUserQuestion, no answer yet)."""
    s = ClaudeSession(sid, cwd)
    data = s.prompt() + s.line(s._base(type="assistant", message={
        "id": f"msg_{sid[:8]}_q", "role": "assistant", "model": "claude-sonnet-4-5", "stop_reason": None,
        "content": [{"type": "tool_use", "id": "toolu_q", "name": "AskUserQuestion",
                     "input": {"questions": [{"question": "Which database?"}]}}]}))
    write(claude_path(root, sid), data)


def working_session(root: Path, sid: str, cwd: str) -> None:
    s = ClaudeSession(sid, cwd)
    write(claude_path(root, sid), s.prompt() + s.tool_use())


def test_three_machines_one_prometheus_one_alertmanager_pair_one_pager(tmp_path):
    prometheus = _binary("prometheus")
    alertmanager = _binary("prometheus-alertmanager", "alertmanager")
    chrome = chromium()
    if chrome is None:
        pytest.skip("chromium not installed (.ci/run installs it)")
    began = time.monotonic()

    web = tmp_path / "web.yml"
    web.write_text(yaml.safe_dump({"basic_auth_users": {
        "ops": bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()}}))
    (tmp_path / "password").write_text(PASSWORD + "\n")
    receiver = Receiver()
    procs: list = []
    machines: dict[str, Machine] = {}
    try:
        # -- three machines ----------------------------------------------------------
        sids = {"alpha": "0a1f0000-0000-4000-8000-0000000000a1", "beta": "0b2f0000-0000-4000-8000-0000000000b2",
                "gamma": "0c3f0000-0000-4000-8000-0000000000c3"}
        beta = Machine(tmp_path / "beta", "127.0.0.3", "beta", web)
        gamma = Machine(tmp_path / "gamma", "127.0.0.4", "gamma", web)
        working_session(gamma.root, sids["gamma"], "/home/dev/infra")
        for m in (beta, gamma):  # first: they bind port 0, and alpha's config names the ports they got
            procs.append(m)
            m.start(wait_ready=False)
        alpha = Machine(tmp_path / "alpha", "127.0.0.2", "alpha", web, {
            "alerts": {"urls": [receiver.url]},
            "fleet": {"peers": [beta.base, gamma.base], "poll_interval_seconds": 0.5, "timeout_seconds": 2,
                      "username": "ops", "password_file": str(tmp_path / "password")}})
        machines.update(alpha=alpha, beta=beta, gamma=gamma)
        working_session(alpha.root, sids["alpha"], "/home/dev/web")
        procs.append(alpha)
        alpha.start(wait_ready=False)
        for m in machines.values():
            wait_for(m.ready_check, timeout=30, what=f"exporter {m.name} ready")

        # -- an Alertmanager HA pair with the shipped config ----------------------------
        am_cfg = yaml.safe_load(AM_CONFIG.read_text())
        am_cfg["route"].update(group_wait="1s", group_interval="1s", repeat_interval="2s")
        for route in am_cfg["route"]["routes"]:
            route.pop("group_wait", None)
        # quiet hours that never apply (the test may run at night)
        am_cfg["time_intervals"] = [{"name": "quiet-hours", "time_intervals": [{"years": ["1999"]}]}]
        for rcv in am_cfg["receivers"]:
            for wh in rcv["webhook_configs"]:
                wh["url"] = alpha.base + "/hooks/alertmanager"
                wh["http_config"]["basic_auth"] = {"username": "ops", "password_file": str(tmp_path / "password")}
                wh["http_config"].pop("tls_config", None)
        am_path = tmp_path / "alertmanager.yml"
        am_path.write_text(yaml.safe_dump(am_cfg))
        r = subprocess.run(["amtool", "check-config", str(am_path)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        # Every port is 0, bound by the server itself (no race between xdist workers): the second
        # member joins the first at the gossip address the first one's API reports.
        ams, am_urls, peer = [], [], []
        for i in (0, 1):
            ams.append(Proc([alertmanager, f"--config.file={am_path}", f"--storage.path={tmp_path / f'am{i}'}",
                             "--web.listen-address=127.0.0.1:0", "--cluster.listen-address=127.0.0.1:0", *peer,
                             # both members send at once: the exporter, not the gossip, makes it one page
                             "--cluster.peer-timeout=0s", "--cluster.gossip-interval=50ms",
                             "--cluster.pushpull-interval=1s", "--cluster.settle-timeout=2s",
                             "--log.level=info"], tmp_path / f"am{i}.log", tmp_path))
            procs.append(ams[-1])
            am_urls.append(f"http://127.0.0.1:{listening_port(ams[-1])}")
            if not peer:
                status = wait_for(lambda: _am_status(am_urls[0]), timeout=20, what="the first member's cluster")
                peer = [f"--cluster.peer={status['cluster']['peers'][0]['address']}"]
        wait_for(lambda: all(len((_am_status(u) or {}).get("cluster", {}).get("peers") or ()) == 2 for u in am_urls),
                 timeout=20, what=f"the two members joined\n{ams[1].tail()}")

        # -- Prometheus: file_sd with the three machines, the shipped rules -----------
        rules = yaml.safe_load(RULES.read_text())
        for group in rules["groups"]:
            for rule in group["rules"]:
                if rule.get("alert") in SHORT_FOR:
                    rule["for"] = SHORT_FOR[rule["alert"]]
                if rule.get("alert") == "CodingAgentWaitingTooLong":
                    assert "> 30 * 60 <" in rule["expr"]
                    rule["expr"] = rule["expr"].replace("> 30 * 60 <", "> 2 <")
        rules_path = tmp_path / "rules.yml"
        rules_path.write_text(yaml.safe_dump(rules))
        (tmp_path / "sd").mkdir()
        for m in machines.values():
            (tmp_path / "sd" / f"{m.name}.yml").write_text(yaml.safe_dump([{"targets": [m.target]}]))
        prom_cfg = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules_path)],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [u.removeprefix("http://")
                                                                              for u in am_urls]}]}]},
            "scrape_configs": [{"job_name": "coding-agent-exporter",
                                "basic_auth": {"username": "ops", "password_file": str(tmp_path / "password")},
                                "file_sd_configs": [{"files": [str(tmp_path / "sd" / "*.yml")],
                                                     "refresh_interval": "1s"}]}],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(prom_cfg))
        prom = Proc([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                     f"--storage.tsdb.path={tmp_path / 'tsdb'}", "--web.listen-address=127.0.0.1:0",
                     "--log.level=info"], tmp_path / "prometheus.log", tmp_path)
        procs.append(prom)
        prom_url = f"http://127.0.0.1:{listening_port(prom)}"

        def prom_query(q: str) -> list:
            try:
                body = get(f"{prom_url}/api/v1/query?" + urllib.parse.urlencode({"query": q}))
            except OSError:
                return []
            return json.loads(body)["data"]["result"]

        wait_for(lambda: len(prom_query('up{job="coding-agent-exporter"} == 1')) == 3, timeout=30,
                 what=f"Prometheus scraping the three machines\n{prom.tail()}")
        info = prom_query("coding_agent_exporter_info")
        assert sorted(s["metric"]["machine"] for s in info) == ["alpha", "beta", "gamma"]

        def pages(title_part: str) -> list[dict]:
            return [m for m in receiver.messages if title_part in m.get("title", "")]

        with Browser(chrome, tmp_path / "chromium.log") as browser:
            page = browser.open("about:blank")
            page.call("Network.enable")
            page.call("Network.setExtraHTTPHeaders", {"headers": AUTH})
            page.call("Page.navigate", {"url": alpha.base + "/"})
            shown = "[...document.querySelectorAll('#sessions tbody tr')].map(r => [r.dataset.machine, r.dataset.session])"
            health = ("Object.fromEntries([...document.querySelectorAll('#machines [data-machine]')]"
                      ".map(d => [d.dataset.machine, [d.dataset.up, d.innerText]]))")

            # -- a session on beta waits for its user: the pager pages once ------------
            waiting_session(beta.root, sids["beta"], "/home/dev/billing")
            rows = wait_for(lambda: len(page.js(shown) or []) == 3 and page.js(shown), timeout=20,
                            what="the fleet page listing the three machines' sessions")
            assert sorted(rows) == sorted([n, s] for n, s in sids.items())
            assert page.js("document.getElementById('th-machine').hidden") is False
            assert {k: v[0] for k, v in page.js(health).items()} == {"alpha": "true", "beta": "true", "gamma": "true"}

            wait_for(lambda: pages("has waited for you"), timeout=30,
                     what=f"the waiting-too-long page\nAM:\n{ams[0].tail()}\n{alpha.log()[-3000:]}")
            (msg,) = pages("has waited for you")
            assert msg["title"].startswith("claude_code session in billing has waited for you for")
            body = msg["message"].splitlines()
            assert "machine: beta" in body and "project: billing" in body and "provider: claude_code" in body
            assert "Which database" not in json.dumps(receiver.messages)  # no transcript text
            # Both members sent it, and re-sent it on repeat_interval: still one page.
            sent = [lambda u=u: metric(u + "/metrics", "alertmanager_notifications_total", integration="webhook")
                    for u in am_urls]
            wait_for(lambda: all(s() >= 3 for s in sent), timeout=20, what="both members sending and re-sending")
            time.sleep(1.0)
            assert len(pages("has waited for you")) == 1
            am_metric = alpha.base + "/metrics"
            assert metric(am_metric, "coding_agent_alerts_deduplicated_total", AUTH, kind="alertmanager") >= 5
            assert metric(am_metric, "coding_agent_alertmanager_notifications_total", AUTH, status="accepted") >= 6

            # -- one machine stops: "exporter down" once, and the page shows it down ----
            gamma.stop()
            wait_for(lambda: pages(f"on {gamma.target} is down"), timeout=30,
                     what=f"the exporter-down page\n{ams[0].tail()}")
            down = wait_for(lambda: (h := page.js(health)).get("gamma", [""])[0] == "false" and h, timeout=10,
                            what="gamma shown down on the fleet page")
            assert "down · last seen" in down["gamma"][1]
            assert sorted(page.js(shown)) == sorted([n, s] for n, s in sids.items())  # its sessions stay, greyed
            assert page.js(f"document.querySelector('tr[data-machine=gamma]').className") == "gone"
            (ROOT / "test-artifacts").mkdir(exist_ok=True)
            page.screenshot(ROOT / "test-artifacts" / "fleet-page.png")  # for a person to look at
            time.sleep(3.0)  # a few repeat_intervals from both members
            (gone,) = pages(f"on {gamma.target} is down")
            assert "machine: gamma" in gone["message"].splitlines()
            assert not pages("stopped reporting")  # CodingAgentMachineSilent is not a second page for it

        # -- the pager is down while Alertmanager sends: nothing is lost ----------------
        alpha.stop()
        beta.stop()
        beta_down = f"on {beta.target} is down"
        failed = [lambda u=u: metric(u + "/metrics", "alertmanager_notifications_failed_total",
                                     integration="webhook") for u in am_urls]
        before = sum(f() for f in failed)
        wait_for(lambda: prom_query('ALERTS{alertname="CodingAgentExporterDown", alertstate="firing", '
                                    f'instance="{beta.target}"}}'), timeout=20, what="beta down firing")
        wait_for(lambda: sum(f() for f in failed) > before + 2, timeout=20,
                 what="Alertmanager failing to reach the stopped pager")
        assert not pages(beta_down)
        alpha.start()
        wait_for(lambda: pages(beta_down), timeout=30, what="the page sent while the pager was down")
        time.sleep(3.0)
        assert len(pages(beta_down)) == 1
        assert len(pages(f"on {gamma.target} is down")) == 1 and len(pages("has waited for you")) == 1
        assert time.monotonic() - began < 120, "the fleet stack test should stay under two minutes"
    finally:
        for p in reversed(procs):
            p.stop()
        receiver.close()
