"""Every hook payload in tests/fixtures/hooks (the JSON both agents' hook
references document) through the same parse → store → reducer path the
``/hooks/<agent>`` routes use: what each event does to a session's state.
The routes themselves, the ``hook`` command and the pages are exercised
against the real exporter in test_hooks.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coding_agent_exporter.hooks import HookError, parse
from coding_agent_exporter.metrics import Metrics
from coding_agent_exporter.reducer import Timing
from coding_agent_exporter.store import SessionStore

HOOKS = Path(__file__).resolve().parent / "fixtures" / "hooks"
SID = "h0000000-0000-4000-8000-000000000001"
T0 = 1_790_000_000.0

# fixture → (state before it, state after it, waiting_for after it)
EXPECTED = {
    ("claude_code", "PermissionRequest"): ("working", "waiting", {"reason": "permission", "tool": "Bash"}),
    ("claude_code", "PermissionRequest_subagent"): ("working", "waiting", {"reason": "permission", "tool": "Bash"}),
    ("claude_code", "Notification_permission_prompt"): ("working", "waiting", {"reason": "permission", "tool": None}),
    ("claude_code", "Notification_elicitation_dialog"): ("working", "waiting",
                                                         {"reason": "elicitation", "tool": None}),
    ("claude_code", "Notification_idle_prompt"): ("completed", "completed", None),
    ("claude_code", "PostToolUse"): ("waiting", "working", None),
    ("claude_code", "PostToolUseFailure"): ("waiting", "working", None),
    ("claude_code", "PermissionDenied"): ("waiting", "working", None),
    ("claude_code", "UserPromptSubmit"): ("completed", "working", None),
    ("claude_code", "Stop"): ("working", "completed", None),
    ("claude_code", "Stop_background_tasks"): ("working", "completed", None),  # a shell: not pending work
    ("claude_code", "Stop_background_agent"): ("working", "working", None),
    ("claude_code", "StopFailure"): ("working", "error", None),
    ("claude_code", "SessionEnd"): ("waiting", "interrupted", None),
    ("claude_code", "SubagentStop"): ("working", "working", None),
    ("codex", "PermissionRequest"): ("working", "waiting", {"reason": "permission", "tool": "Bash"}),
    ("codex", "PostToolUse"): ("waiting", "working", None),
    ("codex", "UserPromptSubmit"): ("completed", "working", None),
    ("codex", "Stop"): ("working", "completed", None),
    ("codex", "StopFailure"): ("working", "error", None),
    ("codex", "SubagentStop"): ("working", "working", None),
}
SETUP = {  # hook events that put a session into the "before" state
    "working": [("UserPromptSubmit", {"prompt": "go"})],
    "waiting": [("UserPromptSubmit", {"prompt": "go"}), ("PermissionRequest", {"tool_name": "Bash"})],
    "completed": [("UserPromptSubmit", {"prompt": "go"}), ("Stop", {"stop_hook_active": False})],
}


def _fixtures():
    return sorted((p.parent.name, p.stem) for p in HOOKS.glob("*/*.json"))


def _body(provider: str, name: str) -> bytes:
    text = (HOOKS / provider / f"{name}.json").read_text()
    return text.replace("${SID}", SID).replace("${PATH}", f"/nowhere/{SID}.jsonl").encode()


def test_every_fixture_has_an_expectation():
    assert set(_fixtures()) == set(EXPECTED)


@pytest.mark.parametrize("provider,name", sorted(EXPECTED), ids=[f"{p}-{n}" for p, n in sorted(EXPECTED)])
def test_hook_fixture_moves_the_state(provider, name):
    before, after, waiting_for = EXPECTED[(provider, name)]
    store = SessionStore(Metrics(), Timing())
    t = T0
    for event, fields in SETUP[before]:
        t += 1
        body = json.dumps({"session_id": SID, "transcript_path": None, "cwd": "/home/dev/shop",
                           "hook_event_name": event, "turn_id": "turn-1", **fields}).encode()
        store.apply_hook(parse(provider, body, t))
    store.evaluate(t + 0.1)
    assert store.session(provider, SID).status.state == before
    store.apply_hook(parse(provider, _body(provider, name), t + 1))
    store.evaluate(t + 1.1)
    (row,) = store.rows(t + 1.1)
    assert (row["state"], row["waiting_for"]) == (after, waiting_for)
    assert row["project"] == "shop"
    assert "rm -rf" not in json.dumps(row) and "Rebuilt" not in json.dumps(row)


@pytest.mark.parametrize("body,reason", [
    (b"", "invalid_json"), (b"{", "invalid_json"), (b"[]", "not_object"), (b'"x"', "not_object"),
    (b'{"hook_event_name":"Stop"}', "no_session"), (b'{"session_id":7,"hook_event_name":"Stop"}', "no_session"),
    (b'{"session_id":"s","hook_event_name":"Stop","background_tasks":{"a":1}}', None),
    (b'{"session_id":"s","hook_event_name":["Stop"],"tool_name":{"x":1}}', None),
    (b'{"session_id":"s","hook_event_name":"PermissionRequest","tool_name":["Bash"]}', None),
    (b'{"session_id":"s","hook_event_name":"Notification","notification_type":["permission_prompt"]}', None),
    (b'{"session_id":"s","hook_event_name":"StopFailure","error":{"type":"rate_limit"}}', None),
])
def test_malformed_bodies_are_refused_or_harmless(body, reason):
    for provider in ("claude_code", "codex"):
        if reason is None:
            parse(provider, body, T0)  # any field of any type: no crash
        else:
            with pytest.raises(HookError) as e:
                parse(provider, body, T0)
            assert e.value.reason == reason
