"""``POST /hooks/alertmanager``: Alertmanager's webhook receiver, turned into
Apprise pages under the exporter's page ledger.

Format facts (Alertmanager's ``webhook_config``, payload ``"version": "4"``,
Alertmanager 0.2x; prometheus.io/docs/alerting/latest/configuration/#webhook_config):
``{"version": "4", "groupKey", "truncatedAlerts", "status", "receiver",
"groupLabels", "commonLabels", "commonAnnotations", "externalURL",
"alerts": [{"status": "firing"|"resolved", "labels", "annotations",
"startsAt", "endsAt", "generatorURL", "fingerprint"}]}``. Alertmanager
re-sends the active alerts of a group on every ``repeat_interval`` and
after its own restarts, each member of an HA pair sends them too, and it
retries a notification that got no 2xx reply (5xx and connection errors;
4xx are final).

One page per firing alert: the ledger key is ``alertmanager:`` + the
alert's ``fingerprint`` + its ``startsAt`` (one firing of one alert:
the same from both HA members and on every re-send; a new firing after a
resolve has a new ``startsAt``). ``resolved`` alerts page once each only
with ``alertmanager.send_resolved``. The reply is 200 only once every
alert of the notification is in the ledger on disk
(:meth:`.alerts.Alerter.page`), 503 when it cannot be written (or no Apprise
target is configured), so that Alertmanager retries; 400 for a payload that
is not a version 4 notification, 413 past ``alertmanager.max_body_bytes``
or ``alertmanager.max_alerts``, 401 without the credential (a bearer token,
``state_dir/alertmanager-secret``, or basic auth of ``basic_auth_users``).
The ledger is written once per notification; the pages count under
``alerts.max_pages_per_session`` per ``(machine, alertname)``; refusals and
re-sent alerts are counted and logged in one summary line a minute.
Each notification is counted on
``coding_agent_alertmanager_notifications_total{status}``.

Page text: the ``summary`` annotation (else ``alertname``) as the title;
the ``description`` annotation and the labels ``machine``, ``project``,
``provider`` in the body; nothing else of the payload (and the exporter has
no transcript text in it to add). Apprise tags: the values of the labels
in ``alertmanager.tag_labels`` plus ``alertmanager``.
"""

from __future__ import annotations

import logging

import orjson

log = logging.getLogger(__name__)

PATH = "/hooks/alertmanager"
#: The ``kind`` of these pages on the alert counters and in the ledger log.
KIND = "alertmanager"
#: Labels shown in a page's body, in this order.
BODY_LABELS = ("machine", "project", "provider")
_NOTIFY = {"critical": "failure", "error": "failure", "warning": "warning", "info": "info"}
_MAX_TITLE, _MAX_BODY, _MAX_ID = 250, 2000, 128
#: A refused body up to this size is read (and dropped) before the 413 reply.
_DRAIN_MAX_BYTES = 64 << 20


class Malformed(ValueError):
    """The body is not an Alertmanager version 4 notification (message: why)."""


def _strings(value, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise Malformed(f"{where}: expected a mapping of strings")
    return value


def parse(body: bytes) -> list[dict]:
    """The alerts of one notification body, each ``{"status", "labels",
    "annotations", "fingerprint", "startsAt"}``. Raises :class:`Malformed`."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise Malformed("not JSON") from None
    if not isinstance(data, dict):
        raise Malformed("not a JSON object")
    if data.get("version") != "4":
        raise Malformed(f"version: expected \"4\", got {str(data.get('version'))[:20]!r}")
    alerts = data.get("alerts")
    if not isinstance(alerts, list):
        raise Malformed("alerts: expected a list")
    truncated = data.get("truncatedAlerts", 0)
    if isinstance(truncated, int) and truncated > 0:
        log.warning("an Alertmanager notification left out %d alert(s) (its max_alerts); they page when sent",
                    truncated)
    out = []
    for i, a in enumerate(alerts):
        where = f"alerts[{i}]"
        if not isinstance(a, dict):
            raise Malformed(f"{where}: expected an object")
        if a.get("status") not in ("firing", "resolved"):
            raise Malformed(f"{where}.status: expected firing or resolved")
        for key in ("fingerprint", "startsAt"):
            v = a.get(key)
            if not isinstance(v, str) or not 0 < len(v) <= _MAX_ID or not v.isprintable():
                raise Malformed(f"{where}.{key}: expected a short string")
        out.append({"status": a["status"], "fingerprint": a["fingerprint"], "startsAt": a["startsAt"],
                    "labels": _strings(a.get("labels"), f"{where}.labels"),
                    "annotations": _strings(a.get("annotations"), f"{where}.annotations")})
    return out


def ledger_key(alert: dict) -> str:
    """``alertmanager:<fingerprint>:<startsAt>`` (``:resolved`` appended for
    the page of its resolve)."""
    key = f"{KIND}:{alert['fingerprint']}:{alert['startsAt']}"
    return key + ":resolved" if alert["status"] == "resolved" else key


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def message(alert: dict) -> tuple[str, str, str]:
    """``(title, body, notify type)`` of one alert's page (see the module doc)."""
    labels, ann = alert["labels"], alert["annotations"]
    title = ann.get("summary") or labels.get("alertname") or "Alertmanager alert"
    resolved = alert["status"] == "resolved"
    if resolved:
        title = "Resolved: " + title
    lines = [ann["description"]] if ann.get("description") else []
    lines += [f"{name}: {labels[name]}" for name in BODY_LABELS if labels.get(name)]
    notify = "success" if resolved else _NOTIFY.get(labels.get("severity", ""), "warning")
    return _cut(title, _MAX_TITLE), _cut("\n".join(lines) or title, _MAX_BODY), notify


#: The route's credential in ``state_dir`` (mode 0600, made at the first start).
SECRET_FILE = "alertmanager-secret"
#: Seconds between the summary lines of refused notifications and re-sent alerts.
SUMMARY_EVERY_SECONDS = 60.0


class _Summary:
    """Counts of what would be one log line each (a refused notification, a
    re-sent alert), logged as one line at most every ``every`` seconds."""

    def __init__(self, every: float = SUMMARY_EVERY_SECONDS):
        import threading

        self.every, self.counts, self.level, self._last = every, {}, logging.INFO, 0.0
        self._lock = threading.Lock()

    def add(self, what: str, n: int = 1, level: int = logging.INFO) -> None:
        """Count ``n`` of ``what``; log the counts when the last line is
        ``every`` seconds old (at the highest ``level`` added since)."""
        import time

        if not n:
            return
        with self._lock:
            self.counts[what] = self.counts.get(what, 0) + n
            self.level = max(self.level, level)
            now = time.monotonic()
            if now - self._last < self.every:
                return
            self._last, counts, level, self.counts, self.level = now, self.counts, self.level, {}, logging.INFO
        log.log(level, "Alertmanager notifications since the last summary: %s",
                ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


def receiver_app(alerter, cfg, metrics, secret: str | None = None, basic_auth: bool = False):
    """WSGI app of ``POST /hooks/alertmanager`` (see the module doc):
    ``alerter`` is the :class:`.alerts.Alerter`, ``cfg`` the
    :class:`.config.Config`, ``metrics`` the :class:`.metrics.Metrics`.
    ``secret``: the bearer token a notification must carry
    (``state_dir/alertmanager-secret``; None with ``alertmanager.auth``
    false); ``basic_auth``: the server checks ``basic_auth_users`` before
    any route, so a request with basic auth that reaches here has passed.
    Without either a request gets 401. Refusals and re-sent alerts are
    counted and summed up in one log line a minute (:class:`_Summary`)."""
    import hmac

    am = cfg.alertmanager
    counted = metrics.alertmanager_notifications
    want = f"Bearer {secret}".encode() if secret else None
    summary = _Summary()

    def reply(start_response, status: str, text: str, outcome: str | None):
        if outcome:
            counted.labels(outcome).inc()
        body = text.encode()
        start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]

    def authorized(environ) -> bool:
        if not am.auth:
            return True
        header = environ.get("HTTP_AUTHORIZATION", "")
        if basic_auth and header.startswith("Basic "):
            return True
        return want is not None and hmac.compare_digest(header.encode("latin-1", "replace"), want)

    def app(environ, start_response):
        if environ.get("REQUEST_METHOD") != "POST":
            return reply(start_response, "405 Method Not Allowed", "POST an Alertmanager notification\n", None)
        if not authorized(environ):
            summary.add("refused: no or wrong credential", level=logging.WARNING)
            counted.labels("unauthorized").inc()  # before the status goes out: a scrape after the 401 sees it
            body = b"credential missing or wrong (http_config.authorization.credentials_file)\n"
            start_response("401 Unauthorized", [("Content-Type", "text/plain"), ("Content-Length", str(len(body))),
                                                ("WWW-Authenticate", 'Bearer realm="coding-agent-exporter"')])
            return [body]
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if length < 0:
            return reply(start_response, "400 Bad Request", "bad Content-Length\n", "malformed")
        if length > am.max_body_bytes:
            stream, left = environ["wsgi.input"], length if length <= _DRAIN_MAX_BYTES else 0
            while left > 0 and (chunk := stream.read(min(left, 1 << 16))):  # so the sender sees the 413
                left -= len(chunk)
            summary.add("refused: larger than alertmanager.max_body_bytes", level=logging.WARNING)
            return reply(start_response, "413 Content Too Large", "notification too large\n", "too_large")
        try:
            alerts = parse(environ["wsgi.input"].read(length) if length else b"")
        except Malformed:
            summary.add("refused: malformed", level=logging.WARNING)
            return reply(start_response, "400 Bad Request", "not an Alertmanager notification\n", "malformed")
        if len(alerts) > am.max_alerts:
            summary.add("refused: more alerts than alertmanager.max_alerts", level=logging.WARNING)
            return reply(start_response, "413 Content Too Large",
                         f"more than {am.max_alerts} alerts (set webhook_configs max_alerts)\n", "too_many_alerts")
        if not alerter.targets:
            log.error("an Alertmanager notification came, but no Apprise URL is configured (alerts.urls)")
            return reply(start_response, "503 Service Unavailable", "no Apprise target configured\n",
                         "unavailable")
        pages = []
        for alert in alerts:
            if alert["status"] == "resolved" and not am.send_resolved:
                continue
            title, body, notify = message(alert)
            labels = alert["labels"]
            tags = frozenset([KIND] + [labels[n] for n in am.tag_labels if labels.get(n)])
            rate_key = (KIND, labels.get("machine", ""), labels.get("alertname", ""))
            pages.append((ledger_key(alert), KIND, title, body, tags, notify, rate_key))
        try:
            counts = alerter.page_many(pages)  # one ledger write for the notification
        except OSError:
            return reply(start_response, "503 Service Unavailable", "cannot write the page ledger\n", "unavailable")
        summary.add("alerts already paged (re-sent)", counts["duplicate"])
        summary.add("alerts over alerts.max_pages_per_session", counts["rate_limited"], logging.WARNING)
        log.debug("Alertmanager notification taken: %d alert(s), %d new page(s)", len(alerts), counts["new"])
        return reply(start_response, "200 OK", "", "accepted")

    return app
