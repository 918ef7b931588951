"""``hooks print`` and ``hooks install``: the agents' hook settings that feed the exporter.

What the exporter subscribes to (field facts in tests/fixtures/hooks/README.md):

- Claude Code (``~/.claude/settings.json``, key ``hooks``; Hooks reference,
  https://code.claude.com/docs/en/hooks): ``PermissionRequest``, ``Notification`` (matcher
  ``permission_prompt|elicitation_dialog|elicitation_response|elicitation_complete|agent_needs_input``
  only: ``idle_prompt`` and ``agent_completed`` add nothing), ``PostToolUse``,
  ``PostToolUseFailure``, ``PermissionDenied``, ``UserPromptSubmit``, ``Stop``, ``StopFailure``,
  ``SessionEnd``. By default as command hooks running
  ``coding-agent-exporter hook --agent claude_code --url <url>``, which read the hook secret from the
  state folder when they run: the settings file (often in a dotfiles repository) holds no secret.
  With ``--http`` (or a ``--url`` with a password, which stays out of the file) as ``"type": "http"``
  hooks that POST the hook JSON to ``<url>/hooks/claude_code`` with the secret in their headers.
  Re-running ``install`` turns an earlier install's HTTP hooks into command hooks in place, and the
  backup it makes has that secret removed.
- Codex (``~/.codex/hooks.json``; https://developers.openai.com/codex/hooks): command hooks only,
  for ``PermissionRequest``, ``PostToolUse``, ``UserPromptSubmit``, ``Stop``, ``Interrupt`` (0.152).
  The file's root may
  hold only ``description`` and ``hooks`` (Codex refuses other keys), so nothing else is added.
- GitHub Copilot CLI (every ``$COPILOT_HOME/hooks/*.json``, default ``~/.copilot``; ours is
  ``coding-agent-exporter.json``): ``Stop`` and ``Notification`` under their Claude names, in the
  nested shape below, as command hooks running ``coding-agent-exporter hook --agent copilot_cli``
  (Copilot CLI 1.0.102 runs a nested ``{"type": "command", "command": …, "timeout": …}`` handler
  and sends it on stdin the same snake_case JSON its HTTP hooks POST), which read the hook secret
  from the state folder: the hooks file holds none. With ``--http``, ``"type": "http"`` hooks to
  ``<url>/hooks/copilot_cli`` with the secret in their headers, as for Claude Code; Copilot sends
  those to loopback only when it runs with ``COPILOT_HOOK_ALLOW_LOCALHOST=1``. Re-running
  ``install`` turns an earlier install's HTTP hooks into command hooks in place.
- Gemini CLI (``$GEMINI_CLI_HOME/.gemini/settings.json``, default ``~/.gemini/settings.json``, key
  ``hooks``; 0.61.0 runs ``command`` hooks only, ``timeout`` in milliseconds): ``BeforeAgent``,
  ``AfterAgent``, ``Notification``, ``BeforeTool``, ``AfterTool``, ``SessionEnd``, running
  ``coding-agent-exporter hook --agent gemini_cli``. Gemini CLI loads hooks, the user's too, only in a
  trusted folder (``security.folderTrust``, on by default: ``hookRegistry.processHooksFromConfig``).

Both files share one shape: ``{"hooks": {Event: [{"matcher"?: str, "hooks": [handler, …]}]}}``.
``install`` merges into it: the user's events, groups and handlers stay where they are; a handler
of ours (same type, pointing at this exporter's hook route or ``hook`` command) is updated in
place; otherwise one group is appended to the event. A changed file is first copied to
``<file>.bak-<UTC time>``; a file that would not change is left alone, so running it twice is
harmless. A file that is not JSON, or whose ``hooks`` is not of that shape, is refused untouched.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

DEFAULT_URL = "http://127.0.0.1:9877"
AGENTS = ("claude_code", "codex", "copilot_cli", "gemini_cli")
# A hook runs inside the agent's loop (PermissionRequest even delays the prompt): the exporter
# answers at once, so a short timeout only matters when it hangs.
HTTP_TIMEOUT_S = 5
COMMAND_TIMEOUT_S = 10

CLAUDE_EVENTS = {  # event -> matcher (None: every occurrence)
    "PermissionRequest": None,
    "Notification": "permission_prompt|elicitation_dialog|elicitation_response|elicitation_complete|agent_needs_input",
    "PostToolUse": None,
    "PostToolUseFailure": None,
    "PermissionDenied": None,
    "UserPromptSubmit": None,
    "Stop": None,
    "StopFailure": None,
    "SessionEnd": None,
}
CODEX_EVENTS = {"PermissionRequest": None, "PostToolUse": None, "UserPromptSubmit": None, "Stop": None,
                "Interrupt": None}
COPILOT_EVENTS = {"Notification": None, "Stop": None}
#: Gemini CLI 0.61.0 (``packages/core/src/hooks``): BeforeTool keeps a long tool run from looking
#: like a finished answer (the file shows none of it), AfterTool ends an approval.
GEMINI_EVENTS = {"BeforeAgent": None, "AfterAgent": None, "Notification": None, "BeforeTool": None,
                 "AfterTool": None, "SessionEnd": None}
#: Copilot CLI delivers HTTP hooks to a loopback address only with this set in its environment.
COPILOT_LOCALHOST_ENV = "COPILOT_HOOK_ALLOW_LOCALHOST"


class HookFileError(Exception):
    """The settings file cannot be merged into (not JSON, or ``hooks`` of another shape)."""


def default_file(agent: str) -> Path:
    """The user-level file the agent reads hooks from (honours ``CLAUDE_CONFIG_DIR``/``CODEX_HOME``)."""
    if agent == "claude_code":
        return Path(os.environ.get("CLAUDE_CONFIG_DIR") or "~/.claude").expanduser() / "settings.json"
    if agent == "copilot_cli":
        return Path(os.environ.get("COPILOT_HOME") or "~/.copilot").expanduser() / "hooks" / "coding-agent-exporter.json"
    if agent == "gemini_cli":  # (GEMINI_CLI_HOME replaces the home folder, as in the CLI's own homedir())
        return Path(os.environ.get("GEMINI_CLI_HOME") or "~").expanduser() / ".gemini" / "settings.json"
    return Path(os.environ.get("CODEX_HOME") or "~/.codex").expanduser() / "hooks.json"


def hook_command(agent: str, url: str, config_file: str | None = None) -> str:
    """Shell command line that runs ``coding-agent-exporter hook`` for ``agent``.

    ``config_file`` is passed on as ``--config.file`` (absolute), so the command spools under the
    same ``state_dir`` as the exporter.

    Uses the absolute path of the script running now, else of the one on PATH (the agent's hook
    shell may not share this shell's PATH), else this interpreter with ``-m coding_agent_exporter``.
    """
    me = Path(sys.argv[0])
    exe = str(me.absolute()) if me.name == "coding-agent-exporter" and me.is_file() \
        else shutil.which("coding-agent-exporter")
    argv = [exe] if exe else [sys.executable, "-m", "coding_agent_exporter"]
    extra = ["--config.file", str(Path(config_file).expanduser().absolute())] if config_file else []
    return shlex.join([*argv, "hook", "--agent", agent, "--url", url, *extra])


#: Environment variable a Claude Code HTTP hook takes its basic-auth token from.
AUTH_ENV = "CODING_AGENT_EXPORTER_HOOK_AUTH"


def _handler(agent: str, url: str, command: bool, config_file: str | None, secret: str | None) -> dict:
    if agent in ("claude_code", "copilot_cli") and not command:
        from .hooks import TOKEN_HEADER

        parts = urlsplit(url)
        handler = {"type": "http", "timeout": HTTP_TIMEOUT_S}
        headers = {}
        if secret:
            # The hook secret as a literal header value: Claude Code sends it
            # with every POST, with nothing to set up in its environment. The
            # settings file then holds a secret: keep it private (``main`` says
            # so when others may read it).
            headers[TOKEN_HEADER] = secret
        if parts.username is not None:
            # No password in the settings file: Claude Code puts the header
            # together from the agent's environment (allowedEnvVars).
            url = urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
            headers["Authorization"] = f"Basic ${AUTH_ENV}"
            handler["allowedEnvVars"] = [AUTH_ENV]
        if headers:
            handler["headers"] = headers
        handler["url"] = f"{url.rstrip('/')}/hooks/{agent}"
        return handler
    # The ``hook`` command reads the secret from the state folder itself.
    if agent == "gemini_cli":  # its timeout is in milliseconds; a name shows in its /hooks panel
        return {"type": "command", "name": "coding-agent-exporter", "command": hook_command(agent, url, config_file),
                "timeout": COMMAND_TIMEOUT_S * 1000}
    return {"type": "command", "command": hook_command(agent, url, config_file), "timeout": COMMAND_TIMEOUT_S}


def hooks_block(agent: str, url: str = DEFAULT_URL, command: bool = False, config_file: str | None = None,
                secret: str | None = None) -> dict:
    """The ``{"hooks": {...}}`` object to merge into the agent's file.

    ``command`` only matters for Claude Code and Copilot CLI (Codex and Gemini CLI run command
    hooks only). ``secret`` (the exporter's hook secret, :func:`.hooks.ensure_secret`) goes
    into an HTTP hook's ``headers`` as ``X-Coding-Agent-Hook-Token``;
    a command hook reads it from ``state_dir`` when it runs.
    Raises ValueError for an unknown agent.
    """
    if agent not in AGENTS:
        raise ValueError(f"unknown agent {agent!r} (one of: {', '.join(AGENTS)})")
    events = {"claude_code": CLAUDE_EVENTS, "copilot_cli": COPILOT_EVENTS, "gemini_cli": GEMINI_EVENTS}.get(
        agent, CODEX_EVENTS)
    handler = _handler(agent, url, command, config_file, secret)
    out = {}
    for event, matcher in events.items():
        group = {"matcher": matcher} if matcher else {}
        group["hooks"] = [dict(handler)]
        out[event] = [group]
    return {"hooks": out}


def _is_ours(handler: object, agent: str) -> bool:
    """A handler this module wrote: it POSTs to ``/hooks/<agent>`` or runs ``… hook --agent <agent>``."""
    if not isinstance(handler, dict):
        return False
    if handler.get("type") == "http":
        return str(handler.get("url", "")).rstrip("/").endswith(f"/hooks/{agent}")
    if handler.get("type") == "command":
        cmd = str(handler.get("command", ""))
        return ("coding-agent-exporter" in cmd or "coding_agent_exporter" in cmd) and f" hook --agent {agent}" in cmd
    return False


def merge(settings: dict, block: dict, agent: str) -> dict:
    """Return ``settings`` with ``block``'s hooks merged in; ``settings`` itself is not changed.

    Keeps every existing event, group and handler in its order. Raises HookFileError when
    ``settings`` or its ``hooks`` value is not of the documented shape.
    """
    if not isinstance(settings, dict):
        raise HookFileError("the top level is not a JSON object")
    out = copy.deepcopy(settings)
    hooks = out.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise HookFileError('"hooks" is not a JSON object')
    for event, groups_new in block["hooks"].items():
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list) or not all(isinstance(g, dict) and isinstance(g.get("hooks", []), list)
                                                    for g in groups):
            raise HookFileError(f'"hooks.{event}" is not a list of {{"matcher", "hooks": [...]}} groups')
        ours = groups_new[0]["hooks"][0]
        found = [(g, i) for g in groups for i, h in enumerate(g.get("hooks", [])) if _is_ours(h, agent)]
        if found:
            for g, i in found:
                g["hooks"][i] = dict(ours)
        else:
            groups.append(copy.deepcopy(groups_new[0]))
    return out


#: What a backup holds where an earlier install's hook secret was (it is not in the new file).
REMOVED_TOKEN = "removed-by-hooks-install"


def _tokens(settings: dict, agent: str) -> set[str]:
    """The hook secrets in ``settings``' HTTP handlers of ours (``headers`` of an earlier install)."""
    from .hooks import TOKEN_HEADER

    out = set()
    hooks = settings.get("hooks") if isinstance(settings, dict) else None
    for groups in (hooks.values() if isinstance(hooks, dict) else ()):
        for g in groups if isinstance(groups, list) else ():
            for h in (g.get("hooks") if isinstance(g, dict) and isinstance(g.get("hooks"), list) else ()):
                headers = h.get("headers") if _is_ours(h, agent) else None
                token = headers.get(TOKEN_HEADER) if isinstance(headers, dict) else None
                if isinstance(token, str) and len(token) >= 16:
                    out.add(token)
    return out


def _dump(obj: dict) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def install(agent: str, path: Path, url: str = DEFAULT_URL, command: bool = False,
            config_file: str | None = None, secret: str | None = None) -> str:
    """Merge the hooks into ``path``; return a one-line report for the user.

    Writes atomically (temporary file, then rename, keeping the file's mode; mode 0600 when the
    hooks carry ``secret``, and so does the backup) after copying the old file to
    ``<path>.bak-<YYYYmmddTHHMMSSZ>``; a symlinked ``path`` (dotfiles) is written
    through: the file it points to changes, the link stays. Leaves ``path`` untouched when nothing
    changes or on error. Raises HookFileError (bad content) or OSError (cannot read or write).
    """
    block = hooks_block(agent, url, command, config_file, secret)
    if path.is_symlink():
        path = path.resolve()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = None
    if text is None or not text.strip():
        settings = {}
    else:
        try:
            settings = json.loads(text)
        except json.JSONDecodeError as e:
            raise HookFileError(f"not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    merged = merge(settings, block, agent)
    if text is not None and merged == settings:
        return f"{path}: hooks already installed, nothing changed"
    backup, gone = None, []
    path.parent.mkdir(parents=True, exist_ok=True)
    if text is not None:
        stamp = f"{path.name}.bak-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
        backup, n = path.with_name(stamp), 0
        while backup.exists():
            n += 1
            backup = path.with_name(f"{stamp}.{n}")
        shutil.copy2(path, backup)
        gone = [t for t in _tokens(settings, agent) if t not in _dump(merged)]
        if gone:  # an earlier install's hook secret, no longer in the file: not in its backup either
            old = text
            for t in gone:
                old = old.replace(t, REMOVED_TOKEN)
            backup.write_text(old, encoding="utf-8")
        if secret or gone:  # it may hold the secret of an earlier install
            os.chmod(backup, 0o600)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(_dump(merged))
        if text is not None and not secret:  # mkstemp made it 0600: a file holding the secret stays so
            shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    added = ", ".join(block["hooks"])
    return (f"{path}: installed hooks for {added}" + (" (mode 0600: it holds the hook secret)" if secret else "")
            + (" (the hook secret of the earlier HTTP hooks is no longer in it, nor in the backup)" if gone else "")
            + (f" (backup: {backup})" if backup else ""))


def add_parser(sub) -> None:
    """Add the ``hooks`` subcommand (``print`` and ``install``) to the CLI's subparsers."""
    hooks = sub.add_parser("hooks", allow_abbrev=False, help="print or install the agents' hook settings")
    verbs = hooks.add_subparsers(dest="hooks_command", required=True)
    for verb, help_ in (("print", "print the hooks block to add to the agent's settings"),
                        ("install", "merge the hooks into the agent's settings file (keeps a backup)")):
        p = verbs.add_parser(verb, allow_abbrev=False, help=help_)
        p.add_argument("--agent", required=True, metavar="AGENT",
                       help=f"the agent: {', '.join(AGENTS)} (checked by main: an agent without hooks is said so)")
        p.add_argument("--url", default=DEFAULT_URL,
                       help=f"the exporter's base URL, as the agent reaches it (default: {DEFAULT_URL})")
        p.add_argument("--http", dest="use_http", action="store_true",
                       help="Claude Code, Copilot CLI: HTTP hooks that POST to the exporter themselves, instead of "
                            "command hooks running `coding-agent-exporter hook`; the settings file then holds the hook secret")
        p.add_argument("--command", dest="use_command", action="store_true",
                       help="command hooks (the default for every agent; kept for scripts that pass it)")
        p.add_argument("--config.file", dest="config_file", metavar="FILE",
                       help="the exporter's configuration file, passed on to the hook command (its state_dir holds the spool)")
        if verb == "install":
            p.add_argument("--file", type=Path, metavar="PATH",
                           help="settings file (default: ~/.claude/settings.json, ~/.codex/hooks.json, "
                                "~/.copilot/hooks/coding-agent-exporter.json or ~/.gemini/settings.json)")


def _secret(config_file: str | None) -> str | None:
    """The hook secret of the exporter's ``state_dir`` (from ``config_file``, else the default),
    made now if the exporter has not run yet; None when ``hooks.auth`` is off. Raises OSError
    (unusable state folder or secret) or ValueError (a bad configuration file)."""
    from .config import ConfigError, load
    from .hooks import default_state_dir, ensure_secret

    try:
        cfg = load(Path(config_file).expanduser() if config_file else None)
    except ConfigError as e:
        raise ValueError(f"--config.file: {e}") from None
    state_dir = cfg.resolved_state_dir() if config_file else default_state_dir(cfg.resolved_state_dir())
    return ensure_secret(state_dir) if cfg.hooks.auth else None


def check_url(url: str) -> str | None:
    """Why ``url`` cannot be the exporter's address (``http(s)://[user:password@]host:port``), or None."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as e:
        return str(e)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "expected http(s)://HOST:PORT, e.g. http://127.0.0.1:9877"
    if parts.path.strip("/") or parts.query or parts.fragment:
        return "give the exporter's address only (no path): /hooks/<agent> is added"
    return None


def main(args: argparse.Namespace) -> int:
    """Run ``hooks print|install``; exit status 0, or 2 with a message on stderr."""
    if args.agent not in AGENTS:
        from .providers import PROVIDER_MODULES

        mod = PROVIDER_MODULES.get(args.agent)
        if mod is not None:
            print(f"coding-agent-exporter: {mod.LABEL} has no hooks to install: the exporter follows its "
                  f"transcripts only, nothing to set up (hooks exist for {', '.join(AGENTS)})", file=sys.stderr)
        else:
            print(f"coding-agent-exporter: --agent {args.agent!r}: not an agent with hooks "
                  f"(one of: {', '.join(AGENTS)})", file=sys.stderr)
        return 2
    problem = check_url(args.url)
    if problem:
        print(f"coding-agent-exporter: --url {args.url!r}: {problem}", file=sys.stderr)
        return 2
    if args.config_file and not Path(args.config_file).expanduser().is_file():
        print(f"coding-agent-exporter: --config.file {args.config_file}: no such file (the hook command would "
              "spool where the exporter never looks)", file=sys.stderr)
        return 2
    asked_command = args.use_command
    if args.use_http and args.use_command:
        print("coding-agent-exporter: --http and --command: choose one", file=sys.stderr)
        return 2
    if args.use_http and args.agent in ("codex", "gemini_cli"):
        print(f"coding-agent-exporter: --http: {'Codex' if args.agent == 'codex' else 'Gemini CLI'} runs command "
              "hooks only here", file=sys.stderr)
        return 2
    # Claude Code and Copilot CLI: command hooks unless --http. The `hook` command reads the secret
    # from the state folder when it runs, so the settings file (often in a dotfiles repository) holds none.
    either = args.agent in ("claude_code", "copilot_cli")
    args.use_command = either and not args.use_http \
        and (asked_command or urlsplit(args.url).username is None)  # a password stays out of the command line
    if urlsplit(args.url).username is not None and either and not args.use_command:
        print(f"note: the password is not written to the settings file; set {AUTH_ENV} to the base64 of "
              "user:password in the agent's environment", file=sys.stderr)
    http = either and not args.use_command
    if args.agent == "copilot_cli" and http:
        print(f"note: Copilot CLI sends HTTP hooks to a loopback address only when it runs with "
              f"{COPILOT_LOCALHOST_ENV}=1 in its environment", file=sys.stderr)
    try:
        secret = _secret(args.config_file) if http else None
    except (OSError, ValueError) as e:
        print(f"coding-agent-exporter: {getattr(e, 'strerror', None) or e}", file=sys.stderr)
        return 2
    if args.hooks_command == "print":
        sys.stdout.write(_dump(hooks_block(args.agent, args.url, args.use_command, args.config_file, secret)))
        return 0
    path = args.file or default_file(args.agent)
    try:
        said = install(args.agent, path, args.url, args.use_command, args.config_file, secret)
        print(said)
    except HookFileError as e:
        print(f"coding-agent-exporter: {path}: {e}; left unchanged", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"coding-agent-exporter: {path}: {e.strerror or e}", file=sys.stderr)
        return 2
    if said.endswith("nothing changed"):
        return 0  # no restart advice: the agent has these hooks already
    if args.agent in ("codex", "gemini_cli") or args.use_command:
        cmd = shlex.split(hook_command(args.agent, args.url, args.config_file))
        exe = cmd[0] if cmd[1:2] != ["-m"] else f"{cmd[0]} -m coding_agent_exporter"
        print(f"The hooks run {exe}: if you move or delete it (the clone or virtual environment it is in, or a "
              "switch to pipx), run `hooks install` again.")
    if args.agent == "codex":
        config_toml = Path(os.environ.get("CODEX_HOME") or "~/.codex").expanduser() / "config.toml"
        print("Codex versions that still keep hooks behind a feature flag also need `codex_hooks = true` under "
              f"`[features]` in {config_toml}. Restart Codex, then review the hooks with /hooks.")
    elif args.agent == "copilot_cli":
        print(f"Restart Copilot CLI{f' with {COPILOT_LOCALHOST_ENV}=1 set' if http else ''} to load them.")
    elif args.agent == "gemini_cli":
        print("Gemini CLI runs hooks only in trusted folders (its trust dialog, `~/.gemini/trustedFolders.json`, "
              "or GEMINI_CLI_TRUST_WORKSPACE=true); in an untrusted folder it pages from its session files alone. "
              "Restart Gemini CLI to load them; its /hooks command lists them.")
    else:
        print("Restart Claude Code to load them.")
    return 0
