"""The real-agent scenarios: what is typed, what the exporter must show after each step.

A :class:`Scenario` runs one agent (``claude_code`` or ``codex``) in ``mode``
``tui`` (interactive, under tmux) or ``print`` (``claude -p`` / ``codex exec``).
Steps (tuples):

- ``("type", text)``: type ``text`` and Enter;
- ``("keys", key, ...)``: tmux key names (``Escape``, ``Enter``, ``C-c``, ``y``);
- ``("wait_pane", regex, timeout_s)``: the screen shows ``regex``;
- ``("expect", state, pages, timeout_s[, extra])``: within ``timeout_s`` the newest
  session of the agent is in ``state`` (and ``extra``: ``reason``/``error_kind``)
  and the pages received so far are exactly ``pages`` (kinds, in order);
- ``("sleep", s)``, ``("pages", kinds, timeout_s)`` (the pages received so far are
  exactly ``kinds``, whatever the state), ``("kill",)`` (SIGKILL the agent and its children),
  ``("exited", timeout_s)``, ``("exporter_stop",)``, ``("exporter_start",)`` (the
  same exporter, state_dir and port again).

``pages`` is the exact list of page kinds at the end; ``titles`` (when given)
regexes their titles match, in order. The model stand-in picks its
answer from a keyword in the prompt (``model.py``). ``slow`` scenarios (backoff
retries) run only with ``CAE_SLOW=1``; ``needs`` names an exporter feature the
scenario depends on (``registry``: Claude Code's session registry, issue 23).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import agent_copilot
import agent_pi

CLAUDE_READY = r"(?i)(for shortcuts|\? for|❯)"
CODEX_READY = r"(?i)(›|context left|for shortcuts)"
#: Agents whose screens are described in their own module (tests/agents/agent_*.py).
READY: dict[str, str] = {m.NAME: m.READY for m in (agent_pi, agent_copilot)}
GEMINI_READY = r"Type your message"


@dataclass
class Scenario:
    name: str
    agent: str
    mode: str
    steps: list = field(default_factory=list)
    pages: list = field(default_factory=list)
    prompt: str = ""
    args: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    model_env: dict = field(default_factory=dict)
    #: regexes the page titles match, in order (when given)
    titles: list = field(default_factory=list)
    hooks: bool = True
    #: Claude Code hooks as ``http`` (``hooks install --http``) or ``command`` (the default ``hooks install``)
    hook_type: str = "http"
    slow: bool = False
    needs: str | None = None
    what: str = ""
    #: the user's own Claude Code settings (hooks), by file: ``user`` (``~/.claude/settings.json``,
    #: merged before ``hooks install``; Gemini CLI: ``~/.gemini/settings.json``), ``project`` (``<work>/.claude/settings.json``), ``local``
    #: (``<work>/.claude/settings.local.json``)
    settings: dict = field(default_factory=dict)
    #: Exporter config merged over the runner's (e.g. ``{"alerts": {"presence_delay_seconds": 10}}``).
    config: dict = field(default_factory=dict)

    @property
    def ready(self) -> str:
        if self.agent == "gemini_cli":
            return GEMINI_READY
        return READY.get(self.agent) or (CLAUDE_READY if self.agent == "claude_code" else CODEX_READY)


#: The user's own hooks of the issue-29 scenarios (Claude Code settings, by file; see ``Scenario.settings``).
_USER_HOOK_SLOW = {"project": {"hooks": {"Stop": [{"hooks": [
    {"type": "command", "command": "sleep 12", "timeout": 60}]}]}}}
#: blocks the first stop (exit 2: stderr goes to the model as "Stop hook feedback"), passes the next
_USER_HOOK_BLOCKS = {"local": {"hooks": {"Stop": [{"hooks": [{"type": "command", "timeout": 60, "command":
    "sleep 3; if [ -e .stop-hook-blocked ]; then exit 0; fi; touch .stop-hook-blocked; "
    "echo 'tests failed: SCN_FIXIT' >&2; exit 2"}]}]}}}
#: refuses a prompt that says SCN_BLOCKME (exit 2)
_USER_PROMPT_BLOCK = {"user": {"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command":
    "if grep -q SCN_BLOCKME; then echo 'prompt refused by policy' >&2; exit 2; fi"}]}]}}}


def _all() -> list[Scenario]:
    C, X = "claude_code", "codex"
    return [
        # -- Claude Code, interactive ------------------------------------------------
        Scenario("claude_text_two_turns", C, "tui", what="a text turn, then a second turn", steps=[
            ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
            ("expect", "completed", ["completed"], 15),
            ("type", "Ask me something. SCN_QUESTION"), ("wait_pane", "A or B", 40),
            ("expect", "completed", ["completed", "completed"], 15)],
            pages=["completed", "completed"]),
        Scenario("claude_tool_call", C, "tui", what="a tool call (Bash ls, allowed by auto mode)", steps=[
            ("type", "List the files here. SCN_BASH"), ("wait_pane", "files in this folder", 40),
            ("expect", "completed", ["completed"], 15)], pages=["completed"]),
        Scenario("claude_permission_allow", C, "tui", args=["--permission-mode", "default"],
                 what="a permission prompt answered (hooks)", steps=[
            ("type", "Create a file. SCN_WRITE"), ("wait_pane", r"(?i)do you want to proceed", 40),
            ("expect", "waiting", ["waiting"], 10, {"reason": "permission"}),
            ("keys", "Enter"), ("wait_pane", "created made_by_agent", 40),
            ("expect", "completed", ["waiting", "completed"], 15)], pages=["waiting", "completed"],
                 titles=[r"needs your approval$", r"your turn$"]),
        Scenario("claude_permission_allow_command_hooks", C, "tui", args=["--permission-mode", "default"],
                 hook_type="command", what="a permission prompt answered (command hooks: the hook command)", steps=[
            ("type", "Create a file. SCN_WRITE"), ("wait_pane", r"(?i)do you want to proceed", 40),
            ("expect", "waiting", ["waiting"], 10, {"reason": "permission"}),
            ("keys", "Enter"), ("wait_pane", "created made_by_agent", 40),
            ("expect", "completed", ["waiting", "completed"], 15)], pages=["waiting", "completed"],
                 titles=[r"needs your approval$", r"your turn$"]),
        Scenario("claude_permission_deny", C, "tui", args=["--permission-mode", "default"],
                 what="a permission prompt denied with Esc (hooks)", steps=[
            ("type", "Create a file. SCN_WRITE"), ("wait_pane", r"(?i)do you want to proceed", 40),
            ("expect", "waiting", ["waiting"], 10, {"reason": "permission"}),
            ("keys", "Escape"), ("expect", "interrupted", ["waiting"], 15)], pages=["waiting"]),
        Scenario("claude_question", C, "tui", what="AskUserQuestion, answered", steps=[
            ("type", "Ask me which colour. SCN_ASK"), ("wait_pane", r"Which colour", 40),
            ("expect", "waiting", ["waiting"], 10, {"reason": "question"}),
            ("keys", "Enter"), ("wait_pane", "all done with scn_ask", 40),
            ("expect", "completed", ["waiting", "completed"], 15)], pages=["waiting", "completed"],
                 titles=[r"asks you a question$", r"your turn$"]),
        Scenario("claude_question_dismissed", C, "tui", what="AskUserQuestion, dismissed with Esc", steps=[
            ("type", "Ask me which colour. SCN_ASK"), ("wait_pane", r"Which colour", 40),
            ("expect", "waiting", ["waiting"], 10, {"reason": "question"}),
            ("keys", "Escape"), ("expect", "interrupted", ["waiting"], 15)], pages=["waiting"]),
        Scenario("claude_plan", C, "tui", args=["--permission-mode", "plan"], what="a plan to approve", steps=[
            ("type", "Plan a file. SCN_PLAN"), ("wait_pane", r"(?i)(exit plan mode\?|would you like to proceed)", 40),
            ("expect", "waiting", ["waiting"], 10, {"reason": "plan"}),
            ("keys", "Enter"), ("wait_pane", "all done with scn_plan", 40),
            ("expect", "completed", ["waiting", "completed"], 15)], pages=["waiting", "completed"],
                 titles=[r"has a plan for you to approve$", r"your turn$"]),
        Scenario("claude_subagent", C, "tui", args=["--permission-mode", "acceptEdits"], model_env={"FAKE_PAUSE": 5},
                 what="a subagent (Agent tool) that works a while", steps=[
            ("type", "Use a helper. SCN_AGENT"), ("sleep", 2),
            ("expect", "working", [], 5),
            ("wait_pane", "all done with scn_agent", 40),
            ("expect", "completed", ["completed"], 15)], pages=["completed"]),
        Scenario("claude_background_agent", C, "tui", args=["--permission-mode", "acceptEdits"],
                 model_env={"FAKE_PAUSE": 8},
                 what="a background agent that reports back later", steps=[
            ("type", "Start a helper in the background. SCN_BGAGENT"), ("wait_pane", "all done with scn_bgagent", 40),
            ("sleep", 1.5), ("expect", "working", [], 3),
            ("expect", "completed", ["completed"], 40)], pages=["completed"]),
        Scenario("claude_clear", C, "tui", what="/clear, then a new turn", steps=[
            ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
            ("expect", "completed", ["completed"], 15),
            ("type", "/clear"), ("sleep", 2),
            ("type", "Ask me something. SCN_QUESTION"), ("wait_pane", "A or B", 40),
            ("expect", "completed", ["completed", "completed"], 15)], pages=["completed", "completed"]),
        Scenario("claude_compact", C, "tui", what="/compact between two turns", steps=[
            ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
            ("expect", "completed", ["completed"], 15),
            ("type", "/compact"), ("sleep", 6), ("expect", "completed", ["completed"], 10),
            ("type", "Ask me something. SCN_QUESTION"), ("wait_pane", "A or B", 40),
            ("expect", "completed", ["completed", "completed"], 15)], pages=["completed", "completed"]),
        Scenario("claude_429_recovers", C, "tui", model_env={"FAKE_FAIL_N": 2},
                 what="a 429 that recovers (two retries)", steps=[
            ("type", "Answer after a rate limit. SCN_ERR429"), ("wait_pane", "Recovered after", 60),
            ("expect", "completed", ["completed"], 15)], pages=["completed"]),
        Scenario("claude_529_persistent", C, "tui", env={"CLAUDE_CODE_MAX_RETRIES": "2"},
                 what="a 529 that does not recover", steps=[
            ("type", "Answer while overloaded. SCN_ERR529"),
            ("expect", "error", ["error"], 45, {"error_kind": "overloaded"})], pages=["error"],
                 titles=[r"Claude Code · claude_529_persistent: stopped on overloaded$"]),
        Scenario("claude_esc_streaming", C, "tui", what="Esc while streaming, then a new turn", steps=[
            ("type", "Write a long answer. SCN_SLOW"), ("wait_pane", "word4", 40), ("keys", "Escape"),
            ("expect", "interrupted", [], 10),
            ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
            ("expect", "completed", ["completed"], 15)], pages=["completed"]),
        Scenario("claude_esc_tool_call", C, "tui", args=["--allowedTools", "Bash(python3:*)"],
                 what="Esc during a tool call (Bash sleep)", steps=[
            ("type", "Wait a while. SCN_SLEEP"), ("wait_pane", r"time\.sleep", 40), ("sleep", 2),
            ("expect", "working", [], 3), ("keys", "Escape"),
            ("expect", "interrupted", [], 10)], pages=[]),
        Scenario("claude_exit_mid_turn", C, "tui", what="the agent quit (Ctrl-C twice) mid-turn", steps=[
            ("type", "Write a long answer. SCN_SLOW"), ("wait_pane", "word4", 40),
            ("keys", "C-c"), ("sleep", 1.5), ("keys", "C-c", "C-c"), ("exited", 15),
            ("expect", "interrupted", [], 10)], pages=[]),
        Scenario("claude_exit_after_turn", C, "tui", what="/exit after a turn (SessionEnd, registry file deleted)",
                 steps=[("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
                        ("expect", "completed", ["completed"], 15), ("type", "/exit"), ("exited", 15),
                        ("sleep", 1.5), ("expect", "completed", ["completed"], 5)], pages=["completed"]),
        Scenario("claude_exporter_restart", C, "tui", what="a turn that ended while the exporter was down",
                 steps=[("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
                        ("expect", "completed", ["completed"], 15), ("exporter_stop",),
                        ("type", "Ask me something. SCN_QUESTION"), ("wait_pane", "A or B", 40), ("sleep", 1),
                        ("exporter_start",), ("expect", "completed", ["completed", "completed"], 15)],
                 pages=["completed", "completed"]),
        # never a false done: its session registry record is left behind by the dead process
        # (issue 23), so the exporter says so at once: error agent_exited, one page
        Scenario("claude_killed", C, "tui", needs="registry",
                 what="the agent process killed mid-turn: never a false done (agent_exited)", steps=[
            ("type", "Write a long answer. SCN_SLOW"), ("wait_pane", "word4", 40), ("kill",), ("exited", 10),
            ("expect", "error", ["error"], 10)], pages=["error"], titles=[r": the agent exited mid-turn$"]),
        Scenario("claude_print_429_recovers", C, "print", prompt="Answer after a rate limit. SCN_ERR429",
                 model_env={"FAKE_FAIL_N": 2}, what="-p: a 429 that recovers", steps=[
            ("exited", 60), ("expect", "completed", ["completed"], 15)], pages=["completed"]),
        Scenario("claude_print_529", C, "print", prompt="Answer while overloaded. SCN_ERR529",
                 env={"CLAUDE_CODE_MAX_RETRIES": "2"}, what="-p: a 529 that does not recover", steps=[
            ("exited", 60), ("expect", "error", ["error"], 15, {"error_kind": "overloaded"})], pages=["error"],
                 titles=[r"stopped on overloaded$"]),
        Scenario("claude_print_permission_denied", C, "print", prompt="Create a file. SCN_WRITE",
                 args=["--permission-mode", "default"], what="-p: a tool that needs permission, denied by -p itself",
                 steps=[("exited", 60), ("expect", "completed", ["completed"], 15)], pages=["completed"]),
        Scenario("claude_429_backoff", C, "tui", model_env={"FAKE_FAIL_N": 5, "FAKE_RETRY_AFTER": ""}, slow=True,
                 what="a 429 that recovers after five backoff retries", steps=[
            ("type", "Answer after a rate limit. SCN_ERR429"), ("wait_pane", "Recovered after", 120),
            ("expect", "completed", ["completed"], 15)], pages=["completed"]),
        Scenario("claude_text_no_hooks", C, "tui", hooks=False, what="a text turn, no hooks (transcript only)",
                 steps=[("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
                        ("expect", "completed", ["completed"], 15)], pages=["completed"]),
        Scenario("claude_question_no_hooks", C, "tui", hooks=False,
                 what="AskUserQuestion, no hooks (transcript only)", steps=[
            ("type", "Ask me which colour. SCN_ASK"), ("wait_pane", r"Which colour", 40),
            ("expect", "waiting", ["waiting"], 10, {"reason": "question"}),
            ("keys", "Enter"), ("wait_pane", "all done with scn_ask", 40),
            ("expect", "completed", ["waiting", "completed"], 15)], pages=["waiting", "completed"]),
        Scenario("claude_permission_no_hooks", C, "tui", args=["--permission-mode", "default"], hooks=False,
                 needs="registry", what="a permission prompt with no hooks (the registry's waiting)", steps=[
            ("type", "Create a file. SCN_WRITE"), ("wait_pane", r"(?i)do you want to proceed", 40),
            ("expect", "waiting", ["waiting"], 10, {"reason": "permission"}),
            ("keys", "Enter"), ("wait_pane", "created made_by_agent", 40),
            ("expect", "completed", ["waiting", "completed"], 15)], pages=["waiting", "completed"]),
        Scenario("claude_permission_deny_no_hooks", C, "tui", args=["--permission-mode", "default"], hooks=False,
                 needs="registry", what="a permission prompt denied, no hooks (the registry's waiting)", steps=[
            ("type", "Create a file. SCN_WRITE"), ("wait_pane", r"(?i)do you want to proceed", 40),
            ("expect", "waiting", ["waiting"], 10, {"reason": "permission"}),
            ("keys", "Escape"), ("expect", "interrupted", ["waiting"], 15)], pages=["waiting"]),
        # 2.1.332 behind a gateway (ANTHROPIC_BASE_URL): auto mode's "can't check actions" dialog blocks
        # the turn; no hook fires (no PermissionRequest, no Notification in 30 s), the registry says
        # status "waiting" (a wait of its own: it pages once)
        Scenario("claude_auto_mode_gateway", C, "tui", needs="registry",
                 what="auto mode behind a gateway: its 'can't check actions' dialog (no hook fires)", steps=[
            ("type", "Use a helper. SCN_AGENT"), ("wait_pane", r"(?i)auto mode can.t check", 40),
            # (2.1.332 tells it through Notification agent_needs_input; the dialog's default answer
            # moved between runs, "No" or "Yes", so the scenario ends at the page)
            ("expect", "waiting", ["waiting"], 15)], pages=["waiting"]),
        # -- Claude Code: what the agent states about its own state (issue 29) ---------------
        # a Stop hook of the user's own that takes 12 s (project settings): the screen says
        # "running stop hooks"; the page comes when Claude Code has run every Stop hook
        Scenario("claude_user_stop_hook_slow", C, "tui", settings=_USER_HOOK_SLOW,
                 what="a slow Stop hook of the user's own (12 s): no page before it is done", steps=[
            ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40), ("sleep", 4),
            ("expect", "working", [], 2), ("pages", [], 2),
            ("expect", "completed", ["completed"], 25)], pages=["completed"]),
        # the same hook blocks the first stop ("tests failed"): Claude answers again; one page, at the real end
        Scenario("claude_user_stop_hook_blocks", C, "tui", settings=_USER_HOOK_BLOCKS,
                 what="a Stop hook of the user's own that blocks once: one page, at the real end", steps=[
            ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40), ("sleep", 2),
            ("expect", "working", [], 3), ("wait_pane", "Fixed after the hook", 40),
            ("expect", "completed", ["completed"], 20)], pages=["completed"]),
        # a UserPromptSubmit hook of the user's own refuses the prompt: the model is never called
        Scenario("claude_user_prompt_blocked", C, "tui", settings=_USER_PROMPT_BLOCK,
                 what="a prompt blocked by a UserPromptSubmit hook of the user's own: not left working", steps=[
            ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
            ("expect", "completed", ["completed"], 15),
            ("type", "Do the forbidden thing. SCN_BLOCKME"), ("wait_pane", r"(?i)blocked by hook", 20),
            ("sleep", 3), ("expect", "completed", ["completed"], 5)], pages=["completed"]),
        # `!` bash mode after an earlier turn: 2.1.332 sends the command and its output to the model
        Scenario("claude_bang_after_turn", C, "tui", what="`!` bash mode after an earlier turn", steps=[
            ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
            ("expect", "completed", ["completed"], 15), ("sleep", 1),
            ("type", "!echo bang-ran"), ("wait_pane", "Ran your command", 40),
            ("expect", "completed", ["completed", "completed"], 15)], pages=["completed", "completed"]),
        # a background agent that would run a minute, stopped with TaskStop: no notification follows
        Scenario("claude_background_taskstop", C, "tui", args=["--permission-mode", "acceptEdits"],
                 model_env={"FAKE_PAUSE": 90}, what="a background agent stopped with TaskStop", steps=[
            ("type", "Start a helper in the background. SCN_BGAGENT"), ("wait_pane", "all done with scn_bgagent", 40),
            ("sleep", 2), ("expect", "working", [], 3),
            ("type", "Stop the helper. SCN_TASKSTOP"), ("wait_pane", "stopped the helper", 40),
            ("expect", "completed", ["completed"], 15)], pages=["completed"]),
        Scenario("claude_presence_next_prompt", C, "tui", config={"alerts": {"presence_delay_seconds": 12}},
                 what="presence_delay_seconds: the next prompt typed within the delay, no page; then away, one",
                 steps=[
            ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
            ("expect", "completed", [], 5), ("sleep", 4),  # past settle_seconds, within the delay
            ("type", "List the files here. SCN_BASH"), ("wait_pane", "files in this folder", 40),
            ("expect", "completed", [], 5),
            ("sleep", 13), ("expect", "completed", ["completed"], 10)], pages=["completed"]),
        # -- Codex ----------------------------------------------------------------------
        Scenario("codex_text_two_turns", X, "tui", what="a text turn, then a second turn", steps=[
            ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
            ("expect", "completed", ["completed"], 15),
            ("type", "Ask me something. SCN_QUESTION"), ("wait_pane", "A or B", 40),
            ("expect", "completed", ["completed", "completed"], 15)], pages=["completed", "completed"]),
        Scenario("codex_presence_next_prompt", X, "tui", config={"alerts": {"presence_delay_seconds": 12}},
                 what="presence_delay_seconds: the next prompt typed within the delay, no page; then away, one",
                 steps=[
            ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
            ("expect", "completed", [], 5), ("sleep", 4),  # past settle_seconds, within the delay
            ("type", "Ask me something. SCN_QUESTION"), ("wait_pane", "A or B", 40),
            ("expect", "completed", [], 5),
            ("sleep", 13), ("expect", "completed", ["completed"], 10)], pages=["completed"]),
        Scenario("codex_tool_call", X, "print", prompt="List the files here. SCN_BASH", what="exec: a tool call",
                 steps=[("exited", 60), ("expect", "completed", ["completed"], 15)], pages=["completed"]),
        Scenario("codex_approval_allow", X, "tui", what="an approval answered (hooks)", steps=[
            ("type", "Create a file. SCN_WRITE"),
            ("wait_pane", r"(?i)(run the following|allow|approve|proceed)", 40),
            ("expect", "waiting", ["waiting"], 10, {"reason": "permission"}),
            ("keys", "y"), ("wait_pane", "created made_by_agent", 40),
            ("expect", "completed", ["waiting", "completed"], 15)], pages=["waiting", "completed"],
                 titles=[r"needs your approval", r"your turn$"]),
        Scenario("codex_approval_deny", X, "tui", what="an approval denied with Esc (hooks)", steps=[
            ("type", "Create a file. SCN_WRITE"),
            ("wait_pane", r"(?i)(run the following|allow|approve|proceed)", 40),
            ("expect", "waiting", ["waiting"], 10, {"reason": "permission"}),
            ("keys", "Escape"), ("expect", "interrupted", ["waiting"], 15)], pages=["waiting"]),
        Scenario("codex_429_recovers", X, "print", prompt="Answer after a rate limit. SCN_ERR429",
                 model_env={"FAKE_FAIL_N": 1}, what="exec: a 429 that recovers",
                 steps=[("exited", 60), ("expect", "completed", ["completed"], 15)], pages=["completed"]),
        Scenario("codex_500", X, "print", prompt="Answer while the server fails. SCN_ERR529",
                 what="exec: a 500 that does not recover",
                 steps=[("exited", 60), ("expect", "error", ["error"], 15, {"error_kind": "server_error"})],
                 pages=["error"], titles=[r"^Codex · codex_500: stopped on server error$"]),
        Scenario("codex_question", X, "tui", what="request_user_input (Plan mode), answered", steps=[
            ("keys", "BTab"), ("wait_pane", r"(?i)plan mode", 10),
            ("type", "Ask me which colour. SCN_ASK"), ("wait_pane", r"Which colour", 40),
            ("expect", "waiting", ["waiting"], 10, {"reason": "question"}),
            ("keys", "Enter"), ("wait_pane", "all done with scn_ask", 40),
            ("expect", "completed", ["waiting", "completed"], 15)], pages=["waiting", "completed"],
                 titles=[r"asks you a question$", r"your turn$"]),
        Scenario("codex_plan", X, "tui", what="a proposed plan (Plan mode), then implemented", steps=[
            ("keys", "BTab"), ("wait_pane", r"(?i)plan mode", 10),
            ("type", "Plan a file. SCN_PROPOSE"), ("wait_pane", r"(?i)implement this plan", 40),
            ("expect", "completed", ["completed"], 15),
            ("keys", "Enter"), ("wait_pane", "plain answer", 40),
            ("expect", "completed", ["completed", "completed"], 15)], pages=["completed", "completed"]),
        # Codex 0.171's /compact is a task of its own (task_started, the summary's assistant message,
        # compacted, a ContextCompaction item, task_complete): not a turn of the agent, no page (issue 21)
        Scenario("codex_compact", X, "tui", what="/compact between two turns (no page)", steps=[
            ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
            ("expect", "completed", ["completed"], 15),
            ("type", "/compact"), ("sleep", 6), ("expect", "completed", ["completed"], 5),
            ("type", "Ask me something. SCN_QUESTION"), ("wait_pane", "A or B", 40),
            ("expect", "completed", ["completed"] * 2, 15)], pages=["completed"] * 2),
        Scenario("codex_esc_tool_call", X, "tui", what="Esc during a tool call (sleep)", steps=[
            ("type", "Wait a while. SCN_SLEEP"), ("wait_pane", r"(?i)esc to interrupt", 40), ("sleep", 3),
            ("expect", "working", [], 3), ("keys", "Escape"),
            ("expect", "interrupted", [], 10)], pages=[]),
        Scenario("codex_exit_mid_turn", X, "tui", what="the agent quit (Ctrl-C) mid-turn", steps=[
            ("type", "Write a long answer. SCN_SLOW"), ("wait_pane", "word4", 40),
            ("keys", "C-c"), ("sleep", 1.5), ("keys", "C-c"), ("sleep", 0.5), ("keys", "C-c"), ("exited", 15),
            ("expect", "interrupted", [], 10)], pages=[]),
        Scenario("codex_exporter_restart", X, "tui",
                 what="an approval while the exporter was down (the hook command spools it)", steps=[
            ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
            ("expect", "completed", ["completed"], 15), ("exporter_stop",),
            ("type", "Create a file. SCN_WRITE"),
            ("wait_pane", r"(?i)(run the following|allow|approve|proceed)", 40), ("sleep", 1),
            ("exporter_start",), ("expect", "waiting", ["completed", "waiting"], 15, {"reason": "permission"}),
            ("keys", "y"), ("wait_pane", "created made_by_agent", 40),
            ("expect", "completed", ["completed", "waiting", "completed"], 15)],
                 pages=["completed", "waiting", "completed"]),
        Scenario("codex_killed", X, "tui", what="the agent process killed mid-turn: never a false done", steps=[
            ("type", "Write a long answer. SCN_SLOW"), ("wait_pane", "word4", 40), ("kill",), ("exited", 10),
            ("sleep", 5), ("expect", "working", [], 3)], pages=[]),
        Scenario("codex_esc_streaming", X, "tui", what="Esc while streaming, then a new turn", steps=[
            ("type", "Write a long answer. SCN_SLOW"), ("wait_pane", "word4", 40), ("keys", "Escape"),
            ("expect", "interrupted", [], 10),
            ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
            ("expect", "completed", ["completed"], 15)], pages=["completed"]),
    ]


def _pi_copilot() -> list[Scenario]:
    """Pi and Copilot CLI (their set-up: tests/agents/agent_pi.py, agent_copilot.py)."""
    P, G = "pi", "copilot_cli"
    out = []
    for a, short in ((P, "pi"), (G, "copilot")):
        extra = ["--allow-all-tools"] if a == G else []
        out += [
            Scenario(f"{short}_text_print", a, "print", prompt="Say hello. SCN_TEXT", args=extra,
                     what="a text turn (print mode)",
                     steps=[("exited", 60), ("expect", "completed", ["completed"], 15)], pages=["completed"]),
            Scenario(f"{short}_tool_call_print", a, "print", prompt="List the files here. SCN_BASH", args=extra,
                     what="a tool call (bash ls)",
                     steps=[("exited", 60), ("expect", "completed", ["completed"], 15)], pages=["completed"]),
            Scenario(f"{short}_rate_limit_recovers_print", a, "print", prompt="Go. SCN_ERR429", args=extra,
                     model_env={"FAKE_FAIL_N": 2}, what="429 twice, retried by the agent itself, then the answer",
                     steps=[("exited", 90), ("expect", "completed", ["completed"], 15)], pages=["completed"]),
            Scenario(f"{short}_overloaded_gives_up_print", a, "print", prompt="Go. SCN_ERR529", args=extra,
                     what="529 on every attempt: the agent retries, then gives up (one error page)",
                     steps=[("sleep", 4), ("expect", "working", [], 15), ("exited", 120),
                            ("expect", "error", ["error"], 20, {"error_kind": "overloaded"})], pages=["error"]),
            Scenario(f"{short}_auth_error_print", a, "print", prompt="Go. SCN_AUTH", args=extra,
                     what="401: an error the agent does not retry for long",
                     steps=[("exited", 90), ("expect", "error", ["error"], 15, {"error_kind": "auth"})],
                     pages=["error"]),
            Scenario(f"{short}_two_turns", a, "tui", args=extra, what="a text turn, then a second turn", steps=[
                ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
                ("expect", "completed", ["completed"], 15),
                ("type", "Ask me something. SCN_QUESTION"), ("wait_pane", "A or B", 40),
                ("expect", "completed", ["completed", "completed"], 15)], pages=["completed", "completed"]),
            Scenario(f"{short}_esc_streaming", a, "tui", args=extra, what="Esc while streaming, then a new turn",
                     steps=[("type", "Write a long answer. SCN_SLOW"), ("wait_pane", "word4", 40),
                            # Copilot 1.0.102: Esc Esc, and its abort is written some 12 s later
                            ("keys", *(["Escape", "Escape"] if a == G else ["Escape"])),
                            ("expect", "interrupted", [], 25 if a == G else 10),
                            ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
                            ("expect", "completed", ["completed"], 15)], pages=["completed"]),
            Scenario(f"{short}_bang_command", a, "tui", args=extra, what="a turn, then a !command: no page", steps=[
                ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
                ("expect", "completed", ["completed"], 15),
                ("type", "!ls"), ("wait_pane", "notes.txt", 20), ("sleep", 4),
                ("expect", "completed", ["completed"], 5)], pages=["completed"]),
            Scenario(f"{short}_compact", a, "tui", args=extra, what="a turn, then /compact: no page", steps=[
                ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
                ("expect", "completed", ["completed"], 15),
                ("type", "/compact"), ("sleep", 8),
                ("expect", "completed", ["completed"], 5)], pages=["completed"]),
        ]
    quit_keys = ("keys", "C-c", "C-c", "C-c")
    out += [
        Scenario("pi_resume", P, "tui", what="a turn, quit, `pi -c`, a new turn: the old turn pages no more", steps=[
            ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
            ("expect", "completed", ["completed"], 15), quit_keys, ("exited", 15),
            ("restart", ["-c"]), ("sleep", 3), ("expect", "completed", ["completed"], 5),
            ("type", "Ask me something. SCN_QUESTION"), ("wait_pane", "A or B", 40),
            ("expect", "completed", ["completed", "completed"], 15)], pages=["completed", "completed"]),
        Scenario("copilot_resume", G, "tui", what="a turn, quit, `copilot --continue`, a new turn", steps=[
            ("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 40),
            ("expect", "completed", ["completed"], 15), quit_keys, ("exited", 15),
            ("restart", ["--continue"]), ("sleep", 3), ("expect", "completed", ["completed"], 5),
            ("type", "Ask me something. SCN_QUESTION"), ("wait_pane", "A or B", 40),
            ("expect", "completed", ["completed", "completed"], 15)], pages=["completed", "completed"]),
        Scenario("copilot_ask_user", G, "tui", what="an ask_user question (written: only the open call)", steps=[
            ("type", "Ask me. SCN_ASK"), ("wait_pane", r"(?i)which colour", 40),
            ("expect", "waiting", ["waiting"], 10, {"reason": "question"}),
            ("keys", "Enter"), ("wait_pane", r"(?i)all done", 40),
            ("expect", "completed", ["waiting", "completed"], 15)], pages=["waiting", "completed"]),
        Scenario("copilot_permission", G, "tui", what="a permission prompt answered", steps=[
            ("type", "Create a file. SCN_WRITE"), ("wait_pane", r"(?i)(allow|approve|do you want)", 40),
            ("expect", "waiting", ["waiting"], 10, {"reason": "permission"}),
            ("keys", "Enter"), ("wait_pane", "created made_by_agent", 40),
            ("expect", "completed", ["waiting", "completed"], 15)], pages=["waiting", "completed"]),
    ]
    return out


def _gemini() -> list[Scenario]:
    """Gemini CLI (tests/agents/gemini.py; the stand-in is fake_gemini.py, its keywords differ)."""
    from gemini import next_minute, resume

    G = "gemini_cli"
    text = [("type", "Say hello. SCN_TEXT"), ("wait_pane", "plain answer", 60), ("expect", "completed", ["completed"], 15)]
    again = [("type", "Ask me something. SCN_QUESTION"), ("wait_pane", "A or B", 60),
             ("expect", "completed", ["completed", "completed"], 15)]
    quit_ = [("type", "/quit"), ("exited", 20)]
    reload = [("wait_pane", "plain answer", 60), ("sleep", 3)]  # the resumed history is on the screen
    dialog = r"(?i)allow once"
    return [
        Scenario("gemini_text_two_turns", G, "tui", what="a text turn, then a second turn", steps=text + again,
                 pages=["completed", "completed"], titles=[r"^Gemini CLI · .*your turn$", r"your turn$"]),
        Scenario("gemini_tool_allow", G, "tui", what="a shell tool approved in its dialog (hooks)", steps=[
            ("type", "Create a file. SCN_TOUCH"), ("wait_pane", dialog, 60),
            ("expect", "waiting", ["waiting"], 10, {"reason": "permission"}),
            ("keys", "Enter"), ("wait_pane", "created made_by_agent", 60),
            ("expect", "completed", ["waiting", "completed"], 15)], pages=["waiting", "completed"],
                 titles=[r"needs your approval$", r"your turn$"]),
        Scenario("gemini_tool_deny", G, "tui", what="a shell tool denied with Esc (hooks)", steps=[
            ("type", "Create a file. SCN_TOUCH"), ("wait_pane", dialog, 60),
            ("expect", "waiting", ["waiting"], 10, {"reason": "permission"}),
            ("keys", "Escape"), ("expect", "interrupted", ["waiting"], 15)], pages=["waiting"]),
        Scenario("gemini_ask_user", G, "tui", what="ask_user, answered", steps=[
            ("type", "Ask me a question. SCN_ASK"), ("wait_pane", "Green", 60),
            ("expect", "waiting", ["waiting"], 10, {"reason": "question"}),
            ("keys", "Enter"), ("wait_pane", "Thanks for choosing", 60),
            ("expect", "completed", ["waiting", "completed"], 15)], pages=["waiting", "completed"],
                 titles=[r"asks you a question$", r"your turn$"]),
        Scenario("gemini_subagent", G, "tui", what="a subagent (invoke_agent): one page, for the main turn", steps=[
            ("type", "Delegate this. SCN_AGENT"), ("wait_pane", "reported back", 90),
            ("expect", "completed", ["completed"], 15)], pages=["completed"]),
        Scenario("gemini_esc_streaming", G, "tui", what="Esc while streaming, then a new turn", steps=[
            ("type", "Write a long answer. SCN_SLOW"), ("wait_pane", "word4", 60), ("keys", "Escape"),
            ("expect", "interrupted", [], 10)] + text, pages=["completed"]),
        Scenario("gemini_429_recovers", G, "tui", model_env={"FAKE_FAIL_N": 2}, what="two 429s, then the answer",
                 steps=[("type", "Answer after a rate limit. SCN_ERR429"), ("sleep", 4), ("expect", "working", [], 3),
                        ("wait_pane", "Recovered", 90), ("expect", "completed", ["completed"], 15)],
                 pages=["completed"]),
        Scenario("gemini_400", G, "tui", what="a 400 (not retried): the turn's error, then a turn", steps=[
            ("type", "Answer a bad request. SCN_ERR400"),
            ("expect", "error", ["error"], 30, {"error_kind": "api_error"})]
            + text[:2] + [("expect", "completed", ["error", "completed"], 15)],
                 pages=["error", "completed"], titles=[r"^Gemini CLI · gemini_400: stopped on ", r"your turn$"]),
        Scenario("gemini_500_persistent", G, "tui", settings={"user": {"general": {"maxAttempts": 2}}},
                 what="a 500 on every try: retried for ever (working, no page), then Esc", steps=[
            ("type", "Answer while the server fails. SCN_ERR500"), ("sleep", 25), ("expect", "working", [], 3),
            ("keys", "Escape"), ("expect", "interrupted", [], 15)], pages=[]),
        Scenario("gemini_print_text", G, "print", prompt="Say hello. SCN_TEXT", what="-p: a text answer",
                 steps=[("exited", 90), ("expect", "completed", ["completed"], 15)], pages=["completed"]),
        Scenario("gemini_print_400", G, "print", prompt="Answer a bad request. SCN_ERR400",
                 what="-p: a 400 (only a rollback is written; exit 1)",
                 steps=[("exited", 90), ("expect", "error", ["error"], 15)], pages=["error"]),
        Scenario("gemini_resume", G, "tui", what="a turn, /quit, --resume latest, a second turn",
                 steps=text + quit_ + [("call", resume, "--resume", "latest")] + reload + again,
                 pages=["completed", "completed"]),
        Scenario("gemini_resume_next_minute", G, "tui",
                 what="resume in a later minute (a stub file, the same session), a second turn",
                 steps=text + quit_ + [("call", next_minute), ("call", resume, "--resume", "latest")] + reload
                 + again + [("expect", "completed", ["completed", "completed"], 5, {"sessions": 1})],
                 pages=["completed", "completed"]),
        Scenario("gemini_quit", G, "tui", what="/quit after a turn (SessionEnd three times): no more pages",
                 steps=text + quit_ + [("sleep", 2), ("expect", "completed", ["completed"], 5)], pages=["completed"]),
        Scenario("gemini_text_no_hooks", G, "tui", hooks=False, what="a text turn, no hooks (session file only)",
                 steps=text, pages=["completed"]),
    ]


SCENARIOS: dict[str, Scenario] = {s.name: s for s in _all() + _pi_copilot() + _gemini()}

#: Second-line scenarios: each repeats a kind that another scenario of the same agent already covers in
#: the default run (a dismissed question beside an answered one, a print-mode copy of a TUI case, a
#: resume beside another resume), or waits by design (a minute boundary). They run with ``CAE_SLOW=1``,
#: as the record for docs/agents.md does (``CAE_AGENTS_RECORD=1``), so that the default suite stays near
#: ten minutes on two cores; every kind stays in the default run for every agent.
SECOND_LINE = frozenset({
    "claude_question_dismissed", "claude_permission_deny_no_hooks", "claude_print_429_recovers",
    "claude_exit_after_turn", "claude_clear", "claude_esc_tool_call",
    "codex_esc_tool_call", "codex_approval_deny",
    "copilot_compact", "copilot_esc_streaming", "copilot_resume", "copilot_tool_call_print",
    "gemini_400", "gemini_500_persistent", "gemini_ask_user", "gemini_esc_streaming", "gemini_print_400",
    "gemini_print_text", "gemini_quit", "gemini_resume_next_minute", "gemini_text_no_hooks",
    "gemini_tool_deny",
})
assert SECOND_LINE <= SCENARIOS.keys(), SECOND_LINE - SCENARIOS.keys()
