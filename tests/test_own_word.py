"""What Claude Code states about its own state decides (issue 29); the
exporter's own bookkeeping only fills the gaps.

In-process, at a fake clock: Claude Code 2.1.332 records (their shapes as the
real agent writes them: tests/fixtures/cases/OW*) appended to a transcript
under a Claude root, hooks as the agent POSTs them (``hooks.parse``), the
session store evaluated at chosen times, as ``/api/v1/sessions`` shows it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coding_agent_exporter.files import FileTable
from coding_agent_exporter.hooks import parse
from coding_agent_exporter.metrics import Metrics
from coding_agent_exporter.providers import claude_settings
from coding_agent_exporter.reducer import Timing
from coding_agent_exporter.store import SessionStore

SID = "c00000b0-0029-4000-8000-0000000000b0"
T0 = 1_790_000_000.0
TIMING = Timing(inferred_settle=30, marker_wait=300, stall_after=600, retry_grace=30, wakeup_hold=900,
                stop_hook_wait=60)


@pytest.fixture(autouse=True)
def _fresh_settings_cache():
    claude_settings._CACHE.clear()
    yield
    claude_settings._CACHE.clear()


def _iso(t: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class Claude:
    """One Claude Code 2.1.332 session: records appended to its transcript,
    hooks delivered, the store evaluated at a fake clock."""

    def __init__(self, tmp: Path, version: str = "2.1.332"):
        self.config = tmp / "claude"
        self.root = self.config / "projects"
        self.cwd = tmp / "proj"
        self.cwd.mkdir()
        self.path = self.root / "-home-dev-proj" / f"{SID}.jsonl"
        self.path.parent.mkdir(parents=True)
        self.path.write_bytes(b"")
        self.store = SessionStore(Metrics(), TIMING)
        self.files = FileTable(self.store, 1 << 24)
        self.files.track(str(self.path), "claude_code", self.root, born=T0 - 10)
        self.version, self.n, self.now = version, 0, T0
        self.ends: list[tuple[str, str]] = []  # (state, turn) of each turn end reported

    def rec(self, t: float, rtype: str, **fields) -> None:
        self.n += 1
        obj = {"parentUuid": None, "isSidechain": False, "userType": "external", "entrypoint": "cli",
               "cwd": str(self.cwd), "sessionId": SID, "version": self.version, "type": rtype,
               "uuid": f"00000000-0000-4000-8000-{self.n:012d}", "timestamp": _iso(t), **fields}
        with open(self.path, "ab") as f:
            f.write(json.dumps(obj).encode() + b"\n")
        self.files.refresh(str(self.path), live=True)

    def prompt(self, t, text="do it"):
        self.rec(t, "user", message={"role": "user", "content": text})

    def text(self, t, text="Done."):
        self.rec(t, "assistant", message={"model": "claude-opus-5-5", "id": f"msg_{self.n}", "role": "assistant",
                                          "content": [{"type": "text", "text": text}], "stop_reason": "end_turn"})

    def tool(self, t, name, inp, tid=None):
        self.rec(t, "assistant", message={"model": "claude-opus-5-5", "id": f"msg_{self.n}", "role": "assistant",
                                          "content": [{"type": "tool_use", "id": tid or f"toolu_{self.n}",
                                                       "name": name, "input": inp}], "stop_reason": "tool_use"})

    def result(self, t, tid, content, result=None):
        fields = {"toolUseResult": result} if result is not None else {}
        self.rec(t, "user", message={"role": "user", "content": [
            {"tool_use_id": tid, "type": "tool_result", "content": content}]}, **fields)

    def summary(self, t, hooks=("http://127.0.0.1:9877/hooks/claude_code",), has_output=False):
        self.rec(t, "system", subtype="stop_hook_summary", hookCount=len(hooks),
                 hookInfos=[{"command": h} for h in hooks], hookErrors=[], preventedContinuation=False,
                 stopReason="", hasOutput=has_output, level="suggestion")

    def duration(self, t, **counts):
        self.rec(t, "system", subtype="turn_duration", durationMs=1000, messageCount=4, isMeta=False, **counts)

    def hook(self, t, name, **fields):
        body = {"session_id": SID, "transcript_path": str(self.path), "cwd": str(self.cwd),
                "permission_mode": "default", "hook_event_name": name, **fields}
        self.store.apply_hook(parse("claude_code", json.dumps(body).encode(), t))

    def stop(self, t, tasks=None):
        self.hook(t, "Stop", stop_hook_active=False, last_assistant_message="Done.",
                  **({"background_tasks": tasks} if tasks is not None else {}), session_crons=[])

    def row(self, at: float) -> dict:
        for tr in self.store.evaluate(at):
            if tr.new.state in ("completed", "error") and (tr.old.state, tr.old.turn) != (tr.new.state, tr.new.turn):
                self.ends.append((tr.new.state, tr.new.turn))
        (row,) = [r for r in self.store.rows(at) if r["session_id"] == SID]
        return row


def _state(row):
    return row["state"], row["detail"]


def _launch(c: Claude, t: float, agent="a1b2c3d4e5f607182", tid="toolu_bg"):
    c.tool(t, "Agent", {"description": "Review", "prompt": "Review.", "run_in_background": True}, tid)
    c.result(t + 0.5, tid, f"Async agent launched successfully.\nagentId: {agent}",
             {"isAsync": True, "status": "async_launched", "agentId": agent, "description": "Review"})


# -- pending background work ---------------------------------------------------------
def test_stop_hook_that_lists_nothing_ends_a_turn_the_bookkeeping_holds(tmp_path):
    """Notifications that never come (2.1.234, anthropics/claude-code#87675): the
    transcript still counts the agent, the Stop hook says nothing is in flight."""
    c = Claude(tmp_path, version="2.1.140")  # (a version whose turn_duration states no counts)
    c.prompt(T0)
    _launch(c, T0 + 1)
    c.text(T0 + 2)
    c.stop(T0 + 2.1, [])
    c.summary(T0 + 2.2)  # (the exporter's bookkeeping still holds the agent here)
    c.duration(T0 + 2.3)
    assert _state(c.row(T0 + 3))[0] == "completed"
    assert len(c.ends) == 1


def test_without_the_hook_an_older_version_keeps_its_bookkeeping(tmp_path):
    c = Claude(tmp_path, version="2.1.140")
    c.prompt(T0)
    _launch(c, T0 + 1)
    c.text(T0 + 2)
    c.duration(T0 + 2.3)  # no count written: this version states nothing
    assert _state(c.row(T0 + 3)) == ("working", "background_agents_pending:1")


def test_turn_duration_that_leaves_the_count_out_ends_the_turn(tmp_path):
    """2.1.332 writes pendingBackgroundAgentCount only when > 0: its absence
    is the agent's word that nothing is pending (a lost notification)."""
    c = Claude(tmp_path)
    c.prompt(T0)
    _launch(c, T0 + 1)
    c.text(T0 + 2)
    c.duration(T0 + 2.3, pendingBackgroundAgentCount=1)
    assert _state(c.row(T0 + 3)) == ("working", "background_agents_pending:1")
    c.prompt(T0 + 10, "and now?")  # the user goes on; the agent's notification never comes
    c.text(T0 + 11)
    c.duration(T0 + 11.1)
    assert _state(c.row(T0 + 12))[0] == "completed"


def test_a_shell_is_never_pending_work(tmp_path):
    c = Claude(tmp_path)
    c.prompt(T0)
    c.tool(T0 + 1, "Bash", {"command": "npm run dev", "run_in_background": True}, "toolu_sh")
    c.result(T0 + 1.5, "toolu_sh", "Command running in background with ID: b7x1k9q2p",
             {"stdout": "", "stderr": "", "interrupted": False, "backgroundTaskId": "b7x1k9q2p"})
    c.text(T0 + 2)
    c.stop(T0 + 2.1, [{"id": "b7x1k9q2p", "type": "shell", "status": "running", "description": "dev server",
                       "command": "npm run dev"}])
    assert _state(c.row(T0 + 2.5))[0] == "completed"
    c.summary(T0 + 2.2)
    c.duration(T0 + 2.3)
    assert _state(c.row(T0 + 3))[0] == "completed"
    assert len(c.ends) == 1


def test_stop_hook_listing_an_agent_holds_the_turn(tmp_path):
    c = Claude(tmp_path)
    c.prompt(T0)
    c.text(T0 + 2)  # (the launch line not read yet: the hook's word alone holds it)
    c.stop(T0 + 2.1, [{"id": "a1", "type": "subagent", "status": "running", "description": "Review"},
                      {"id": "b1", "type": "shell", "status": "running", "description": "server"}])
    assert _state(c.row(T0 + 3)) == ("working", "background_agents_pending:1")


def test_taskstop_ends_its_agent(tmp_path):
    c = Claude(tmp_path)
    c.prompt(T0)
    _launch(c, T0 + 1)
    c.text(T0 + 2)
    c.duration(T0 + 2.3, pendingBackgroundAgentCount=1)
    c.prompt(T0 + 10, "stop it")
    c.tool(T0 + 11, "TaskStop", {"task_id": "a1b2c3d4e5f607182"}, "toolu_stop")
    c.result(T0 + 11.2, "toolu_stop", '{"message": "Successfully stopped task"}',
             {"message": "Successfully stopped task: a1b2c3d4e5f607182 (Review)", "task_id": "a1b2c3d4e5f607182",
              "task_type": "local_agent", "command": "Review"})
    c.text(T0 + 12)
    assert _state(c.row(T0 + 12.5))[0] == "working"  # (2.1.332 ends its turns at turn_duration)
    c.summary(T0 + 12.2)  # the exporter's bookkeeping no longer holds the stopped agent
    assert _state(c.row(T0 + 12.6))[0] == "completed"


def test_a_workflow_is_pending_by_its_task_id_until_notified(tmp_path):
    c = Claude(tmp_path)
    c.prompt(T0)
    c.tool(T0 + 1, "Workflow", {"name": "release"}, "toolu_wf")
    c.result(T0 + 1.5, "toolu_wf", "Workflow launched.",
             {"status": "async_launched", "taskId": "wf7q2m3k4p1", "taskType": "local_workflow",
              "workflowName": "release", "runId": "wf_0123456789ab"})
    c.text(T0 + 2)
    c.summary(T0 + 2.2)
    assert _state(c.row(T0 + 2.5)) == ("working", "background_workflows_pending:1")
    c.duration(T0 + 2.3, pendingWorkflowCount=1)
    assert _state(c.row(T0 + 3)) == ("working", "background_workflows_pending:1")
    c.rec(T0 + 30, "user", message={"role": "user", "content": "<task-notification>\n<task-id>wf7q2m3k4p1</task-id>"
                                    "\n<status>completed</status>\n</task-notification>"},
          origin={"kind": "task-notification"})
    c.text(T0 + 31)
    c.summary(T0 + 31.1)  # the workflow's notification named its task id: nothing left unnamed
    assert _state(c.row(T0 + 32))[0] == "completed"


# -- a user's own hooks ----------------------------------------------------------------------
def _user_stop_hook(where: Path, command="sleep 12"):
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [
        {"type": "http", "url": "http://127.0.0.1:9877/hooks/claude_code"},  # the exporter's own: not counted
        {"type": "command", "command": command}]}]}}))


@pytest.mark.parametrize("where", ["user", "project", "local"])
def test_a_user_stop_hook_holds_the_page_until_stop_hook_summary(tmp_path, where):
    c = Claude(tmp_path)
    _user_stop_hook({"user": c.config / "settings.json", "project": c.cwd / ".claude" / "settings.json",
                     "local": c.cwd / ".claude" / "settings.local.json"}[where])
    c.prompt(T0)
    c.text(T0 + 1)
    c.stop(T0 + 1.1, [])
    assert _state(c.row(T0 + 10)) == ("working", "stop_hooks_running:1")
    c.summary(T0 + 13, hooks=("http://127.0.0.1:9877/hooks/claude_code", "sleep 12"))
    assert c.row(T0 + 13.5)["state"] == "completed"
    c.duration(T0 + 13.1)
    assert c.row(T0 + 14)["state"] == "completed"
    assert len(c.ends) == 1


def test_the_hold_is_bounded_by_stop_hook_wait(tmp_path):
    c = Claude(tmp_path)
    _user_stop_hook(c.config / "settings.json")
    c.prompt(T0)
    c.text(T0 + 1)
    c.stop(T0 + 1.1, [])
    assert c.row(T0 + 1.1 + 59)["state"] == "working"
    assert c.row(T0 + 1.1 + 60)["state"] == "completed"  # no summary came: the hook's word stands


def test_no_hold_without_other_stop_hooks_or_with_hooks_disabled(tmp_path):
    c = Claude(tmp_path)
    (c.cwd / ".claude").mkdir()
    (c.cwd / ".claude" / "settings.json").write_text(json.dumps({"hooks": {"Stop": [{"hooks": [
        {"type": "command", "command": "/usr/bin/coding-agent-exporter hook --agent claude_code --url x"}]}]}}))
    c.prompt(T0)
    c.text(T0 + 1)
    c.stop(T0 + 1.1, [])
    assert c.row(T0 + 1.5)["state"] == "completed"  # the exporter's own command hook is not another hook
    _user_stop_hook(c.config / "settings.json")
    (c.cwd / ".claude" / "settings.local.json").write_text(json.dumps({"disableAllHooks": True}))
    c.prompt(T0 + 10)
    c.text(T0 + 11)
    c.stop(T0 + 11.1, [])
    assert c.row(T0 + 11.5)["state"] == "completed"


def test_claude_config_dir_when_the_transcript_says_nothing(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    _user_stop_hook(conf / "settings.json")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(conf))
    assert claude_settings.other_hooks("Stop", "/elsewhere/x.jsonl", None) == 1
    assert claude_settings.other_hooks("Stop", str(tmp_path / "c" / "projects" / "p" / "s.jsonl"), None) == 0


def test_a_blocking_user_stop_hook_pages_once_at_the_real_end(tmp_path):
    c = Claude(tmp_path)
    _user_stop_hook(c.config / "settings.json", "./check.sh")
    c.prompt(T0)
    c.text(T0 + 1)
    c.stop(T0 + 1.1, [])
    assert c.row(T0 + 3)["state"] == "working"
    c.rec(T0 + 4, "user", isMeta=True, message={"role": "user", "content": "Stop hook feedback:\n[./check.sh]: tests failed"})
    c.summary(T0 + 4.01, hooks=("http://127.0.0.1:9877/hooks/claude_code", "./check.sh"), has_output=True)
    assert c.row(T0 + 4.5)["state"] == "working"
    c.text(T0 + 6, "Fixed.")
    c.stop(T0 + 6.1, [])
    assert c.row(T0 + 7)["state"] == "working"
    c.summary(T0 + 9, hooks=("http://127.0.0.1:9877/hooks/claude_code", "./check.sh"))
    c.duration(T0 + 9.1)
    assert c.row(T0 + 10)["state"] == "completed"
    assert len(c.ends) == 1


@pytest.mark.parametrize("hook_first", [True, False])
def test_a_prompt_a_user_hook_blocked_is_no_turn(tmp_path, hook_first):
    c = Claude(tmp_path)
    c.prompt(T0)
    c.text(T0 + 1)
    c.duration(T0 + 1.1)
    before = c.row(T0 + 2)
    assert before["state"] == "completed"

    def blocked():
        c.rec(T0 + 5.1, "system", subtype="informational", level="warning", preventContinuation=True,
              content="UserPromptSubmit operation blocked by hook:\n[./policy.sh]: refused\n\n",
              promptSubmitEnding={"ending": {"kind": "blocked_by_hook", "reason": "refused"}, "promptKept": False})

    if not hook_first:
        blocked()  # (the transcript read before the exporter's own hook is applied)
    c.hook(T0 + 5, "UserPromptSubmit", prompt="do the forbidden thing")
    if hook_first:
        blocked()
    after = c.row(T0 + 30)
    assert (after["state"], after["turn"]) == ("completed", before["turn"])
    assert len(c.ends) == 1


# -- ! bash mode ---------------------------------------------------------------------
@pytest.mark.parametrize("answer_at", [5.9, 6.3])
def test_bang_answer_flushed_after_its_stop_hook_pages(tmp_path, answer_at):
    """2.1.332: ``!cmd`` goes to the model; its answer may reach the disk after
    the turn's Stop hook (older than the hook, or stamped after it)."""
    c = Claude(tmp_path)
    c.prompt(T0)
    c.text(T0 + 1)
    c.stop(T0 + 1.05, [])
    c.summary(T0 + 1.1)
    c.duration(T0 + 1.2)
    assert c.row(T0 + 2)["state"] == "completed"
    c.rec(T0 + 5, "user", message={"role": "user", "content": "<bash-input>echo hi</bash-input>"})
    c.rec(T0 + 5.2, "user", message={"role": "user", "content": "<bash-stdout>hi</bash-stdout><bash-stderr></bash-stderr>"})
    c.stop(T0 + 6.0, [])  # the Stop hook before the answer's line is read
    c.text(T0 + answer_at, "Ran it.")
    c.summary(T0 + 6.4)
    c.duration(T0 + 6.5)
    row = c.row(T0 + 7)
    assert row["state"] == "completed"
    assert len(c.ends) == 2 and c.ends[0][1] != c.ends[1][1]


def test_lines_of_one_response_after_its_stop_hook_are_no_new_turn(tmp_path):
    c = Claude(tmp_path, version="2.1.100")  # (end_turn ends the turn: no turn_duration for every turn)
    c.prompt(T0)
    c.text(T0 + 1)
    c.stop(T0 + 1.2, [])
    c.text(T0 + 1.1, "and a last line of it")  # read after the hook: the same response
    assert c.row(T0 + 2)["state"] == "completed"
    assert len(c.ends) == 1


# -- wakeups ---------------------------------------------------------------------------
@pytest.mark.parametrize("delay,state", [(120, "working"), (1200, "completed")])
def test_wakeup_whose_result_gives_only_text(tmp_path, delay, state):
    c = Claude(tmp_path)
    c.prompt(T0)
    c.tool(T0 + 1, "ScheduleWakeup", {"delaySeconds": delay, "reason": "poll", "prompt": "/loop"}, "toolu_w")
    c.result(T0 + 1.5, "toolu_w", f"Next wakeup scheduled for 10:20:00 (in {delay}s). Then end the turn.")
    c.text(T0 + 2)
    c.stop(T0 + 2.1, [])
    row = c.row(T0 + 3)
    assert row["state"] == state and row["detail"].startswith("wakeup_armed:"), row


def test_a_stop_hook_that_lists_nothing_leaves_other_stop_hooks_running(tmp_path):
    """Its ``background_tasks`` speaks of background work only: a Stop hook of
    the user's own still running (``hook_progress``, field case 46) holds."""
    c = Claude(tmp_path, version="2.1.257")
    c.prompt(T0)
    c.text(T0 + 1)
    for cmd in ("bash .claude/hooks/require-tests.sh", "http://127.0.0.1:9877/hooks/claude_code"):
        c.rec(T0 + 1.01, "progress", data={"type": "hook_progress", "hookEvent": "Stop", "hookName": "Stop",
                                           "command": cmd})
    c.stop(T0 + 1.05, [])
    assert _state(c.row(T0 + 2)) == ("working", "stop_hooks_running:1")
