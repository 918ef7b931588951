"""The forked scan workers change speed, never results: a scan split over
processes equals a scan in one."""

from __future__ import annotations

import shutil
import time
from pathlib import Path


from coding_agent_exporter import parallel as parallel_mod
from coding_agent_exporter import scan as scan_mod
from coding_agent_exporter.files import make_reader
from coding_agent_exporter.config import Config
from harness import FIXTURES


def _layout(dest: Path) -> Path:
    """Every fixture transcript and case laid out as the agents do."""
    root = dest / "corpus"
    for i, f in enumerate(sorted(FIXTURES.rglob("*.jsonl"))):
        text = f.read_bytes()
        if b'"session_meta"' in text or b'"payload"' in text or "codex" in f.parts:
            out = root / "codex" / "2026" / "05" / "01" / f"rollout-2026-05-01T10-00-{i:02d}-{f.stem[:30]}.jsonl"
        elif "subagent" in f.name:  # a subagent of the session before it
            out = root / "claude" / f"-p{(i - 1) % 3}" / f"s{i - 1:02d}" / "subagents" / f"agent-{f.stem[-7:]}.jsonl"
        else:
            # the files of one case (its parts, a lead and its teammates) share a session: one project folder
            group = i if "cases" not in f.parts else sum(f.name.split("_")[0].encode())
            out = root / "claude" / f"-p{group % 3}" / f"s{i:02d}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, out)
    return root


def test_parallel_scan_equals_one_process(tmp_path, monkeypatch):
    root = _layout(tmp_path)
    at = time.time() + 3600
    one, store = scan_mod.scan([str(root)], Config(), at=at, workers=1)
    assert store is not None and one
    monkeypatch.setattr(parallel_mod, "PARALLEL_MIN_BYTES", 0)
    two, store2 = scan_mod.scan([str(root)], Config(), at=at, workers=2)
    # (the fixtures hold copies of one transcript in two folders, which the split reads in one process:
    # test_parallel_scan_copy_across_workers; test_start_up_read_in_workers_equals_one_process has the workers read)
    assert two == one


def test_parallel_scan_copy_across_workers(tmp_path, monkeypatch):
    """One file copied into two project folders (two workers' shards): each
    response is one session's (the first read), as in one process; the split
    notices the shared responses and reads in one process."""
    src = FIXTURES / "transcripts" / "claude_code" / "v1.0.98_complete_session.jsonl"
    for i in range(2):
        (tmp_path / "claude" / f"-p{i}").mkdir(parents=True)
        shutil.copyfile(src, tmp_path / "claude" / f"-p{i}" / f"s{i}.jsonl")
    one, _ = scan_mod.scan([str(tmp_path)], Config(), workers=1)
    monkeypatch.setattr(parallel_mod, "PARALLEL_MIN_BYTES", 0)
    two, store2 = scan_mod.scan([str(tmp_path)], Config(), workers=2)
    assert two == one and store2 is not None
    assert sorted(bool(r["usage"]) for r in one) == [False, True]  # the copy's responses were counted once


def test_parallel_scan_falls_back_when_a_session_spans_workers(tmp_path, monkeypatch):
    """Files of one session read by two workers (a layout the grouping did not
    foresee): detected, and the result stays right."""
    root = _layout(tmp_path)
    at = time.time() + 3600
    # a subagent file away from its session's main file
    sub = next(p for p in sorted(root.rglob("subagents/*.jsonl"))
               if p.parent.parent.with_suffix(".jsonl").exists())  # its session's main file is there
    monkeypatch.setattr(parallel_mod, "_group_key", lambda fp, prov: "sub" if fp == str(sub) else "rest")
    one, _ = scan_mod.scan([str(root)], Config(), at=at, workers=1)
    monkeypatch.setattr(parallel_mod, "PARALLEL_MIN_BYTES", 0)
    outcomes = []
    parallel = parallel_mod.scan_rows

    def spy(*a, **k):
        outcomes.append(parallel(*a, **k))
        return outcomes[-1]

    monkeypatch.setattr(parallel_mod, "scan_rows", spy)
    two, store = scan_mod.scan([str(root)], Config(), at=at, workers=2)
    assert outcomes == [None] and store is not None  # detected, and scanned again in one process
    assert two == one


def _state(reader) -> tuple:
    store, table = reader
    store.evaluate(time.time() + 3600)
    counters = {(name, tuple(sorted(smp.labels.items()))): smp.value
                for name in parallel_mod._READ_COUNTERS + ("files_watched",)
                for fam in getattr(store.metrics, name).collect() for smp in fam.samples}
    live = sorted((k, s.status.live, s.status.state, s.status.turn) for k, s in store.sessions.items())
    offsets = table.offsets()
    return store.rows(time.time() + 3600), counters, live, offsets


def _one_file_per_session(files):
    """``files`` less those whose session another file also builds (the
    fixtures hold the same transcript in several folders, parts of one case
    and subagent files): a session whose files land in two workers' shards
    is read again in one process (test_parallel_scan_copy_across_workers),
    and this test is about the workers' own reading."""
    store, table = make_reader(Config())
    table.read_all(files, None, {}, None, None)
    by: dict = {}
    for f in files:
        s = table.session_of(f[0])
        by.setdefault(id(s) if s is not None else f[0], []).append(f)
    return [fs[0] for fs in by.values() if len(fs) == 1]


def test_start_up_read_in_workers_equals_one_process(tmp_path, monkeypatch):
    """The daemon's start-up read goes the scan's way (forked workers whose
    files and sessions its store adopts): same sessions, states, news, counts
    and offsets as one process."""
    root = _layout(tmp_path)
    files = _one_file_per_session(scan_mod._discover([str(root)], Config(), None))
    # half the files were read by a previous run up to their middle: the rest is news
    until = {fp: (size // 2 if i % 2 else None) for i, (fp, _p, _r, size) in enumerate(files)}
    def make():
        return make_reader(Config())

    one = make()
    parallel_mod.read_start_up(*one, files, until, make, workers=1)
    monkeypatch.setattr(parallel_mod, "PARALLEL_MIN_BYTES", 0)
    calls = []
    fork = parallel_mod._fork
    monkeypatch.setattr(parallel_mod, "_fork", lambda *a, **k: calls.append(fork(*a, **k)) or calls[-1])
    two = make()
    parallel_mod.read_start_up(*two, files, until, make, workers=2)
    assert calls and calls[0] is not None  # the workers did the reading
    a, b = _state(one), _state(two)
    assert a[0] == b[0] and a[0]
    assert a[1] == b[1]
    assert a[2] == b[2] and any(live for _k, live, *_ in a[2])
    assert a[3] == b[3]
