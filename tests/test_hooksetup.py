"""``coding-agent-exporter hooks print|install``, run as a user runs it (a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml


@pytest.fixture(autouse=True)
def _own_state_dir(tmp_path_factory, monkeypatch):
    """``hooks print|install`` make the hook secret in the default state_dir: a tmp one here."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("xdg-state")))

CLAUDE_EVENTS = ["PermissionRequest", "Notification", "PostToolUse", "PostToolUseFailure", "PermissionDenied",
                 "UserPromptSubmit", "Stop", "StopFailure", "SessionEnd"]
CODEX_EVENTS = ["PermissionRequest", "PostToolUse", "UserPromptSubmit", "Stop", "Interrupt"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "coding_agent_exporter", "hooks", *args],
                          capture_output=True, text=True, timeout=60)


def handlers(block: dict, event: str) -> list[dict]:
    return [h for g in block["hooks"][event] for h in g["hooks"]]


def test_print_claude_http_hooks_cover_every_event_the_exporter_uses():
    r = cli("print", "--agent", "claude_code", "--http", "--url", "http://127.0.0.1:9911/")
    assert r.returncode == 0, r.stderr
    block = json.loads(r.stdout)
    assert list(block) == ["hooks"]
    assert list(block["hooks"]) == CLAUDE_EVENTS
    for event in CLAUDE_EVENTS:
        (h,) = handlers(block, event)
        assert h["type"] == "http"
        assert h["url"] == "http://127.0.0.1:9911/hooks/claude_code"
        assert 0 < h["timeout"] <= 10
    (note,) = block["hooks"]["Notification"]
    assert set(note["matcher"].split("|")) == {"permission_prompt", "elicitation_dialog", "elicitation_response",
                                               "elicitation_complete", "agent_needs_input"}  # not idle_prompt
    assert all("matcher" not in g for e in CLAUDE_EVENTS if e != "Notification" for g in block["hooks"][e])


def test_print_claude_command_variant_runs_the_hook_command():
    r = cli("print", "--agent", "claude_code", "--command", "--url", "http://127.0.0.1:9911")
    assert r.returncode == 0, r.stderr
    block = json.loads(r.stdout)
    assert list(block["hooks"]) == CLAUDE_EVENTS
    for event in CLAUDE_EVENTS:
        (h,) = handlers(block, event)
        assert h["type"] == "command"
        assert h["command"].endswith(" hook --agent claude_code --url http://127.0.0.1:9911")


def test_print_codex_is_command_hooks_only_with_no_extra_root_keys():
    r = cli("print", "--agent", "codex")
    assert r.returncode == 0, r.stderr
    block = json.loads(r.stdout)
    assert list(block) == ["hooks"]  # Codex refuses a hooks.json with other root keys
    assert list(block["hooks"]) == CODEX_EVENTS
    for event in CODEX_EVENTS:
        (h,) = handlers(block, event)
        assert h["type"] == "command"
        assert h["command"].endswith(" hook --agent codex --url http://127.0.0.1:9877")


def test_print_passes_the_config_file_on_to_the_hook_command(tmp_path: Path):
    cfg = tmp_path / "exporter config.yml"
    cfg.write_text("state_dir: /tmp/x\n")
    r = cli("print", "--agent", "codex", "--config.file", str(cfg))
    assert r.returncode == 0, r.stderr
    for event in CODEX_EVENTS:
        (h,) = handlers(json.loads(r.stdout), event)
        assert h["command"].endswith(f" hook --agent codex --url http://127.0.0.1:9877 --config.file '{cfg}'")


USER_SETTINGS = {
    "model": "opus",
    "permissions": {"allow": ["Bash(npm test)"]},
    "hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard.sh"}]}],
        "Notification": [{"matcher": "idle_prompt", "hooks": [{"type": "command", "command": "beep"}]}],
    },
}


def test_install_keeps_user_hooks_in_order_makes_a_backup_and_is_idempotent(tmp_path: Path):
    f = tmp_path / "settings.json"
    original = json.dumps(USER_SETTINGS, indent=4)
    f.write_text(original)

    r = cli("install", "--agent", "claude_code", "--http", "--file", str(f))
    assert r.returncode == 0, r.stderr
    backups = list(tmp_path.glob("settings.json.bak-*"))
    assert len(backups) == 1 and backups[0].read_text() == original
    assert str(backups[0]) in r.stdout

    after = json.loads(f.read_text())
    assert after["model"] == "opus" and after["permissions"] == USER_SETTINGS["permissions"]
    # the user's events stay first, in their order; ours follow
    assert list(after["hooks"])[:3] == ["Stop", "PreToolUse", "Notification"]
    assert set(after["hooks"]) == set(CLAUDE_EVENTS) | {"PreToolUse"}
    for event, groups in USER_SETTINGS["hooks"].items():
        assert after["hooks"][event][:len(groups)] == groups  # user's groups untouched, first
    assert after["hooks"]["PreToolUse"] == USER_SETTINGS["hooks"]["PreToolUse"]  # not ours: unchanged
    ours = [h for e in CLAUDE_EVENTS for h in handlers(after, e) if h.get("type") == "http"]
    assert len(ours) == len(CLAUDE_EVENTS)

    installed = f.read_bytes()
    r2 = cli("install", "--agent", "claude_code", "--http", "--file", str(f))
    assert r2.returncode == 0, r2.stderr
    assert "nothing changed" in r2.stdout
    assert f.read_bytes() == installed
    assert len(list(tmp_path.glob("settings.json.bak-*"))) == 1


def test_install_with_a_new_url_updates_its_own_handlers_in_place(tmp_path: Path):
    f = tmp_path / "settings.json"
    f.write_text(json.dumps(USER_SETTINGS))
    assert cli("install", "--agent", "claude_code", "--http", "--file", str(f)).returncode == 0
    first = json.loads(f.read_text())
    r = cli("install", "--agent", "claude_code", "--http", "--file", str(f), "--url", "http://10.0.0.5:9877")
    assert r.returncode == 0, r.stderr
    second = json.loads(f.read_text())
    assert list(second["hooks"]) == list(first["hooks"])
    for event in CLAUDE_EVENTS:
        urls = [h["url"] for h in handlers(second, event) if h.get("type") == "http"]
        assert urls == ["http://10.0.0.5:9877/hooks/claude_code"]
        assert len(handlers(second, event)) == len(handlers(first, event))


def test_install_codex_creates_a_missing_file_without_backup(tmp_path: Path):
    f = tmp_path / "codex" / "hooks.json"
    r = cli("install", "--agent", "codex", "--file", str(f))
    assert r.returncode == 0, r.stderr
    assert json.loads(f.read_text()) == json.loads(cli("print", "--agent", "codex").stdout)
    assert list(f.parent.glob("*.bak-*")) == []


def test_install_refuses_a_file_that_is_not_json_and_leaves_it_untouched(tmp_path: Path):
    f = tmp_path / "settings.json"
    bad = '{"hooks": {"Stop": [}\n'
    f.write_text(bad)
    r = cli("install", "--agent", "claude_code", "--file", str(f))
    assert r.returncode == 2
    assert "not valid JSON" in r.stderr and "left unchanged" in r.stderr
    assert "Traceback" not in r.stderr
    assert f.read_text() == bad
    assert list(tmp_path.iterdir()) == [f]


def test_install_refuses_hooks_of_another_shape(tmp_path: Path):
    f = tmp_path / "hooks.json"
    odd = json.dumps({"hooks": {"Stop": {"hooks": []}}})  # an object where Codex wants a list
    f.write_text(odd)
    r = cli("install", "--agent", "codex", "--file", str(f))
    assert r.returncode == 2
    assert "hooks.Stop" in r.stderr and "Traceback" not in r.stderr
    assert f.read_text() == odd


def test_bad_url_or_config_file_refused(tmp_path):
    """A --url that is not http(s)://host:port, or a --config.file that does
    not exist, is refused (exit 2) instead of being written into hooks that
    could never reach the exporter."""
    import subprocess
    import sys

    for extra in (["--url", "127.0.0.1:9877"], ["--url", "ftp://x"], ["--url", "http://h:1/x"],
                  ["--config.file", str(tmp_path / "missing.yml")]):
        r = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "hooks", "print", "--agent", "codex",
                            *extra], capture_output=True, timeout=30)
        assert r.returncode == 2 and r.stdout == b"", extra


def test_claude_http_hook_with_basic_auth_keeps_the_password_out():
    """With ``user:password@`` in the URL, Claude Code's HTTP hooks get an
    Authorization header from an environment variable, not the password."""
    from coding_agent_exporter.hooksetup import AUTH_ENV, hooks_block

    block = hooks_block("claude_code", "http://alice:pw@127.0.0.1:9877")
    for groups in block["hooks"].values():
        handler = groups[0]["hooks"][0]
        assert handler["url"] == "http://127.0.0.1:9877/hooks/claude_code"
        assert handler["headers"] == {"Authorization": f"Basic ${AUTH_ENV}"}
        assert handler["allowedEnvVars"] == [AUTH_ENV]
        assert "pw" not in json.dumps(handler)


def test_copilot_cli_command_hooks_in_their_own_file_under_copilot_home(tmp_path):
    """Copilot CLI merges every ``$COPILOT_HOME/hooks/*.json``: ``Stop`` and ``Notification`` (Claude
    names, nested shape) as command hooks running ``hook --agent copilot_cli`` (no loopback opt-in
    needed); ``--http`` gives HTTP hooks to ``/hooks/copilot_cli``, and then the opt-in is said."""
    r = cli("print", "--agent", "copilot_cli", "--url", "http://127.0.0.1:9911")
    assert r.returncode == 0, r.stderr
    block = json.loads(r.stdout)
    assert list(block["hooks"]) == ["Notification", "Stop"]
    for event in ("Notification", "Stop"):
        (h,) = handlers(block, event)
        assert h["type"] == "command" and h["command"].endswith(" hook --agent copilot_cli --url http://127.0.0.1:9911")
        assert 0 < h["timeout"] <= 10 and "headers" not in h
    assert "COPILOT_HOOK_ALLOW_LOCALHOST" not in r.stderr
    env = {**os.environ, "COPILOT_HOME": str(tmp_path / "copilot")}
    out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "hooks", "install", "--agent", "copilot_cli"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    path = tmp_path / "copilot" / "hooks" / "coding-agent-exporter.json"
    assert json.loads(path.read_text()) == json.loads(cli("print", "--agent", "copilot_cli").stdout)
    assert "The hooks run" in out.stdout and "COPILOT_HOOK_ALLOW_LOCALHOST" not in out.stdout + out.stderr
    http = cli("print", "--agent", "copilot_cli", "--http", "--url", "http://127.0.0.1:9911")
    for event in ("Notification", "Stop"):
        (h,) = handlers(json.loads(http.stdout), event)
        assert (h["type"], h["url"]) == ("http", "http://127.0.0.1:9911/hooks/copilot_cli")
    assert "COPILOT_HOOK_ALLOW_LOCALHOST=1" in http.stderr
    assert cli("print", "--agent", "copilot_cli", "--command").returncode == 0


def test_no_file_install_writes_holds_the_secret_and_old_inline_secrets_move_out(tmp_path: Path):
    """Every agent's hook file (often in a dotfiles repository) and its backups: after ``hooks
    install`` none holds the hook secret. Claude Code's and Copilot CLI's files start from an
    earlier install's HTTP hooks with the secret inline; installing again turns them into command
    hooks in place and takes the secret out of the backup too."""
    state = tmp_path / "state"
    cfg = tmp_path / "c.yml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(state)}))
    folders = {a: tmp_path / a for a in ("claude_code", "codex", "copilot_cli", "gemini_cli")}
    for agent, folder in folders.items():
        folder.mkdir()
        f = folder / "hooks.json"
        f.write_text('{"model": "opus"}\n' if agent != "codex" else "{}\n")
        if agent in ("claude_code", "copilot_cli"):  # the earlier, inline-secret install
            old = cli("install", "--agent", agent, "--http", "--file", str(f), "--config.file", str(cfg))
            assert old.returncode == 0, old.stderr
    secret = (state / "hook-secret").read_text().strip()
    assert secret in (folders["copilot_cli"] / "hooks.json").read_text()
    for agent, folder in folders.items():
        r = cli("install", "--agent", agent, "--file", str(folder / "hooks.json"), "--config.file", str(cfg))
        assert r.returncode == 0, (agent, r.stderr)
        written = list(folder.iterdir())
        assert len(written) == (3 if agent in ("claude_code", "copilot_cli") else 2), written  # file + backups
        for f in written:
            assert secret not in f.read_text(), (agent, f.name)
        block = json.loads((folder / "hooks.json").read_text())
        assert all(h["type"] == "command" and f" hook --agent {agent} --url " in h["command"]
                   for groups in block["hooks"].values() for g in groups for h in g["hooks"]), agent


def test_claude_http_hooks_carry_the_exporters_secret_and_command_hooks_do_not(tmp_path: Path):
    """Issue 22: the secret the exporter keeps in its state_dir (made here
    if it has not run yet, mode 0600) goes into each Claude HTTP hook's
    headers; the command hooks read it from the state folder when they run
    (so it is not in their command line); with ``hooks.auth: false`` none."""
    state = tmp_path / "state"
    cfg = tmp_path / "c.yml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(state)}))
    r = cli("print", "--agent", "claude_code", "--http", "--config.file", str(cfg))
    assert r.returncode == 0, r.stderr
    secret = (state / "hook-secret").read_text().strip()
    assert (state / "hook-secret").stat().st_mode & 0o777 == 0o600 and len(secret) == 64
    for event in CLAUDE_EVENTS:
        (h,) = handlers(json.loads(r.stdout), event)
        assert h["headers"] == {"X-Coding-Agent-Hook-Token": secret}
    again = cli("print", "--agent", "claude_code", "--http", "--config.file", str(cfg))
    assert again.stdout == r.stdout  # the same secret: made once
    for args in (["--agent", "claude_code"], ["--agent", "claude_code", "--command"], ["--agent", "codex"]):
        r = cli("print", *args, "--config.file", str(cfg))
        assert r.returncode == 0 and secret not in r.stdout, args
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "other"), "hooks": {"auth": False}}))
    r = cli("print", "--agent", "claude_code", "--http", "--config.file", str(cfg))
    assert "headers" not in r.stdout and not (tmp_path / "other").exists()


def test_a_settings_file_given_the_secret_is_made_private(tmp_path: Path):
    """An existing, world-readable settings.json that gets the secret in its
    hooks' headers is left mode 0600, and so is its backup (which holds an
    earlier install's secret); without a secret the mode is kept."""
    cfg = tmp_path / "c.yml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state")}))
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"model": "opus"}\n')
    settings.chmod(0o644)
    r = cli("install", "--agent", "claude_code", "--http", "--file", str(settings), "--config.file", str(cfg))
    assert r.returncode == 0, r.stderr
    assert "X-Coding-Agent-Hook-Token" in settings.read_text() and "mode 0600" in r.stdout
    assert settings.stat().st_mode & 0o777 == 0o600
    hooks = tmp_path / "codex-hooks.json"
    hooks.write_text("{}\n")
    hooks.chmod(0o644)
    assert cli("install", "--agent", "codex", "--file", str(hooks), "--config.file", str(cfg)).returncode == 0
    assert hooks.stat().st_mode & 0o777 == 0o644  # command hooks: no secret in the file
    (tmp_path / "state" / "hook-secret").unlink()  # a new secret: the old one stays in the backup only
    r = cli("install", "--agent", "claude_code", "--http", "--file", str(settings), "--config.file", str(cfg))
    backups = sorted(settings.parent.glob("settings.json.bak-*"))
    assert r.returncode == 0 and backups and all(b.stat().st_mode & 0o777 == 0o600 for b in backups)


def test_install_writes_through_a_symlinked_settings_file(tmp_path: Path):
    """A dotfiles setup: ``~/.claude/settings.json`` is a link into a repo.
    The file it points to gets the hooks; the link stays a link."""
    real = tmp_path / "dotfiles" / "claude-settings.json"
    real.parent.mkdir()
    real.write_text('{"model": "opus"}\n')
    link = tmp_path / ".claude" / "settings.json"
    link.parent.mkdir()
    link.symlink_to(real)
    r = cli("install", "--agent", "claude_code", "--file", str(link))
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and link.resolve() == real
    merged = json.loads(real.read_text())
    assert merged["model"] == "opus" and set(merged["hooks"]) == set(CLAUDE_EVENTS)


def test_install_says_what_the_command_hooks_run_and_about_codex_hooks(tmp_path: Path):
    """Command hooks name this installation's executable: install says so,
    and when it would break; the Codex message names ``codex_hooks = true``."""
    r = cli("install", "--agent", "codex", "--file", str(tmp_path / "hooks.json"))
    assert r.returncode == 0, r.stderr
    cmd = handlers(json.loads((tmp_path / "hooks.json").read_text()), "Stop")[0]["command"]
    exe = cmd.split(" hook --agent")[0]
    assert f"The hooks run {exe}" in r.stdout or f"The hooks run {exe.split(' -m ')[0]}" in r.stdout, r.stdout
    assert "run `hooks install` again" in r.stdout and "codex_hooks = true" in r.stdout
    r = cli("install", "--agent", "claude_code", "--http", "--file", str(tmp_path / "settings.json"))
    assert r.returncode == 0 and "The hooks run" not in r.stdout and "Restart Claude Code" in r.stdout
    r = cli("install", "--agent", "claude_code", "--file", str(tmp_path / "settings.json"))  # command hooks
    assert r.returncode == 0 and "The hooks run" in r.stdout and "run `hooks install` again" in r.stdout


def test_an_agent_without_hooks_is_said_so():
    """`hooks install --agent pi`: Pi has no hooks (not argparse's "invalid choice")."""
    for verb in ("print", "install"):
        r = cli(verb, "--agent", "pi")
        assert r.returncode == 2
        assert "Pi has no hooks to install" in r.stderr and "invalid choice" not in r.stderr, r.stderr
    r = cli("print", "--agent", "vim")
    assert r.returncode == 2 and "not an agent with hooks (one of: claude_code, codex, copilot_cli, gemini_cli)" in r.stderr


def test_claude_hooks_keep_the_secret_out_of_the_settings_file_and_old_installs_move_over(tmp_path: Path):
    """A settings.json in a dotfiles repository: `hooks install` writes command hooks, which read the
    hook secret from the state folder when they run, so neither the file nor its backup holds it. An
    earlier install's HTTP hooks (secret in their headers) still work (the exporter takes that header)
    and are turned into command hooks in place by installing again; the backup has the secret removed."""
    state = tmp_path / "state"
    cfg = tmp_path / "c.yml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(state)}))
    dotfiles = tmp_path / "dotfiles" / "claude-settings.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text('{"model": "opus"}\n')
    link = tmp_path / ".claude" / "settings.json"
    link.parent.mkdir()
    link.symlink_to(dotfiles)
    old = cli("install", "--agent", "claude_code", "--http", "--file", str(link), "--config.file", str(cfg))
    assert old.returncode == 0, old.stderr
    secret = (state / "hook-secret").read_text().strip()
    assert secret in dotfiles.read_text()  # the old way: the secret in the dotfiles repository
    r = cli("install", "--agent", "claude_code", "--file", str(link), "--config.file", str(cfg))
    assert r.returncode == 0, r.stderr
    assert "no longer in it, nor in the backup" in r.stdout
    for f in dotfiles.parent.iterdir():
        assert secret not in f.read_text(), f
    new = json.loads(dotfiles.read_text())
    for event in CLAUDE_EVENTS:
        (h,) = handlers(new, event)
        assert h["type"] == "command" and f" hook --agent claude_code --url http://127.0.0.1:9877 --config.file {cfg}" \
            in h["command"]
    assert new["model"] == "opus"
