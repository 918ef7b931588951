"""HTTP endpoint: ``/metrics`` (prometheus-client's WSGI app, with OpenMetrics
negotiation), a landing page at ``/``, ``/-/healthy`` and ``/-/ready``.

``--web.config.file`` takes the exporter-toolkit format: ``tls_server_config``
(``cert_file``, ``key_file``) and ``basic_auth_users`` (user: bcrypt hash).
"""

from __future__ import annotations

import base64
import html
import logging
import ssl
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import bcrypt
import yaml
from prometheus_client import make_wsgi_app

from . import __version__
from .config import ConfigError

log = logging.getLogger(__name__)


class WebConfig:
    """Parsed exporter-toolkit web config: ``cert_file``, ``key_file`` (or
    None) and ``users`` (name → bcrypt hash bytes)."""

    def __init__(self, cert_file=None, key_file=None, users=None):
        self.cert_file = cert_file
        self.key_file = key_file
        self.users = users or {}


def load_web_config(path: str | None) -> WebConfig:
    """Read a ``--web.config.file``; raises :class:`ConfigError` naming the
    file and key on a bad one."""
    if not path:
        return WebConfig()
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level: expected a mapping")
    known = {"tls_server_config", "basic_auth_users", "http_server_config"}
    for key in data:
        if key not in known:
            raise ConfigError(f"{path}: {key}: unknown key (known: {', '.join(sorted(known))})")
    tls = data.get("tls_server_config") or {}
    if not isinstance(tls, dict):
        raise ConfigError(f"{path}: tls_server_config: expected a mapping")
    cert, key = tls.get("cert_file"), tls.get("key_file")
    if bool(cert) != bool(key):
        raise ConfigError(f"{path}: tls_server_config: cert_file and key_file go together")
    users = data.get("basic_auth_users") or {}
    if not isinstance(users, dict) or not all(isinstance(v, str) for v in users.values()):
        raise ConfigError(f"{path}: basic_auth_users: expected a mapping of user to bcrypt hash")
    for user, hashed in users.items():
        if not hashed.startswith("$2"):
            raise ConfigError(f"{path}: basic_auth_users.{user}: not a bcrypt hash")
    return WebConfig(cert, key, {str(u): h.encode() for u, h in users.items()})


class _Auth:
    def __init__(self, users: dict[str, bytes]):
        self.users = users
        self._ok: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def check(self, header: str | None) -> bool:
        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:]).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        hashed = self.users.get(user)
        if hashed is None:
            return False
        with self._lock:
            if (user, password) in self._ok:
                return True
        if bcrypt.checkpw(password.encode(), hashed):
            with self._lock:
                self._ok.add((user, password))
            return True
        return False


def make_app(registry, telemetry_path: str, ready, users=None):
    """The WSGI application. ``ready()`` tells whether the first scan is done."""
    metrics_app = make_wsgi_app(registry)
    auth = _Auth(users or {})
    landing = (
        "<html><head><title>coding-agent-exporter</title></head><body>"
        f"<h1>coding-agent-exporter {html.escape(__version__)}</h1>"
        f'<p><a href="{html.escape(telemetry_path)}">Metrics</a></p></body></html>'
    ).encode()

    def app(environ, start_response):
        if not auth.check(environ.get("HTTP_AUTHORIZATION")):
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="coding-agent-exporter"'),
                                                 ("Content-Type", "text/plain")])
            return [b"Unauthorized\n"]
        path = environ.get("PATH_INFO") or "/"
        if path == telemetry_path:
            return metrics_app(environ, start_response)
        if path == "/-/healthy":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"Healthy\n"]
        if path == "/-/ready":
            if ready():
                start_response("200 OK", [("Content-Type", "text/plain")])
                return [b"Ready\n"]
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"Reading transcripts\n"]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [landing]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"Not found\n"]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - wsgiref's signature
        log.debug("%s %s", self.address_string(), format % args)


def parse_listen_address(addr: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9877`` for IPv6, ``:9877`` for all interfaces)
    to ``(host, port)``; raises ``ValueError`` with a readable message."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--web.listen-address: expected HOST:PORT, got {addr!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def serve(app, address: str, web: WebConfig):
    """Start serving in a daemon thread; returns the server (``server_port``
    is the bound port). Raises ``OSError`` when the address is taken."""
    host, port = parse_listen_address(address)
    server_cls = _Server
    if ":" in host:
        import socket

        class _Server6(_Server):
            address_family = socket.AF_INET6

        server_cls = _Server6
    server = make_server(host, port, app, server_class=server_cls, handler_class=_QuietHandler)
    if web.cert_file:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(web.cert_file, web.key_file)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    t = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    t.start()
    return server
