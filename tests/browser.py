"""Headless Chromium driven over the DevTools protocol, standard library only.

Chromium's ``--remote-debugging-pipe`` reads protocol commands from file
descriptor 3 and writes replies and events to descriptor 4, each message
JSON followed by a NUL byte (the transport Puppeteer's ``pipe: true`` uses),
so no websocket client is needed. ``chromium()`` returns None when Debian's
``chromium`` is not installed (tests skip then; ``.ci/run`` installs it).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

#: Flags for a quiet, sandbox-free headless run on a CI machine (root, no GPU,
#: no network of its own).
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--remote-debugging-pipe"]


def chromium() -> str | None:
    """Path of the chromium binary, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium process with a fresh profile. Use as a context
    manager; :meth:`open` gives a :class:`Page`."""

    def __init__(self, binary: str, log_path: str | os.PathLike, flags: list[str] | None = None):
        self.profile = tempfile.mkdtemp(prefix="cae-chromium-")
        a, self._w = os.pipe()
        self._r, b = os.pipe()
        # Above fd 9, so that making them fds 3 and 4 in the child cannot
        # overwrite one with the other; close-on-exec like every fd Python opens.
        to_child, from_child = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (a, b))
        os.close(a)
        os.close(b)

        def fds():  # in the child before exec: the protocol pipes become fds 3 and 4 (inheritable)
            os.dup2(to_child, 3)
            os.dup2(from_child, 4)

        self._log = open(log_path, "ab")
        # close_fds=False: subprocess would close fds 3 and 4 after preexec_fn;
        # every other fd of this process is close-on-exec (PEP 446).
        self.proc = subprocess.Popen([binary, *FLAGS, *(flags or []), f"--user-data-dir={self.profile}", "about:blank"],
                                     close_fds=False, preexec_fn=fds, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "TMPDIR": self.profile})  # its own temp folders go with it
        os.close(to_child)
        os.close(from_child)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict:
        """Send one command and wait for its reply; raises on a protocol error."""
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._next(deadline - time.monotonic())
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def _next(self, timeout: float) -> dict:
        while b"\0" not in self._buf:
            ready, _, _ = select.select([self._r], [], [], max(0.0, timeout))
            if not ready:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium exited ({self.proc.poll()})")
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return json.loads(msg)

    def open(self, url: str, width: int = 1100, height: int = 800) -> "Page":
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        page.viewport(width, height)
        self.call("Page.enable", session=session)
        self.call("Page.navigate", {"url": url}, session=session)
        return page

    def close(self) -> None:
        try:
            os.close(self._w)
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        os.close(self._r)
        self._log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Page:
    """One tab: evaluate JavaScript, emulate media and viewport, screenshot."""

    def __init__(self, browser: Browser, session: str):
        self.browser, self.session = browser, session

    def call(self, method: str, params: dict | None = None) -> dict:
        return self.browser.call(method, params, self.session)

    def js(self, expression: str):
        """The value of a JavaScript expression (JSON-able), awaited if a promise."""
        res = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def viewport(self, width: int, height: int, mobile: bool = False) -> None:
        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                        "deviceScaleFactor": 1, "mobile": mobile})

    def color_scheme(self, scheme: str) -> None:
        """``light`` or ``dark``: what ``prefers-color-scheme`` answers."""
        self.call("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]})

    def screenshot(self, path: str | os.PathLike) -> None:
        """A PNG of the whole page: the viewport's width, down to the end of the body."""
        width, height = self.js("[innerWidth, Math.ceil(document.body.getBoundingClientRect().bottom)]")
        data = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                    "clip": {"x": 0, "y": 0, "width": width, "height": height,
                                                             "scale": 1}})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
