"""HTTP endpoint: ``/metrics`` (prometheus-client's WSGI app, with OpenMetrics
negotiation), the status page at ``/`` with its JSON under ``/api/v1/`` (see
:mod:`.statuspage`), ``/-/healthy``, ``/-/ready``, and
``POST /hooks/claude_code`` / ``POST /hooks/codex`` for the agents' hook
events (see :mod:`.hooks`).

``--web.config.file`` takes the exporter-toolkit format: ``tls_server_config``
(``cert_file``, ``key_file``, ``client_ca_file``, ``client_auth_type``,
``min_version``, ``max_version``), ``basic_auth_users`` (user: bcrypt hash)
and ``http_server_config.headers``. Keys this exporter cannot honour
(``cipher_suites``, ``curve_preferences``, …) are refused at start rather than
silently ignored: a security setting that does nothing is worse than an error.

Hardening: served by uvicorn (:func:`serve`): the TLS handshake and every
request head are read in the event loop, so silent or trickling clients hold
a descriptor, never a thread; connections are capped below the open-file
limit (:func:`connection_cap`) and a request head and a request each have a
deadline (:class:`Limits`). An unknown user costs the same bcrypt work as a
known one (no user enumeration by timing); passwords bcrypt cannot take
(over 72 bytes) are refused with 401, not a 500. :class:`HostCheck` refuses
foreign ``Host`` and ``Origin`` headers on every route.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import ipaddress
import logging
import os
import ssl
import threading
import time

import bcrypt
import yaml

from . import __version__
from .config import ConfigError
from .exposition import wsgi_app as metrics_wsgi_app

log = logging.getLogger(__name__)


_TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                 "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"": ssl.CERT_NONE, "NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
                "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
_TLS_KEYS = {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version", "max_version"}
#: exporter-toolkit keys this exporter does not implement (refused, never ignored).
_TLS_UNSUPPORTED = {"cert", "key", "client_ca", "cipher_suites", "curve_preferences", "prefer_server_cipher_suites",
                    "client_allowed_sans"}


class WebConfig:
    """Parsed exporter-toolkit web config: ``cert_file``, ``key_file`` (or
    None), ``context`` (the server's ``ssl.SSLContext`` or None), ``users``
    (name → bcrypt hash bytes) and ``headers`` (added to every response)."""

    def __init__(self, cert_file=None, key_file=None, users=None, context=None, headers=None):
        self.cert_file = cert_file
        self.key_file = key_file
        self.users = users or {}
        self.context = context
        self.headers = headers or {}


def _tls_context(path: str, tls: dict) -> ssl.SSLContext:
    where = f"{path}: tls_server_config"
    for key in tls:
        if key in _TLS_UNSUPPORTED:
            raise ConfigError(f"{where}.{key}: not supported by this exporter (remove it)")
        if key not in _TLS_KEYS:
            raise ConfigError(f"{where}.{key}: unknown key (known: {', '.join(sorted(_TLS_KEYS))})")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2  # exporter-toolkit's default
    for key, attr in (("min_version", "minimum_version"), ("max_version", "maximum_version")):
        if tls.get(key) is not None:
            if tls[key] not in _TLS_VERSIONS:
                raise ConfigError(f"{where}.{key}: expected one of {', '.join(_TLS_VERSIONS)}, got {tls[key]!r}")
            setattr(ctx, attr, _TLS_VERSIONS[tls[key]])
    try:
        ctx.load_cert_chain(tls["cert_file"], tls["key_file"])
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"{where}: cannot load cert_file {tls['cert_file']!r} and key_file "
                          f"{tls['key_file']!r}: {getattr(e, 'strerror', None) or e}") from None
    auth = tls.get("client_auth_type") or ""
    if auth not in _CLIENT_AUTH:
        raise ConfigError(f"{where}.client_auth_type: expected one of "
                          f"{', '.join(k for k in _CLIENT_AUTH if k)}, got {auth!r}")
    ca = tls.get("client_ca_file")
    if _CLIENT_AUTH[auth] != ssl.CERT_NONE and not ca:
        raise ConfigError(f"{where}.client_auth_type: {auth} needs client_ca_file")
    if ca and _CLIENT_AUTH[auth] == ssl.CERT_NONE:
        raise ConfigError(f"{where}.client_ca_file: set, but client_auth_type does not verify client certificates")
    if ca:
        try:
            ctx.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"{where}.client_ca_file: cannot load {ca!r}: "
                              f"{getattr(e, 'strerror', None) or e}") from None
    ctx.verify_mode = _CLIENT_AUTH[auth]
    return ctx


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
    if tls and not cert:
        raise ConfigError(f"{path}: tls_server_config: cert_file and key_file are required")
    context = _tls_context(path, tls) if cert else None
    users = data.get("basic_auth_users") or {}
    if not isinstance(users, dict) or not all(isinstance(v, str) for v in users.values()):
        raise ConfigError(f"{path}: basic_auth_users: expected a mapping of user to bcrypt hash")
    for user, hashed in users.items():
        if not hashed.startswith("$2"):
            raise ConfigError(f"{path}: basic_auth_users.{user}: not a bcrypt hash")
        try:
            bcrypt.checkpw(b"", hashed.encode())
        except ValueError:
            raise ConfigError(f"{path}: basic_auth_users.{user}: not a valid bcrypt hash") from None
    http = data.get("http_server_config") or {}
    if not isinstance(http, dict):
        raise ConfigError(f"{path}: http_server_config: expected a mapping")
    for k in http:
        if k not in ("headers", "http2"):
            raise ConfigError(f"{path}: http_server_config.{k}: unknown key (known: headers, http2)")
    headers = http.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) and "\n" not in k + v
                                                and "\r" not in k + v for k, v in headers.items()):
        raise ConfigError(f"{path}: http_server_config.headers: expected a mapping of header to value")
    if users and not cert:
        log.warning("%s: basic_auth_users without tls_server_config: passwords cross the network in clear", path)
    return WebConfig(cert, key, {str(u): h.encode() for u, h in users.items()}, context, headers)


#: Seconds a successful basic-auth header is remembered (as a keyed digest).
AUTH_CACHE_SECONDS = 60.0
#: Headers remembered at most (the oldest go first).
AUTH_CACHE_MAX = 1024
#: bcrypt checks run at once (each takes a core for its cost's time; run at
#: a lower CPU priority where the OS allows), and requests waiting for one;
#: past that a request is refused with 401 at once.
AUTH_HASHERS, AUTH_WAITING_MAX = 1, 16


def _lower_priority() -> None:
    """This thread runs at nice 10 (Linux: per thread), so that a
    wrong-password flood's bcrypt yields the CPU to scrapes and hooks."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):
        pass


class _Auth:
    """HTTP basic auth against bcrypt hashes. Successful headers are
    remembered for ``AUTH_CACHE_SECONDS`` as an HMAC-SHA-256 of the header
    under a key made at start (bcrypt is deliberately slow; nothing in clear,
    nothing an attacker could precompute); an unknown user is checked against
    a dummy hash of the same cost. At most ``AUTH_HASHERS`` bcrypt checks
    run at once (:meth:`check` waits for one; :func:`auth_gate` never lets
    a request wait in a worker thread)."""

    def __init__(self, users: dict[str, bytes]):
        self.users = users
        self._ok: dict[bytes, float] = {}  # digest of a header -> monotonic expiry
        self._key = os.urandom(32)
        self._lock = threading.Lock()
        self._hashers = threading.BoundedSemaphore(AUTH_HASHERS)
        self._dummy = None
        if users:
            salt = next(iter(users.values()))[:29]  # $2b$NN$ + 22 salt characters: the same cost
            try:
                self._dummy = bcrypt.hashpw(os.urandom(16).hex().encode(), salt)
            except ValueError:
                self._dummy = bcrypt.hashpw(b"x", bcrypt.gensalt())

    def _digest(self, header: str) -> bytes:
        return hmac.new(self._key, header.encode("utf-8", "surrogateescape"), hashlib.sha256).digest()

    def cached(self, header: str | None) -> bool:
        """``header`` passed :meth:`check` less than ``AUTH_CACHE_SECONDS``
        ago (or no users are configured). Cheap: no bcrypt."""
        if not self.users:
            return True
        if not header:
            return False
        key = self._digest(header)
        with self._lock:
            until = self._ok.get(key)
            if until is not None and until < time.monotonic():
                del self._ok[key]
                until = None
        return until is not None

    def check(self, header: str | None) -> bool:
        if self.cached(header):
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, sep, password = base64.b64decode(header[6:], validate=True).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        if not sep:
            return False
        hashed = self.users.get(user)
        with self._hashers:
            try:
                ok = bcrypt.checkpw(password.encode(), hashed or self._dummy) and hashed is not None
            except ValueError:  # e.g. longer than bcrypt's 72 bytes
                return False
        if ok:
            with self._lock:
                self._ok[self._digest(header)] = time.monotonic() + AUTH_CACHE_SECONDS
                while len(self._ok) > AUTH_CACHE_MAX:
                    del self._ok[next(iter(self._ok))]
        return ok


def auth_gate(app, users: dict[str, bytes], headers: dict | None = None):
    """ASGI middleware: basic auth (``users``: name -> bcrypt hash) before a
    worker thread is taken. A header remembered by :meth:`_Auth.cached` passes
    in the event loop; another is checked by bcrypt in a pool of
    ``AUTH_HASHERS`` threads of its own, with at most ``AUTH_WAITING_MAX``
    requests waiting; past that, and on a wrong password, 401 is answered
    from the event loop. A wrong-password flood costs at most one core of
    bcrypt (at nice 10) and never delays a scrape whose credentials passed before. Sets
    ``scope["cae.authenticated"]`` for :func:`make_app`; ``headers`` go on
    its 401 replies too (``http_server_config.headers``). Returns ``(app,
    auth)``."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    auth = _Auth(users)
    if not users:
        return app, auth
    pool = ThreadPoolExecutor(AUTH_HASHERS, thread_name_prefix="bcrypt", initializer=_lower_priority)
    waiting = [0]
    extra = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]

    async def gate(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        raw = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), None)
        header = raw.decode("latin-1") if raw is not None else None
        ok = auth.cached(header)
        if not ok and header and waiting[0] < AUTH_WAITING_MAX:
            waiting[0] += 1
            try:
                ok = await asyncio.get_running_loop().run_in_executor(pool, auth.check, header)
            finally:
                waiting[0] -= 1
        if not ok:
            body = b"Unauthorized\n"
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"www-authenticate", b'Basic realm="coding-agent-exporter"'),
                                    (b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
                        + extra})
            await send({"type": "http.response.body", "body": body})
            return
        scope = dict(scope, **{"cae.authenticated": True})
        return await app(scope, receive, send)

    return gate, auth


#: A refused hook body up to this size is read (and dropped) before the 413,
#: so the agent's HTTP client sees the reply instead of a broken pipe.
_DRAIN_MAX_BYTES = 64 << 20


def hooks_app(inbox, max_body_bytes: int, secret: str | None = None, max_skew: float = 30.0,
              host_check: "HostCheck | None" = None, headers: dict | None = None, refused=None):
    """ASGI app for ``POST /hooks/<provider>``, run in the server's event
    loop (:func:`serve` routes ``/hooks/`` to it, inside basic auth and
    :func:`whole_bodies`): the body is the hook's JSON exactly as the agent
    sends it, with ``Content-Type: application/json`` and, when ``secret``
    is set, the secret in the ``X-Coding-Agent-Hook-Token`` header
    (:data:`.hooks.TOKEN_HEADER`). It answers 200 with an empty body when
    taken, only once it is on disk (:mod:`.hookjournal`; Claude Code reads an
    empty 2xx reply as success with no decision): the request waits for the
    journal's flush without holding a thread, and the reader thread applies
    it. 503 when it cannot be saved, 400 for a body that is not a hook event,
    401 without the secret, 404 for an unknown agent, 405 for another method,
    413 past ``max_body_bytes``, 415 for another content type (a browser's
    ``no-cors`` request can only send ``text/plain`` and form types), 429
    when the inbox is full. A time header (``X-Coding-Agent-Hook-Time``,
    Unix seconds) more than ``max_skew`` seconds from now is ignored
    (received now). Every refusal is counted on
    ``coding_agent_hook_errors_total``; never a 5xx but the 503. Before
    that, as on every route (:func:`make_app`): ``host_check`` (421 for a
    ``Host`` not allowed, 403 for a foreign ``Origin``, counted on
    ``refused`` by reason); ``headers`` go on every reply
    (``http_server_config.headers``)."""
    from .hooks import TIME_HEADER, TOKEN_HEADER
    from .providers import PROVIDER_MODULES

    time_key, token_key = TIME_HEADER.lower().encode(), TOKEN_HEADER.lower().encode()
    want = secret.encode() if secret else None
    check = host_check or HostCheck()
    extra = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    warned = [0.0]

    async def reply(send, status: int, text: bytes = b"", reason: str | None = None):
        if reason is not None and refused is not None:
            refused.labels(reason).inc()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(text)).encode())]
                    + extra})
        await send({"type": "http.response.body", "body": text})

    async def app(scope, receive, send):
        head: dict[bytes, str] = {}
        for k, v in scope.get("headers", ()):  # repeated headers joined with "," (as WSGI environ has them)
            v = v.decode("latin-1")
            head[k] = head[k] + "," + v if k in head else v
        parts, kept, more = [], 0, True
        while more:  # whole already (whole_bodies): one message
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            if kept <= max_body_bytes and chunk:
                parts.append(chunk[:max_body_bytes + 1 - kept])
                kept += len(parts[-1])
            more = message.get("more_body", False)
        host = head.get(b"host")
        if not check.host_ok(host):
            return await reply(send, 421, b"Host not allowed (web.allowed_hosts)\n", "host")
        if not check.origin_ok(head.get(b"origin"), scope.get("scheme", "http"), host):
            return await reply(send, 403, b"cross-origin request refused\n", "origin")
        provider = scope.get("path", "")[len("/hooks/"):]
        if not hasattr(PROVIDER_MODULES.get(provider), "project_hook"):  # no such agent, or no hooks (Pi)
            inbox.metrics.hook_errors.labels("unknown_agent").inc()
            return await reply(send, 404, b"unknown agent\n")
        if scope.get("method") != "POST":
            return await reply(send, 405, b"POST a hook event\n")
        if want is not None and not hmac.compare_digest(head.get(token_key, "").encode("latin-1", "replace"), want):
            inbox.metrics.hook_errors.labels("unauthorized").inc()
            now = time.monotonic()
            if now - warned[0] > 60:  # once a minute: a hook set up for another state_dir keeps trying
                warned[0] = now
                log.warning("hook delivery refused: no or wrong %s (hooks set up before the state_dir's "
                            "hook-secret changed? run `coding-agent-exporter hooks install` again)", TOKEN_HEADER)
            return await reply(send, 401, b"hook secret missing or wrong\n")
        ctype = head.get(b"content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            inbox.metrics.hook_errors.labels("not_json_content_type").inc()
            return await reply(send, 415, b"send Content-Type: application/json\n")
        declared = head.get(b"content-length")
        if declared is not None and not declared.isdigit():
            inbox.metrics.hook_errors.labels("invalid_json").inc()
            return await reply(send, 400, b"bad Content-Length\n")
        if (int(declared) if declared is not None else kept) > max_body_bytes:
            inbox.metrics.hook_errors.labels("too_large").inc()
            return await reply(send, 413, b"hook body too large\n")
        try:
            at = float(head.get(time_key) or "nan")
        except ValueError:
            at = float("nan")
        if not abs(at - time.time()) <= max_skew:  # NaN included
            at = None
        error = await inbox.receive_async(provider, b"".join(parts), at)
        if error is None:
            return await reply(send, 200)
        if error == "too_large":
            return await reply(send, 429, b"busy\n")
        if error == "unsaved":
            return await reply(send, 503, b"cannot save the hook event\n")
        return await reply(send, 400, f"not a hook event: {error}\n".encode())

    return app


def asgi_routes(routes: dict, app):
    """ASGI dispatch by path, as :func:`make_app` routes: a key ending in
    ``/`` takes every path under it (the longest first), any other key that
    path only (before any prefix). A value is an ASGI app, or None for
    ``app`` (a path under a prefix that stays with the WSGI routes); every
    other request goes to ``app``."""
    exact = {k: v for k, v in routes.items() if not k.endswith("/")}
    prefixes = sorted(((k, v) for k, v in routes.items() if k.endswith("/")), key=lambda kv: -len(kv[0]))

    async def dispatch(scope, receive, send):
        if scope["type"] == "http":
            path = scope.get("path", "")
            route = exact[path] if path in exact else next((v for k, v in prefixes if path.startswith(k)), app)
            return await (route or app)(scope, receive, send)
        return await app(scope, receive, send)

    return dispatch


def inline_wsgi(app):
    """An ASGI app that runs the WSGI ``app`` in the event loop itself, for
    routes that answer from memory in a few milliseconds (``/metrics``, the
    health checks). A thread of the pool costs two hand-offs a request (the
    loop wakes a worker, the worker wakes the loop to send), and on two busy
    cores each wake-up waits for the scheduler: that, not the render, was
    most of a scrape's time. The body (already whole: :func:`whole_bodies`)
    is the app's ``wsgi.input``; what the app returns is sent in one piece; an
    exception is logged and answered 500, as a2wsgi does."""
    import io

    from a2wsgi.wsgi import build_environ

    async def run(scope, receive, send):
        parts, more = [], True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            parts.append(message.get("body", b""))
            more = message.get("more_body", False)
        head, chunks = [], []

        def start_response(status, headers, exc_info=None):
            head[:] = [int(status.split(" ", 1)[0]),
                       [(k.strip().encode("latin-1").lower(), v.strip().encode("latin-1")) for k, v in headers]]
            return chunks.append

        try:
            body = app(build_environ(scope, io.BytesIO(b"".join(parts))), start_response)
            try:
                chunks.extend(body)
            finally:
                getattr(body, "close", lambda: None)()
        except Exception:
            log.exception("error answering %s", scope.get("path"))
            head[:], chunks[:] = [500, [(b"content-type", b"text/plain")]], [b"Internal Server Error\n"]
        await send({"type": "http.response.start", "status": head[0], "headers": head[1]})
        await send({"type": "http.response.body", "body": b"".join(chunks)})

    return run


def _host_name(value: str) -> str:
    """The host part of a ``Host`` header or an origin's netloc (no port, no
    brackets, lower case, no trailing dot)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    host, sep, port = value.rpartition(":")
    if sep and port.isdigit() and ":" not in host:
        value = host
    return value.rstrip(".")


class HostCheck:
    """Which ``Host`` a request may name, and which ``Origin`` it may come
    from (DNS rebinding and cross-site requests; issue 22).

    Allowed hosts: any IP address literal (a rebinding attack needs a name),
    ``localhost`` and ``*.localhost``, this machine's name, the listen
    address's host, and ``allowed`` (``web.allowed_hosts``; ``"*"``: any).
    A request with no ``Host`` (HTTP/1.0) passes. An ``Origin`` header
    (browsers send it on every cross-origin request and on same-origin
    POSTs) must name the very scheme and ``Host`` the request was sent to;
    ``null`` never passes."""

    def __init__(self, listen_host: str = "", allowed=()):
        import socket

        names = {str(a).lower().rstrip(".") for a in allowed}
        self.any = "*" in names
        names |= {"localhost", _host_name(listen_host)} if listen_host else {"localhost"}
        name = socket.gethostname()  # not getfqdn(): a reverse lookup can hang the start for seconds
        if name:
            names.add(name.lower().rstrip("."))
        self.names = names - {"", "0.0.0.0", "::"}

    def host_ok(self, host: str | None) -> bool:
        """``host`` (a ``Host`` header value, or None) is allowed."""
        if host is None or self.any:
            return True
        name = _host_name(host)
        if name in self.names or name.endswith(".localhost"):
            return True
        try:
            ipaddress.ip_address(name)
            return True
        except ValueError:
            return False

    @staticmethod
    def origin_ok(origin: str | None, scheme: str, host: str | None) -> bool:
        """``origin`` (an ``Origin`` header, or None) is the request's own."""
        if origin is None:
            return True
        return host is not None and origin.strip().lower() == f"{scheme}://{host.strip().lower()}"


def _head_as_get(inner):
    """``inner`` (a WSGI app that answers GET only: prometheus_client's
    answers HEAD with 405) with HEAD answered as GET is, headers and all,
    without the body (RFC 9110 9.3.2)."""
    def app(environ, start_response):
        if environ.get("REQUEST_METHOD") != "HEAD":
            return inner(environ, start_response)
        body = inner({**environ, "REQUEST_METHOD": "GET"}, start_response)
        try:
            for _chunk in body:
                pass
        finally:
            if hasattr(body, "close"):
                body.close()
        return [b""]
    return app


def make_app(registry, telemetry_path: str, ready, users=None, headers=None, status=None,
             host_check: HostCheck | None = None, routes: dict | None = None, refused=None):
    """The WSGI application. ``ready()`` tells whether the first scan is done;
    ``headers`` are added to every response (the hook routes are ASGI,
    :func:`hooks_app`, given to :func:`serve`); ``status`` the WSGI app of
    ``/`` and ``/api/v1/*`` (:func:`.statuspage.status_app`), or None for a
    plain landing page. ``routes`` adds WSGI apps by path: a key ending in
    ``/`` takes every path under it, any other key that path only.

    Before any route: basic auth (``users``), then ``host_check``
    (:class:`HostCheck`; default: loopback names and IP addresses only): a
    ``Host`` not allowed gets 421, a foreign ``Origin`` 403, both counted on
    ``refused`` (a ``Counter`` labelled by reason) when given."""
    metrics_app = _head_as_get(metrics_wsgi_app(registry))  # prometheus-client's output, from cached line prefixes
    auth = _Auth(users or {})
    check = host_check or HostCheck()
    extra = list((headers or {}).items())
    landing = (
        "<html><head><title>coding-agent-exporter</title></head><body>"
        f"<h1>coding-agent-exporter {html.escape(__version__)}</h1>"
        f'<p><a href="{html.escape(telemetry_path)}">Metrics</a></p></body></html>'
    ).encode()

    def text(code: str, body: bytes, ctype: str = "text/plain"):
        def app(environ, start_response):
            start_response(code, [("Content-Type", ctype)])
            return [body]
        return app

    def ready_app(environ, start_response):
        if ready():
            return text("200 OK", b"Ready\n")(environ, start_response)
        return text("503 Service Unavailable", b"Reading transcripts\n")(environ, start_response)

    table = {telemetry_path: metrics_app, "/-/healthy": text("200 OK", b"Healthy\n"), "/-/ready": ready_app,
             "/": status or text("200 OK", landing, "text/html; charset=utf-8")}
    if status is not None:
        table["/api/"] = status
    table.update(routes or {})
    exact = {k: v for k, v in table.items() if not k.endswith("/") or k == "/"}
    prefixes = sorted(((k, v) for k, v in table.items() if k.endswith("/") and k != "/"), key=lambda kv: -len(kv[0]))
    not_found = text("404 Not Found", b"Not found\n")

    def refuse(reason: str, code: str, body: bytes, start_response):
        if refused is not None:
            refused.labels(reason).inc()
        start_response(code, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]

    def app(environ, start_response):
        if extra:
            inner = start_response

            def start_response(status, hdrs, exc_info=None):
                return inner(status, list(hdrs) + extra, exc_info)
        if not (environ.get("asgi.scope") or {}).get("cae.authenticated") \
                and not auth.check(environ.get("HTTP_AUTHORIZATION")):
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="coding-agent-exporter"'),
                                                 ("Content-Type", "text/plain")])
            return [b"Unauthorized\n"]
        host = environ.get("HTTP_HOST")
        if not check.host_ok(host):
            return refuse("host", "421 Misdirected Request", b"Host not allowed (web.allowed_hosts)\n",
                          start_response)
        if not check.origin_ok(environ.get("HTTP_ORIGIN"), environ.get("wsgi.url_scheme", "http"), host):
            return refuse("origin", "403 Forbidden", b"cross-origin request refused\n", start_response)
        path = environ.get("PATH_INFO") or "/"
        route = exact.get(path)
        if route is None:
            route = next((v for k, v in prefixes if path.startswith(k)), not_found)
        return route(environ, start_response)

    return app


class Limits:
    """What one client may hold of the server (config ``web.*``):
    ``max_connections`` open at once (capped further by the open-file
    limit, keeping descriptors for transcript files: :func:`connection_cap`),
    ``header_timeout`` seconds from connecting (or from the first byte after
    a kept-alive response) to a complete request head, ``request_timeout``
    seconds from the head to the end of the response (body included),
    ``keep_alive_timeout`` seconds idle between requests."""

    def __init__(self, max_connections: int = 500, header_timeout: float = 10.0, request_timeout: float = 30.0,
                 keep_alive_timeout: float = 5.0, body_timeout: float = 10.0, max_body_bytes: int = 4 << 20):
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.request_timeout = request_timeout
        self.keep_alive_timeout = keep_alive_timeout
        #: Seconds from the head to the end of its body (at most three
        #: quarters of ``request_timeout``, so the 408 goes out first).
        self.body_timeout = min(body_timeout, request_timeout * 0.75)
        #: Body bytes kept for a route (the largest route limit); more is
        #: read and dropped, and the route answers 413 from the length.
        self.max_body_bytes = max_body_bytes


#: Listen backlog: connections the kernel queues before ``accept`` (a burst
#: of hooks at once; Claude Code's HTTP hook gives up after 5 s).
BACKLOG = 1024
#: Threads running the WSGI app (every route answers in milliseconds).
APP_THREADS = 8
#: Connections asyncio accepts per wake-up (it uses the listen backlog for
#: this, so the backlog is set again after start): few, so that a flood can
#: never take the descriptors kept for files before the cap closes some.
ACCEPT_BATCH = 8


#: Body bytes held at once by requests still receiving theirs (all
#: connections together); past it a request gets 503 and is closed.
BODY_BUDGET_BYTES = 64 << 20


def whole_bodies(app, limits: Limits, refused=None):
    """ASGI middleware: the request body is read whole in the event loop,
    under one deadline for the body (``limits.body_timeout`` seconds, not per
    read), before the WSGI app gets a thread. A body not complete within it
    gets ``408 Request Timeout`` and the connection is closed (counted as
    ``body_timeout`` on ``refused``, a ``Counter`` by reason): a client
    trickling a byte a second holds a descriptor, never one of the
    ``APP_THREADS``. Up to ``limits.max_body_bytes + 1`` bytes are kept (the
    route refuses larger ones with 413); the rest is read and dropped, up to
    ``_DRAIN_MAX_BYTES`` (so the sender sees the 413; a larger declared
    length is not read at all). All requests together keep at most
    ``BODY_BUDGET_BYTES`` (then 503). uvicorn has no body deadline of its
    own; its ``receive`` is awaited here under ``asyncio.timeout``."""
    import asyncio

    held = [0]
    keep = limits.max_body_bytes + 1

    async def refuse(send, status: int, reason: str, text: bytes):
        if refused is not None:
            refused.labels(reason).inc()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(text)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": text})

    async def middleware(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        declared = next((v for k, v in scope.get("headers", ()) if k == b"content-length"), b"")
        if declared.isdigit() and int(declared) > _DRAIN_MAX_BYTES:
            return await app(scope, _replay(b"", receive), send)  # 413 from the length, nothing read
        parts, kept, read, more = [], 0, 0, True
        try:
            async with asyncio.timeout(limits.body_timeout):
                while more:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    chunk = message.get("body", b"")
                    more = message.get("more_body", False)
                    read += len(chunk)
                    if kept < keep and chunk:
                        chunk = chunk[:keep - kept]
                        if held[0] + len(chunk) > BODY_BUDGET_BYTES:
                            return await refuse(send, 503, "body_budget", b"busy: too many bodies at once\n")
                        parts.append(chunk)
                        kept += len(chunk)
                        held[0] += len(chunk)
                    if read > _DRAIN_MAX_BYTES:
                        break
        except TimeoutError:
            return await refuse(send, 408, "body_timeout", b"request body not complete in time\n")
        finally:
            held[0] -= kept
        await app(scope, _replay(b"".join(parts), receive), send)

    return middleware


def _replay(body: bytes, receive):
    """An ASGI ``receive`` that gives ``body`` as the whole request body,
    then passes on to the server's (a disconnect)."""
    given = [False]

    async def replay():
        if not given[0]:
            given[0] = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class _QuietUvicorn(logging.Filter):
    """uvicorn's own log lines: start and stop chatter and per-request
    complaints a client can cause at will go to debug, not to the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or "graceful shutdown" in record.getMessage():
            log.debug("uvicorn: %s", record.getMessage())
            return False
        return True


def connection_cap(wanted: int) -> int:
    """``wanted`` connections, at most what the open-file limit leaves after
    keeping a quarter of it (at least 64 descriptors) for transcript files,
    the watcher and the state files: sockets can never use the descriptors
    reading needs. At least 8."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return wanted
    if soft == getattr(resource, "RLIM_INFINITY", -1) or soft <= 0:
        return wanted
    return max(8, min(wanted, soft - max(64, soft // 4)))


#: Bytes a request head may take (request line and headers); more is
#: answered 400 and the connection closed.
MAX_HEAD_BYTES = 64 * 1024


def _protocol_base():
    """uvicorn's httptools protocol (llhttp, a C parser: about a third less
    CPU a request than h11's, measured with the hook flood), or its h11 one
    where httptools is not installed."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return HttpToolsProtocol
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol


def _protocol_class(limits: Limits, cap: int):
    """uvicorn's HTTP protocol (:func:`_protocol_base`) with the deadlines,
    the head limit and the connection cap of ``limits``: a connection that
    has not sent a whole request head within ``header_timeout`` (idle or
    trickling a byte a second) is closed, as is a request whose body and
    response take longer than ``request_timeout``; a head past
    :data:`MAX_HEAD_BYTES` gets 400; with ``cap`` connections open, a new one
    closes the oldest connection that has no request in progress (or itself,
    when every one has): idle connections can never keep a scrape or a hook
    out."""

    base = _protocol_base()

    class Protocol(base):
        _deadline = None
        _phase = None  # "head": waiting for a whole request head; "request": its body and response
        _born = 0.0
        _head_bytes = 0

        def _arm(self, phase, seconds: float) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._phase = phase
            self._deadline = self.loop.call_later(seconds, self._expire) if phase and seconds else None

        def _expire(self) -> None:
            self._deadline = None
            if self.transport is not None and not self.transport.is_closing():
                log.debug("connection from %s closed: its request took longer than web.%s",
                          (self.client or ("?",))[0],
                          "header_timeout_seconds" if self._phase == "head" else "request_timeout_seconds")
                self.transport.close()

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._born = time.monotonic()
            open_ = [c for c in self.connections if c.transport is not None and not c.transport.is_closing()]
            if len(open_) > cap:
                idle = [c for c in open_ if c is not self and getattr(c, "_phase", None) != "request"]
                victim = min(idle, key=lambda c: c._born) if idle else self
                victim.transport.close()
                if victim is self:
                    return
            self._arm("head", limits.header_timeout)

        def data_received(self, data: bytes) -> None:
            before = self.cycle
            if self._phase is None:
                self._arm("head", limits.header_timeout)  # the next request on a kept-alive connection
            super().data_received(data)
            if self.cycle is not before and self._phase == "head":
                self._arm("request", limits.request_timeout)  # the head is in: body and response from here

        if hasattr(base, "on_header"):  # httptools (llhttp) has no head limit of its own; h11 has
            def on_message_begin(self) -> None:
                self._head_bytes = 0
                super().on_message_begin()

            def on_url(self, url: bytes) -> None:
                self._count_head(len(url))
                super().on_url(url)

            def on_header(self, name: bytes, value: bytes) -> None:
                self._count_head(len(name) + len(value) + 4)
                super().on_header(name, value)

            def _count_head(self, n: int) -> None:
                self._head_bytes += n
                if self._head_bytes > MAX_HEAD_BYTES:  # the parser answers 400 and closes
                    raise ValueError("request head too large")

        def on_response_complete(self) -> None:
            self._arm(None, 0)
            super().on_response_complete()

        def connection_lost(self, exc) -> None:
            self._arm(None, 0)
            super().connection_lost(exc)

    return Protocol


class Server:
    """The HTTP server (uvicorn, with the WSGI app run by a2wsgi in
    ``APP_THREADS`` threads) on its own thread. ``server_address`` is the
    bound ``(host, port, …)``; :meth:`shutdown` stops it."""

    def __init__(self, uv, sock, thread):
        self._uv, self._sock, self._thread = uv, sock, thread
        self.server_address = sock.getsockname()
        self.server_port = self.server_address[1]

    def shutdown(self) -> None:
        self._uv.should_exit = True
        self._thread.join(timeout=10)

    def server_close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass


def parse_listen_address(addr: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9877`` for IPv6, ``:9877`` for all interfaces)
    to ``(host, port)``; raises ``ValueError`` with a readable message."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--web.listen-address: expected HOST:PORT, got {addr!r}")
    if not 0 <= int(port) <= 65535:
        raise ValueError(f"--web.listen-address: port {port} is out of range (0-65535)")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def serve(app, address: str, web: WebConfig, limits: Limits | None = None, refused=None,
          routes: dict | None = None) -> Server:
    """Start serving the WSGI ``app`` in a daemon thread; returns the
    :class:`Server`. Raises ``OSError`` when the address is taken.

    uvicorn (asyncio, h11) rather than a thread per connection: a thousand
    idle or trickling connections cost a descriptor each, no thread, and
    never delay a scrape (measured on 2 cores with 200 connections sending a
    byte a second: a thread pool's GET timed out after 20 s, uvicorn's took
    2 ms). Chunked request bodies, keep-alive and the TLS handshake (in the
    event loop: a silent client blocks nobody) come with it; the TLS context
    is ours (:func:`load_web_config`: client certificates, versions).
    Bodies are read whole in the event loop before a thread runs the app
    (:func:`whole_bodies`); ``refused`` counts its refusals. ``routes``:
    ASGI apps by path prefix (:func:`asgi_routes`) run in the event loop
    itself, after basic auth and :func:`whole_bodies` (the hooks:
    :func:`hooks_app`)."""
    import socket

    import uvicorn
    from a2wsgi import WSGIMiddleware

    limits = limits or Limits()
    host, port = parse_listen_address(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    cap = connection_cap(limits.max_connections)
    inner = WSGIMiddleware(app, workers=APP_THREADS)
    if routes:
        inner = asgi_routes(routes, inner)
    gated, _auth = auth_gate(whole_bodies(inner, limits, refused), web.users, web.headers)
    config = uvicorn.Config(gated, http=_protocol_class(limits, cap),
                            lifespan="off", log_config=None, access_log=False, backlog=ACCEPT_BATCH,
                            timeout_keep_alive=limits.keep_alive_timeout or 0.001, server_header=False, date_header=False, interface="asgi3", ws="none",
                            h11_max_incomplete_event_size=MAX_HEAD_BYTES, timeout_graceful_shutdown=2)
    config.load()
    if web.cert_file:
        config.ssl = web.context or _tls_context("--web.config.file",
                                                 {"cert_file": web.cert_file, "key_file": web.key_file})
    uv_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _QuietUvicorn) for f in uv_log.filters):
        uv_log.addFilter(_QuietUvicorn())
    uv = uvicorn.Server(config)
    t = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, name="http", daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while not uv.started and t.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    sock.listen(BACKLOG)  # asyncio listened with ACCEPT_BATCH: the kernel's queue gets the real backlog
    return Server(uv, sock, t)
