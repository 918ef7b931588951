"""The fleet view: one exporter shows the sessions of the others.

With ``fleet.peers`` set (base URLs of other exporters), a thread polls each
peer's ``/api/v1/sessions`` and ``/api/v1/health`` every
``fleet.poll_interval_seconds``, each peer on its own schedule (a slow one
never holds the others), at most ``fleet.max_concurrency`` peers at once,
each request under one deadline of ``fleet.timeout_seconds`` (the whole
request, not per read), no redirects, an answer of at most 2 MiB and
``metrics.max_sessions`` rows (else the peer is dropped: ``up: false``,
``error`` "dropped: …", no rows); the answers are kept
in memory and ``GET /api/v1/fleet`` is served from them, so a slow or dead
peer never slows this exporter's own page (``/``, ``/api/v1/sessions``
never wait for a peer). The browser talks to this exporter only: no CORS,
one set of credentials.

``GET /api/v1/fleet``: ``{"machine", "now", "states", "agents",
"machines": [...]}``; each machine is ``{"machine", "url" (None for this
one), "local", "up" (None before its first poll), "last_seen" (Unix seconds
of its last good answer, or None), "stale" (that answer is older than two
poll intervals), "age_seconds" (its age), "error" (why its last poll failed,
"stale: …", or None), "ready", "sessions" (its ``/api/v1/sessions`` rows, the last ones
known while it is down), "sessions_dropped", "health" (its
``/api/v1/health``, or None)}``, this machine first, then the peers in
``fleet.peers`` order. A peer that does not answer stays on the list with
``up: false``, its error and when it was last seen.

Credentials: ``fleet.username`` with the password read from
``fleet.password_file``, or a bearer token from ``fleet.bearer_token_file``
(both read at start; a missing file stops the start). They are sent to the
peers only, never logged, never put into ``/api/v1/fleet``.
"""

from __future__ import annotations

import base64
import http.client
import logging
import ssl
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import orjson

from .config import ConfigError

log = logging.getLogger(__name__)

PATH = "/api/v1/fleet"
#: A peer's answer larger than this is refused and the peer dropped (bytes).
MAX_ANSWER_BYTES = 2 << 20


class Refused(ValueError):
    """A peer's answer over the bounds (bytes, sessions) or a redirect: the
    peer is dropped from the view (its rows cleared) until it answers within them."""


def _read_secret(path: str, key: str) -> str:
    try:
        value = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{key}: cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    if not value:
        raise ConfigError(f"{key}: {path} is empty")
    return value


def auth_header(fleet) -> str | None:
    """The ``Authorization`` header value for the peers from ``fleet``
    (:class:`.config.Fleet`), or None. Raises :class:`ConfigError` when a
    credentials file cannot be read (its content is never in the message)."""
    if fleet.bearer_token_file:
        return "Bearer " + _read_secret(fleet.bearer_token_file, "fleet.bearer_token_file")
    if fleet.username:
        password = _read_secret(fleet.password_file, "fleet.password_file") if fleet.password_file else ""
        return "Basic " + base64.b64encode(f"{fleet.username}:{password}".encode()).decode()
    return None


class Peer:
    """What is known of one peer (see the module doc for the fields)."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.name = urlsplit(self.url).hostname or self.url  # until it tells its machine name
        self.up: bool | None = None
        self.last_seen: float | None = None
        self.error: str | None = None
        self.ready = False
        #: Its last ``sessions`` rows, kept as JSON (serialised once per poll,
        #: not per request; a fraction of the memory of the parsed rows).
        self.sessions_json = b"[]"
        self.sessions_dropped = 0
        self.health: dict | None = None
        self.agents: dict = {}
        self.states: list = []

    def view(self, now: float, stale_after: float) -> bytes:
        """This peer's entry of ``machines`` as JSON at ``now`` (Unix
        seconds); ``stale``: its last good answer is older than
        ``stale_after`` seconds (``age_seconds``: how old; the error says so
        when there is no other)."""
        age = None if self.last_seen is None else max(0.0, now - self.last_seen)
        stale = age is not None and age > stale_after
        error = self.error or (f"stale: last good answer {age:.0f} s ago" if stale else None)
        return _entry({"machine": self.name, "url": self.url, "local": False, "up": self.up,
                       "last_seen": self.last_seen, "error": error, "ready": self.ready,
                       "stale": stale, "age_seconds": None if age is None else round(age, 1),
                       "sessions_dropped": self.sessions_dropped, "health": self.health}, self.sessions_json)


def _entry(fields: dict, sessions_json: bytes) -> bytes:
    """``fields`` as a JSON object with ``"sessions"`` (already JSON) added."""
    return orjson.dumps(fields)[:-1] + b',"sessions":' + sessions_json + b"}"


def _why(e: BaseException, timeout: float) -> str:
    """A short reason for a failed poll, without URL or credentials."""
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code}"
    reason = e if isinstance(e, ssl.SSLError) else getattr(e, "reason", e)
    if isinstance(reason, TimeoutError) or isinstance(e, TimeoutError):
        return f"no answer within {timeout:g} s (fleet.timeout_seconds)"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, ssl.SSLError):
        return f"TLS: {getattr(reason, 'reason', None) or reason}"
    if isinstance(reason, OSError):
        return reason.strerror or type(reason).__name__
    return str(reason)[:200]


class Fleet:
    """Polls ``cfg.fleet.peers`` and serves ``/api/v1/fleet``.

    ``local()`` returns this exporter's own ``(sessions payload, health
    payload)`` (the dicts of :mod:`.statuspage`); ``machine`` is its name.
    Raises :class:`ConfigError` at construction for unreadable credentials.
    """

    def __init__(self, cfg, machine: str, local):
        self.f = cfg.fleet
        self.machine = machine
        self.local = local
        self.peers = [Peer(u) for u in self.f.peers]
        self._auth = auth_header(self.f)
        self._ctx = None
        if self.f.ca_file:
            try:
                self._ctx = ssl.create_default_context(cafile=str(Path(self.f.ca_file).expanduser()))
            except (OSError, ssl.SSLError) as e:
                raise ConfigError(f"fleet.ca_file: cannot load {self.f.ca_file}: "
                                  f"{getattr(e, 'strerror', None) or e}") from None
        self.max_sessions = cfg.metrics.max_sessions
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._due = {id(p): 0.0 for p in self.peers}  # monotonic time of each peer's next poll
        self._busy: set[int] = set()  # peers being polled
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(self.f.max_concurrency, len(self.peers) or 1)),
                                        thread_name_prefix="fleet")

    # -- polling -------------------------------------------------------------
    def start(self) -> None:
        if self.peers and self._thread is None:
            log.info("fleet view: polling %d peer(s) every %g s", len(self.peers), self.f.poll_interval_seconds)
            self._thread = threading.Thread(target=self._loop, name="fleet", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=self.f.timeout_seconds * 2 + 1)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _loop(self) -> None:
        """Each peer on its own schedule: polled every
        ``poll_interval_seconds`` from the end of its last poll, however
        long the others take (at most ``max_concurrency`` at once)."""
        while not self._stop.is_set():
            now = time.monotonic()
            for p in self.peers:
                if id(p) not in self._busy and now >= self._due[id(p)]:
                    self._busy.add(id(p))
                    self._pool.submit(self._poll_then_schedule, p)
            self._stop.wait(min(0.25, self.f.poll_interval_seconds / 4))

    def _poll_then_schedule(self, peer: Peer) -> None:
        try:
            self._poll(peer)
        except Exception:  # pragma: no cover - never let the poller die
            log.exception("fleet poll failed unexpectedly")
        finally:
            self._due[id(peer)] = time.monotonic() + self.f.poll_interval_seconds
            self._busy.discard(id(peer))

    def poll_once(self) -> None:
        """Poll every peer once (bounded concurrency); returns when all have
        answered or failed."""
        for fut in [self._pool.submit(self._poll, p) for p in self.peers]:
            try:
                fut.result()
            except Exception:  # pragma: no cover - never let the poller die
                log.exception("fleet poll failed unexpectedly")

    def _get(self, url: str) -> dict:
        """GET ``url`` (JSON) under one deadline for the whole request
        (``fleet.timeout_seconds``: connect, TLS, head and body together; a
        peer trickling its answer is cut there), at most ``MAX_ANSWER_BYTES``,
        no redirects (a 3xx is refused: credentials go to the configured
        peer only). Raises ``OSError`` (timeouts included), ``ValueError``
        (:class:`Refused` for an answer over the bounds) or
        ``http.client.HTTPException``."""
        parts = urlsplit(url)
        timeout = self.f.timeout_seconds
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout,
                                               context=self._ctx or ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
        expired = threading.Event()
        sock = []  # the socket (conn.sock goes None once the response owns it)

        def cut():  # the deadline: whatever read is waiting fails now
            expired.set()
            for sk in sock or ([conn.sock] if conn.sock is not None else []):
                try:
                    sk.shutdown(2)
                except OSError:
                    pass
        timer = threading.Timer(timeout, cut)
        timer.daemon = True
        timer.start()
        try:
            conn.connect()
            sock.append(conn.sock)
            if expired.is_set():
                raise TimeoutError("deadline")
            headers = {"Accept": "application/json"}
            if self._auth:
                headers["Authorization"] = self._auth
            conn.request("GET", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), headers=headers)
            r = conn.getresponse()
            if 300 <= r.status < 400:
                raise Refused(f"redirect refused (HTTP {r.status})")
            if r.status != 200:
                raise urllib.error.HTTPError(url, r.status, r.reason, r.headers, None)
            length = r.getheader("Content-Length")
            if length and length.isdigit() and int(length) > MAX_ANSWER_BYTES:
                raise Refused(f"answer larger than {MAX_ANSWER_BYTES >> 20} MiB")
            body = r.read(MAX_ANSWER_BYTES + 1)
        except (OSError, http.client.HTTPException):
            if expired.is_set():
                raise TimeoutError("deadline") from None
            raise
        finally:
            timer.cancel()
            conn.close()
        if expired.is_set():
            raise TimeoutError("deadline")
        if len(body) > MAX_ANSWER_BYTES:
            raise Refused(f"answer larger than {MAX_ANSWER_BYTES >> 20} MiB")
        data = orjson.loads(body)
        if not isinstance(data, dict):
            raise ValueError("not an exporter's answer")
        return data

    def _poll(self, peer: Peer) -> None:
        try:
            sessions = self._get(peer.url + "/api/v1/sessions")
            rows = sessions.get("sessions")
            if not isinstance(rows, list):
                raise ValueError("not an exporter's answer (no sessions list)")
            if self.max_sessions and len(rows) > self.max_sessions:
                raise Refused(f"more than {self.max_sessions} sessions (metrics.max_sessions)")
            if not all(isinstance(r, dict) for r in rows):
                raise ValueError("not an exporter's answer (no sessions list)")
            rows_json = orjson.dumps(rows)  # outside the lock that /api/v1/fleet is served under
            health = self._get(peer.url + "/api/v1/health")
        except (OSError, ValueError, http.client.HTTPException) as e:  # URLError, HTTPError and timeouts are
            # OSErrors, orjson's error a ValueError, a cut-off answer an HTTPException
            why = _why(e, self.f.timeout_seconds) if isinstance(e, OSError) else (str(e) or type(e).__name__)[:200]
            if isinstance(e, Refused):
                why = "dropped: " + why
            with self._lock:
                was, peer.up, peer.error = peer.up, False, why
                if isinstance(e, Refused):  # what it sent is not shown
                    peer.sessions_json, peer.health, peer.agents, peer.states = b"[]", None, {}, []
            if was is not False:
                log.warning("fleet peer %s is down: %s", peer.url, why)
            return
        name = sessions.get("machine")
        with self._lock:
            was = peer.up
            if isinstance(name, str) and name:
                peer.name = name[:128]
            peer.up, peer.error, peer.last_seen = True, None, time.time()
            peer.ready = bool(sessions.get("ready"))
            peer.sessions_json = rows_json
            dropped = sessions.get("sessions_dropped")
            peer.sessions_dropped = dropped if isinstance(dropped, int) else 0
            peer.health = health
            agents = sessions.get("agents")
            peer.agents = agents if isinstance(agents, dict) else {}
            states = sessions.get("states")
            peer.states = states if isinstance(states, list) else []
        if was is False:
            log.info("fleet peer %s (%s) answers again", peer.url, peer.name)

    # -- serving -------------------------------------------------------------
    def body(self) -> bytes:
        """The body of ``GET /api/v1/fleet`` (see the module doc), JSON. The
        peers' rows are spliced in as kept, not serialised again."""
        sessions, health = self.local()
        now = time.time()
        agents = dict(sessions.get("agents") or {})
        states = list(sessions.get("states") or [])
        machines = [_entry({"machine": self.machine, "url": None, "local": True, "up": True, "last_seen": now,
                            "error": None, "ready": sessions.get("ready"),
                            "sessions_dropped": sessions.get("sessions_dropped"), "health": health},
                           orjson.dumps(sessions.get("sessions") or []))]
        with self._lock:
            for p in self.peers:
                machines.append(p.view(now, 2 * self.f.poll_interval_seconds))
                for k, v in p.agents.items():
                    agents.setdefault(k, v)
                states += [s for s in p.states if s not in states]
        head = orjson.dumps({"machine": self.machine, "now": now, "states": states, "agents": agents})
        return head[:-1] + b',"machines":[' + b",".join(machines) + b"]}"

    def app(self, environ, start_response):
        """WSGI app of ``GET /api/v1/fleet``."""
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Content-Type", "text/plain"), ("Allow", "GET, HEAD")])
            return [b"GET only\n"]
        body = self.body()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                                  ("Cache-Control", "no-store")])
        return [body]
