"""The words of a page you can act on: its first line (the project and what
happened: ``webapp: Claude Code finished after 4 min 12 s``), the command
that resumes the session, and a link to the session on the status page.

No transcript text: a page names the agent, the project label, the state,
the wait reason and (quoted, bounded) the tool name a hook reported.

Links the agents' own services make are not known from disk: Claude Code's
Remote Control URL is printed by the running CLI, and the transcripts (a
``bridge-session`` record of the Desktop app, 2.1.260) and the session
registry (``bridgeSessionId``) hold only an id the URL is not documented to
be built from; Codex writes no cloud link into a local session's rollout
(0.171.0). So a page gives neither (docs/pages.md).
"""

from __future__ import annotations

import json
import shlex
from urllib.parse import quote

from .suppress import fmt_duration

#: What a page says the agent waits for, by wait reason.
WAIT_WORDS = {"permission": "needs your approval", "question": "asks you a question",
              "plan": "has a plan for you to approve", "elicitation": "needs your input",
              "worker_request": "has a worker request for you", "sandbox_request": "has a sandbox request for you",
              "goal_proposal": "proposes a goal for you to approve"}
#: Tool names the agents give their shell tool (Claude Code and Codex hooks: ``Bash``).
SHELL_TOOLS = frozenset({"Bash", "bash", "shell", "exec_command", "local_shell", "shell_command", "PowerShell"})


def headline(label: str, project: str, st) -> str:
    """The page body's first line from the agent's display ``label``, the
    ``project`` label ("" for none) and the :class:`~.reducer.Status` paged."""
    who = f"{project or 'session'}: {label}"
    if st.state == "completed":
        took = fmt_duration(st.duration)
        return f"{who} finished after {took}" if took else f"{who} finished"
    if st.state == "error":
        return f"{who} stopped on {(st.error_kind or 'an error').replace('_', ' ')}"
    if st.state == "waiting":
        what = WAIT_WORDS.get(st.reason or "", "waits for you")
        if st.tool:
            what += ": shell command" if st.tool in SHELL_TOOLS else f": tool {json.dumps(st.tool[:64])}"
        return f"{who} {what}"
    return f"{who} is stalled (nothing written for a while)"


def resume_command(mod, session_id: str) -> str | None:
    """The command that resumes ``session_id`` for the provider module
    ``mod`` (its ``RESUME`` template), the id shell-quoted; None when the
    agent has none."""
    template = getattr(mod, "RESUME", None)
    return template.format(id=shlex.quote(session_id)) if template else None


def session_link(base: str | None, provider: str, session_id: str) -> str | None:
    """The status page's link to one session (``alerts.link_base_url``), or None."""
    if not base:
        return None
    return f"{base.rstrip('/')}/#session={quote(provider, safe='')}/{quote(session_id, safe='')}"


def action_lines(mod, s, link_base: str | None) -> list[str]:
    """The lines under the first: resume command, working directory, link."""
    lines = []
    cmd = resume_command(mod, s.session_id)
    if cmd:
        lines.append(f"Resume: {cmd}")
    if s.cwd:
        lines.append(f"Directory: {s.cwd}")
    link = session_link(link_base, s.provider, s.session_id)
    if link:
        lines.append(f"Status page: {link}")
    return lines
