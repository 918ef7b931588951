"""``/metrics`` from cached line prefixes (``exporter.exposition``) gives
the bytes prometheus-client's own encoders give, before and after the
values, label sets and sessions change; and the real endpoint still
negotiates the format and gzip as the library does."""

from __future__ import annotations

import gzip
import shutil
import time
import urllib.request
from pathlib import Path

from prometheus_client import Gauge
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import Config
from exporter.exposition import Exposition, wsgi_app
from exporter.files import make_reader
from exporter.metrics import SessionCollector
from exporter.scan import _discover
from harness import Exporter, claude_path, wait_for

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
ACCEPTS = ("", "text/plain", "application/openmetrics-text; version=1.0.0,text/plain;version=0.0.4;q=0.5",
           "application/openmetrics-text", "text/plain; version=1.0.0; escaping=allow-utf-8")


def _registry(tmp_path: Path):
    """A store that read the real Claude Code and Codex fixture files, its
    metrics registry with the session collector, and the store."""
    for sub in ("claude_code", "codex"):
        shutil.copytree(FIXTURES / sub, tmp_path / sub)
    cfg = Config()
    store, table = make_reader(cfg)
    table.read_all(_discover([str(tmp_path)], cfg, None))
    store.evaluate()
    m = store.metrics
    m.registry.register(SessionCollector(store.snapshot, m, True))
    return m, store


def _same(ex: Exposition, registry) -> int:
    n = 0
    for accept in ACCEPTS:
        encoder, _ = choose_encoder(accept)
        want = encoder(registry)
        assert ex.render(encoder) == want, accept
        assert ex.render(encoder) == want, accept  # from the cache this time
        n += want.count(b"\n")
    return n


def test_same_bytes_as_the_library_as_values_change(tmp_path):
    m, store = _registry(tmp_path)
    ex = Exposition(m.registry)
    assert store.sessions and _same(ex, m.registry) > 400
    # values that format oddly, label values that need escaping, new children
    odd = Gauge("coding_agent_test_odd", "Odd values.", ["v"], registry=m.registry)
    for label, value in (("nan", float("nan")), ("neg-zero", -0.0), ("zero", 0), ("inf", float("inf")),
                         ("big", 1.5e17), ("tiny", 3e-9), ('quote " back \\ nl \n é 😀', 7)):
        odd.labels(label).set(value)
    m.lines.labels("claude_code").inc(12345)
    m.turn_duration.labels("codex").observe(42.0)
    m.user_wait.labels("claude_code", "question").observe(3.0)
    m.set_machine('host "a"')
    _same(ex, m.registry)
    odd.labels("zero").set(-0.0)
    odd.labels("nan").set(1.0)
    m.lines.labels("claude_code").inc(1)
    for s in store.sessions.values():  # the sessions' series change with their state
        s.status = type(s.status)("working", since=time.time())
        s.cwd = "/home/dev/other"
    _same(ex, m.registry)
    store.sessions.clear()
    _same(ex, m.registry)
    # children read directly (exposition._children) or, where that would not be the library's, collected:
    # an exemplar, a gauge with a function, a metric without labels, a histogram's first observation
    from prometheus_client import Counter, Histogram
    Counter("coding_agent_test_plain", "No labels.", registry=m.registry).inc(3)
    Gauge("coding_agent_test_fn", "A function.", registry=m.registry).set_function(lambda: 2.5)
    Counter("coding_agent_test_ex", "Exemplar.", ["k"], registry=m.registry).labels("a").inc(1, {"trace_id": "x1"})
    Histogram("coding_agent_test_h", "Buckets.", ["k"], buckets=(0.5, 2, 7.25), registry=m.registry).labels("b").observe(1)
    _same(ex, m.registry)


def test_wsgi_app_negotiates_as_the_library(tmp_path):
    m, _ = _registry(tmp_path)
    app = wsgi_app(m.registry)
    from prometheus_client import make_wsgi_app
    lib = make_wsgi_app(m.registry)

    def call(a, **env):
        got = {}
        body = b"".join(a({"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", **env},
                          lambda status, headers: got.update(status=status, headers=headers)))
        return got["status"], got["headers"], body

    for env in ({}, {"HTTP_ACCEPT": ACCEPTS[2]}, {"HTTP_ACCEPT_ENCODING": "gzip"},
                {"QUERY_STRING": "name[]=coding_agent_sessions"}, {"REQUEST_METHOD": "POST"},
                {"REQUEST_METHOD": "OPTIONS"}):
        mine, theirs = call(app, **env), call(lib, **env)
        assert mine[:2] == theirs[:2], env
        if env.get("HTTP_ACCEPT_ENCODING"):
            assert gzip.decompress(mine[2]) == gzip.decompress(theirs[2])
        else:
            assert mine[2] == theirs[2], env


def test_endpoint_serves_both_formats(tmp_path):
    """The real exporter: a session's state in plain text, OpenMetrics and
    gzip, each parsed by the library's parsers."""
    sid = "5f0c7a52-1b7e-4c8e-9a51-0d2b7c1e9f33"
    path = claude_path(tmp_path, sid)
    path.parent.mkdir(parents=True)
    path.write_text('{"type":"user","uuid":"u1","sessionId":"%s","cwd":"/home/dev/proj","timestamp":"%s",'
                    '"message":{"role":"user","content":"hi"}}\n'
                    % (sid, time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())))
    ex = Exporter(tmp_path).start()
    try:
        url = f"http://127.0.0.1:{ex.port}/metrics"

        def get(headers):
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
                body = r.read()
                return r.headers, gzip.decompress(body) if r.headers.get("Content-Encoding") == "gzip" else body

        def state(families):
            return {s.labels["state"] for f in families if f.name == "coding_agent_session_state"
                    for s in f.samples if s.labels.get("session_id") == sid}

        wait_for(lambda: state(text_string_to_metric_families(get({})[1].decode())) == {"working"})
        headers, body = get({"Accept": ACCEPTS[2], "Accept-Encoding": "gzip"})
        assert headers["Content-Type"].startswith("application/openmetrics-text")
        assert body.endswith(b"# EOF\n") and state(om_parse(body.decode())) == {"working"}
        headers, body = get({"Accept-Encoding": "gzip"})
        assert headers["Content-Encoding"] == "gzip" and headers["Content-Type"].startswith("text/plain")
        assert state(text_string_to_metric_families(body.decode())) == {"working"}
    finally:
        ex.stop()
