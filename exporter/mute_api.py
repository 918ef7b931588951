"""The mute API (WSGI), behind the same basic auth, ``Host`` and ``Origin``
checks as the status page (:func:`.web.make_app` runs them before any
route: a foreign ``Origin`` gets 403 there):

- ``POST /api/v1/sessions/<provider>/<session_id>/mute`` with
  ``{"seconds": N}`` (0 < N ≤ 31 days) or ``{"until": "next_prompt"}``
  (the mute ends when the session's turn changes); ``DELETE`` of the same
  path unmutes.
- ``POST /api/v1/projects/<project>/mute`` with ``{"seconds": N}``;
  ``DELETE`` unmutes. ``<project>`` is the ``project`` label
  (``metrics.project_label``).
- ``GET /api/v1/mutes``: :meth:`.suppress.Mutes.rows`.

State-changing requests take only ``Content-Type: application/json`` (415
otherwise: a cross-origin form or ``no-cors`` fetch cannot send that type
without a CORS preflight, which this server never grants). Replies: 200
with ``{"muted": …}`` or ``{"unmuted": bool}``, 400 for a bad body, 404
for an unknown provider or session, 405 for another method, 413 for a body
over 4 kB, 503 when ``mutes.json`` cannot be written (nothing changed).
"""

from __future__ import annotations

import math
import time

import orjson

from .providers import PROVIDER_MODULES
from .suppress import Mutes

PREFIX_SESSIONS = "/api/v1/sessions/"
PREFIX_PROJECTS = "/api/v1/projects/"
PATH_MUTES = "/api/v1/mutes"
MAX_BODY = 4096
MAX_SECONDS = 31 * 86400


def mute_app(mutes: Mutes, lookup, on_change=None):
    """WSGI app of the routes above. ``lookup(provider, session_id)`` gives
    the store's session or None; ``on_change()`` is called after a change."""

    def reply(start_response, status: str, body) -> list[bytes]:
        data = orjson.dumps(body) if not isinstance(body, bytes) else body
        ctype = "application/json" if not isinstance(body, bytes) else "text/plain"
        start_response(status, [("Content-Type", ctype), ("Content-Length", str(len(data))),
                                ("Cache-Control", "no-store")])
        return [data]

    def read_body(environ):
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return None, "bad Content-Length"
        if length > MAX_BODY:
            return None, "too large"
        raw = environ["wsgi.input"].read(length) if length > 0 else b""
        if not raw.strip():
            return {}, None
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None, "not JSON"
        return (body, None) if isinstance(body, dict) else (None, "expected a JSON object")

    def app(environ, start_response):
        path = environ.get("PATH_INFO") or ""
        method = environ.get("REQUEST_METHOD", "GET")
        if path == PATH_MUTES:
            if method not in ("GET", "HEAD"):
                return reply(start_response, "405 Method Not Allowed", b"GET only\n")
            return reply(start_response, "200 OK", mutes.rows())
        if not path.endswith("/mute"):
            return reply(start_response, "404 Not Found", b"Not found\n")
        if method not in ("POST", "DELETE"):
            return reply(start_response, "405 Method Not Allowed", b"POST or DELETE\n")
        ctype = (environ.get("CONTENT_TYPE") or "").split(";")[0].strip().lower()
        if ctype != "application/json":
            return reply(start_response, "415 Unsupported Media Type", b"send Content-Type: application/json\n")
        body, err = read_body(environ)
        if err == "too large":
            return reply(start_response, "413 Content Too Large", b"body too large\n")
        if err:
            return reply(start_response, "400 Bad Request", {"error": err})
        now = time.time()
        if path.startswith(PREFIX_SESSIONS):
            provider, sep, sid = path[len(PREFIX_SESSIONS):-len("/mute")].partition("/")
            if not sep or not sid or provider not in PROVIDER_MODULES:
                return reply(start_response, "404 Not Found", {"error": "unknown provider or session"})
            which, name = "sessions", Mutes.key(provider, sid)
            session = lookup(provider, sid)
            if method == "POST" and session is None:
                return reply(start_response, "404 Not Found", {"error": "no such session"})
        elif path.startswith(PREFIX_PROJECTS):
            which, name, session = "projects", path[len(PREFIX_PROJECTS):-len("/mute")], None
            if not name:
                return reply(start_response, "404 Not Found", {"error": "no project named"})
        else:
            return reply(start_response, "404 Not Found", b"Not found\n")
        try:
            if method == "DELETE":
                gone = mutes.clear(which, name)
                if on_change:
                    on_change()
                return reply(start_response, "200 OK", {"unmuted": gone})
            entry, err = _entry(body, session, now)
            if err:
                return reply(start_response, "400 Bad Request", {"error": err})
            mutes.set(which, name, entry, now)
        except OSError as e:
            return reply(start_response, "503 Service Unavailable", {"error": f"cannot keep the mute: {e.strerror or e}"})
        if on_change:
            on_change()
        return reply(start_response, "200 OK", {"muted": {"which": which[:-1], "name": name, **entry}})

    return app


def _entry(body: dict, session, now: float) -> tuple[dict | None, str | None]:
    """The mute from a request body: ``({"until": t} | {"turn": turn}, None)``
    or ``(None, why it is refused)``."""
    if set(body) - {"seconds", "until"} or len(body) != 1:
        return None, 'give exactly one of {"seconds": N} or {"until": "next_prompt"}'
    if "seconds" in body:
        n = body["seconds"]
        if isinstance(n, bool) or not isinstance(n, (int, float)) or not math.isfinite(n) or not 0 < n <= MAX_SECONDS:
            return None, f"seconds: a number over 0 and at most {MAX_SECONDS}"
        return {"until": now + float(n)}, None
    if body["until"] != "next_prompt":
        return None, 'until: only "next_prompt"'
    if session is None:
        return None, 'until "next_prompt" is for sessions; give a project {"seconds": N}'
    return {"turn": session.status.turn or ""}, None
