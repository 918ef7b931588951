"""The typed projection decoders (``exporter.projection``) and the forked
scan workers change speed, never results: on every fixture file the fast
path gives the same events and the same session states as the plain orjson
path, and a scan split over processes equals a scan in one."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from exporter import scan as scan_mod
from exporter.config import Config
from exporter.decode import LineError, decode_line
from exporter.metrics import Metrics
from exporter.providers import claude_code, claude_code_fast, codex, codex_fast
from exporter.reducer import Timing
from exporter.store import SessionStore
from harness import FIXTURES

FILES = sorted(FIXTURES.rglob("*.jsonl"))
PROVIDERS = [(claude_code, claude_code_fast), (codex, codex_fast)]


def _events(path: Path, provider: str, fast: bool):
    """Every event the store's decoder projects from ``path``, and the rows."""
    store = SessionStore(Metrics(), Timing(3.0, 6.0, 60.0), 16 << 20, max_sessions=0, session_ttl=0)
    store.fast_decode = fast
    assert store.track(str(path), provider, path.parent)
    f = store.files[str(path)]
    seen = []
    project = f.decoder.project

    def spy(obj):
        ev = project(obj)
        seen.append(None if ev is None else (ev.kind, ev.ts, ev.ident, ev.sidechain, ev.turn_id, ev.message_id,
                                             ev.detail, ev.error_kind, ev.duration, ev.expects_marker,
                                             ev.session_id, ev.cwd, ev.subagent, ev.parent_id, ev.text))
        return ev

    f.decoder.project = spy
    while store.refresh(str(path), live=False, final=True):
        pass
    at = time.time() + 86400
    store.evaluate(at)
    rows = store.rows(at)
    for r in rows:
        r.pop("last_write")
    m = {(s.name, tuple(sorted(s.labels.items()))): s.value
         for fam in store.metrics.registry.collect() for s in fam.samples if not s.name.endswith("_created")}
    return seen, rows, m


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(FIXTURES)) for p in FILES])
@pytest.mark.parametrize("provider", ["claude_code", "codex"])
def test_fast_path_equals_orjson_path(path, provider):
    slow = _events(path, provider, fast=False)
    fast = _events(path, provider, fast=True)
    assert fast[0] == slow[0]  # events, line by line
    assert fast[1] == slow[1]  # session states and counters
    assert fast[2] == slow[2]  # every metric


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(FIXTURES)) for p in FILES])
def test_fast_decoder_steps_aside_exactly_where_orjson_must_decide(path):
    """Per line: the fast decoder projects to the same event, or returns None
    (malformed, blank, or a shape it does not take) and the orjson path
    decides. It never accepts a line orjson rejects."""
    for mod, fast in PROVIDERS:
        d_slow, d_fast = mod.FileDecoder(), mod.FileDecoder()
        for line in path.read_bytes().split(b"\n"):
            try:
                full = decode_line(line)
            except LineError:
                full = None
            obj = fast.decode(line)
            if obj is None:
                if full is not None:
                    d_slow.project(full), d_fast.project(full)  # keep both decoders' state in step
                continue
            assert full is not None, line[:200]
            assert d_fast.project(obj) == d_slow.project(full)


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(FIXTURES)) for p in FILES])
def test_fast_decoder_on_non_ascii_text_escaped(path):
    """Non-ASCII lines go to orjson; written with ``\\u`` escapes (as some
    writers do) they are ASCII and take the typed path: same events."""
    for mod, fast in PROVIDERS:
        d_slow, d_fast = mod.FileDecoder(), mod.FileDecoder()
        for line in path.read_bytes().split(b"\n"):
            try:
                full = decode_line(line)
            except LineError:
                continue
            if full is None or line.isascii():
                continue
            escaped = json.dumps(full, ensure_ascii=True).encode()
            obj = fast.decode(escaped)
            assert obj is not None
            assert d_fast.project(obj) == d_slow.project(decode_line(escaped))


@pytest.mark.parametrize("line", [
    b'{"type":"user","uuid":"u1","timestamp":"2026-05-01T10:00:00Z","x":"\xff\xfe"}',  # bad UTF-8, skipped field
    b'{"type":"user","uuid":"u1","timestamp":"2026-05-01T10:00:00Z","x":"\xed\xa0\x80"}',  # encoded surrogate
    b'{"type":"user","uuid":"u1","timestamp":"2026-05-01T10:00:00Z","x":"\xc0\xaf"}',  # overlong
    b'{"type":"user","x":' + b"[" * 1010 + b"]" * 1010 + b"}",  # deeper than msgspec's limit, fine for orjson
    b'[1,2]', b'', b'   ', b'\x00\x00', b'{"type":"user"', b'{"a":1}{"b":2}',
])
def test_fast_decoders_defer_what_they_cannot_judge(line):
    assert claude_code_fast.decode(line) is None
    assert codex_fast.decode(line) is None


@pytest.mark.parametrize("line", [
    b'{"type":"assistant","message":"not an object"}',
    b'{"type":"user","message":{"content":[1,"x"]}}',
    b'{"type":"progress","data":"not an object"}',
])
def test_claude_fast_decoder_defers_unexpected_shapes(line):
    assert claude_code_fast.decode(line) is None


@pytest.mark.parametrize("line", [
    b'{"timestamp":"2026-05-01T10:00:00Z","type":"event_msg","payload":"not an object"}',
    b'{"timestamp":"2026-05-01T10:00:00Z","type":"response_item","payload":{"type":"message","content":[1]}}',
])
def test_codex_fast_decoder_defers_unexpected_shapes(line):
    assert codex_fast.decode(line) is None


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
            out = root / "claude" / f"-p{i % 3}" / f"s{i:02d}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, out)
    return root


def test_parallel_scan_equals_one_process(tmp_path, monkeypatch):
    root = _layout(tmp_path)
    at = time.time() + 3600
    one, store = scan_mod.scan([str(root)], Config(), at=at, workers=1)
    assert store is not None and one
    monkeypatch.setattr(scan_mod, "PARALLEL_MIN_BYTES", 0)
    two, store2 = scan_mod.scan([str(root)], Config(), at=at, workers=2)
    assert store2 is None  # the workers did the reading
    assert two == one


def test_parallel_scan_falls_back_when_a_session_spans_workers(tmp_path, monkeypatch):
    """Files of one session read by two workers (a layout the grouping did not
    foresee): detected, and the result stays right."""
    root = _layout(tmp_path)
    at = time.time() + 3600
    # a subagent file away from its session's main file
    sub = next(root.rglob("subagents/*.jsonl"))
    monkeypatch.setattr(scan_mod, "_group_key", lambda fp, prov: "sub" if fp == str(sub) else "rest")
    one, _ = scan_mod.scan([str(root)], Config(), at=at, workers=1)
    monkeypatch.setattr(scan_mod, "PARALLEL_MIN_BYTES", 0)
    outcomes = []
    parallel = scan_mod._parallel

    def spy(*a, **k):
        outcomes.append(parallel(*a, **k))
        return outcomes[-1]

    monkeypatch.setattr(scan_mod, "_parallel", spy)
    two, store = scan_mod.scan([str(root)], Config(), at=at, workers=2)
    assert outcomes == [None] and store is not None  # detected, and scanned again in one process
    assert two == one
