"""Claude Code's live session registry (``~/.claude/sessions/<pid>.json``) as a
third source of evidence (issue 23).

Unit tests on the real records of every status and OS
(``shared/transcripts/claude_sessions``, copied to
``tests/fixtures/claude_sessions``): parse, liveness, mapping. End to end
against a running exporter, with a real child process (``sleep``) whose pid
and ``/proc/<pid>/stat`` start time the test writes into a record in place,
as Claude Code 2.1.332 does (``shared/live-agents/claude-code-2.1.332``:
``waiting`` ~80 ms after the ``tool_use`` line, ``busy`` again on the
answer, ``idle`` ~200 ms after the final line, the file deleted on exit).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from watchdog import events as wd_events
from watchdog.observers import Observer

from coding_agent_exporter.events import END, ERROR, WAIT, WAIT_REASONS, WORK
from coding_agent_exporter.metrics import USER_WAIT_REASONS
from coding_agent_exporter.alerts import WAIT_TITLES
from coding_agent_exporter.providers import claude_registry as creg
from coding_agent_exporter.registry import Registry
from coding_agent_exporter.registry_records import Entry as _Entry, own_pid_domain, process_started
from harness import Exporter, Receiver, claude_path, wait_for
from test_hardening_support import ClaudeSession, alerts_for, write

FIXTURES = Path(__file__).parent / "fixtures" / "claude_sessions"


# -- helpers ---------------------------------------------------------------------
def proc_start_of(pid: int) -> str:
    """``/proc/<pid>/stat`` field 22 (start time in clock ticks since boot), as Claude Code writes it."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[19]


class Agent:
    """A stand-in Claude Code process (``sleep 300``) and its registry record,
    rewritten in place (no temp+rename) like the real one."""

    def __init__(self, folder: Path, sid: str, name: str = "my secret title", cwd: str = "/home/dev/proj"):
        self.proc = subprocess.Popen(["sleep", "300"])
        self.pid = self.proc.pid
        self.proc_start = proc_start_of(self.pid)
        self.folder, self.sid, self.name, self.cwd = folder, sid, name, cwd
        self.path = folder / f"{self.pid}.json"
        self.started = int(time.time() * 1000)

    def record(self, status: str | None, waiting_for: str | None = None, **over) -> dict:
        now = int(time.time() * 1000)
        rec = {"pid": self.pid, "sessionId": self.sid, "cwd": self.cwd, "startedAt": self.started,
               "procStart": self.proc_start, "version": "2.1.332", "peerProtocol": 1, "kind": "interactive",
               "entrypoint": "cli", "messagingSocketPath": f"/tmp/cc-socks/{self.pid}.sock", "name": self.name,
               "nameSource": "derived", "nameSince": self.started}
        domain = own_pid_domain()
        if domain is not None:  # as 2.1.332 writes it
            rec["pidDomain"] = f"linux:{domain[0]}:{domain[1]}"
        if status is not None:
            rec.update(status=status, updatedAt=now, statusUpdatedAt=now)
        if waiting_for is not None:
            rec["waitingFor"] = waiting_for
        rec.update(over)
        return rec

    def write(self, status: str | None, waiting_for: str | None = None, cut: int | None = None, **over) -> None:
        data = json.dumps(self.record(status, waiting_for, **over), separators=(",", ":")).encode()
        if cut is not None:
            data = data[:cut]
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.path, "r+b" if self.path.exists() else "wb") as f:  # in place, as Claude Code writes
            f.truncate(0)
            f.write(data)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()


class OpenWatch:
    """Every open(2) of a file in ``folder`` whose name is not ``<pid>.json``,
    seen through inotify ``IN_OPEN`` (watchdog ``FileOpenedEvent``)."""

    def __init__(self, folder: Path):
        self.opened: list[str] = []
        outer = self

        class H(wd_events.FileSystemEventHandler):
            def on_opened(self, event):
                name = os.path.basename(os.fsdecode(event.src_path))
                if not creg.RECORD_NAME.fullmatch(name):
                    outer.opened.append(name)

        self.observer = Observer()
        self.observer.schedule(H(), str(folder), recursive=False)
        self.observer.start()

    def close(self):
        self.observer.stop()
        self.observer.join(5)


def place(folder: Path, name: str, text: str) -> None:
    """Write ``folder/name`` without opening it there (written beside, then
    renamed in), so that :class:`OpenWatch` sees only the exporter's opens."""
    tmp = folder.parent / f".{name}"
    tmp.write_text(text)
    os.replace(tmp, folder / name)


def plant_key_files(folder: Path, pid: int, secret: str) -> Path:
    """A ``<pid>.<hash>.key`` with ``secret`` in it, and a FIFO ``.key`` (an
    open for reading would block the reader thread, and a non-blocking
    writer open then finds a reader). Returns the FIFO."""
    folder.mkdir(parents=True, exist_ok=True)
    place(folder, f"{pid}.3f9a1c0b.key", secret)
    fifo = folder / f"{pid + 1}.77aa00ff.key"
    os.mkfifo(fifo)
    return fifo


def assert_fifo_never_opened(fifo: Path) -> None:
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        assert e.errno == errno.ENXIO  # no reader has it open
        return
    os.close(fd)
    raise AssertionError(f"{fifo.name} was opened for reading")


def api_row(exp: Exporter, sid: str) -> dict | None:
    rows = json.loads(exp.scrape_text("/api/v1/sessions"))["sessions"]
    return next((r for r in rows if r["session_id"] == sid), None)


# -- unit: parse -----------------------------------------------------------------
EXPECTED = {
    "v2.1.139_cli_busy_linux.json": ("busy", None),
    "v2.1.226_cli_busy_macos_fixture.json": ("busy", None),
    "v2.1.226_cli_idle_linux.json": ("idle", None),
    "v2.1.238_cli_windows_1_registering_no_status.json": "no_status",
    "v2.1.238_cli_windows_2_idle.json": ("idle", None),
    "v2.1.238_cli_windows_3_busy.json": ("busy", None),
    "v2.1.238_cli_windows_4_waiting_dialog_open.json": ("waiting", "dialog open"),
    "v2.1.238_cli_windows_5_waiting_permission_prompt.json": ("waiting", "permission prompt"),
    "v2.1.238_cli_windows_6_shell.json": ("shell", None),
}


def test_fixtures_are_every_real_record():
    assert sorted(p.name for p in FIXTURES.glob("*.json")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parse_real_records(name):
    data = (FIXTURES / name).read_bytes()
    want = EXPECTED[name]
    if isinstance(want, str):
        with pytest.raises(creg.RecordSkipped) as e:
            creg.parse(data)
        assert e.value.reason == want
        return
    rec = creg.parse(data)
    raw = json.loads(data)
    assert (rec.status, rec.waiting_for) == want
    assert rec.pid == raw["pid"] and rec.session_id == raw["sessionId"] and rec.proc_start == raw["procStart"]
    assert rec.status_at == (raw.get("statusUpdatedAt") or raw["updatedAt"]) / 1000
    assert not any(raw["name"] in str(v) for v in (rec.key, rec.proc_start, rec.entrypoint))
    for n in range(len(data) - 1):  # every cut of an in-place write reads as "not written yet"
        with pytest.raises((creg.RecordCut, creg.RecordSkipped)):
            creg.parse(data[:n])
    with pytest.raises(creg.RecordCut):
        creg.parse(data[: len(data) // 2])


def test_records_to_skip():
    live = json.loads((FIXTURES / "v2.1.238_cli_windows_3_busy.json").read_bytes())
    sdk_ts = {k: v for k, v in live.items() if k not in ("status", "statusUpdatedAt")} | {"entrypoint": "sdk-ts"}
    no_start = {k: v for k, v in live.items() if k != "procStart"}
    for rec, reason in ((sdk_ts, "no_status"), (no_start, "no_status"), ([live], "invalid"),
                        ({**live, "pid": "28160"}, "invalid"), ({**live, "sessionId": None}, "invalid")):
        with pytest.raises(creg.RecordSkipped) as e:
            creg.parse(json.dumps(rec).encode())
        assert e.value.reason == reason
    for name in ("pid-4242.json", "4242.3f9a1c0b.key", "4242.3f9a1c0b.key.tmp.1", "4242.json.tmp", "x.json"):
        assert not creg.RECORD_NAME.fullmatch(name)
    assert creg.RECORD_NAME.fullmatch("4242.json")


# -- unit: liveness ----------------------------------------------------------------
def test_proc_start_forms_of_every_os():
    win = creg.parse((FIXTURES / "v2.1.238_cli_windows_2_idle.json").read_bytes())
    mac = creg.parse((FIXTURES / "v2.1.226_cli_busy_macos_fixture.json").read_bytes())
    # The process starts a moment before Claude Code writes startedAt.
    for rec in (win, mac):
        (start,) = [c for c in creg.proc_start_seconds(rec.proc_start, 0.0) if 0 <= rec.started_at - c < 10]
        assert 0 <= rec.started_at - start < 10
    assert creg.proc_start_seconds("20095994", 1_000_000.0, 100) == [1_000_000.0 + 200959.94]
    assert creg.proc_start_seconds("not a time", 0.0) == []


def test_liveness_with_a_real_process(tmp_path):
    from coding_agent_exporter.metrics import Metrics

    reg = Registry([tmp_path], Metrics())
    child = subprocess.Popen(["sleep", "30"])
    try:
        ticks = proc_start_of(child.pid)
        base = json.loads((FIXTURES / "v2.1.226_cli_idle_linux.json").read_bytes())
        rec = creg.parse(json.dumps({**base, "pid": child.pid, "procStart": ticks}).encode())
        assert reg.records.alive(rec)
        assert process_started(child.pid) == pytest.approx(psutil.Process(child.pid).create_time())
        reused = creg.parse(json.dumps({**base, "pid": child.pid, "procStart": str(int(ticks) - 500)}).encode())
        assert not reg.records.alive(reused)  # the same pid, another process's start
        child.send_signal(signal.SIGKILL)
        wait_for(lambda: process_started(child.pid) is None, what="a zombie reads as dead")
        assert not reg.records.alive(rec)
        child.wait()
        assert not reg.records.alive(rec)
    finally:
        child.kill()
        child.wait()


# -- unit: mapping -----------------------------------------------------------------
def _rec(status, waiting_for=None, at=1000.0):
    base = json.loads((FIXTURES / "v2.1.238_cli_windows_3_busy.json").read_bytes())
    base.update(status=status, statusUpdatedAt=int(at * 1000))
    if waiting_for:
        base["waitingFor"] = waiting_for
    return creg.parse(json.dumps(base).encode())


@pytest.mark.parametrize("waiting_for,reason", [("permission prompt", "permission"), ("input needed", "question"),
                                                ("worker request", "worker_request"),
                                                ("sandbox request", "sandbox_request"),
                                                ("goal proposal", "goal_proposal")])
def test_waits(waiting_for, reason):
    ev = creg.evidence(_rec("waiting", waiting_for), "working", None)
    assert (ev.kind, ev.reason, ev.ts, ev.source) == (WAIT, reason, 1000.0, "registry")
    assert reason in WAIT_REASONS and reason in USER_WAIT_REASONS and reason in WAIT_TITLES


def test_mapping_of_the_other_statuses():
    # dialog open waits on nobody; busy is work only where it answers a wait
    assert creg.evidence(_rec("waiting", "dialog open"), "working", None) is None
    assert creg.evidence(_rec("busy"), "working", None) is None
    assert creg.evidence(_rec("busy"), "completed", None) is None
    # busy ends only a wait the registry reported: 2.1.332 writes busy again after the transcript's
    # ExitPlanMode and before the prompt shows (a real run paged "permission" for a plan so)
    assert creg.evidence(_rec("busy", at=1005.0), "waiting", None) is None
    ev = creg.evidence(_rec("busy", at=1005.0), "waiting", 1001.0)
    assert (ev.kind, ev.ts) == (WORK, 1005.0)
    # idle and shell end only a wait the registry reported, at that wait's time; never a turn end
    for status in ("idle", "shell"):
        assert creg.evidence(_rec(status), "working", None) is None
        assert creg.evidence(_rec(status), "waiting", None) is None
        ev = creg.evidence(_rec(status, at=1009.0), "waiting", 1001.0)
        assert (ev.kind, ev.ts) == (WORK, 1001.0)
    # the process gone
    for state in ("working", "waiting", "stalled"):
        assert creg.exited(state, True, 5.0).kind == END
        ev = creg.exited(state, False, 5.0)
        assert (ev.kind, ev.error_kind) == (ERROR, "agent_exited")
    for state in ("completed", "error", "interrupted", "unknown"):
        assert creg.exited(state, True, 5.0) is None and creg.exited(state, False, 5.0) is None


def test_the_real_2_1_332_flips_in_order():
    """The statuses Claude Code 2.1.332 wrote in the permission-allow run
    (registry.jsonl, one copy per change) map to: a wait, its end (busy),
    then no evidence (idle: the transcript decides)."""
    live = Path(__file__).resolve().parents[1] / ".." / "shared" / "live-agents" / "claude-code-2.1.332"
    path = live / "tui_permission_allow" / "registry.jsonl"
    if not path.exists():
        pytest.skip("shared/live-agents not present")
    state, got, reg_wait = "working", [], None
    for line in path.read_text().splitlines():
        snap = json.loads(line)
        if snap.get("deleted"):
            got.append(("exit", creg.exited(state, True, snap["t"]).kind))
            break
        try:
            rec = creg.parse(json.dumps(snap["content"]).encode())
        except creg.RecordSkipped:
            got.append(("skip", None))
            continue
        ev = creg.evidence(rec, state, reg_wait)
        got.append((rec.status, ev.kind if ev else None))
        if ev is not None and ev.kind == WAIT:
            state, reg_wait = "waiting", ev.ts
        elif ev is not None and ev.kind == WORK:
            state, reg_wait = "working", None
    assert got == [("skip", None), ("idle", None), ("busy", None), ("waiting", WAIT), ("busy", WORK),
                   ("idle", None), ("exit", END)]


# -- end to end --------------------------------------------------------------------
@pytest.fixture
def env(tmp_path):
    receiver = Receiver()
    folder = tmp_path / "claude" / "sessions"  # the default: beside the projects folder
    folder.mkdir(parents=True)
    watch = OpenWatch(folder)
    exp = Exporter(tmp_path, receiver=receiver).start()
    agents: list[Agent] = []
    yield exp, receiver, folder, agents, watch
    exp.stop()
    receiver.close()
    watch.close()
    for a in agents:
        a.close()


def _session(tmp_path, sid):
    s = ClaudeSession(sid)
    path = claude_path(tmp_path, sid)
    return s, path


def _agent(env, tmp_path, sid, busy: bool = False):
    """A registered agent of session ``sid`` (closed with ``env``) and its
    transcript; ``busy``: a prompt and a tool call written, the record
    ``busy``, and the exporter showing ``working``. Returns ``(agent,
    session, path)``."""
    exp, _receiver, folder, agents, _watch = env
    a = Agent(folder, sid)
    agents.append(a)
    s, path = _session(tmp_path, sid)
    if busy:
        write(path, s.prompt() + s.tool_use())
        a.write("busy")
        exp.wait_state(sid, "working")
    return a, s, path


def test_permission_prompt_without_hooks_pages_once(env, tmp_path):
    exp, receiver, folder, agents, watch = env
    sid = "rg000000-0000-4000-8000-000000000001"
    fifo = plant_key_files(folder, 4242, "sk-ant-KEYFILE-SECRET")
    a, s, path = _agent(env, tmp_path, sid)
    a.write(None)  # registering: no status yet
    a.write("idle")
    write(path, s.prompt("create a file"))
    a.write("busy")
    write(path, s.tool_use("touch made_by_agent.txt"))
    exp.wait_state(sid, "working")
    time.sleep(0.08)
    a.write("waiting", "permission prompt")
    exp.wait_state(sid, "waiting", timeout=5)
    row = api_row(exp, sid)
    assert row["source"] == "registry" and row["waiting_for"]["reason"] == "permission"
    wait_for(lambda: len(alerts_for(receiver, sid)) == 1, timeout=5, what="the waiting page")
    assert "needs your approval" in alerts_for(receiver, sid)[0]["title"]
    time.sleep(1.5)  # the same record read again (poll, events): still one page
    assert len(alerts_for(receiver, sid)) == 1
    a.write("busy")  # answered
    write(path, s.tool_result("done"))
    exp.wait_state(sid, "working")
    write(path, s.text("Created the file.") + s.turn_duration())
    time.sleep(0.2)
    a.write("idle")
    exp.wait_state(sid, "completed")
    wait_for(lambda: len(alerts_for(receiver, sid)) == 2, what="the completion page")
    assert api_row(exp, sid)["source"] == "transcript"
    time.sleep(1.5)
    assert exp.state(sid) == "completed" and len(alerts_for(receiver, sid)) == 2
    assert exp.value("coding_agent_registry_records") == 1
    assert watch.opened == [] and exp.proc.poll() is None
    assert_fifo_never_opened(fifo)
    assert "my secret title" not in exp.log() + exp.scrape_text() + exp.scrape_text("/api/v1/sessions")


def test_hook_and_registry_report_one_wait(env, tmp_path):
    exp, receiver, folder, agents, _w = env
    sid = "rg000000-0000-4000-8000-000000000002"
    a, s, path = _agent(env, tmp_path, sid, busy=True)
    body = {"session_id": sid, "transcript_path": str(path), "cwd": "/home/dev/proj",
            "hook_event_name": "PermissionRequest", "tool_name": "Bash", "tool_input": {"command": "ls"}}
    import urllib.request
    urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{exp.port}/hooks/claude_code",
                                                  data=json.dumps(body).encode(), method="POST",
                                                  headers=exp.hook_headers()), timeout=5)
    exp.wait_state(sid, "waiting")
    assert api_row(exp, sid)["source"] == "hook"
    a.write("waiting", "permission prompt")  # the same prompt, seen by the registry
    time.sleep(2.5)
    assert api_row(exp, sid)["source"] == "hook"
    assert len(alerts_for(receiver, sid)) == 1
    assert api_row(exp, sid)["waiting_for"] == {"reason": "permission", "tool": "Bash"}


def test_killed_mid_turn_is_agent_exited_one_page(env, tmp_path):
    exp, receiver, folder, agents, _w = env
    sid = "rg000000-0000-4000-8000-000000000003"
    a, s, path = _agent(env, tmp_path, sid, busy=True)
    time.sleep(0.6)
    a.kill()  # the record stays behind, still busy
    exp.wait_state(sid, "error", timeout=5)
    row = api_row(exp, sid)
    assert (row["error_kind"], row["source"]) == ("agent_exited", "registry")
    wait_for(lambda: len(alerts_for(receiver, sid, "error")) == 1, what="the agent_exited page")
    assert alerts_for(receiver, sid)[0]["title"].endswith(": the agent exited mid-turn")  # not "stopped on agent exited"
    time.sleep(1.5)
    assert len(alerts_for(receiver, sid)) == 1 and exp.state(sid) == "error"
    assert exp.value("coding_agent_turn_errors_total", kind="agent_exited") == 1


def test_removed_mid_turn_is_interrupted_no_page(env, tmp_path):
    exp, receiver, folder, agents, _w = env
    sid = "rg000000-0000-4000-8000-000000000004"
    a, s, path = _agent(env, tmp_path, sid, busy=True)
    time.sleep(0.6)
    a.path.unlink()  # a clean exit removes the file
    exp.wait_state(sid, "interrupted", timeout=5)
    time.sleep(2.0)
    assert alerts_for(receiver, sid) == [] and exp.state(sid) == "interrupted"
    a.kill()  # the process ending after its file is gone changes nothing
    time.sleep(1.0)
    assert exp.state(sid) == "interrupted" and alerts_for(receiver, sid) == []


def test_records_that_are_not_evidence(env, tmp_path):
    """A reused pid (alive, another start time), a legacy ``pid-<n>.json``, an
    ``sdk-ts`` record without status and a cut record never make a working
    session wait; ``.key`` files beside them are never opened."""
    exp, receiver, folder, agents, watch = env
    sids = [f"rg000000-0000-4000-8000-00000000001{i}" for i in range(4)]
    sessions = [_session(tmp_path, sid) for sid in sids]
    for s, path in sessions:
        write(path, s.prompt() + s.tool_use())
    for sid in sids:
        exp.wait_state(sid, "working")
    fifo = plant_key_files(folder, 5151, "sk-ant-KEYFILE-SECRET")
    # a reused pid: a live process under the pid, but not the one that wrote the record
    reused = Agent(folder, sids[0])
    agents.append(reused)
    reused.proc_start = str(int(reused.proc_start) - 700)
    reused.write("waiting", "permission prompt")
    # legacy: snake_case, no status, no procStart; a live pid
    legacy = Agent(folder, sids[1])
    agents.append(legacy)
    place(folder, f"pid-{legacy.pid}.json", json.dumps({"session_id": sids[1], "cwd": "/home/dev/proj"}))
    # sdk-ts: never a status; its process then dies
    sdk = Agent(folder, sids[2])
    agents.append(sdk)
    sdk.write(None, entrypoint="sdk-ts")
    # cut: a waiting record caught half written
    cut = Agent(folder, sids[3])
    agents.append(cut)
    cut.write("waiting", "permission prompt", cut=120)
    # the reused pid: the record's process is gone (error, paged: the session was working), never waiting
    exp.wait_state(sids[0], "error", timeout=5)
    assert api_row(exp, sids[0])["error_kind"] == "agent_exited"
    sdk.kill()
    time.sleep(2.0)
    assert [exp.state(sid) for sid in sids[1:]] == ["working"] * 3
    assert exp.value("coding_agent_registry_records_skipped_total", reason="no_status") >= 1
    assert exp.value("coding_agent_registry_records_skipped_total", reason="cut") >= 1
    # the cut record, written whole: read again at its change
    cut.write("waiting", "permission prompt")
    exp.wait_state(sids[3], "waiting", timeout=5)
    wait_for(lambda: len(alerts_for(receiver, sids[3])) == 1, what="the page of the whole record")
    assert not any(f"Session: {sid}" in m.get("message", "") and "approval" in m.get("title", "")
                   for sid in sids[:3] for m in receiver.messages)
    assert watch.opened == [], watch.opened  # neither .key file nor pid-<n>.json
    assert_fifo_never_opened(fifo)
    assert exp.proc.poll() is None


def test_after_a_restart_only_live_transitions_page(tmp_path):
    """A record left behind by a process that died while the exporter was
    down (a reboot) is shown (error, agent_exited) but never pages."""
    receiver = Receiver()
    folder = tmp_path / "claude" / "sessions"
    sid = "rg000000-0000-4000-8000-000000000021"
    a = Agent(folder, sid)
    s, path = _session(tmp_path, sid)
    write(path, s.prompt() + s.tool_use())
    a.write("busy")
    exp = Exporter(tmp_path, receiver=receiver).start()
    try:
        exp.wait_state(sid, "working")
        exp.stop()
        a.kill()
        exp = Exporter(tmp_path, receiver=receiver).start()
        exp.wait_state(sid, "error", timeout=5)
        time.sleep(2.0)
        assert alerts_for(receiver, sid) == []
    finally:
        exp.stop()
        receiver.close()
        a.close()


def test_clear_is_followed_to_the_new_session(env, tmp_path):
    exp, receiver, folder, agents, _w = env
    old, new = "rg000000-0000-4000-8000-000000000031", "rg000000-0000-4000-8000-000000000032"
    a = Agent(folder, old)
    agents.append(a)
    s1, p1 = _session(tmp_path, old)
    write(p1, s1.prompt() + s1.text() + s1.turn_duration())
    a.write("idle")
    exp.wait_state(old, "completed")
    a.sid = new  # /clear: the same pid and procStart under a new sessionId
    a.write("idle")
    s2, p2 = _session(tmp_path, new)
    write(p2, s2.prompt() + s2.tool_use())
    a.write("busy")
    exp.wait_state(new, "working")
    a.write("waiting", "permission prompt")
    exp.wait_state(new, "waiting", timeout=5)
    wait_for(lambda: len(alerts_for(receiver, new)) == 1, what="the waiting page")
    a.kill()
    exp.wait_state(new, "error", timeout=5)
    assert exp.state(old) == "completed"
    wait_for(lambda: len(alerts_for(receiver, new)) == 2, what="the waiting and agent_exited pages")
    time.sleep(1.0)
    assert len(alerts_for(receiver, old)) == 1  # its completion only


@pytest.mark.parametrize("busy_again", [False, True])
def test_permission_prompt_for_a_pending_plan_is_the_plan(env, tmp_path, busy_again):
    """busy from the prompt on, the plan, the prompt for it; 2.1.332 also
    writes busy again between the plan and the prompt (``busy_again``: a
    real run paged "permission" for the plan so): no answer, the plan."""
    exp, receiver, folder, agents, _w = env
    sid = "rg000000-0000-4000-8000-000000000041"
    a, s, path = _agent(env, tmp_path, sid)
    a.write("busy")
    time.sleep(0.08)
    prompt = s.prompt()
    plan = s.line(s._base(type="assistant", message={
        "id": "msg_plan", "role": "assistant", "model": "claude-sonnet-4-5", "stop_reason": None,
        "content": [{"type": "tool_use", "id": "toolu_plan", "name": "ExitPlanMode", "input": {"plan": "p"}}]}))
    write(path, prompt + plan)
    exp.wait_state(sid, "waiting")  # the transcript's plan
    if busy_again:
        a.write("busy")
        time.sleep(0.5)
    a.write("waiting", "permission prompt")
    exp.wait_state(sid, "waiting")
    time.sleep(2.0)
    assert api_row(exp, sid)["waiting_for"]["reason"] == "plan"
    assert len(alerts_for(receiver, sid)) == 1 and "plan" in alerts_for(receiver, sid)[0]["title"]


def test_esc_at_the_prompt_is_interrupted_not_working(env, tmp_path):
    """2.1.332 ``tui_permission_deny_esc``: the record says ``idle`` and the
    rejection and the interrupt reach the transcript just after; the
    session goes from ``waiting`` to ``interrupted``, never ``working``."""
    exp, receiver, folder, agents, _w = env
    sid = "rg000000-0000-4000-8000-000000000051"
    a, s, path = _agent(env, tmp_path, sid)
    write(path, s.prompt() + s.tool_use())
    a.write("busy")
    time.sleep(0.08)
    a.write("waiting", "permission prompt")
    exp.wait_state(sid, "waiting")
    wait_for(lambda: len(alerts_for(receiver, sid)) == 1, what="the waiting page")
    rejected = s.tool_result("The user doesn't want to proceed with this tool use.")
    interrupt = s.line(s._base(type="user", message={
        "role": "user", "content": [{"type": "text", "text": "[Request interrupted by user for tool use]"}]}))
    a.write("idle")  # the record first; the transcript lines reach the disk tens of ms later
    time.sleep(0.05)
    write(path, rejected + interrupt)
    seen = []
    for _ in range(60):
        seen.append(exp.state(sid))
        time.sleep(0.025)
    assert "working" not in seen and seen[-1] == "interrupted", seen
    assert len(alerts_for(receiver, sid)) == 1  # the wait's page only


def test_idle_ends_a_wait_only_the_registry_reported(env, tmp_path):
    exp, receiver, folder, agents, _w = env
    sid = "rg000000-0000-4000-8000-000000000061"
    a, s, path = _agent(env, tmp_path, sid)
    write(path, s.prompt() + s.tool_use())
    a.write("busy")
    a.write("waiting", "goal proposal")
    exp.wait_state(sid, "waiting")
    assert api_row(exp, sid)["waiting_for"]["reason"] == "goal_proposal"
    a.write("idle")
    exp.wait_state(sid, "working")
    assert api_row(exp, sid)["source"] == "registry"


def test_config_folders(tmp_path, monkeypatch):
    from coding_agent_exporter.config import ConfigError, from_mapping
    from coding_agent_exporter.registry import folders_of
    from coding_agent_exporter.roots import configured_roots

    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "cc"))
    cfg = from_mapping({})
    assert cfg.sources.claude_code.registry.enabled
    assert folders_of(cfg, configured_roots(cfg)) == [tmp_path / "cc" / "sessions"]
    monkeypatch.delenv("CLAUDE_CONFIG_DIR")
    cfg = from_mapping({})
    assert folders_of(cfg, configured_roots(cfg)) == [Path.home() / ".claude" / "sessions"]
    cfg = from_mapping({"sources": {"claude_code": {"paths": [str(tmp_path / "a" / "projects")]}}})
    assert folders_of(cfg, configured_roots(cfg)) == [tmp_path / "a" / "sessions"]
    cfg = from_mapping({"sources": {"claude_code": {"registry": {"path": str(tmp_path / "reg")}}}})
    assert folders_of(cfg, configured_roots(cfg)) == [tmp_path / "reg"]
    for off in ({"registry": {"enabled": False}}, {"enabled": False}):
        cfg = from_mapping({"sources": {"claude_code": off}})
        assert folders_of(cfg, configured_roots(cfg)) == []
    with pytest.raises(ConfigError, match="sources.codex.registry: unknown key"):
        from_mapping({"sources": {"codex": {"registry": {}}}})


def test_pid_domain_of_another_machine_or_container(tmp_path):
    from coding_agent_exporter.metrics import Metrics

    domain = own_pid_domain()
    real = json.loads((Path(__file__).parent / "fixtures" / "claude_sessions" / "v2.1.226_cli_idle_linux.json")
                      .read_bytes())
    assert creg.pid_domain("linux:3d1219c7c4c5404aaa1f6d2a48adfda4:pid:[4026531836]") == (
        "3d1219c7c4c5404aaa1f6d2a48adfda4", "pid:[4026531836]")  # 2.1.332, shared/live-agents
    if domain is None:
        pytest.skip("no machine id here")
    m = Metrics()
    reg = Registry([tmp_path], m)
    for n, (machine, ns, used) in enumerate(((domain[0], domain[1], True), ("0" * 32, domain[1], False),
                                             (domain[0], "pid:[1]", False))):
        path = tmp_path / f"{1000 + n}.json"
        path.write_text(json.dumps({**real, "pid": 1000 + n, "pidDomain": f"linux:{machine}:{ns}"}))
        e = _Entry()
        reg.records.read(str(path), e)
        assert (e.rec is not None) == used
    assert m.registry.get_sample_value("coding_agent_registry_records_skipped_total",
                                       {"reason": "foreign_pid_domain"}) == 2


def test_a_wait_both_reported_pages_once_across_a_restart(tmp_path):
    import urllib.request

    receiver = Receiver()
    folder = tmp_path / "claude" / "sessions"
    sid = "rg000000-0000-4000-8000-000000000071"
    a = Agent(folder, sid)
    s, path = _session(tmp_path, sid)
    write(path, s.prompt() + s.tool_use())
    a.write("busy")
    exp = Exporter(tmp_path, receiver=receiver).start()
    try:
        exp.wait_state(sid, "working")
        a.write("waiting", "permission prompt")
        exp.wait_state(sid, "waiting")
        body = {"session_id": sid, "transcript_path": str(path), "cwd": "/home/dev/proj",
                "hook_event_name": "PermissionRequest", "tool_name": "Bash", "tool_input": {"command": "ls"}}
        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{exp.port}/hooks/claude_code",
                                                      data=json.dumps(body).encode(), method="POST",
                                                  headers=exp.hook_headers()), timeout=5)
        wait_for(lambda: len(alerts_for(receiver, sid)) == 1, what="the waiting page")
        time.sleep(5.5)  # a periodic checkpoint
        exp.stop()
        exp = Exporter(tmp_path, receiver=receiver).start()
        exp.wait_state(sid, "waiting")
        assert api_row(exp, sid)["source"] == "registry"
        time.sleep(2.5)
        assert len(alerts_for(receiver, sid)) == 1, [m["title"] for m in receiver.messages]
        a.write("busy")
        exp.wait_state(sid, "working")
    finally:
        exp.stop()
        receiver.close()
        a.close()


def test_size_cap_and_a_link_to_a_key_file(tmp_path):
    """A record over ``max_record_bytes`` is skipped unread; a ``<pid>.json``
    that is a symbolic link (here to a ``.key`` file) or a FIFO is never opened."""
    from coding_agent_exporter.metrics import Metrics

    m = Metrics()
    reg = Registry([tmp_path], m, max_bytes=1024)
    real = json.loads((FIXTURES / "v2.1.226_cli_idle_linux.json").read_bytes())
    big = tmp_path / "1001.json"
    big.write_text(json.dumps({**real, "pid": 1001, "padding": "x" * 2000}))
    place(tmp_path, "1002.0badc0de.key", "sk-ant-KEYFILE-SECRET")
    os.symlink(tmp_path / "1002.0badc0de.key", tmp_path / "1002.json")
    os.mkfifo(tmp_path / "1003.json")
    watch = OpenWatch(tmp_path)
    try:
        time.sleep(0.2)
        for pid in (1001, 1002, 1003):
            e = _Entry()
            assert reg.records.read(str(tmp_path / f"{pid}.json"), e) and e.rec is None
        time.sleep(0.3)
        assert watch.opened == []
    finally:
        watch.close()
    value = m.registry.get_sample_value
    assert value("coding_agent_registry_records_skipped_total", {"reason": "too_large"}) == 1
    assert value("coding_agent_registry_records_skipped_total", {"reason": "invalid"}) == 2
