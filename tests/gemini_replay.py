"""Replays a recorded Gemini CLI run (tests/fixtures/gemini_cli/<run>, made by extract.py there) through
the exporter's own reading path on a simulated clock: the file table and its tailers, the session
store, the hook evidence (``Evidence.apply_hooks``: the transcript is read before each hook) and the
page decision (``Pager``), at the recorded times. Each session file grows to the size it had at each
recorded change (with that change's modification time), each hook body is applied at the time it ran,
and the state is evaluated every ``STEP`` seconds in between."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from coding_agent_exporter.evidence import Evidence
from coding_agent_exporter.files import FileTable
from coding_agent_exporter.hooks import parse
from coding_agent_exporter.metrics import Metrics
from coding_agent_exporter.pager import Pager, Rules
from coding_agent_exporter.reducer import Timing
from coding_agent_exporter.roots import Roots
from coding_agent_exporter.store import SessionStore

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gemini_cli"
RECORDED_TMP = "/home/dev/.gemini/tmp/"
STEP = 0.1
#: The time rules of the replays (seconds): a finished-looking file settles in 1.5 s (the screens are
#: captured 2 s after an answer), a rolled-back ``-p`` turn stands as an error 1.5 s after the rollback.
TIMING = Timing(inferred_settle=1.5, marker_wait=30.0, stall_after=600.0, retry_grace=1.5)
PAGE_SETTLE = 1.0


def runs() -> list[str]:
    return sorted(p.name for p in FIXTURES.iterdir() if (p / "timeline.json").is_file())


@dataclass
class Replay:
    """What a replay saw: ``snaps`` label → the session's row at that screen (``state``, ``reason``,
    ``error_kind``; ``None`` when no session is shown); ``pages`` the page kinds in order;
    ``final`` the row after the last event and a minute more."""

    snaps: dict = field(default_factory=dict)
    pages: list = field(default_factory=list)
    final: dict | None = None
    sessions: int = 0


def _row(store: SessionStore, now: float) -> dict | None:
    rows = [r for r in store.rows(now) if r["provider"] == "gemini_cli"]
    if not rows:
        return None
    r = rows[0]
    out = {"state": r["state"]}
    if r["waiting_for"]:
        out["reason"] = r["waiting_for"]["reason"]
    if r["error_kind"]:
        out["error_kind"] = r["error_kind"]
    return out


def replay(run: str, root: Path, hooks: bool, timing: Timing = TIMING, tail: float = 60.0) -> Replay:
    """Replay fixture ``run`` into the folder ``root`` (it becomes ``~/.gemini/tmp``); ``hooks``: apply
    the recorded hook bodies too (else the files alone)."""
    src = FIXTURES / run
    tl = json.loads((src / "timeline.json").read_text())
    t0 = tl["t0"]
    data = {str(p.relative_to(src / "files")): p.read_bytes() for p in (src / "files").rglob("*.jsonl")}
    metrics = Metrics()
    store = SessionStore(metrics, timing, session_ttl=0)
    roots = Roots([("gemini_cli", root)])
    files = FileTable(store, 16 << 20, roots=roots)
    evidence = Evidence(store, files, roots, metrics)
    pager = Pager(Rules(settle_seconds=PAGE_SETTLE))
    out = Replay()
    clock = [t0 + tl["events"][0][0] - STEP]

    def advance(to: float) -> None:
        while clock[0] + STEP <= to:
            clock[0] += STEP
            step(clock[0])
        clock[0] = max(clock[0], to)
        step(clock[0])

    def step(now: float) -> None:
        transitions = store.evaluate(now)
        pager.observe(transitions, now)
        for p in pager.due(now):
            out.pages.append(p.kind)
            pager.sent(p, now)

    for ev in tl["events"]:
        t = t0 + ev[0]
        advance(t)
        kind = ev[1]
        if kind == "file":
            rel, size = ev[2], ev[3]
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            have = path.stat().st_size if path.exists() else 0
            with open(path, "ab") as f:
                f.write(data[rel][have:size])
            os.utime(path, (t, t))
            files.read(str(path), live=True)
        elif kind == "deleted":
            path = root / ev[2]
            if path.exists():
                path.unlink()
            files.read(str(path), live=True)
        elif kind == "hook" and hooks:
            body = dict(ev[2])
            if isinstance(body.get("transcript_path"), str):
                body["transcript_path"] = body["transcript_path"].replace(RECORDED_TMP, str(root) + "/")
            evidence.apply_hooks([parse("gemini_cli", json.dumps(body).encode(), t)])
        elif kind == "snap":
            step(t)
            out.snaps[ev[2]] = _row(store, t)
    advance(clock[0] + tail)
    out.final = _row(store, clock[0])
    out.sessions = len([s for s in store.sessions.values() if s.provider == "gemini_cli" and not s.hidden])
    return out


def backfill(run: str, root: Path) -> tuple[list[str], dict | None]:
    """Read the run's final files at once as history (a start-up backfill, nothing live) and evaluate a
    minute later: ``(page kinds, the session's row)``."""
    src = FIXTURES / run
    for p in (src / "files").rglob("*.jsonl"):
        dest = root / p.relative_to(src / "files")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(p.read_bytes())
    store = SessionStore(Metrics(), TIMING, session_ttl=0)
    files = FileTable(store, 16 << 20, roots=Roots([("gemini_cli", root)]))
    paths = sorted(str(p) for p in root.rglob("*.jsonl"))
    files.read_all([(p, "gemini_cli", root, 0) for p in paths], until={})
    tl = json.loads((src / "timeline.json").read_text())
    now = tl["t0"] + tl["events"][-1][0] + 60
    pager = Pager(Rules(settle_seconds=PAGE_SETTLE))
    pages = []
    for t in (now, now + 5, now + 60):
        pager.observe(store.evaluate(t), t)
        pages += [p.kind for p in pager.due(t)]
    return pages, _row(store, now + 60)


_ISO = __import__("re").compile(rb'"(20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z"')


def shifted(data: bytes, delta: float) -> bytes:
    """``data`` with every ISO timestamp moved by ``delta`` seconds (the same length: offsets hold)."""
    from datetime import datetime, timedelta, timezone

    def move(m):
        t = datetime.strptime(m.group(1).decode(), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc)
        return b'"' + (t + timedelta(seconds=delta)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3].encode() + b'Z"'

    return _ISO.sub(move, data)


def live(run: str, root: Path, exporter, post, state) -> dict:
    """Play fixture ``run`` at its recorded pace against a running exporter: file changes written at
    their times (timestamps moved to now), hook bodies handed to ``post(body)``; ``state(label)`` is
    read at each screen. Returns ``{screen: state}``."""
    import time as _time

    src = FIXTURES / run
    tl = json.loads((src / "timeline.json").read_text())
    start = _time.time() + 0.5
    delta = start - (tl["t0"] + tl["events"][0][0])
    data = {str(p.relative_to(src / "files")): shifted(p.read_bytes(), delta) for p in (src / "files").rglob("*.jsonl")}
    snaps = {}
    first = tl["events"][0][0]
    for ev in tl["events"]:
        wait = start + ev[0] - first - _time.time()
        if wait > 0:
            _time.sleep(wait)
        if ev[1] == "file":
            path = root / ev[2]
            path.parent.mkdir(parents=True, exist_ok=True)
            have = path.stat().st_size if path.exists() else 0
            with open(path, "ab") as f:
                f.write(data[ev[2]][have:ev[3]])
        elif ev[1] == "deleted":
            (root / ev[2]).unlink(missing_ok=True)
        elif ev[1] == "hook":
            body = dict(ev[2])
            body["transcript_path"] = body["transcript_path"].replace(RECORDED_TMP, str(root) + "/")
            post(body)
        elif ev[1] == "snap":
            snaps[ev[2]] = state(ev[2])
    return snaps
