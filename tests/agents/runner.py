"""Run one real-agent scenario against a running exporter, offline; write its result.

usage (inside a loopback-only network namespace, as tests/test_real_agents.py runs it)::

    unshare -n python3 tests/agents/runner.py SCENARIO OUTDIR BINDIR

It refuses to run unless ``/proc/self/net/dev`` lists only ``lo``. Then, all inside
the namespace: ``lo`` up; the model stand-in (``model.py``) on 127.0.0.1:8765; a
fresh HOME and work dir under OUTDIR; a loopback Apprise receiver and the real
exporter (``tests/harness.py`` ``Exporter``) with its roots on that HOME; hooks
pointed at the exporter (Claude Code: ``hooks install --http`` HTTP hooks, or its default command hooks, into
``$HOME/.claude/settings.json``; Codex: ``hooks install`` of the ``hook`` command
into ``$CODEX_HOME/hooks.json``); the agent from BINDIR under ``env -i`` with fake
keys only and its telemetry, error-report and update switches off (interactive
sessions under tmux). After each step it checks the exporter's live state
(``/api/v1/sessions``) and the exact number of pages received.

OUTDIR/result.json: ``{"scenario", "agent", "version", "ok", "skipped", "checks":
[{"step", "want", "got", "ok", "t"}], "pages": [{"kind", "title"}], "error",
"duration_s"}``; OUTDIR keeps the transcripts, exporter log, pane captures and
the model's request log for a failed run. The registry's ``<pid>.<hash>.key``
files are never opened.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(HERE))

import harness  # noqa: E402
import gemini  # noqa: E402
from harness import Exporter, Receiver, merge  # noqa: E402
from scenarios import SCENARIOS, Scenario  # noqa: E402
import agent_copilot  # noqa: E402
import agent_pi  # noqa: E402

#: Agents whose set-up lives in a module of their own (``roots``, ``setup``,
#: ``hook_file``, ``env``, ``argv``, ``BIN``, ``READY``); Claude Code and Codex
#: are set up inline below.
AGENT_KITS = {m.NAME: m for m in (agent_pi, agent_copilot)}

MODEL_PORT = 8765
#: The scenarios' step timeouts (an expected state, a screen, the agent's exit) times this
#: (``CAE_AGENTS_TIME_SCALE``, default 2): a step that comes in time ends its wait at once, and on a
#: busy machine the agents start and answer several times slower than alone.
TIME_SCALE = float(os.environ.get("CAE_AGENTS_TIME_SCALE") or 2)
FAKE_KEY_ANTHROPIC = "sk-ant-fake-0000000000000000000000"
FAKE_KEY_OPENAI = "sk-fake-0000000000000000000000"
#: The agents' switches for telemetry, error reports, update checks and other
#: non-essential traffic (Claude Code; Codex takes its own from config.toml).
QUIET_ENV = {"DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
             "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_BUG_COMMAND": "1",
             "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1", "CODEX_DISABLE_TELEMETRY": "1"}
#: Exporter timings for the runs: pages within a second or two of a turn end.
EXPORTER_CONFIG = {
    "sources": {"poll_interval_seconds": 0.3},
    "reducer": {"inferred_settle_seconds": 3.0, "marker_wait_seconds": 6.0, "stall_after_seconds": 120.0,
                "evaluation_interval_seconds": 0.1},
    "alerts": {"settle_seconds": 1.0, "max_age_seconds": 0},
}


def interfaces() -> list[str]:
    """Network interfaces of this process's namespace (``/proc/self/net/dev`` is per
    namespace; ``/sys/class/net`` is not remounted by ``unshare -n``)."""
    lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    return [ln.split(":")[0].strip() for ln in lines]


def page_kind(title: str) -> str:
    """The kind of a page from its title (see ``alerts.Alerter._message``)."""
    if title.endswith(": your turn"):
        return "completed"
    if ": stopped on " in title or title.endswith(": the agent exited mid-turn"):
        return "error"
    if title.endswith(": stalled"):
        return "stalled"
    return "waiting"


class Failed(Exception):
    pass


class Run:
    def __init__(self, scn: Scenario, out: Path, bindir: Path):
        self.scn, self.out, self.bindir = scn, out, bindir
        self.home = out / "home"
        self.work = out / "work" / scn.name
        self.t0 = time.time()
        self.checks: list[dict] = []
        self.proc: subprocess.Popen | None = None
        self.sock = f"cae-{os.getpid()}"
        self.tmux = False
        self.version = None

    # -- set-up -----------------------------------------------------------
    def note(self, step, want, got, ok):
        self.checks.append({"step": step, "want": want, "got": got, "ok": ok, "t": round(time.time() - self.t0, 2)})
        if not ok:
            raise Failed(f"{step}: want {want}, got {got}")

    def setup(self):
        if self.home.exists():
            shutil.rmtree(self.home)
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "notes.txt").write_text("a file for the agent to list\n")
        if self.scn.agent == "gemini_cli":
            return gemini.setup(self, EXPORTER_CONFIG, harness)
        claude = self.scn.agent == "claude_code"
        kit = AGENT_KITS.get(self.scn.agent)
        roots = {"claude_code": self.home / ".claude" / "projects", "codex": self.home / ".codex" / "sessions"}
        if kit:
            roots.update(kit.roots(self.home))
        for r in roots.values():
            r.mkdir(parents=True)
        self.start_stand_ins(HERE / "model.py", MODEL_PORT, merge({
            **EXPORTER_CONFIG, "sources": {**EXPORTER_CONFIG["sources"],
                                           **{a: {"paths": [str(r)]} for a, r in roots.items()}}}, self.scn.config))
        url = f"http://127.0.0.1:{self.exporter.port}"
        if kit:
            kit.setup(self, MODEL_PORT)
        elif claude:
            cdir = self.home / ".claude"
            (cdir / "settings.json").write_text("{}\n")
            json.dump({"hasCompletedOnboarding": True, "lastOnboardingVersion": "2.1.332", "theme": "dark",
                       "numStartups": 5,
                       "customApiKeyResponses": {"approved": [FAKE_KEY_ANTHROPIC[-20:]], "rejected": []},
                       "projects": {str(self.work): {"hasTrustDialogAccepted": True,
                                                     "hasCompletedProjectOnboarding": True, "allowedTools": []}}},
                      open(self.home / ".claude.json", "w"), indent=1)
        else:
            xdir = self.home / ".codex"
            (xdir / "config.toml").write_text(f'''model = "gpt-fake"
model_provider = "fake"
approval_policy = "on-request"
sandbox_mode = "workspace-write"
check_for_update_on_startup = false

[model_providers.fake]
name = "Fake local model"
base_url = "http://127.0.0.1:{MODEL_PORT}/v1"
env_key = "FAKE_OPENAI_KEY"
wire_api = "responses"
request_max_retries = {self.scn.model_env.get("CODEX_RETRIES", 1)}
stream_max_retries = 1

[analytics]
enabled = false

[feedback]
enabled = false

[features]
hooks = true

[projects."{self.work}"]
trust_level = "trusted"
''')
        if claude:
            self.user_settings()
        if self.scn.hooks and (not kit or kit.hook_file(self.home)):
            agent_file = kit.hook_file(self.home) if kit else \
                (self.home / ".claude" / "settings.json") if claude else (self.home / ".codex" / "hooks.json")
            agent_file.parent.mkdir(parents=True, exist_ok=True)
            r = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "hooks", "install", "--agent",
                                self.scn.agent, "--url", url, "--config.file", str(self.exporter.config_path),
                                "--file", str(agent_file), *(["--http"] if claude and self.scn.hook_type == "http" else [])],
                               capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                raise Failed(f"hooks install failed: {r.stderr}")

    def start_stand_ins(self, model: Path, port: int, config: dict) -> None:
        """The model stand-in ``model`` (a script serving 127.0.0.1:``port``, every request logged to
        ``requests.jsonl``, the scenario's ``model_env`` in its environment), the page receiver and the
        exporter with ``config``; returns once the exporter is ready and the model takes connections
        (or after about 5 s: the agent's own error then says why)."""
        self.model = subprocess.Popen(
            [sys.executable, str(model)], stderr=open(self.out / "model.log", "w"),
            env={"PATH": "/usr/bin:/bin", "FAKE_PORT": str(port), "FAKE_LOG": str(self.out / "requests.jsonl"),
                 **{k: str(v) for k, v in self.scn.model_env.items()}})
        self.receiver = Receiver()
        self.exporter = Exporter(self.out / "exporter", receiver=self.receiver, config=config)
        self.exporter.start()
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)

    def user_settings(self):
        """The user's own Claude Code settings of the scenario (``Scenario.settings``)."""
        where = {"user": self.home / ".claude" / "settings.json",
                 "project": self.work / ".claude" / "settings.json",
                 "local": self.work / ".claude" / "settings.local.json"}
        for key, conf in self.scn.settings.items():
            path = where[key]
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                have = json.loads(path.read_text())
            except (OSError, ValueError):
                have = {}
            path.write_text(json.dumps({**have, **conf}, indent=1) + "\n")

    def env(self) -> dict:
        if self.scn.agent == "gemini_cli":
            return gemini.env(self)
        e = {"HOME": str(self.home), "PATH": f"{self.bindir}:/usr/local/bin:/usr/bin:/bin",
             "TERM": "xterm-256color", "LANG": "C.UTF-8", "USER": "agent", "SHELL": "/bin/bash", **QUIET_ENV}
        if self.scn.agent in AGENT_KITS:
            e.update(AGENT_KITS[self.scn.agent].env(self, MODEL_PORT))
        elif self.scn.agent == "claude_code":
            e.update({"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{MODEL_PORT}", "ANTHROPIC_API_KEY": FAKE_KEY_ANTHROPIC})
        else:
            e.update({"CODEX_HOME": str(self.home / ".codex"), "FAKE_OPENAI_KEY": FAKE_KEY_OPENAI})
        e.update({k: str(v) for k, v in self.scn.env.items()})
        return e

    def argv(self) -> list[str]:
        a = self.scn
        if a.agent == "gemini_cli":
            return gemini.argv(self)
        if a.agent in AGENT_KITS:
            return AGENT_KITS[a.agent].argv(a)
        if a.agent == "claude_code":
            return ["claude", *a.args, *(["-p", a.prompt] if a.mode == "print" else [])]
        if a.mode == "print":
            return ["codex", "exec", "--skip-git-repo-check", "--dangerously-bypass-hook-trust", *a.args, a.prompt]
        return ["codex", "--no-alt-screen", "--dangerously-bypass-hook-trust", *a.args]

    def start_agent(self):
        argv = self.argv()
        env = self.env()
        if self.scn.mode == "print":
            self.proc = subprocess.Popen(argv, cwd=self.work, env=env, stdin=subprocess.DEVNULL,
                                         stdout=open(self.out / "agent.stdout", "w"),
                                         stderr=open(self.out / "agent.stderr", "w"))
            return
        envargs = ["env", "-i", *(f"{k}={v}" for k, v in env.items())]
        self.tmuxc("-f", "/dev/null", "new-session", "-d", "-s", "s", "-x", "160", "-y", "50", "-c",
                   str(self.work), *envargs, *argv)
        self.tmux = True
        self.tmuxc("set-option", "-t", "s", "remain-on-exit", "on")

    def tmuxc(self, *a) -> str:
        return subprocess.run(["tmux", "-L", self.sock, *a], capture_output=True, text=True, timeout=20).stdout

    def pane(self) -> str:
        return self.tmuxc("capture-pane", "-p", "-t", "s")

    def snap(self, name):
        if self.tmux:
            with open(self.out / "panes.txt", "a") as f:
                f.write(f"===== {name} +{time.time() - self.t0:.1f}s\n{self.pane()}\n")
        # Claude Code's session registry (~/.claude/sessions/<pid>.json) at this moment; the
        # <pid>.<hash>.key files beside it are never opened
        reg = self.home / ".claude" / "sessions"
        if reg.is_dir():
            recs = {}
            for f in reg.iterdir():
                if re.fullmatch(r"\d+\.json", f.name):
                    try:
                        recs[f.name] = json.loads(f.read_text())
                    except (OSError, ValueError):
                        recs[f.name] = None
            with open(self.out / "registry.jsonl", "a") as f:
                f.write(json.dumps({"t": round(time.time() - self.t0, 2), "snap": name, "records": recs}) + "\n")

    def agent_pid(self) -> int | None:
        if self.proc is not None:
            return self.proc.pid
        out = self.tmuxc("list-panes", "-t", "s", "-F", "#{pane_pid}").strip()
        return int(out) if out.isdigit() else None

    def agent_exited(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is not None
        return self.tmuxc("list-panes", "-t", "s", "-F", "#{pane_dead}").startswith("1")

    # -- the exporter's view ---------------------------------------------------
    def rows(self) -> list[dict]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.exporter.port}/api/v1/sessions", timeout=20) as r:
                return json.load(r)["sessions"]
        except TimeoutError:
            return []  # starved for 20 s on a busy machine: asked again until the step's deadline

    def pages(self) -> list[dict]:
        return [{"kind": page_kind(m.get("title", "")), "title": m.get("title", "")}
                for m in list(self.receiver.messages)]

    def view(self, which: str = "current") -> dict:
        rows = [r for r in self.rows() if r["provider"] == self.scn.agent]
        if not rows:
            return {"state": None}
        r = rows[0] if which == "current" else rows[-1]
        got = {"state": r["state"], "sessions": len(rows)}
        if r.get("waiting_for"):
            got["reason"] = r["waiting_for"]["reason"]
        if r.get("error_kind"):
            got["error_kind"] = r["error_kind"]
        return got

    def expect(self, state: str, pages: list[str], timeout: float, which: str = "current", **extra):
        want = {"state": state, "pages": pages, **extra}
        deadline = time.time() + timeout * TIME_SCALE
        got = None
        while True:
            v = self.view(which)
            got = {**{k: v.get(k) for k in ("state", *extra)}, "pages": [p["kind"] for p in self.pages()]}
            if len(got["pages"]) > len(pages):
                break  # a page too many never goes away
            if got == want:
                break
            if time.time() > deadline:
                break
            time.sleep(0.1)
        self.snap(f"expect {state}")
        self.note(f"expect {state}", want, got, got == want)

    # -- steps --------------------------------------------------------------------
    def do(self, st: tuple):
        kind = st[0]
        if kind == "type" and self.scn.agent == "gemini_cli":
            gemini.type_(self, st[1])
        elif kind == "type":
            self.tmuxc("send-keys", "-t", "s", "-l", st[1])
            time.sleep(0.4)
            self.tmuxc("send-keys", "-t", "s", "Enter")
        elif kind == "keys":
            for k in st[1:]:
                self.tmuxc("send-keys", "-t", "s", k)
                time.sleep(0.3)
        elif kind == "sleep":
            time.sleep(st[1])
        elif kind == "wait_pane":
            pattern, timeout = st[1], st[2]
            deadline = time.time() + timeout * TIME_SCALE
            while time.time() < deadline and not re.search(pattern, self.pane()):
                time.sleep(0.2)
            ok = bool(re.search(pattern, self.pane()))
            if not ok:
                self.snap(f"wait_pane failed {pattern}")
            self.note(f"screen shows /{pattern}/", True, ok, ok)
        elif kind == "expect":
            opts = dict(st[4]) if len(st) > 4 else {}
            self.expect(st[1], list(st[2]), st[3], **opts)
        elif kind == "exporter_stop":
            self.exporter.stop()
        elif kind == "exporter_start":
            self.exporter.start()
        elif kind == "pages":
            want, deadline = list(st[1]), time.time() + st[2]
            while time.time() < deadline:
                time.sleep(0.1)
            got = [p["kind"] for p in self.pages()]
            self.note("pages so far", want, got, got == want)
        elif kind == "kill":
            pid = self.agent_pid()
            for p in [pid, *children(pid)]:
                try:
                    os.kill(p, signal.SIGKILL)
                except (ProcessLookupError, TypeError):
                    pass
        elif kind == "restart":  # the agent started again in the same work dir, with extra args (resume)
            self.tmuxc("kill-session", "-t", "s")
            self.tmux = False
            self.scn = dataclasses.replace(self.scn, args=[*self.scn.args, *st[1]])
            self.start_agent()
            self.do(("wait_pane", self.scn.ready, 60))
            time.sleep(1.5)
        elif kind == "call":  # an agent's own step (tests/agents/gemini.py: resume, next_minute)
            st[1](self, *st[2:])
        elif kind == "exited":
            deadline = time.time() + st[1] * TIME_SCALE
            while time.time() < deadline and not self.agent_exited():
                time.sleep(0.2)
            self.note("agent exited", True, self.agent_exited(), self.agent_exited())
        else:
            raise ValueError(f"unknown step {st!r}")

    def main(self) -> dict:
        res = {"scenario": self.scn.name, "agent": self.scn.agent, "ok": False, "skipped": None, "checks": self.checks,
               "pages": [], "error": None}
        if interfaces() != ["lo"]:
            res["error"] = f"refusing: the namespace has interfaces {interfaces()} (run under unshare -n)"
            return res
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        try:
            kit = AGENT_KITS.get(self.scn.agent)
            exe = self.bindir / (kit.BIN if kit else {"claude_code": "claude", "gemini_cli": gemini.BIN}.get(
                self.scn.agent, "codex"))
            self.version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60,
                                          env={"HOME": str(self.out), "PATH": f"{self.bindir}:/usr/bin:/bin",
                                               **QUIET_ENV}).stdout.strip()
            m = re.search(r"\d+\.\d+\.\d+\S*", self.version)
            res["version"] = m.group(0).rstrip(".") if m else self.version  # (Copilot CLI: "1.0.102.")
            self.setup()
            self.start_agent()
            if self.scn.mode == "tui":
                self.do(("wait_pane", self.scn.ready, 60))
                time.sleep(1.5)
            for st in self.scn.steps:
                self.do(st)
            # the exact pages, after the settle time has passed once more
            time.sleep(2.5)
            got = [p["kind"] for p in self.pages()]
            self.note("pages at the end", list(self.scn.pages), got, got == list(self.scn.pages))
            # privacy: no prompt or model text in any page or exporter log line
            leaks = [w for w in ("SCN_", "fake model", "plain answer", "made_by_agent")
                     if any(w in m.get("title", "") + m.get("message", "") for m in self.receiver.messages)
                     or w in self.exporter.log()]
            self.note("no transcript text in pages or the exporter log", [], leaks, not leaks)
            if self.scn.titles:
                titles = [p["title"] for p in self.pages()]
                ok = len(titles) == len(self.scn.titles) and all(
                    re.search(rx, t) for rx, t in zip(self.scn.titles, titles))
                self.note("page titles", list(self.scn.titles), titles, ok)
            res["ok"] = True
        except Failed as e:
            res["error"] = str(e)
        except Exception:
            res["error"] = traceback.format_exc()
        finally:
            if res["error"] and getattr(self, "exporter", None):
                res["exporter_log_tail"] = self.exporter.log().splitlines()[-25:]
            res["pages"] = self.pages()
            self.snap("final")
            self.stop()
            res["duration_s"] = round(time.time() - self.t0, 1)
        return res

    def stop(self):
        if self.tmux:
            if not self.agent_exited():
                self.tmuxc("send-keys", "-t", "s", "C-c")
                time.sleep(0.5)
                self.tmuxc("send-keys", "-t", "s", "C-c")
                time.sleep(1)
            self.tmuxc("kill-server")
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for thing in ("exporter",):
            try:
                getattr(self, thing).stop()
            except Exception:
                pass
        for thing in ("model",):
            p = getattr(self, thing, None)
            if p is not None:
                p.terminate()
                p.wait(10)
        if getattr(self, "receiver", None):
            self.receiver.close()
        # the exporter log and transcripts stay in OUTDIR; nothing key-like is kept
        for dp, _, fs in os.walk(self.home):
            for n in fs:
                if ".key" in n or n in ("auth.json", ".credentials.json"):
                    os.remove(os.path.join(dp, n))


def children(pid: int | None) -> list[int]:
    """Descendants of ``pid`` (from /proc)."""
    if pid is None:
        return []
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def main(argv: list[str]) -> int:
    name, out, bindir = argv[1], Path(argv[2]).resolve(), Path(argv[3]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    res = Run(SCENARIOS[name], out, bindir).main()
    (out / "result.json").write_text(json.dumps(res, indent=1))
    print(json.dumps({k: res.get(k) for k in ("scenario", "ok", "error", "duration_s")}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
