"""Synthetic transcript corpora shaped like Claude Code 2.1.x and Codex CLI
(0.1xx) files, for the benchmark in ``bench/run.py``.

Shapes follow the real lines in ``tests/fixtures/transcripts``:

- Claude Code: one API response split one content block per line (thinking,
  text, tool_use) with the same ``message.id``/``requestId`` and the same
  ``usage`` object on each of its lines (cache reads grow with the context);
  ``user`` tool results with a ``toolUseResult`` copy of the output;
  ``progress`` lines (hook, bash, agent progress with a nested message);
  ``system`` ``stop_hook_summary``/``turn_duration``/``local_command``;
  ``file-history-snapshot``, ``queue-operation``; subagent files under
  ``<sessionId>/subagents/agent-*.jsonl`` with ``isSidechain: true``.
- Codex: ``session_meta`` with long base instructions, ``turn_context``,
  ``event_msg`` (``task_started``, ``user_message``, ``token_count``,
  ``exec_command_end``, ``agent_reasoning``, ``agent_message``,
  ``task_complete``; ``token_count`` with a running ``total_token_usage``
  that only grows and ``last_token_usage`` the request's own),
  ``response_item`` (messages, ``reasoning`` with ``encrypted_content``,
  ``function_call`` with JSON-in-a-string arguments, ``function_call_output``).

String sizes are heavy-tailed (log-normal) and drawn from a text pool with
JSON escapes (quotes, backslashes, newlines, tabs, ANSI colour codes) and
non-ASCII text (accents, CJK, emoji, U+2028); the mean line is about 2 KB and
a few lines per corpus are several MB. Everything is deterministic for a given
seed. Token usage draws from a stream of its own per session (seeded by the
session id), so usage numbers do not shift a session's other draws (the
sessions after it still move a little: its size counts its usage's bytes).
"""

from __future__ import annotations

import base64
import json
import os
import random
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

GENERATOR_VERSION = 5  # 5: usage as the agents write it (one per Claude response, rising Codex totals)

_WORDS = (
    "the a of to and in is it that for on with as was this be are by at from or an have not but which "
    "function return value error file line test build module import class def self None True False "
    "config server client request response session transcript exporter metrics state turn tool "
    "result output input buffer offset decoder reducer store alert page settle latency throughput"
).split()
# Non-ASCII words: about 1 word in 40 (accents, Cyrillic, CJK, arrows, emoji).
_WIDE = (
    "café naïve résumé über straße Ärger façade jalapeño смотри данные 日本語 テスト 中文 数据 "
    "한국어 ελληνικά עברית العربية → ← ✓ ✗ — … « » • ° ± × ÷ 🚀 🔥 ✨ 🐍 👍"
).split()
_CODE = [
    'def handler(event, context):\n    return {"statusCode": 200, "body": json.dumps(event)}\n',
    "    if (x < 0 && y > 0) { return \"neg\\\\pos\"; }\n",
    "\x1b[32m✓\x1b[0m tests/test_parser.py::test_round_trip PASSED\n",
    "\x1b[31mFAILED\x1b[0m tests/test_io.py::test_tail - AssertionError: assert 3 == 4\n",
    "C:\\Users\\dev\\project\\src\\main.rs:42:17: error[E0308]: mismatched types\n",
    "\t\tlet path = \"/home/dev/proj/src/lib.rs\";\n",
    '{"key": "value", "nested": {"list": [1, 2, 3], "flag": true}}\n',
    "SELECT id, name FROM users WHERE email LIKE '%@example.com' ORDER BY id;\n",
    "<div class=\"card\"><span>Hello</span></div>\n",
    "Traceback (most recent call last):\n  File \"/usr/lib/python3.11/json/decoder.py\", line 337\n",
    "line with a separator\u2028inside and a next-line\u0085char\n",
    "   Compiling serde_json v1.0.120\n    Finished `release` profile [optimized] in 41.37s\n",
]


def _pool(rng: random.Random, size: int = 1 << 21) -> str:
    parts, n = [], 0
    while n < size:
        if rng.random() < 0.12:
            s = rng.choice(_CODE)
        else:
            k = rng.randint(3, 18)
            s = " ".join(rng.choice(_WIDE) if rng.random() < 0.025 else rng.choice(_WORDS) for _ in range(k)) \
                + rng.choice((". ", ".\n", ", ", "\n\n", ": "))
        parts.append(s)
        n += len(s)
    return "".join(parts)


class Text:
    """Heavy-tailed strings sliced from a fixed pool."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.pool = _pool(rng)
        self.n = len(self.pool)

    def exact(self, length: int) -> str:
        if length <= 0:
            return ""
        if length >= self.n:
            reps = length // self.n + 1
            start = self.rng.randrange(self.n)
            return (self.pool[start:] + self.pool * reps)[:length]
        start = self.rng.randrange(self.n - length)
        return self.pool[start:start + length]

    def sized(self, median: float, sigma: float = 1.1, cap: int = 200_000) -> str:
        return self.exact(min(cap, int(self.rng.lognormvariate(_ln(median), sigma))))


def _ln(x: float) -> float:
    import math

    return math.log(max(1.0, x))


def _dumps(obj) -> bytes:
    # Claude Code (JSON.stringify) and Codex (serde_json) write compact JSON
    # with raw UTF-8.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _tid(rng: random.Random, prefix: str, n: int = 24) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return prefix + "".join(rng.choice(alphabet) for _ in range(n))


class Clock:
    def __init__(self, t: float):
        self.t = t

    def tick(self, rng: random.Random, mean: float = 1.5) -> str:
        self.t += rng.expovariate(1.0 / mean)
        return _iso(self.t)


# -- Claude Code ---------------------------------------------------------------
_TOOLS = ("Bash", "Read", "Edit", "Write", "Grep", "Glob", "TodoWrite", "Task", "WebFetch")


class ClaudeSession:
    """Writes one Claude Code 2.1.x session (and its subagent files)."""

    def __init__(self, rng: random.Random, text: Text, root: Path, project: str, cwd: str, t0: float,
                 big_lines: list[int] | None = None, subagents: bool = True):
        self.rng, self.text = rng, text
        self.tools = _TOOLS if subagents else tuple(t for t in _TOOLS if t != "Task")
        self.sid = _uuid(rng)
        self.cwd = cwd
        self.dir = root / project
        self.path = self.dir / f"{self.sid}.jsonl"
        self.clock = Clock(t0)
        self.version = rng.choice(("2.1.39", "2.1.72", "2.1.98", "2.1.114"))
        self.branch = rng.choice(("main", "feature/tail", "fix-1234"))
        self.slug = "-".join(rng.choice(("lexical", "painting", "whisper", "quiet", "amber", "river")) for _ in range(3))
        self.parent: str | None = None
        self.out: list[bytes] = []
        self.size = 0
        self.big_lines = big_lines or []
        self.files = 1
        # Usage draws from its own stream, so the rest of the corpus is drawn as before.
        self.urng = random.Random(self.sid)
        self._usages: dict[str, dict] = {}  # message.id -> its usage, for this turn's responses
        self._context = self.urng.randint(15_000, 40_000)  # tokens read from the cache by the next response

    def _base(self, rtype: str, sidechain: bool = False) -> dict:
        u = _uuid(self.rng)
        d = {"parentUuid": self.parent, "isSidechain": sidechain, "userType": "external", "cwd": self.cwd,
             "sessionId": self.sid, "version": self.version, "gitBranch": self.branch, "slug": self.slug,
             "type": rtype}
        self.parent = u
        d["_u"] = u
        return d

    def _emit(self, d: dict, out: list[bytes] | None = None) -> None:
        u = d.pop("_u", None)
        if u is not None:
            d["uuid"] = u
            d["timestamp"] = self.clock.tick(self.rng, 0.8)
        line = _dumps(d)
        (self.out if out is None else out).append(line)
        if out is None:
            self.size += len(line) + 1

    def _usage(self, mid: str) -> dict:
        # Claude Code writes one API response one content block per line, each
        # line with the same ``message.usage`` (2.1.123: the same object on every
        # line of a ``message.id``/``requestId``). The context grows: this
        # response reads from the cache what the last one read and wrote.
        got = self._usages.get(mid)
        if got is None:
            r = self.urng
            write = r.randint(0, 20000)
            got = self._usages[mid] = {
                "input_tokens": r.randint(1, 9), "cache_creation_input_tokens": write,
                "cache_read_input_tokens": self._context,
                "cache_creation": {"ephemeral_5m_input_tokens": write, "ephemeral_1h_input_tokens": 0},
                "output_tokens": r.randint(1, 4000), "service_tier": "standard", "inference_geo": "global"}
            self._context = self._context + write if self._context < 900_000 else r.randint(15_000, 40_000)
        return got

    def _assistant(self, mid: str, req: str, block: dict, out=None, sidechain=False, stop=None) -> None:
        d = self._base("assistant", sidechain)
        del d["type"]
        d["message"] = {"model": "claude-opus-4-6", "id": mid, "type": "message", "role": "assistant",
                        "content": [block], "stop_reason": stop, "stop_sequence": None, "usage": self._usage(mid)}
        d["requestId"] = req
        d["type"] = "assistant"
        self._emit(d, out)

    def _tool_input(self, name: str) -> dict:
        t = self.text
        if name == "Bash":
            return {"command": t.sized(60, 0.8, 2000), "description": t.sized(40, 0.5, 200)}
        if name in ("Read", "Glob", "Grep"):
            return {"file_path": f"{self.cwd}/src/{t.exact(12).strip() or 'x'}.py", "pattern": t.sized(20, 0.5, 200)}
        if name in ("Edit", "Write"):
            return {"file_path": f"{self.cwd}/src/module.py", "old_string": t.sized(300, 1.2, 20000),
                    "new_string": t.sized(400, 1.2, 40000)}
        if name == "TodoWrite":
            return {"todos": [{"content": t.sized(50, 0.5, 300), "status": self.rng.choice(("pending", "completed")),
                               "activeForm": t.sized(40, 0.5, 200)} for _ in range(self.rng.randint(1, 6))]}
        return {"prompt": t.sized(400, 0.9, 8000), "description": t.sized(30, 0.4, 100), "subagent_type": "general"}

    def _result_text(self) -> str:
        if self.big_lines and self.rng.random() < 0.02:
            return self.text.exact(self.big_lines.pop())
        return self.text.sized(700, 1.5, 400_000)

    def turn(self) -> None:
        r, t = self.rng, self.text
        turn_start = self.clock.t
        self._usages.clear()
        self._emit({"type": "file-history-snapshot", "messageId": _uuid(r),
                    "snapshot": {"messageId": _uuid(r), "trackedFileBackups": {}, "timestamp": _iso(self.clock.t)},
                    "isSnapshotUpdate": False})
        if r.random() < 0.1:
            self._emit({"type": "queue-operation", "operation": "enqueue", "timestamp": _iso(self.clock.t),
                        "sessionId": self.sid, "content": t.sized(80, 0.8, 2000)})
        d = self._base("user")
        d["message"] = {"role": "user", "content": t.sized(250, 1.0, 20000)}
        d["thinkingMetadata"] = {"maxThinkingTokens": 31999}
        d["todos"] = []
        d["permissionMode"] = "bypassPermissions"
        self._emit(d)
        for i in range(max(1, int(r.expovariate(1 / 5.0)))):
            mid, req = _tid(r, "msg_01"), _tid(r, "req_011C")
            if r.random() < 0.4:
                self._assistant(mid, req, {"type": "thinking", "thinking": t.sized(500, 1.0, 30000),
                                           "signature": base64.b64encode(r.randbytes(r.randint(200, 900))).decode()})
            if r.random() < 0.5:
                self._assistant(mid, req, {"type": "text", "text": t.sized(200, 1.1, 20000)})
            for _ in range(1 if r.random() < 0.85 else r.randint(2, 4)):
                name = r.choice(self.tools)
                tid = _tid(r, "toolu_01")
                self._assistant(mid, req, {"type": "tool_use", "id": tid, "name": name, "input": self._tool_input(name),
                                           "caller": {"type": "direct"}})
                self._progress(tid, name)
                out = self._result_text()
                d = self._base("user")
                d["message"] = {"role": "user", "content": [{"tool_use_id": tid, "type": "tool_result", "content": out,
                                                             "is_error": r.random() < 0.05}]}
                d["toolUseResult"] = {"stdout": out, "stderr": "", "interrupted": False, "isImage": False}
                d["sourceToolAssistantUUID"] = _uuid(r)
                self._emit(d)
        mid, req = _tid(r, "msg_01"), _tid(r, "req_011C")
        self._assistant(mid, req, {"type": "text", "text": t.sized(600, 1.0, 30000)})
        if r.random() < 0.3:
            d = self._base("system")
            d.update({"subtype": "stop_hook_summary", "hookCount": 1,
                      "hookInfos": [{"command": "$HOME/.claude/hooks/notify.sh"}], "hookErrors": [],
                      "preventedContinuation": False, "stopReason": "", "hasOutput": True, "level": "suggestion"})
            self._emit(d)
        if self.clock.t - turn_start > 30 or r.random() < 0.2:
            d = self._base("system")
            d.update({"subtype": "turn_duration", "durationMs": int((self.clock.t - turn_start) * 1000), "isMeta": False})
            self._emit(d)
        if r.random() < 0.05:
            d = self._base("system")
            d.update({"subtype": "local_command", "content": "<command-name>/model</command-name>", "level": "info"})
            self._emit(d)

    def _progress(self, tid: str, name: str) -> None:
        r, t = self.rng, self.text
        for hook in ("PreToolUse", "PostToolUse"):
            if r.random() < 0.5:
                d = self._base("progress")
                d["data"] = {"type": "hook_progress", "hookEvent": hook, "hookName": f"{hook}:{name}",
                             "command": "$HOME/.claude/hooks/log.sh"}
                d["parentToolUseID"] = tid
                d["toolUseID"] = tid
                self._emit(d)
        if name == "Bash":
            for _ in range(r.randint(0, 3)):
                d = self._base("progress")
                d["data"] = {"type": "bash_progress", "output": t.sized(300, 1.2, 50000),
                             "fullOutput": t.sized(600, 1.2, 100000), "elapsedTimeSeconds": r.randint(1, 90),
                             "totalLines": r.randint(1, 900)}
                d["toolUseID"] = _tid(r, "bash-progress-")
                d["parentToolUseID"] = tid
                self._emit(d)
        elif name == "Task":
            agent = _tid(r, "a", 6).lower()
            sub = self.dir / self.sid / "subagents" / f"agent-{agent}.jsonl"
            sub_lines: list[bytes] = []
            saved = self.parent
            self.parent = None
            for _ in range(r.randint(2, 8)):
                mid = _tid(r, "msg_01")
                self._assistant(mid, _tid(r, "req_011C"), {"type": "text", "text": t.sized(300, 1.0, 8000)},
                                out=sub_lines, sidechain=True)
                d = self._base("progress")
                d["data"] = {"message": {"type": "assistant", "message": {"role": "assistant", "content": [
                    {"type": "text", "text": t.sized(300, 1.0, 8000)}]}, "uuid": _uuid(r),
                    "timestamp": _iso(self.clock.t)}, "normalizedMessages": [], "type": "agent_progress",
                    "prompt": t.sized(200, 0.8, 4000), "agentId": agent}
                d["toolUseID"] = _tid(r, "agent_msg_01")
                d["parentToolUseID"] = tid
                self.parent = saved
                self._emit(d)
            sub.parent.mkdir(parents=True, exist_ok=True)
            with open(sub, "wb") as f:
                f.write(b"\n".join(sub_lines) + b"\n")
            self.files += 1

    def write(self, target_bytes: int) -> int:
        self.dir.mkdir(parents=True, exist_ok=True)
        r = self.rng
        for hook in ("SessionStart:startup", "SessionStart:startup"):
            d = self._base("progress")
            d["data"] = {"type": "hook_progress", "hookEvent": "SessionStart", "hookName": hook,
                         "command": "$HOME/.claude/hooks/session.sh"}
            d["parentToolUseID"] = d["toolUseID"] = _uuid(r)
            self._emit(d)
        while self.size < target_bytes or self.big_lines:
            self.turn()
            self.clock.t += r.expovariate(1 / 120.0)
        with open(self.path, "wb") as f:
            f.write(b"\n".join(self.out) + b"\n")
        return self.size


# -- Codex ---------------------------------------------------------------------
class CodexSession:
    """Writes one Codex rollout (envelope format, ≥0.100)."""

    def __init__(self, rng: random.Random, text: Text, root: Path, cwd: str, t0: float,
                 big_lines: list[int] | None = None, version: str | None = None):
        self.rng, self.text = rng, text
        self.sid = _uuid(rng)
        self.cwd = cwd
        dt = datetime.fromtimestamp(t0, timezone.utc)
        self.path = root / f"{dt:%Y}" / f"{dt:%m}" / f"{dt:%d}" / f"rollout-{dt:%Y-%m-%dT%H-%M-%S}-{self.sid}.jsonl"
        self.clock = Clock(t0)
        self.version = version or rng.choice(("0.118.0", "0.123.0", "0.135.0", "0.146.0"))
        self.out: list[bytes] = []
        self.size = 0
        self.big_lines = big_lines or []
        self.files = 1
        # Usage draws from its own stream, so the rest of the corpus is drawn as before.
        self.urng = random.Random(self.sid)
        self._total = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0,
                       "reasoning_output_tokens": 0, "total_tokens": 0}
        self._context = self.urng.randint(12_000, 24_000)  # input tokens of the next request

    def _token_count(self) -> dict:
        # Codex 0.1xx: ``info.total_token_usage`` is the session's running total
        # (it only grows) and ``info.last_token_usage`` the request's own, the
        # difference; cached input is part of input, reasoning part of output
        # (v0.135_exec_complete.jsonl, 0.171.0 live runs).
        r = self.urng
        inp = self._context
        cached = min(inp, int(inp * r.uniform(0.6, 0.98)) // 128 * 128)
        out = r.randint(1, 5000)
        reasoning = r.randint(0, out) if r.random() < 0.6 else 0
        last = {"input_tokens": inp, "cached_input_tokens": cached, "output_tokens": out,
                "reasoning_output_tokens": reasoning, "total_tokens": inp + out}
        for k, v in last.items():
            self._total[k] += v
        self._context = inp + out + r.randint(100, 6000) if inp < 250_000 else r.randint(12_000, 24_000)
        return {"total_token_usage": dict(self._total), "last_token_usage": last, "model_context_window": 258400}

    def _emit(self, rtype: str, payload: dict) -> None:
        line = _dumps({"timestamp": self.clock.tick(self.rng, 0.9), "type": rtype, "payload": payload})
        self.out.append(line)
        self.size += len(line) + 1

    def _output(self) -> str:
        if self.big_lines and self.rng.random() < 0.03:
            return self.text.exact(self.big_lines.pop())
        return self.text.sized(700, 1.5, 400_000)

    def turn(self) -> None:
        r, t = self.rng, self.text
        turn_id = _uuid(r)
        start = self.clock.t
        self._emit("event_msg", {"type": "task_started", "turn_id": turn_id, "started_at": int(start),
                                 "model_context_window": 258400, "collaboration_mode_kind": "default"})
        self._emit("turn_context", {"turn_id": turn_id, "cwd": self.cwd, "approval_policy": "on-request",
                                    "sandbox_policy": {"type": "workspace-write"}, "model": "gpt-5.5",
                                    "summary": "auto", "personality": "pragmatic"})
        prompt = t.sized(250, 1.0, 20000)
        self._emit("response_item", {"type": "message", "role": "user",
                                     "content": [{"type": "input_text", "text": prompt}]})
        self._emit("event_msg", {"type": "user_message", "message": prompt, "images": [], "local_images": [],
                                 "text_elements": []})
        for _ in range(max(1, int(r.expovariate(1 / 5.0)))):
            summary = t.sized(300, 0.9, 8000)
            self._emit("response_item", {"type": "reasoning", "summary": [{"type": "summary_text", "text": summary}],
                                         "content": None,
                                         "encrypted_content": base64.b64encode(r.randbytes(r.randint(300, 3000))).decode()})
            self._emit("event_msg", {"type": "agent_reasoning", "text": summary})
            call = _tid(r, "call_")
            args = json.dumps({"cmd": t.sized(80, 0.8, 3000), "workdir": self.cwd, "yield_time_ms": 10000},
                              ensure_ascii=False)
            self._emit("response_item", {"type": "function_call", "name": "exec_command", "arguments": args,
                                         "call_id": call})
            out = self._output()
            if r.random() < 0.6:
                self._emit("event_msg", {"type": "exec_command_end", "call_id": call, "turn_id": turn_id,
                                         "command": ["bash", "-lc", t.sized(60, 0.8, 2000)], "cwd": self.cwd,
                                         "stdout": "", "stderr": "", "aggregated_output": out[:20000], "exit_code": 0,
                                         "duration": {"secs": r.randint(0, 30), "nanos": r.randint(0, 10 ** 9)},
                                         "formatted_output": ""})
            self._emit("response_item", {"type": "function_call_output", "call_id": call,
                                         "output": f"Chunk ID: {r.randint(0, 1 << 24):06x}\nWall time: 1.2 seconds\n"
                                                   f"Process exited with code 0\nOutput:\n{out}"})
            self._emit("event_msg", {"type": "token_count", "info": self._token_count(),
                                     "rate_limits": {"primary": {"used_percent": 15.0, "window_minutes": 300}}})
        final = t.sized(500, 1.0, 20000)
        self._emit("event_msg", {"type": "agent_message", "message": final, "phase": "final_answer"})
        self._emit("response_item", {"type": "message", "role": "assistant",
                                     "content": [{"type": "output_text", "text": final}], "phase": "final_answer"})
        self._emit("event_msg", {"type": "task_complete", "turn_id": turn_id, "last_agent_message": final,
                                 "completed_at": int(self.clock.t), "duration_ms": int((self.clock.t - start) * 1000)})

    def write(self, target_bytes: int) -> int:
        r, t = self.rng, self.text
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._emit("session_meta", {"id": self.sid, "timestamp": _iso(self.clock.t), "cwd": self.cwd,
                                    "originator": "codex_cli_rs", "cli_version": self.version, "source": "cli",
                                    "model_provider": "openai",
                                    "base_instructions": {"text": t.sized(12000, 0.3, 40000)}})
        while self.size < target_bytes or self.big_lines:
            self.turn()
            self.clock.t += r.expovariate(1 / 120.0)
        with open(self.path, "wb") as f:
            f.write(b"\n".join(self.out) + b"\n")
        return self.size


# -- corpora -------------------------------------------------------------------
def _stamp(out: Path, meta: dict) -> bool:
    """True when ``out`` already holds a corpus generated with ``meta``."""
    f = out / "corpus.json"
    try:
        done = json.loads(f.read_text())
        return all(done.get(k) == v for k, v in meta.items())  # the file adds what was written
    except (OSError, ValueError):
        return False


def _reset(out: Path) -> None:
    import shutil

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)


def corpus(out: Path, total_bytes: int, seed: int = 7, session_median: int = 300_000,
           codex_share: float = 0.35, big_line_every: int = 150_000_000) -> dict:
    """A mixed corpus of about ``total_bytes`` under ``out/claude/projects``
    and ``out/codex/sessions``; session sizes are log-normal around
    ``session_median``; one line of 1–4 MB per ``big_line_every`` bytes."""
    meta = {"kind": "mixed", "bytes": total_bytes, "seed": seed, "median": session_median, "codex": codex_share,
            "v": GENERATOR_VERSION}
    if _stamp(out, meta):
        return json.loads((out / "corpus.json").read_text())
    _reset(out)
    rng = random.Random(seed)
    text = Text(rng)
    croot, xroot = out / "claude" / "projects", out / "codex" / "sessions"
    big = [rng.randint(1 << 20, 4 << 20) for _ in range(max(1, total_bytes // big_line_every))]
    written, sessions, files = 0, 0, 0
    t0 = 1_777_000_000.0
    projects = [f"-home-dev-{name}" for name in ("api", "web", "exporter", "infra", "ml", "docs", "cli", "mobile")]
    while written < total_bytes:
        size = int(min(40e6, rng.lognormvariate(_ln(session_median), 1.2)))
        size = min(size, total_bytes - written + 1)
        mine = [big.pop()] if big and rng.random() < 0.3 else []
        if rng.random() < codex_share:
            s = CodexSession(rng, text, xroot, "/home/dev/" + rng.choice(projects)[10:], t0 + sessions * 50, mine)
        else:
            proj = rng.choice(projects)
            s = ClaudeSession(rng, text, croot, proj, "/home/dev/" + proj[10:], t0 + sessions * 50, mine)
        written += s.write(size)
        sessions += 1
        files += s.files
    meta.update(sessions=sessions, files=sum(1 for _ in out.rglob("*.jsonl")),
                written=sum(p.stat().st_size for p in out.rglob("*.jsonl")))
    (out / "corpus.json").write_text(json.dumps(meta))
    return meta


def many_sessions(out: Path, n: int, seed: int = 11, session_bytes: int = 6000) -> dict:
    """``n`` small sessions (half Claude Code, half Codex), one file each."""
    meta = {"kind": "many", "n": n, "seed": seed, "bytes": session_bytes, "v": GENERATOR_VERSION}
    if _stamp(out, meta):
        return json.loads((out / "corpus.json").read_text())
    _reset(out)
    rng = random.Random(seed)
    text = Text(rng)
    croot, xroot = out / "claude" / "projects", out / "codex" / "sessions"
    t0 = 1_777_000_000.0
    for i in range(n):
        if i % 2:
            CodexSession(rng, text, xroot, f"/home/dev/p{i % 40}", t0 + i * 7).write(session_bytes)
        else:
            ClaudeSession(rng, text, croot, f"-home-dev-p{i % 40}", f"/home/dev/p{i % 40}", t0 + i * 7,
                          subagents=False).write(session_bytes)
    meta.update(files=sum(1 for _ in out.rglob("*.jsonl")), written=sum(p.stat().st_size for p in out.rglob("*.jsonl")))
    (out / "corpus.json").write_text(json.dumps(meta))
    return meta


def huge_line(out: Path, line_bytes: int, seed: int = 13) -> dict:
    """One Claude Code session whose tool result is a single ``line_bytes``
    line, then the end of the turn; plus one ordinary Codex rollout."""
    meta = {"kind": "huge", "line": line_bytes, "seed": seed, "v": GENERATOR_VERSION}
    if _stamp(out, meta):
        return json.loads((out / "corpus.json").read_text())
    _reset(out)
    rng = random.Random(seed)
    text = Text(rng)
    croot, xroot = out / "claude" / "projects", out / "codex" / "sessions"
    t0 = 1_777_000_000.0
    s = ClaudeSession(rng, text, croot, "-home-dev-big", "/home/dev/big", t0)
    s.write(50_000)
    # the huge tool result, streamed to disk (never built whole here either)
    with open(s.path, "ab") as f:
        head = {"parentUuid": s.parent, "isSidechain": False, "userType": "external", "cwd": s.cwd,
                "sessionId": s.sid, "version": s.version, "type": "user",
                "message": {"role": "user", "content": [{"tool_use_id": "toolu_01huge", "type": "tool_result",
                                                         "content": "@@"}]}}
        pre, post = _dumps(head).split(b"@@")
        f.write(pre)
        chunk = _dumps(text.exact(1 << 20))[1:-1]
        left = line_bytes - len(pre) - len(post)
        while left >= len(chunk):
            f.write(chunk)
            left -= len(chunk)
        f.write(b"x" * left)
        f.write(post + b"\n")
    s.out, s.size = [], 0
    s.clock.t += 5
    s._assistant(_tid(rng, "msg_01"), _tid(rng, "req_011C"), {"type": "text", "text": "All done."})
    d = s._base("system")
    d.update({"subtype": "turn_duration", "durationMs": 65000, "isMeta": False})
    s._emit(d)
    with open(s.path, "ab") as f:
        f.write(b"\n".join(s.out) + b"\n")
    CodexSession(rng, text, xroot, "/home/dev/big", t0).write(50_000)
    meta.update(session_id=s.sid, files=sum(1 for _ in out.rglob("*.jsonl")),
                written=sum(p.stat().st_size for p in out.rglob("*.jsonl")))
    (out / "corpus.json").write_text(json.dumps(meta))
    return meta


def _session_of(out: Path, p: Path) -> str:
    """The session a corpus file belongs to (a Claude session file and its
    subagent folder; a Codex rollout alone)."""
    rel = p.relative_to(out).parts
    if "subagents" in rel:
        return "/".join(rel[:rel.index("subagents")])
    return "/".join(rel)[: -len(".jsonl")]


def history(out: Path, total_bytes: int, recent_share: float = 0.01, seed: int = 7) -> dict:
    """A heavy history: the mixed corpus of ``total_bytes`` (see
    :func:`corpus`), whose files are dated (``mtime``) 2–60 days ago except
    whole sessions holding about ``recent_share`` of the bytes, dated within
    the last minute. Dates are set again at every call (the corpus itself is
    reused). Returns the corpus meta plus ``recent_bytes``, ``recent_files``
    and ``recent_sessions`` (their corpus-relative names)."""
    meta = corpus(out, total_bytes, seed=seed)
    groups: dict[str, list[Path]] = {}
    for p in sorted(out.rglob("*.jsonl")):
        groups.setdefault(_session_of(out, p), []).append(p)
    rng = random.Random(seed + 1)
    names = sorted(groups)
    rng.shuffle(names)
    total = sum(p.stat().st_size for ps in groups.values() for p in ps)
    now = datetime.now(timezone.utc).timestamp()
    recent, recent_bytes = [], 0
    for name in names:
        size = sum(p.stat().st_size for p in groups[name])
        if recent_bytes + size <= recent_share * total * 1.2 and recent_bytes < recent_share * total:
            recent.append(name)
            recent_bytes += size
            t = now - rng.uniform(1, 50)
        else:
            t = now - rng.uniform(2 * 86400, 60 * 86400)
        for p in groups[name]:
            os.utime(p, (t, t))
    return {**meta, "recent_bytes": recent_bytes, "recent_sessions": sorted(recent),
            "recent_files": sum(len(groups[n]) for n in recent), "bytes_total": total}


def line_stats(root: Path) -> dict:
    """Lines, bytes, mean and largest line of every ``*.jsonl`` under ``root``."""
    lines = nbytes = biggest = 0
    for p in root.rglob("*.jsonl"):
        with open(p, "rb") as f:
            for line in f:
                lines += 1
                nbytes += len(line)
                biggest = max(biggest, len(line))
    return {"lines": lines, "bytes": nbytes, "mean": nbytes / max(1, lines), "max": biggest}


if __name__ == "__main__":  # pragma: no cover - manual use
    import sys

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/out/corpus-test")
    print(corpus(target, int(float(sys.argv[2]) * 1e6) if len(sys.argv) > 2 else 20_000_000))
    print(line_stats(target))
    _ = os
