"""Tokens and cost (exporter.usage) against ccusage on the real agents' files,
and the counting rules a user sees on /metrics and in ``scan``.

ccusage 18.0.11 and @ccusage/codex 18.0.11 come from npm (installed once under
``.agents/ccusage``, git-ignored) and run ``--offline`` (their bundled LiteLLM
prices). Every real Claude Code and Codex file in ``../shared/transcripts``
and ``../shared/live-agents`` (skipped without it), laid out as the agents
lay them out, is read by both: token sums per model and type must be equal,
cost per model within 3 % where both price the model. Where ccusage is wrong,
the test names the file and line (``CCUSAGE_WRONG``) and compares the rest.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from coding_agent_exporter import usage as usage_mod

ROOT = Path(__file__).resolve().parent.parent
#: Copies of the real files: ``transcripts`` (shared/transcripts) and ``live-agents`` (shared/live-agents'
#: transcripts and rollouts, as the agents wrote them offline against a stand-in model).
SHARED = ROOT / "tests" / "fixtures"
CCUSAGE_DIR = Path(os.environ.get("CAE_CCUSAGE_DIR", ROOT / ".agents" / "ccusage"))
CCUSAGE = "18.0.11"


def _ccusage() -> Path:
    """ccusage's folder (npm install once); skips without npm."""
    bin_dir = CCUSAGE_DIR / "node_modules"
    if not (bin_dir / "ccusage" / "dist" / "index.js").exists() or not (bin_dir / "@ccusage" / "codex").exists():
        if shutil.which("npm") is None or shutil.which("node") is None:
            pytest.skip("npm/node not installed")
        CCUSAGE_DIR.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(CCUSAGE_DIR),
                            f"ccusage@{CCUSAGE}", f"@ccusage/codex@{CCUSAGE}"], capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr
    return bin_dir


def _claude_layout(dest: Path) -> Path:
    """``<CLAUDE_CONFIG_DIR>/projects/<project>/<session>.jsonl`` (subagents
    under ``<session>/subagents/``) from the shared transcripts and every live
    agent run's ``claude_projects``."""
    projects = dest / "claude" / "projects"
    for run in sorted((SHARED / "live-agents").glob("claude-code-*/*/claude_projects")):
        for proj in run.iterdir():
            shutil.copytree(proj, projects / f"{run.parent.name}{proj.name}")
    src = SHARED / "transcripts" / "claude_code"
    for i, f in enumerate(sorted(src.glob("*.jsonl"))):
        if "subagent" in f.name:
            continue
        proj = projects / f"-t{i}"
        proj.mkdir(parents=True)
        shutil.copyfile(f, proj / f.name)
        # that session's subagent files, where the shared folder has them
        stem = f.name.split("_")[0]
        for sub in sorted(src.glob(f"{stem}_subagent_agent-*.jsonl")):
            if sub.name.startswith(stem) and "session_start" in f.name:
                d = proj / f.stem / "subagents"
                d.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(sub, d / (sub.name.split("_subagent_")[1]))
    return dest / "claude"


def _codex_layout(dest: Path) -> Path:
    """``<CODEX_HOME>/sessions/YYYY/MM/DD/rollout-*.jsonl``."""
    sessions = dest / "codex" / "sessions"
    for f in sorted((SHARED / "live-agents").glob("codex-*/*/codex_sessions/**/*.jsonl")):
        out = sessions / f.relative_to(f.parents[3])
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, out)
    for i, f in enumerate(sorted((SHARED / "transcripts" / "codex").glob("*.jsonl"))):
        out = sessions / "2026" / "01" / "01" / f"rollout-2026-01-01T00-00-{i:02d}-{f.stem}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, out)
    return dest / "codex"


def _ours(path: Path) -> dict:
    """``scan --by day --json`` summed per model: ``{model: {type: n, "cost_usd": x}}``."""
    out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "scan", "--by", "day", "--json", str(path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "TZ": "UTC"})
    assert out.returncode == 0, out.stderr
    models: dict = {}
    for day in json.loads(out.stdout):
        for model, m in day["models"].items():
            got = models.setdefault(model, dict.fromkeys(usage_mod.TYPES, 0) | {"cost_usd": 0.0})
            for t in usage_mod.TYPES:
                got[t] += m[t]
            got["cost_usd"] = None if m["cost_usd"] is None or got["cost_usd"] is None else got["cost_usd"] + m["cost_usd"]
    return models


def _run(cmd: list, env: dict) -> dict:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "TZ": "UTC", **env})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _ours_by_day(path: Path) -> list:
    out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "scan", "--by", "day", "--json", str(path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "TZ": "UTC"})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _knows(dist: Path, model: str) -> bool:
    """ccusage's bundled prices name ``model`` itself: where they do not, it prices
    the model by a substring match (gpt-5.5 at gpt-5's prices), which is a guess
    (CCUSAGE_WRONG), not a price."""
    return any(f'"{model}": {{' in f.read_text() for f in dist.glob("*.js"))


def _lines(root: Path, want):
    """``(file, line number, record)`` of every record of the ``.jsonl`` files under ``root`` that ``want``s."""
    for f in sorted(root.rglob("*.jsonl")):
        for n, line in enumerate(f.read_bytes().splitlines(), 1):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and want(obj):
                yield f, n, obj


def _one_hour_writes(obj) -> bool:
    u = (obj.get("message") or {}).get("usage") if isinstance(obj.get("message"), dict) else None
    return isinstance(u, dict) and bool((u.get("cache_creation") or {}).get("ephemeral_1h_input_tokens"))


def test_claude_code_equals_ccusage(tmp_path):
    nm = _ccusage()
    home = _claude_layout(tmp_path)
    got = _run(["node", str(nm / "ccusage" / "dist" / "index.js"), "daily", "--json", "--offline"],
               {"CLAUDE_CONFIG_DIR": str(home)})
    theirs: dict = {}
    for day in got["daily"]:
        for b in day["modelBreakdowns"]:
            m = theirs.setdefault(b["modelName"], [0, 0, 0, 0, 0.0])
            for i, k in enumerate(("inputTokens", "outputTokens", "cacheReadTokens", "cacheCreationTokens", "cost")):
                m[i] += b[k]
    ours = _ours(home / "projects")
    assert theirs and set(ours) == set(theirs)
    for model, m in theirs.items():
        o = ours[model]
        assert [o["input"], o["output"], o["cache_read"], o["cache_write"]] == m[:4], model
    # CCUSAGE_WRONG: ccusage prices 1-hour cache writes (message.usage.cache_creation.ephemeral_1h_input_tokens)
    # at the 5-minute price; Anthropic charges them 2x the input price (genai-prices: cache_write_1h_mtok).
    wrong = [(f.relative_to(home), n) for f, n, _ in _lines(home, _one_hour_writes)]
    assert wrong  # e.g. the live Claude Code 2.1.332 runs write 1 h cache entries
    # So the costs are compared on a copy without the 1 h split, where both price every cache write alike.
    flat = tmp_path / "flat"
    for f in home.rglob("*.jsonl"):
        out = flat / f.relative_to(home)
        out.parent.mkdir(parents=True, exist_ok=True)
        rows = []
        for line in f.read_bytes().splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                rows.append(line)
                continue
            if isinstance(obj, dict) and _one_hour_writes(obj):
                obj["message"]["usage"].pop("cache_creation")
                line = json.dumps(obj).encode()
            rows.append(line)
        out.write_bytes(b"\n".join(rows) + b"\n")
    flat_ours = _ours(flat / "projects")
    compared = 0
    for model, m in theirs.items():
        if m[4] == 0 or flat_ours[model]["cost_usd"] is None or not _knows(nm / "ccusage" / "dist", model):
            continue  # a model ccusage's bundled prices do not know (it says 0) or ours do not
        assert flat_ours[model]["cost_usd"] == pytest.approx(m[4], rel=0.03), model
        compared += 1
        assert ours[model]["cost_usd"] >= flat_ours[model]["cost_usd"] - 1e-9  # 1 h writes cost more, never less
    assert compared >= 5


def test_codex_equals_ccusage(tmp_path):
    nm = _ccusage()
    home = _codex_layout(tmp_path)
    got = _run(["node", str(nm / "@ccusage" / "codex" / "dist" / "index.js"), "daily", "--json", "--offline"],
               {"CODEX_HOME": str(home)})
    theirs: dict = {}
    for day in got["daily"]:
        for model, b in day["models"].items():
            # ccusage names a token_count before any model was known "gpt-5" (isFallback): a guess. Ours: unknown.
            m = theirs.setdefault("unknown" if b["isFallback"] else model, [0, 0, 0, 0])
            for i, v in enumerate((b["inputTokens"] - b["cachedInputTokens"], b["outputTokens"],
                                   b["cachedInputTokens"], b["reasoningOutputTokens"])):
                m[i] += v
    # CCUSAGE_WRONG: a token_count whose totals equal the previous one's (Codex writes one again with new
    # rate limits) is no new response; ccusage adds its last_token_usage again. Those lines, and the model
    # ccusage gave them, taken back out of its sums:
    repeats = []
    for f in sorted(home.rglob("*.jsonl")):
        model, prev = None, None
        for n, line in enumerate(f.read_bytes().splitlines(), 1):
            obj = json.loads(line)
            payload = obj.get("payload") if isinstance(obj.get("payload"), dict) else {}
            if obj.get("type") == "turn_context" and payload.get("model"):
                model = payload["model"]
            info = payload.get("info") if payload.get("type") == "token_count" else None
            if obj.get("type") != "event_msg" or not isinstance(info, dict):
                continue
            total, last = info.get("total_token_usage"), info.get("last_token_usage")
            model = model or "unknown"
            if total is not None and total == prev and last:
                repeats.append((f.relative_to(home), n))
                m = theirs[model]
                cached = last.get("cached_input_tokens", 0)
                for i, v in enumerate((last["input_tokens"] - cached, last["output_tokens"], cached,
                                       last.get("reasoning_output_tokens", 0))):
                    m[i] -= v
            prev = total if total is not None else prev
    assert repeats  # e.g. v0.58_cli_session.lines1-20.jsonl line 14
    ours = _ours(home / "sessions")
    theirs = {k: v for k, v in theirs.items() if any(v)}
    assert theirs and set(ours) == set(theirs)
    for model, m in theirs.items():
        o = ours[model]
        assert [o["input"], o["output"], o["cache_read"], o["reasoning"]] == m, model
    # Cost: ccusage gives it per day; days of one priced model with no repeated token_count.
    from datetime import datetime
    days = {d["date"]: d for d in _ours_by_day(home / "sessions")}
    repeat_days = set()
    for f, n in repeats:
        obj = json.loads((home / f).read_bytes().splitlines()[n - 1])
        repeat_days.add(obj["timestamp"][:10])
    compared = 0
    for day in got["daily"]:
        date = datetime.strptime(day["date"], "%b %d, %Y").strftime("%Y-%m-%d")
        (model, b), = day["models"].items() if len(day["models"]) == 1 else ((None, None),)
        if model is None or b["isFallback"] or not day["costUSD"] or date in repeat_days:
            continue
        ours_cost = days[date]["models"][model]["cost_usd"]
        if ours_cost is None or not _knows(nm / "@ccusage" / "codex" / "dist", model):
            continue
        assert ours_cost == pytest.approx(day["costUSD"], rel=0.03), (date, model)
        compared += 1
    assert compared >= 1


def test_edges_are_the_price_data_tiers():
    """EDGES (the prompt-size buckets of exporter.usage) hold every tier start of the pinned data."""
    from genai_prices import data

    starts = set()
    for p in data.providers:
        for m in p.models:
            prices = m.prices if isinstance(m.prices, list) else [m.prices]
            for mp in prices:
                mp = getattr(mp, "prices", mp)
                for v in vars(mp).values():
                    for t in getattr(v, "tiers", ()) or ():
                        starts.add(t.start)
    assert tuple(sorted(starts)) == usage_mod.EDGES


def test_take_buckets_every_prompt_size_as_bisect_does():
    """take() tells the first tiers inline (a C call costs more than the compares): the bucket of
    every prompt size around each edge is bisect_left(EDGES, size), whichever part it takes."""
    import bisect
    import types

    sizes = sorted({max(0, e + d) for e in (0, *usage_mod.EDGES) for d in (-1, 0, 1)} | {10**7})
    store = types.SimpleNamespace(usage=usage_mod.Accounting())
    s = types.SimpleNamespace(usage=usage_mod.Tally())
    for i, n in enumerate(sizes):
        usage_mod.take(store, s, "claude_code", [(f"k{i}", f"m{i}", (n, 1, 0, 0, 0, 0))], False, 7200.5)
    got = {int(model[1:]): bucket for (model, bucket, hour) in s.usage.tokens}
    assert got == {i: bisect.bisect_left(usage_mod.EDGES, n) for i, n in enumerate(sizes)}
    assert {hour for (_m, _b, hour) in s.usage.tokens} == {2}
    assert list(s.usage.by_hour(usage_mod.Prices(overrides={}))) == [2]


# -- live: /metrics over a restart; one response on three lines; bad values ------------------------------
LIVE = SHARED / "live-agents" / "claude-code-2.1.332" / "tui_bash" / "claude_projects"


def _tokens(exp) -> dict:
    return {(dict(lbls)["model"], dict(lbls)["type"]): v for (n, lbls), v in exp.metrics().items()
            if n == "coding_agent_tokens_total" and v}


def _wait(pred, timeout=20.0):
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.1)
    return pred()


def test_counters_over_a_restart_equal_the_whole_file(tmp_path):
    """A real Claude Code 2.1.332 transcript appended in two halves, with a
    restart between: coding_agent_tokens_total ends equal to the whole file's
    totals (scan), each response once, although one response's lines may
    fall on both sides of the restart."""
    from harness import Exporter

    src = next(LIVE.rglob("*.jsonl"))
    whole = _ours(src)
    lines = src.read_bytes().splitlines(keepends=True)
    half = next(i for i, line in enumerate(lines) if b'"usage"' in line) + 1  # after a response's first line
    dest = tmp_path / "claude" / "projects" / src.parent.name / src.name
    dest.parent.mkdir(parents=True)
    exp = Exporter(tmp_path).start()
    try:
        dest.write_bytes(b"".join(lines[:half]))
        first = _wait(lambda: _tokens(exp))
        assert first
    finally:
        exp.stop()
    exp = Exporter(tmp_path).start()
    try:
        assert _tokens(exp) == first  # the saved counts go on (the first half is not counted again)
        with open(dest, "ab") as f:
            f.write(b"".join(lines[half:]))
        want = {(m, t): v for m, row in whole.items() for t, v in row.items() if t != "cost_usd" and v}
        assert _wait(lambda: _tokens(exp) == want), (_tokens(exp), want)
        cost = exp.value("coding_agent_cost_usd_total")
        assert cost == pytest.approx(sum(r["cost_usd"] or 0 for r in whole.values()))
        assert exp.value("coding_agent_session_cost_usd") == pytest.approx(cost)
    finally:
        exp.stop()


def _assistant(i: int, usage: dict, block: dict, msg="msg_live1", req="req_live1") -> bytes:
    return json.dumps({"type": "assistant", "uuid": f"00000000-0000-4000-8000-00000000000{i}",
                       "sessionId": "11111111-2222-4333-8444-555555555555", "timestamp": f"2026-12-01T10:00:0{i}.000Z",
                       "cwd": "/w/p", "requestId": req, "message": {"id": msg, "model": "claude-sonnet-4-6",
                       "role": "assistant", "content": [block], "usage": usage}}).encode() + b"\n"


def test_one_response_on_three_lines_counts_once_and_bad_values_count_nothing(tmp_path):
    from harness import Exporter

    u = {"input_tokens": 10, "output_tokens": 20, "cache_read_input_tokens": 300, "cache_creation_input_tokens": 40}
    dest = tmp_path / "claude" / "projects" / "-w-p" / "11111111-2222-4333-8444-555555555555.jsonl"
    dest.parent.mkdir(parents=True)
    exp = Exporter(tmp_path).start()
    try:
        with open(dest, "ab") as f:
            for i, block in enumerate(({"type": "thinking", "thinking": ""}, {"type": "text", "text": "ok"},
                                       {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}})):
                f.write(_assistant(i, u, block))
        want = {("claude-sonnet-4-6", "input"): 10, ("claude-sonnet-4-6", "output"): 20,
                ("claude-sonnet-4-6", "cache_read"): 300, ("claude-sonnet-4-6", "cache_write"): 40}
        assert _wait(lambda: _tokens(exp) == want), _tokens(exp)
        with open(dest, "ab") as f:
            for i, bad in enumerate(({**u, "output_tokens": -5}, {**u, "input_tokens": "12"},
                                     {**u, "cache_read_input_tokens": 10**12}, {"output_tokens": 3}), 3):
                f.write(_assistant(i, bad, {"type": "text", "text": "x"}, msg=f"msg_bad{i}", req=f"req_bad{i}"))
        assert _wait(lambda: exp.value("coding_agent_transcript_parse_errors_total", reason="bad_usage") == 4)
        assert _tokens(exp) == want  # never moved by a bad value
    finally:
        exp.stop()


@pytest.mark.parametrize("include_cost", [False, True])
def test_completion_page_says_what_the_turn_cost(tmp_path, include_cost):
    """``alerts.include_cost`` (off by default): the completion page names the
    turn's cost; without it the page has no cost line."""
    from harness import Exporter, Receiver

    rx = Receiver()
    sid = "11111111-2222-4333-8444-555555555555"
    dest = tmp_path / "claude" / "projects" / "-w-p" / f"{sid}.jsonl"
    dest.parent.mkdir(parents=True)
    cfg = {"alerts": {"include_cost": True}} if include_cost else {}
    exp = Exporter(tmp_path, cfg, receiver=rx).start()
    try:
        prompt = {"type": "user", "uuid": "00000000-0000-4000-8000-0000000000aa", "sessionId": sid, "cwd": "/w/p",
                  "timestamp": "2026-12-01T10:00:00.000Z", "message": {"role": "user", "content": "hi"}}
        u = {"input_tokens": 1000, "output_tokens": 2000, "cache_read_input_tokens": 0,
             "cache_creation_input_tokens": 0}
        line = json.loads(_assistant(1, u, {"type": "text", "text": "done"}))
        line["message"]["stop_reason"] = "end_turn"
        with open(dest, "ab") as f:
            f.write(json.dumps(prompt).encode() + b"\n" + json.dumps(line).encode() + b"\n")
        assert _wait(lambda: rx.messages)
        body = rx.messages[0].get("message", "") + json.dumps(rx.messages[0])
        # claude-sonnet-4-6: $3 / $15 per million tokens -> 0.003 + 0.03
        assert ("Cost: $0.03 session so far" in body) is include_cost, body
        assert ("Cost" in body) is include_cost
    finally:
        exp.stop()
        rx.close()


def test_pinned_library_version():
    from importlib.metadata import version

    assert usage_mod.LIBRARY_VERSION == version(usage_mod.LIBRARY)
    assert f'"{usage_mod.LIBRARY}=={usage_mod.LIBRARY_VERSION}"' in (ROOT / "pyproject.toml").read_text()


def test_the_daemon_prices_without_holding_the_library(tmp_path):
    """``Prices.isolate`` (set by ``run``): rates come from a child process, equal
    to the library's, and the exporter never imports genai-prices (about 25 MB
    it would hold for good: idle RSS with 500 sessions 65 MB → 48 MB)."""
    model = "claude-sonnet-4-5-20250929"
    code = f"""
import json, sys
from coding_agent_exporter import usage
usage.Prices.isolate = True
p = usage.Prices(cache_path={str(tmp_path / 'price-cache.json')!r})
p.prefetch([{model!r}, "no-such-model-xyz"])
print(json.dumps([p.rates({model!r}), p.rates("no-such-model-xyz"), "genai_prices" in sys.modules]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    rates, none, imported = json.loads(out.stdout)
    assert rates == usage_mod._from_library(model) and rates[0][0] > 0
    assert none is None and imported is False
