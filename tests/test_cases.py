"""Every field case in ``fixtures/cases`` (copied from shared/cases), replayed
from ``cases.json`` against the running exporter, as ``cases/README.md`` says:
live mode (files appended step by step, each line stamped with the time it is
written) and backfill mode (files present before start, shifted so the last
record is a minute old), alerts delivered through Apprise to a loopback
receiver.

Time: the cases assume the default config (inferred settle 30 s, alert settle
2 s). They run with every time rule and every ``wait`` scaled by ``K`` (0.1;
alert settle 1 s), or with the real defaults when ``CAE_SLOW=1``. ``within``
stays as written."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import pytest

from harness import CASES, ROOT, Exporter, Receiver, claude_path, codex_path, session_id_of, wait_for

SLOW = os.environ.get("CAE_SLOW") == "1"
K = 1.0 if SLOW else 0.1
LINE_DELAY = 0.1  # the README says about 200 ms; half keeps the suite quick
TIMING = {
    "reducer": {"inferred_settle_seconds": 30.0 * K, "marker_wait_seconds": 300.0 * K,
                "stall_after_seconds": 600.0 * K, "api_retry_grace_seconds": 30.0 * K,
                "stop_hook_wait_seconds": 600.0 * K},
    "alerts": {"settle_seconds": 2.0 if SLOW else 1.0},
}
PROVIDERS = {"claude": "claude_code", "codex": "codex", "copilot": "copilot_cli", "pi": "pi"}
#: Where each provider's files go under the exporter root (as tests/harness.py configures it).
BASES = {"claude_code": ("claude", "projects"), "codex": ("codex", "sessions"),
         "copilot_cli": ("copilot", "session-state"), "pi": ("pi", "sessions")}
SPEC = json.loads((CASES / "cases.json").read_text())


CASE_PARAMS = [pytest.param(name, id=name) for name in SPEC]

# -- timestamps ---------------------------------------------------------------------
_TS = re.compile(rb'("timestamp"\s*:\s*")([^"]+)(")')


def _iso(t: float) -> bytes:
    dt = datetime.fromtimestamp(t, timezone.utc)
    return (dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z").encode()


def _parse_iso(s: bytes) -> float | None:
    try:
        return datetime.fromisoformat(s.decode().replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _parses(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _stamp(line: bytes, t: float) -> bytes:
    """Every ``"timestamp"`` value of a line that parses set to ``t``; a line
    that does not parse is written as it is."""
    if not _parses(line):
        return line
    return _TS.sub(lambda m: m.group(1) + _iso(t) + m.group(3), line)


def _shift(line: bytes, delta: float) -> bytes:
    def sub(m):
        t = _parse_iso(m.group(2))
        return m.group(0) if t is None else m.group(1) + _iso(t + delta) + m.group(3)
    return _TS.sub(sub, line) if _parses(line) else line


def _times(data: bytes) -> list[float]:
    out = []
    for line in data.split(b"\n"):
        if _parses(line):
            for m in _TS.finditer(line):
                t = _parse_iso(m.group(2))
                if t is not None:
                    out.append(t)
    return out


# -- one case ------------------------------------------------------------------------
def _lines(step: dict) -> bytes:
    data = (CASES / step["write"]).read_bytes()
    if "lines" in step:
        a, b = step["lines"]
        data = b"".join(data.splitlines(keepends=True)[a - 1:b])
    return data


class Replay:
    """One case's files under an exporter root (paths from ``cases.json``)."""

    def __init__(self, name: str, root: Path):
        self.name = name
        self.spec = SPEC[name]
        self.provider = PROVIDERS[self.spec["provider"]]
        self.root = root
        base = root.joinpath(*BASES[self.provider])
        self.paths = {k: base / rel for k, rel in self.spec["files"].items()}
        self.sids = self.spec["sessions"]
        self.fds: dict[str, int] = {}
        self.written: dict[str, set] = {k: set() for k in self.paths}  # lines written as they were
        self._restamped: dict[bytes, bytes] = {}

    def alerts(self, receiver: Receiver) -> list[dict]:
        """Pages whose body names one of the case's sessions."""
        return [m for m in receiver.messages if any(f"Session: {sid}" in m.get("message", "")
                                                    for sid in self.sids.values())]

    def states(self, exp: Exporter) -> dict:
        return {k: exp.state(sid) for k, sid in self.sids.items()}

    # live steps
    def write(self, step: dict) -> None:
        key = step["to"]
        path = self.paths[key]
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _lines(step)
        if step.get("raw"):
            pieces = [data]
        else:
            pieces = [p for p in data.splitlines(keepends=True) if p]
        delay = step.get("delay", LINE_DELAY)
        for i, piece in enumerate(pieces):
            if piece in self.written[key] and piece.endswith(b"\n"):
                out = self._restamped[piece]  # an exact duplicate stays exact
            else:
                now = time.time()
                out = b"".join(_stamp(line, now) for line in piece.splitlines(keepends=True))
                self._restamped[piece] = out
                self.written[key].add(piece)
            if step.get("fd"):
                fd = self.fds.get(step["fd"])
                if fd is None:
                    fd = self.fds[step["fd"]] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                os.write(fd, out)
            else:
                with open(path, "ab") as f:
                    f.write(out)
            if i < len(pieces) - 1 and not step.get("raw"):
                time.sleep(delay)

    def rewrite(self, step: dict) -> None:
        """The file rewritten in place (same inode, truncated, written again:
        a Copilot CLI rewind): lines written before keep their bytes, new
        lines are stamped now."""
        data = _lines({**step, "write": step["rewrite"]})
        out = b"".join(self._restamped.get(line) or _stamp(line, time.time())
                       for line in data.splitlines(keepends=True))
        with open(self.paths[step["to"]], "r+b") as f:
            f.truncate(0)
            f.write(out)

    def play(self, step: dict, exp) -> None:
        """Play one step that is not an ``expect``: ``write``, ``wait`` (in
        case seconds, scaled by ``K``), ``touch``, ``restart`` (of ``exp``),
        ``rewrite``, ``hook`` or ``settings`` (the user's Claude Code
        ``settings.json``). Raises AssertionError for an unknown step."""
        if "write" in step:
            self.write(step)
        elif "wait" in step:
            time.sleep(step["wait"] * K)
        elif "touch" in step:
            for _ in range(step.get("times", 1)):
                os.utime(self.paths[step["touch"]])
                time.sleep(0.05)
        elif "restart" in step:
            exp.stop()
            exp.start()
        elif "rewrite" in step:
            self.rewrite(step)
        elif "hook" in step:
            self.hook(step, exp)
        elif "settings" in step:  # the user's own Claude Code settings (hooks), beside its projects folder
            path = self.root.joinpath(*BASES["claude_code"][:-1], "settings.json")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(step["settings"]))
        else:
            raise AssertionError(f"{self.name}: unknown step {step}")

    def expect(self, step: dict, exp: Exporter, receiver: Receiver) -> None:
        want = {k: (v if isinstance(v, list) else [v]) for k, v in step["expect"].items()}
        n = step.get("alerts")

        def ok():
            states = self.states(exp)
            return all(states[k] in v for k, v in want.items()) and (n is None or len(self.alerts(receiver)) == n)

        try:
            wait_for(ok, timeout=step.get("within", 12), interval=0.1, what=f"{self.name} {step}")
        except AssertionError:
            raise AssertionError(f"{self.name}: expected {step}; states {self.states(exp)}, "
                                 f"{len(self.alerts(receiver))} alerts; exporter log tail:\n"
                                 + "\n".join(exp.log().splitlines()[-20:])) from None

    def hook(self, step: dict, exp: Exporter) -> None:
        body = json.dumps(step["body"])
        for k in self.paths:
            body = body.replace("${SID:%s}" % k, self.sids.get(k, "")).replace("${PATH:%s}" % k, str(self.paths[k]))
        url = f"http://127.0.0.1:{exp.port}"
        if step["via"] == "http":
            req = urllib.request.Request(f"{url}/hooks/{step['hook']}", data=body.encode(),
                                         headers=exp.hook_headers())
            with urllib.request.urlopen(req, timeout=20) as r:
                assert r.status < 300
        else:
            out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "hook", "--agent", step["hook"],
                                  "--url", url, "--config.file", str(exp.config_path)], input=body, text=True, capture_output=True, cwd=ROOT, timeout=30)
            assert out.returncode == 0, out.stderr

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    # backfill
    def lay_out(self) -> None:
        """Every file whole, timestamps shifted so the case's last record is
        a minute old, each file's mtime at its own last record."""
        data = {}
        for step in self.spec["steps"]:
            if "write" in step:
                data[step["to"]] = data.get(step["to"], b"") + _lines(step)
            elif "rewrite" in step:
                data[step["to"]] = _lines({**step, "write": step["rewrite"]})
        last = max(t for d in data.values() for t in _times(d))
        delta = time.time() - 60 - last
        for key, d in data.items():
            shifted = b"".join(_shift(line, delta) for line in d.splitlines(keepends=True))
            path = self.paths[key]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(shifted)
            times = _times(shifted)
            if times:
                os.utime(path, (max(times), max(times)))


def _exporter(root: Path, receiver: Receiver) -> Exporter:
    return Exporter(root, config=TIMING, receiver=receiver)


def live_params(*providers: str) -> list:
    """The cases of ``providers`` (cases.json's ``provider``: claude, codex,
    copilot, pi) as test parameters. The live replays are split by agent
    over test_cases_live_*.py so that pytest-xdist (``--dist loadfile``)
    gives them to different workers: one worker playing them all took 11
    minutes of a 14-minute suite."""
    return [pytest.param(n, id=n) for n, spec in SPEC.items() if spec.get("provider") in providers]


def play_live(name: str, tmp_path: Path) -> None:
    """Replay case ``name`` step by step against a new exporter (live mode)."""
    receiver = Receiver()
    exp = _exporter(tmp_path, receiver).start()
    case = Replay(name, tmp_path)
    try:
        for step in case.spec["steps"]:
            if "expect" in step:
                case.expect(step, exp, receiver)
            else:
                case.play(step, exp)
    finally:
        case.close()
        exp.stop()
        receiver.close()


def test_every_case_is_played_live():
    """Each case's provider is one that a test_cases_live_*.py file plays
    (a case of a new agent must get its live replay too)."""
    played = set()
    for f in Path(__file__).parent.glob("test_cases_live_*.py"):
        played |= set(re.findall(r'"(\w+)"', re.search(r"live_params\(([^)]*)\)", f.read_text()).group(1)))
    assert {spec.get("provider") for spec in SPEC.values()} <= played


@pytest.fixture(scope="module")
def backfill(tmp_path_factory):
    """Every case laid out before the exporter starts."""
    root = tmp_path_factory.mktemp("backfill")
    for name in SPEC:
        Replay(name, root).lay_out()
    receiver = Receiver()
    exp = _exporter(root, receiver).start()
    time.sleep(1.0)  # several evaluation rounds
    yield exp, receiver
    exp.stop()
    receiver.close()


@pytest.mark.parametrize("name", CASE_PARAMS)
def test_case_backfill(name, backfill):
    exp, receiver = backfill
    case = Replay(name, exp.root)
    want = {k: (v if isinstance(v, list) else [v]) for k, v in case.spec["backfill"].items()}
    wait_for(lambda: all(case.states(exp)[k] in v for k, v in want.items()), timeout=10,
             what=f"{name} backfill {want} (now {case.states(exp)})")
    time.sleep(0.2)
    assert case.alerts(receiver) == []


# -- counters the cases name -------------------------------------------------------
def test_case_counters(tmp_path):
    """Malformed lines are counted by reason, duplicates counted, the big
    progress file read once (bytes ≈ file size)."""
    exp = Exporter(tmp_path).start()
    try:
        size = 0
        for name in ("01_torn_glued_line", "03_malformed_midfile", "04_nul_padding_line", "05_codex_invalid_utf8_line",
                     "09_huge_progress_lines", "10_split_and_duplicated_rows"):
            case = Replay(name, tmp_path)
            for step in case.spec["steps"]:
                if "write" in step:
                    case.write({**step, "raw": True})
                    if case.provider == "claude_code":
                        size += len(_lines(step))
        m = exp.value
        wait_for(lambda: m("coding_agent_duplicate_events_total", provider="claude_code") >= 1, what="10's duplicate")
        wait_for(lambda: m("coding_agent_transcript_bytes_total", provider="claude_code") >= size * 0.99, what="bytes")
        # (99 % of the bytes can be read before a small file is: 09's lines are most of them)
        wait_for(lambda: m("coding_agent_transcript_parse_errors_total", reason="nul_bytes") >= 1, what="04's NUL line")
        wait_for(lambda: m("coding_agent_transcript_parse_errors_total", reason="invalid_utf8") >= 1, what="05's line")
        # (01's torn line gives up its whole record and counts as torn_record; 03's lines are invalid_json)
        wait_for(lambda: m("coding_agent_transcript_parse_errors_total", reason="torn_record") >= 1, what="01")
        wait_for(lambda: m("coding_agent_transcript_parse_errors_total", reason="invalid_json") >= 2, what="03")
        read = m("coding_agent_transcript_bytes_total", provider="claude_code")
        assert read <= size * 1.01, "bytes were read more than once"
    finally:
        exp.stop()


# -- 23: appends through one long-open file descriptor, polling only ----------------
def test_case_23_codex_open_fd_appends_polling_only(tmp_path):
    """23 with the watcher off: polling is the only path (and is not counted
    as a recovery)."""
    receiver = Receiver()
    exp = Exporter(tmp_path, config={"sources": {"watch_events": False, "poll_interval_seconds": 0.3}},
                   receiver=receiver).start()
    try:
        sid = session_id_of(CASES / "23_codex_open_fd_appends_part1.jsonl")
        path = codex_path(tmp_path, sid)
        path.parent.mkdir(parents=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, (CASES / "23_codex_open_fd_appends_part1.jsonl").read_bytes())
            exp.wait_state(sid, "working", timeout=5)
            time.sleep(1.0)
            for line in (CASES / "23_codex_open_fd_appends_part2.jsonl").read_bytes().splitlines(keepends=True):
                os.write(fd, line)
                time.sleep(0.3)
            exp.wait_state(sid, "completed", timeout=5)  # before the file is closed
            wait_for(lambda: len(receiver.messages) == 1, timeout=5, what="1 alert")
        finally:
            os.close(fd)
        time.sleep(0.5)
        assert len(receiver.messages) == 1
        assert exp.value("coding_agent_poll_recoveries_total") == 0  # polling is the only path, not a recovery
    finally:
        exp.stop()
        receiver.close()


def test_case_24_replaced_by_copy(tmp_path):
    """The file replaced by an identical copy (new inode) is read again from
    the start, deduplicated: still one page."""
    receiver = Receiver()
    exp = Exporter(tmp_path, receiver=receiver).start()
    try:
        src = CASES / "24_one_turn_many_end_markers.jsonl"
        sid = session_id_of(src)
        path = claude_path(tmp_path, sid)
        from harness import append_lines

        append_lines(path, src.read_bytes(), 0.05)
        exp.wait_state(sid, "completed")
        wait_for(lambda: len(receiver.messages) == 1, what="1 alert")
        tmp = path.with_suffix(".tmp")
        shutil.copy(path, tmp)
        os.replace(tmp, path)
        time.sleep(1.5)
        assert len(receiver.messages) == 1
        assert exp.value("coding_agent_duplicate_events_total", provider="claude_code") >= 3
    finally:
        exp.stop()
        receiver.close()
