"""The background service files in config/: the systemd user unit (checked
by ``systemd-analyze verify``, Debian's systemd package; .ci/run installs it
when missing) and the launchd agent (parsed with plistlib, ``plutil -lint``
where it exists, and its command run with a home folder laid out as the
README's install commands leave it)."""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import ROOT

UNIT = ROOT / "config" / "coding-agent-exporter.service"
PLIST = ROOT / "config" / "local.coding-agent-exporter.plist"
SCRIPT = Path(sys.executable).parent / "coding-agent-exporter"


def _home(tmp_path: Path) -> Path:
    """A home folder after the README's install commands: the console script
    in ~/.local/bin and the example config in ~/.config/coding-agent-exporter."""
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "coding-agent-exporter").symlink_to(SCRIPT)
    (home / ".config" / "coding-agent-exporter").mkdir(parents=True)
    shutil.copy(ROOT / "config" / "config.example.yml", home / ".config" / "coding-agent-exporter" / "config.yml")
    return home


def _unit_keys() -> dict[str, str]:
    keys = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            k, v = line.split("=", 1)
            keys[k.strip()] = v.strip()
    return keys


def test_systemd_user_unit_verifies(tmp_path):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail("systemd-analyze missing in CI (.ci/run installs systemd)")
        pytest.skip("systemd-analyze not installed")
    home = _home(tmp_path)
    units = home / ".config" / "systemd" / "user"
    units.mkdir(parents=True)
    shutil.copy(UNIT, units / UNIT.name)
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime)}
    out = subprocess.run([tool, "--user", "--man=no", "verify", str(units / UNIT.name)], env=env,
                         capture_output=True, text=True, timeout=60)
    # verify exits 0 on some unparsable values and only warns: no output at all is the bar.
    assert out.returncode == 0 and not out.stdout.strip() and not out.stderr.strip(), out.stdout + out.stderr
    keys = _unit_keys()
    assert keys["ExecStart"].startswith("%h/.local/bin/coding-agent-exporter run ")
    assert keys["Restart"] == "on-failure" and keys["WantedBy"] == "default.target"
    # It fails when the program is not where the README puts it (the check is real).
    (home / ".local" / "bin" / "coding-agent-exporter").unlink()
    out = subprocess.run([tool, "--user", "--man=no", "verify", str(units / UNIT.name)], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "is not executable" in out.stderr


def test_launchd_agent_plist(tmp_path):
    data = plistlib.loads(PLIST.read_bytes())
    assert data["Label"] + ".plist" == PLIST.name
    assert data["RunAtLoad"] is True and data["KeepAlive"] == {"SuccessfulExit": False}
    args = data["ProgramArguments"]
    assert args[:2] == ["/bin/sh", "-c"] and " run " in args[2]
    if shutil.which("plutil"):
        out = subprocess.run(["plutil", "-lint", str(PLIST)], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
    # launchd runs ProgramArguments with HOME set; run the same command (as
    # check-config, so that it ends) against the installed layout.
    home = _home(tmp_path)
    (home / "Library" / "Logs").mkdir(parents=True)
    cmd = args[2].replace(" run ", " check-config ", 1)
    out = subprocess.run(args[:2] + [cmd], env={**os.environ, "HOME": str(home)}, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and "configuration OK" in out.stdout, (out.stdout, out.stderr)
