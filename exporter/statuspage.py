"""The status page at ``/`` and the JSON it polls, for people without Grafana.

Routes (GET or HEAD; behind the same TLS and basic auth as ``/metrics``,
since :func:`.web.make_app` checks both before it dispatches here):

- ``/``: ``statuspage.html`` (package data), one dependency-free file whose
  script polls the two endpoints below every two seconds.
- ``/api/v1/sessions``: ``{"machine", "fleet", "now", "ready", "states", "agents", "sessions",
  "sessions_dropped", "usage_total"}``. ``sessions`` are the store's rows
  (:meth:`.store.SessionStore.rows`: the fields of ``scan --json``), most
  recently written first, cut to ``metrics.max_sessions`` like the
  per-session series (``sessions_dropped`` says how many the cap left out).
  ``states`` is :data:`.reducer.STATES` in order; ``agents`` maps provider
  names to display names; ``now`` is the exporter's clock (Unix seconds) so
  that relative times do not depend on the browser's clock; ``ready`` is
  False during the start-up scan; ``usage_total`` sums the tokens and cost
  of ``sessions`` (:func:`.usage.view_total`). ``mutes`` (when the exporter runs its
  alerter): :meth:`.suppress.Mutes.rows`, who is muted and until when.
- ``/api/v1/health``: ``machine`` (config ``machine``, default the host
  name) and the exporter's own numbers, read from the same
  instruments ``/metrics`` exposes: ``files_watched``, ``parse_errors`` and
  ``duplicates`` by provider, ``alerts_sent`` and ``alerts_failed`` by kind,
  ``last_alert`` (``{"at": Unix seconds, "kind"}`` of this run's last
  delivered page, or None) and ``alerts_on`` (any Apprise target configured).

Privacy: the rows hold identifiers, states, times and counters, never
transcript or hook text; ``project`` follows ``metrics.project_label``.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import time
from importlib import resources

import orjson

from . import __version__
from .names import STATES
from .providers import PROVIDER_MODULES
from .usage import view_total

PAGE_FILE = "statuspage.html"
API_SESSIONS = "/api/v1/sessions"
API_HEALTH = "/api/v1/health"


def _by_label(metric, label: str) -> dict[str, float]:
    """Current values of a prometheus-client instrument summed by one label
    (counters: their ``_total`` samples)."""
    out: dict[str, float] = {}
    for family in metric.collect():
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            key = sample.labels.get(label, "")
            out[key] = out.get(key, 0) + sample.value
    return {k: int(v) if float(v).is_integer() else v for k, v in out.items()}


def sessions_payload(snapshot, ready: bool, now: float | None = None, machine: str | None = None,
                     fleet: bool = False) -> dict:
    """The body of ``/api/v1/sessions`` from the store's ``snapshot()``
    (``(rows, counts, dropped)``); ``machine`` is config ``machine``,
    ``fleet`` whether ``fleet.peers`` is set (the page then polls
    ``/api/v1/fleet``)."""
    rows, _counts, dropped = snapshot()
    return {"machine": machine, "fleet": fleet, "now": time.time() if now is None else now, "ready": ready, "states": list(STATES),
            "agents": {name: mod.LABEL for name, mod in PROVIDER_MODULES.items()},
            "sessions": rows, "sessions_dropped": dropped, "usage_total": view_total(rows)}


def health_payload(metrics, last_alert, alerts_on: bool, now: float | None = None,
                   machine: str | None = None) -> dict:
    """The body of ``/api/v1/health``: ``metrics`` is the exporter's
    :class:`.metrics.Metrics`, ``last_alert()`` returns ``(Unix seconds,
    kind)`` or None."""
    last = last_alert()
    return {
        "machine": machine,
        "now": time.time() if now is None else now,
        "files_watched": _by_label(metrics.files_watched, "provider"),
        "parse_errors": _by_label(metrics.parse_errors, "provider"),
        "duplicates": _by_label(metrics.duplicates, "provider"),
        "alerts_sent": _by_label(metrics.alerts, "kind"),
        "alerts_failed": _by_label(metrics.alerts_failed, "kind"),
        "last_alert": {"at": last[0], "kind": last[1]} if last else None,
        "alerts_on": alerts_on,
    }


def load_page(telemetry_path: str) -> tuple[bytes, str]:
    """The page's bytes (version and metrics link filled in) and its
    Content-Security-Policy: nothing but the page's own inline script and
    style (by hash) and requests to this origin."""
    text = resources.files(__package__).joinpath(PAGE_FILE).read_text("utf-8")
    text = text.replace("__VERSION__", html.escape(__version__)).replace(
        "__TELEMETRY_PATH__", html.escape(telemetry_path))

    def hashes(tag: str) -> str:
        found = re.findall(rf"<{tag}>(.*?)</{tag}>", text, re.S)
        return " ".join("'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
                        for s in found)

    csp = (f"default-src 'none'; script-src {hashes('script')}; style-src {hashes('style')}; "
           "connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
    return text.encode(), csp


def status_app(snapshot, metrics, last_alert, alerts_on: bool, ready, telemetry_path: str,
               machine: str | None = None, fleet: bool = False, mutes=None):
    """WSGI app of ``/`` and ``/api/v1/*`` (see the module doc). ``snapshot``
    is :meth:`.store.SessionStore.snapshot`; ``ready()`` tells whether the
    start-up scan is done; ``machine`` heads both JSON bodies; ``fleet``
    tells the page to show ``/api/v1/fleet`` (served by :mod:`.fleet`);
    ``mutes()`` gives :meth:`.suppress.Mutes.rows` for the sessions body's
    ``mutes`` (the page shows who is muted, and mutes through
    :mod:`.mute_api`)."""
    page, csp = load_page(telemetry_path)

    def reply(start_response, status: str, ctype: str, body: bytes, extra=()):
        start_response(status, [("Content-Type", ctype), ("Content-Length", str(len(body))),
                                ("Cache-Control", "no-store"), *extra])
        return [body]

    def app(environ, start_response):
        path = environ.get("PATH_INFO") or "/"
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            return reply(start_response, "405 Method Not Allowed", "text/plain", b"GET only\n",
                         [("Allow", "GET, HEAD")])
        if path == "/":
            return reply(start_response, "200 OK", "text/html; charset=utf-8", page,
                         [("Content-Security-Policy", csp), ("Referrer-Policy", "no-referrer")])
        if path == API_SESSIONS:
            payload = sessions_payload(snapshot, bool(ready()), machine=machine, fleet=fleet)
            if mutes is not None:
                payload["mutes"] = mutes()
            body = orjson.dumps(payload)
        elif path == API_HEALTH:
            body = orjson.dumps(health_payload(metrics, last_alert, alerts_on, machine=machine))
        else:
            return reply(start_response, "404 Not Found", "text/plain", b"Not found\n")
        return reply(start_response, "200 OK", "application/json", body)

    return app
