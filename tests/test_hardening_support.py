"""Shared helpers of the hardening suites (``test_hardening_*.py``); no tests.

- :class:`Daemon`: the real exporter process (``harness.Exporter``) with a
  command prefix (``unshare …``), a ``preexec_fn`` (dropped capabilities), and
  readings of its peak RSS and CPU time from ``/proc``.
- Record makers for Claude Code 2.1.x and Codex ≥0.100 sessions stamped now.
- ``SLOW``: ``CAE_SLOW=1`` turns on the long variants (1 GB input, minutes of
  load, more kill -9 rounds).
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from coding_agent_exporter.courier import SENT_AGAIN
from harness import ROOT, Exporter, Receiver, wait_for  # noqa: F401  (re-exported)

SLOW = os.environ.get("CAE_SLOW", "") not in ("", "0")
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def drop_file_capabilities() -> None:
    """``preexec_fn``: remove CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from
    the bounding set, so that a process started as root (the tests run as
    root) meets file permissions like any other user after ``exec``."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def permissions_apply() -> str | None:
    """None when a child started with :func:`drop_file_capabilities` (or any
    child, when not root) is refused a mode-000 file; else why not."""
    probe = Path(f"/tmp/cae-perm-probe-{os.getpid()}")
    probe.write_text("x")
    probe.chmod(0)
    try:
        pre = drop_file_capabilities if os.geteuid() == 0 else None
        r = subprocess.run([sys.executable, "-c", f"open({str(probe)!r}).read()"], preexec_fn=pre,
                           capture_output=True)
        return None if r.returncode != 0 else "a process could read a mode-000 file (capabilities not droppable)"
    except OSError as e:
        return f"cannot drop capabilities: {e}"
    finally:
        probe.unlink()


class Daemon(Exporter):
    """``harness.Exporter`` (its launch options: ``prefix`` such as
    ``["unshare", "-U", "-r", "sh", "-c", '… exec "$0" "$@"']``,
    ``preexec_fn``, ``listen``, ``python_args``) plus ``scheme`` and process
    readings."""

    def __init__(self, root: Path, *args, scheme: str = "http", **kwargs):
        super().__init__(root, *args, **kwargs)
        self.scheme = scheme

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def status(self) -> dict[str, int]:
        """``/proc/PID/status`` sizes in KiB (VmHWM = peak RSS, VmRSS)."""
        out = {}
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if v.strip().endswith("kB"):
                    out[k] = int(v.split()[0])
        return out

    def peak_rss_mib(self) -> float:
        return self.status()["VmHWM"] / 1024

    def rss_mib(self) -> float:
        return self.status()["VmRSS"] / 1024

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime

    def send(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float = 20.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if getattr(self, "_log", None):
                self._log.close()

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._log.close()


# -- records stamped now --------------------------------------------------------
def iso(t: float | None = None) -> str:
    t = time.time() if t is None else t
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ClaudeSession:
    """Claude Code 2.1.x records of one session, one call per record."""

    def __init__(self, sid: str, cwd: str = "/home/dev/proj"):
        self.sid, self.cwd, self.n = sid, cwd, 0

    def _base(self, **kw) -> dict:
        self.n += 1
        r = {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": self.cwd,
             "sessionId": self.sid, "version": "2.1.120",
             "uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{self.sid}/{self.n}")),
             "timestamp": iso()}
        r.update(kw)
        return r

    @staticmethod
    def line(r: dict) -> bytes:
        return json.dumps(r, ensure_ascii=False).encode() + b"\n"

    def prompt(self, text: str = "do the thing") -> bytes:
        return self.line(self._base(type="user", message={"role": "user", "content": text}))

    def tool_use(self, payload: str = "ls") -> bytes:
        n = self.n + 1
        return self.line(self._base(type="assistant", message={
            "id": f"msg_{self.sid[:8]}_{n}", "role": "assistant", "model": "claude-sonnet-4-5", "stop_reason": None,
            "content": [{"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {"command": payload}}]}))

    def tool_result(self, output: str = "ok") -> bytes:
        return self.line(self._base(type="user", message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{self.n}", "content": output}]},
            toolUseResult={"stdout": output}))

    def text(self, text: str = "done", stop: str | None = None) -> bytes:
        n = self.n + 1
        return self.line(self._base(type="assistant", message={
            "id": f"msg_{self.sid[:8]}_{n}", "role": "assistant", "model": "claude-sonnet-4-5", "stop_reason": stop,
            "content": [{"type": "text", "text": text}]}))

    def turn_duration(self, ms: int = 12000) -> bytes:
        return self.line(self._base(type="system", subtype="turn_duration", durationMs=ms, isMeta=False))

    def api_error(self, status: int = 429) -> bytes:
        n = self.n + 1
        return self.line(self._base(type="assistant", isApiErrorMessage=True, error="rate_limit",
                                    apiErrorStatus=status, message={
                                        "id": f"err_{self.sid[:8]}_{n}", "role": "assistant", "model": "<synthetic>",
                                        "stop_reason": "stop_sequence",
                                        "content": [{"type": "text", "text": "API Error: rate limited"}]}))


class CodexSession:
    """Codex ≥0.100 rollout records of one session."""

    def __init__(self, sid: str, cwd: str = "/home/dev/proj"):
        self.sid, self.cwd, self.turn = sid, cwd, 0

    @staticmethod
    def line(rtype: str, **payload) -> bytes:
        return json.dumps({"timestamp": iso(), "type": rtype, "payload": payload}, ensure_ascii=False).encode() + b"\n"

    def meta(self) -> bytes:
        return self.line("session_meta", id=self.sid, timestamp=iso(), cwd=self.cwd, source="cli",
                         cli_version="0.130.0", originator="codex_cli_rs")

    def start(self, text: str = "do the thing") -> bytes:
        self.turn += 1
        return (self.line("event_msg", type="task_started", turn_id=f"{self.sid}-t{self.turn}")
                + self.line("event_msg", type="user_message", message=text, turn_id=f"{self.sid}-t{self.turn}"))

    def call(self, cmd: str = "ls") -> bytes:
        return (self.line("response_item", type="function_call", name="shell", arguments=json.dumps({"cmd": cmd}),
                          call_id=f"c{time.monotonic_ns()}")
                + self.line("response_item", type="function_call_output", call_id="c", output="ok"))

    def answer(self, text: str = "done") -> bytes:
        return self.line("event_msg", type="agent_message", message=text, turn_id=f"{self.sid}-t{self.turn}")

    def complete(self, text: str = "done") -> bytes:
        return self.line("event_msg", type="task_complete", turn_id=f"{self.sid}-t{self.turn}",
                         last_agent_message=text, duration_ms=4000)

    def error(self) -> bytes:
        return self.line("event_msg", type="error", message="You've hit your usage limit.",
                         codex_error_info="usage_limit_exceeded", turn_id=f"{self.sid}-t{self.turn}")


def write(path: Path, data: bytes, mode: str = "ab") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode) as f:
        f.write(data)


def alerts_for(receiver: Receiver, sid: str, kind: str | None = None) -> list[dict]:
    """Messages the receiver got for session ``sid`` (``kind``: completed/error)."""
    out = []
    for m in list(receiver.messages):
        if f"Session: {sid}" not in m.get("message", ""):
            continue
        title = m.get("title", "")
        if kind == "completed" and "your turn" not in title:
            continue
        if kind == "error" and "stopped on" not in title and not title.endswith(": the agent exited mid-turn"):
            continue
        out.append(m)
    return out


class SessionWriter(threading.Thread):
    """Writes turns into the sessions of a kill -9 loop: ``sessions`` (filled by the subclass), one
    thread each running ``write_turns(entry)`` until ``stop_flag`` is set; ``rng`` from ``seed``."""

    def __init__(self, seed: int):
        super().__init__(daemon=True)
        self.rng = random.Random(seed)
        self.stop_flag = threading.Event()
        self.sessions: list = []

    def run(self):
        threads = [threading.Thread(target=self.write_turns, args=(entry,), daemon=True) for entry in self.sessions]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def write_turns(self, entry) -> None:
        raise NotImplementedError


def kill9_rounds(exp: Exporter, writer: SessionWriter, rounds: int, rng: random.Random,
                 up: tuple[float, float, float, float]) -> None:
    """While ``writer`` writes: ``rounds`` times up for a while (uniform seconds over ``up[0:2]`` or
    ``up[2:4]``, one of the two picked at random: a short one falls inside the settle time), kill -9,
    down for 0 to 3 s, start again. Then stop ``writer`` and wait for it (60 s at most)."""
    for _ in range(rounds):
        time.sleep(rng.choice((rng.uniform(*up[:2]), rng.uniform(*up[2:]))))
        exp.kill9()
        time.sleep(rng.uniform(0, 3.0))
        exp.start()
    writer.stop_flag.set()
    writer.join(timeout=60)
    assert not writer.is_alive()


def owed_page_problems(exp: Exporter, receiver: Receiver, writer, grace: float) -> tuple[list[str], int]:
    """After a kill -9 loop's ``writer`` stopped (its ``sessions`` ``[(agent,
    session, path)]``, ``final`` state and ``owed`` ``{sid: {kind: turn
    ends}}``): wait for every session's final state and every owed page, then
    ``grace`` seconds more for a page too many. Returns ``(problems, turn
    ends owed)``: a line for each (session, kind) paged another number of
    times than it owed."""
    for _agent, s, _path in writer.sessions:
        exp.wait_state(s.sid, writer.final[s.sid], timeout=15)

    def paged():
        return all(len(alerts_for(receiver, sid, k)) >= n for sid, owed in writer.owed.items()
                   for k, n in owed.items())
    try:
        wait_for(paged, timeout=20, what="every owed page")
    except AssertionError:
        pass  # the problems say which
    time.sleep(grace)
    problems = []
    for sid, owed in writer.owed.items():
        for kind, n in owed.items():
            got = alerts_for(receiver, sid, kind)
            again = sum(SENT_AGAIN in m.get("message", "") for m in got)
            # A page whose delivery a kill interrupted may come twice; the second one says so.
            if not n <= len(got) <= n + again:
                problems.append(f"{sid} {kind}: owed {n}, got {len(got)} ({again} marked as sent again)")
    return problems, sum(n for owed in writer.owed.values() for n in owed.values())


def log_has(exp: Exporter, text: str) -> bool:
    return text in exp.log()
