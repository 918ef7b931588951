"""Cold ``scan`` speed per byte: Gemini CLI session files against the Claude Code + Codex corpus of
bench/gen.py, the same size, in one run (issue 35).

    python3 bench/gemini_scan.py [--size 60MB] [--repeat 3]

The Gemini corpus is made here, in the shape Gemini CLI 0.61.0 writes (tests/fixtures/gemini_cli):
a metadata line, the ``$set messages`` of the session context, then turns of a prompt, answers with
``toolCalls`` written twice (the same id, last wins), tool results, ``$set lastUpdated`` after each
message; now and then a resume (a second metadata line, ``$set sessionId``, the whole history again
in one ``$set messages``), an Esc with its rollback, a subagent file. Both corpora live under
``bench/out/`` (git-ignored). Prints, per corpus: bytes, the best wall time of ``scan --json`` and
of a bare ``orjson.loads`` loop over the same lines, MB/s of each and their ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gen  # noqa: E402
from run import LOOP, parse_size  # noqa: E402

OUT = HERE / "out"


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def _line(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def gemini_session(rng: random.Random, text, root: Path, project: str, t: float, target: int) -> int:
    sid = str(uuid.UUID(int=rng.getrandbits(128)))
    chats = root / project / "chats"
    chats.mkdir(parents=True, exist_ok=True)
    path = chats / f"session-{time.strftime('%Y-%m-%dT%H-%M', time.gmtime(t))}-{sid[:8]}.jsonl"
    meta = {"sessionId": sid, "projectHash": uuid.uuid4().hex * 2, "startTime": _iso(t), "lastUpdated": _iso(t),
            "kind": "main"}
    ctx = {"id": uuid.uuid4().hex, "timestamp": _iso(t), "type": "user",
           "content": [{"text": "<session_context>\nThis is the Gemini CLI.\n- **Workspace Directories:**\n"
                                f"  - /home/dev/{project}\n" + text.sized(800)}]}
    history = [ctx]
    out = [_line(meta), _line({"$set": {"messages": history}})]
    size = sum(map(len, out))

    def add(msg: dict) -> None:
        nonlocal size
        for obj in (msg, {"$set": {"lastUpdated": msg["timestamp"]}}):
            b = _line(obj)
            out.append(b)
            size += len(b)

    while size < target:
        t += rng.uniform(5, 60)
        prompt = {"id": str(uuid.uuid4()), "timestamp": _iso(t), "type": "user", "content": [{"text": text.sized(200)}]}
        add(prompt)
        history.append(prompt)
        if rng.random() < 0.05:  # Esc: the cancel, then a rollback of the prompt
            add({"id": str(uuid.uuid4()), "timestamp": _iso(t + 1), "type": "info", "content": "Request cancelled."})
            history.pop()
            b = _line({"$set": {"messages": history[-50:]}})
            out.append(b)
            size += len(b)
            continue
        for _ in range(rng.choice((0, 0, 1, 2, 4))):
            t += rng.uniform(1, 20)
            g = {"id": str(uuid.uuid4()), "timestamp": _iso(t), "type": "gemini", "content": text.sized(300),
                 "thoughts": [], "tokens": {"input": 9000, "output": 200, "cached": 0, "thoughts": 0, "tool": 0,
                                            "total": 9200}, "model": "gemini-3.8-flash"}
            add(g)
            g = dict(g, toolCalls=[{"id": "run_shell_command_" + uuid.uuid4().hex[:8], "name": "run_shell_command",
                                    "args": {"command": "ls"}, "status": "success", "timestamp": _iso(t + 2),
                                    "resultDisplay": text.sized(1500)}])
            add(g)
            add({"id": str(uuid.uuid4()), "timestamp": _iso(t + 3), "type": "user",
                 "content": [{"functionResponse": {"id": "x", "name": "run_shell_command",
                                                   "response": {"output": text.sized(1500)}}}]})
        t += rng.uniform(1, 30)
        final = {"id": str(uuid.uuid4()), "timestamp": _iso(t), "type": "gemini", "content": text.sized(1200),
                 "thoughts": [], "tokens": {"input": 9000, "output": 300, "cached": 0, "thoughts": 0, "tool": 0,
                                            "total": 9300}, "model": "gemini-3.8-flash"}
        add(final)
        history += [final]
        if rng.random() < 0.03:  # a resume: the whole history again in one line
            for obj in (dict(meta, startTime=_iso(t + 60)), {"$set": {"sessionId": sid}},
                        {"$set": {"messages": history}}):
                b = _line(obj)
                out.append(b)
                size += len(b)
    path.write_bytes(b"".join(out))
    return size


def gemini_corpus(out: Path, total: int, seed: int = 35) -> Path:
    root = out / ".gemini" / "tmp"
    stamp = out / "corpus.json"
    meta = {"bytes": total, "seed": seed, "v": 1}
    if stamp.is_file() and json.loads(stamp.read_text()) == meta:
        return root
    subprocess.run(["rm", "-rf", str(out)], check=True)
    rng = random.Random(seed)
    text = gen.Text(rng)
    written, n, t0 = 0, 0, 1_777_000_000.0
    while written < total:
        size = int(min(20e6, rng.lognormvariate(gen._ln(300_000), 1.2)))
        written += gemini_session(rng, text, root, rng.choice(("api", "web", "exporter", "infra")), t0 + n * 50,
                                  min(size, total - written + 1))
        n += 1
    stamp.write_text(json.dumps(meta))
    return root


def best(argv: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=parse_size, default=parse_size("60MB"))
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    corpora = {"gemini_cli": gemini_corpus(OUT / "gemini", a.size)}
    gen.corpus(OUT / "gemini-cmp-mixed", a.size)
    corpora["claude_code+codex"] = OUT / "gemini-cmp-mixed"
    exe = [sys.executable, "-m", "coding_agent_exporter", "scan", "--json"]
    print(f"{'corpus':20} {'MB':>7} {'scan s':>7} {'scan MB/s':>10} {'orjson MB/s':>12} {'orjson/scan':>12}")
    for name, root in corpora.items():
        nbytes = sum(p.stat().st_size for p in root.rglob("*.jsonl"))
        scan = best(exe + [str(root)], a.repeat)
        loop = min(float(subprocess.run([sys.executable, "-c", LOOP, str(root), "orjson"], capture_output=True,
                                        text=True, check=True).stdout.split()[0]) for _ in range(a.repeat))
        print(f"{name:20} {nbytes / 1e6:7.1f} {scan:7.2f} {nbytes / scan / 1e6:10.1f} {nbytes / loop / 1e6:12.1f} "
              f"{loop / scan:12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
