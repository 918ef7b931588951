"""Test harness: the real exporter process, a real Apprise receiver on
loopback, and helpers that lay transcripts out as Claude Code and Codex do."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
CASES = FIXTURES / "cases"
TRANSCRIPTS = FIXTURES / "transcripts"


@contextlib.contextmanager
def closed_port():
    """A loopback port that refuses connections for as long as the block runs: bound here (so no other
    process, another xdist worker's server included, can take it) but never listening. Yields the port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


#: exporter-toolkit's line for the address a server bound (Prometheus 2.42, Alertmanager 0.25; level info).
_LISTENING = re.compile(rb'msg="Listening on" address=\S*:(\d+)')


def listening_port(proc: "Proc", timeout: float = 30.0) -> int:
    """The port a Prometheus or Alertmanager started with ``--web.listen-address=127.0.0.1:0`` (and
    ``--log.level=info``) got, from its log line ``msg="Listening on" address=127.0.0.1:PORT``. No
    port is picked before the server binds it, so two xdist workers can never be handed the same one.
    Fails when the process exits first, or after ``timeout`` seconds."""
    def bound():
        with open(proc.log, "rb") as f:
            f.seek(proc.offset)
            m = _LISTENING.search(f.read())
        if m:
            return int(m.group(1))
        if proc.p.poll() is not None:
            raise AssertionError(f"{proc.args[0]} exited with {proc.p.returncode}:\n{proc.tail()}")
        return None
    return wait_for(bound, timeout=timeout, what=f"{Path(proc.args[0]).name} listening")


_RUNS = itertools.count(1)  # numbers the exporters' log files


def wait_for(pred, timeout: float = 10.0, interval: float = 0.05, what: str = "condition"):
    """Poll ``pred`` until it returns a truthy value; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


# -- transcript layout -------------------------------------------------------
def session_id_of(case_file: Path) -> str:
    """The sessionId (Claude) or session_meta id (Codex) inside a case file."""
    text = case_file.read_bytes().decode("utf-8", "replace")
    m = re.search(r'"sessionId":"([^"]+)"', text)
    if m and '"session_meta"' not in text:
        return m.group(1)
    m = re.search(r'"session_meta","payload":\{"id":"([^"]+)"', text)
    assert m, f"no session id in {case_file}"
    return m.group(1)


def claude_path(root: Path, session_id: str, project: str = "-home-dev-proj") -> Path:
    return root / "claude" / "projects" / project / f"{session_id}.jsonl"


def codex_path(root: Path, session_id: str) -> Path:
    return root / "codex" / "sessions" / "2026" / "05" / "01" / f"rollout-2026-05-01T10-00-00-{session_id}.jsonl"


def copilot_path(root: Path, session_id: str) -> Path:
    return root / "copilot" / "session-state" / session_id / "events.jsonl"


def pi_path(root: Path, session_id: str, cwd_folder: str = "--home-dev-proj--") -> Path:
    return root / "pi" / "sessions" / cwd_folder / f"2026-05-01T10-00-00-000Z_{session_id}.jsonl"


def append_lines(path: Path, data: bytes, delay: float) -> None:
    """Append ``data`` one physical line at a time, ``delay`` seconds apart
    (a part may begin mid-line; bytes are written as they are)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    chunks = data.split(b"\n")
    for i, chunk in enumerate(chunks):
        piece = chunk + (b"\n" if i < len(chunks) - 1 else b"")
        if not piece:
            continue
        with open(path, "ab") as f:
            f.write(piece)
        if delay:
            time.sleep(delay)


# -- Apprise receiver --------------------------------------------------------
#: The environment of a server a test starts (Prometheus, Alertmanager): loopback is never proxied.
NO_PROXY_ENV = {**os.environ, "NO_PROXY": "*", "no_proxy": "*"}


class Proc:
    """A server process (``args``) started now in ``cwd``, its output appended to ``log``."""

    def __init__(self, args: list[str], log: Path, cwd: Path):
        self.args, self.log, self.cwd = args, log, cwd
        self.start()

    def start(self) -> None:
        self._f = open(self.log, "ab")
        self.offset = self._f.tell()  # where this run's output begins (:func:`listening_port`)
        self.p = subprocess.Popen(self.args, stdout=self._f, stderr=subprocess.STDOUT, cwd=self.cwd,
                                  stdin=subprocess.DEVNULL, env=NO_PROXY_ENV)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(timeout=10)
        self._f.close()

    def tail(self) -> str:
        """The last 20 lines of its output."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])


class Receiver:
    """A loopback HTTP server that takes Apprise ``json://`` posts.

    ``fail_first`` requests are answered 500 (a receiver that fails, then
    recovers). ``messages`` holds the decoded JSON bodies received with 200.
    """

    def __init__(self, fail_first: int = 0):
        self.messages: list[dict] = []
        self.failed = 0
        self.fail_first = fail_first
        self.received_at: list[float] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                if outer.failed < outer.fail_first:
                    outer.failed += 1
                    self.send_response(500)
                    self.end_headers()
                    return
                try:
                    outer.messages.append(json.loads(body))
                except ValueError:
                    outer.messages.append({"raw": body.decode("utf-8", "replace")})
                outer.received_at.append(time.time())
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"json://127.0.0.1:{self.port}/notify"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# -- the exporter ------------------------------------------------------------
FAST = {
    "sources": {"poll_interval_seconds": 0.5},
    "reducer": {"inferred_settle_seconds": 3.0, "marker_wait_seconds": 6.0, "stall_after_seconds": 60.0,
                "evaluation_interval_seconds": 0.1},
    "alerts": {"settle_seconds": 1.0, "max_age_seconds": 0,
               "retry": {"attempts": 5, "initial_backoff_seconds": 0.2, "max_backoff_seconds": 1.0}},
}


def merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class Exporter:
    """``python -m coding_agent_exporter run`` on tmp roots, with a tmp config and state dir.

    ``root`` holds ``claude/projects``, ``codex/sessions``, ``copilot/session-state``,
    ``pi/sessions`` and ``gemini/tmp`` (Gemini CLI's ``~/.gemini/tmp``).
    """

    def __init__(self, root: Path, config: dict | None = None, receiver: Receiver | None = None,
                 extra_args: list[str] | None = None, env: dict | None = None, prefix: list[str] | None = None,
                 preexec_fn=None, listen: str | None = None, python_args: list[str] | None = None):
        """``prefix``: argv run before Python (e.g. ``unshare …``);
        ``preexec_fn``: for Popen; ``listen``: the listen address ("" for the
        exporter's default); ``python_args``: instead of ``-m coding_agent_exporter``."""
        self.root = root
        self._port: int | None = None  # the port it got (port 0 asked for), read at start from state_dir/listen-url
        cfg = merge(FAST, {
            "sources": {"claude_code": {"paths": [str(root / "claude" / "projects")]},
                        "codex": {"paths": [str(root / "codex" / "sessions")]},
                        "copilot_cli": {"paths": [str(root / "copilot" / "session-state")]},
                        "pi": {"paths": [str(root / "pi" / "sessions")]},
                        "gemini_cli": {"paths": [str(root / "gemini" / "tmp")]}},
            "state_dir": str(root / "state"),
        })
        if receiver is not None:
            cfg = merge(cfg, {"alerts": {"urls": [receiver.url]}})
        self.config = merge(cfg, config or {})
        self.config_path = root / "config.yml"
        self.extra_args = extra_args or []
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.log_path = root / f"exporter-{next(_RUNS)}.log"
        self.prefix = prefix or []
        self.preexec_fn = preexec_fn
        self.listen = listen  # None: 127.0.0.1, port 0 at the first start (then the port it got: a restart keeps it)
        self.python_args = python_args or ["-m", "coding_agent_exporter"]
        self.ready_check = None  # callable replacing the plain-HTTP readiness probe

    def start(self, wait_ready: bool = True, ready_timeout: float = 30.0) -> "Exporter":
        self.root.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config))
        env = dict(os.environ)
        env.pop("CODING_AGENT_EXPORTER_APPRISE_URLS", None)
        if self.env:
            env.update(self.env)
        self._log = open(self.log_path, "ab")
        addr = self.listen if self.listen is not None else "127.0.0.1:0"
        if addr.endswith(":0") and self._port:  # a restart: where it was (as a restarted exporter is)
            addr = f"{addr[:-1]}{self._port}"
        listen = ["--web.listen-address", addr] if addr else []
        if addr.rpartition(":")[2] not in ("", "0"):
            self._port = int(addr.rpartition(":")[2])
        self.listen_url_path().unlink(missing_ok=True)  # (a crashed run's)
        # In the test's own folder: a relative path it writes lands there, never in the checkout.
        self.proc = subprocess.Popen(
            [*self.prefix, sys.executable, *self.python_args, "run", "--config.file", str(self.config_path),
             *listen, *self.extra_args],
            cwd=self.root, stdout=self._log, stderr=subprocess.STDOUT, env=env, preexec_fn=self.preexec_fn)
        if wait_ready:
            wait_for(self.ready_check or self.ready, timeout=ready_timeout, what="exporter ready")
        return self

    def listen_url_path(self) -> Path:
        """``state_dir/listen-url``: where the exporter says which URL it serves on."""
        state_dir = self.config.get("state_dir")
        if state_dir:
            return Path(state_dir).expanduser() / "listen-url"
        env = {**os.environ, **(self.env or {})}
        base = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".local" / "state")
        return Path(base) / "coding-agent-exporter" / "listen-url"

    @property
    def port(self) -> int:
        """The port it serves on: the one it got for port 0 (from
        ``state_dir/listen-url``, waited for), or the one it was given."""
        if self._port is None:
            path = self.listen_url_path()

            def written():
                if self.proc is not None and self.proc.poll() is not None:
                    raise AssertionError(f"exporter exited with {self.proc.returncode}:\n{self.log()}")
                try:
                    return path.read_text().strip()
                except OSError:
                    return None
            if self.proc is None:
                raise AssertionError("the exporter was not started: it has no port yet")
            self._port = int(wait_for(written, timeout=30, what=f"{path}").rpartition(":")[2])
        return self._port

    @port.setter
    def port(self, value: int) -> None:
        self._port = value

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"exporter exited with {self.proc.returncode}:\n{self.log()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, sig: str = "term") -> int:
        if self.proc and self.proc.poll() is None:
            if sig == "kill":
                self.proc.kill()
            else:
                self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "_log", None):
            self._log.close()
        return self.proc.returncode if self.proc else 0

    def secret(self) -> str:
        """The hook secret the exporter made in its state_dir (what ``hooks
        install`` puts into a Claude Code HTTP hook's headers)."""
        return (self.root / "state" / "hook-secret").read_text().strip()

    def hook_headers(self) -> dict:
        """The headers a hook set up by ``hooks install`` sends."""
        return {"Content-Type": "application/json", "X-Coding-Agent-Hook-Token": self.secret()}

    def scrape_text(self, path: str = "/metrics") -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=20) as r:  # a busy machine can starve one scrape for seconds
            return r.read().decode()

    def metrics(self) -> dict:
        """``{(name, frozenset(labels.items())): value}`` of one scrape."""
        out = {}
        for fam in text_string_to_metric_families(self.scrape_text()):
            for s in fam.samples:
                out[(s.name, frozenset(s.labels.items()))] = s.value
        return out

    def value(self, name: str, **labels) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels``."""
        total = 0.0
        for (n, lbls), v in self.metrics().items():
            if n == name and all((k, val) in lbls for k, val in labels.items()):
                total += v
        return total

    def state(self, session_id: str) -> str | None:
        for (n, lbls), v in self.metrics().items():
            if n == "coding_agent_session_state" and ("session_id", session_id) in lbls and v == 1:
                return dict(lbls)["state"]
        return None

    def wait_state(self, session_id: str, state: str, timeout: float = 15.0) -> None:
        try:
            wait_for(lambda: self.state(session_id) == state, timeout=timeout,
                     what=f"session {session_id} to be {state}")
        except AssertionError as e:
            raise AssertionError(f"{e}; now {self.state(session_id)}; exporter log tail:\n"
                                 + "\n".join(self.log().splitlines()[-30:])) from None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
