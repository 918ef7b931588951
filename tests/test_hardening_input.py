"""Hardening, input: hostile bytes against the reader.

In-process properties (hypothesis) for the tailer and the line decoder, then
the running exporter fed hostile streams: random bytes, torn and glued
records, invalid UTF-8, NUL runs, lone surrogate escapes, raw U+2028/U+0085
inside strings, deep nesting, huge numbers, odd field types, a 100 MB single
line and a ~100 MB file with lines of every size (1 GiB with ``CAE_SLOW=1``).
Each bad line must be counted once under its reason, the exporter must not
crash or stop watching, the sessions around the junk must end in the right
state with the right pages, and the peak RSS must stay under the bound the
docs/hardening.md states.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coding_agent_exporter import tailer as tailer_mod
from coding_agent_exporter.decode import PARSE_ERROR_REASONS, LineError, decode_line
from coding_agent_exporter.tailer import Tailer
from harness import TRANSCRIPTS, claude_path, codex_path
from test_hardening_support import (SLOW, ClaudeSession, CodexSession, Daemon, Receiver, alerts_for, wait_for,
                                    write)

MIB = 1 << 20


# -- in-process properties ------------------------------------------------------
def _reference(data: bytes, max_line: int) -> tuple[list[bytes], int, int]:
    """Complete lines, oversized count and final offset for ``data`` read to
    its end (the tail stays unconsumed unless it is already oversized)."""
    parts = data.split(b"\n")
    tail = parts.pop()
    lines = [p for p in parts if len(p) <= max_line]
    over = sum(1 for p in parts if len(p) > max_line)
    offset = len(data) - len(tail)
    if len(tail) > max_line:
        over += 1
        offset = len(data)
    return lines, over, offset


_bytes = st.lists(st.sampled_from([b"\n", b"\x00", b"\xff", b"{", b"}", b'"', b"\r", b"\xe2\x80\xa8", b"a", b"ab",
                                   b"\n\n", b"x" * 40, b"\xc2\x85"]), max_size=120).map(b"".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=_bytes, cuts=st.lists(st.integers(0, 5000), max_size=8), chunk=st.integers(1, 64),
       budget=st.integers(1, 200), max_line=st.integers(1, 60))
def test_tailer_any_bytes_any_cuts(tmp_path, monkeypatch, data, cuts, chunk, budget, max_line):
    """Whatever the bytes, the cuts, the chunk size and the per-call budget,
    the tailer returns exactly the complete lines of the whole, in order,
    counts each oversized line once, and stops at the last newline."""
    monkeypatch.setattr(tailer_mod, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(tailer_mod, "READ_BUDGET_BYTES", budget)
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"")
    t = Tailer(str(path), max_line)
    lines, over, consumed = [], 0, 0
    prev = 0
    for c in sorted({min(c, len(data)) for c in cuts}) + [len(data)]:
        with open(path, "ab") as f:
            f.write(data[prev:c])
        prev = c
        while True:
            r = t.read()
            assert not r.reset
            lines += r.lines
            over += r.oversized
            consumed += r.bytes_read
            if not r.bytes_read:
                break
    ref_lines, ref_over, ref_offset = _reference(data, max_line)
    assert lines == ref_lines
    assert over == ref_over
    assert t.offset == consumed == ref_offset


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=_bytes, after=_bytes)
def test_tailer_rewrite_in_place_reads_again(tmp_path, before, after):
    """A file truncated and written again past the old offset is read again
    from the start, unless the last ``SIGNATURE_BYTES`` before the offset are
    unchanged (then what follows the offset is read, as for an append)."""
    path = tmp_path / "r.jsonl"
    path.write_bytes(before)
    t = Tailer(str(path), 1 << 20)
    while t.read().bytes_read:
        pass
    old = t.offset
    new = after + b"#" * max(0, old + 1 - len(after)) + b"\n"  # longer than the old offset
    path.write_bytes(new)
    got = []
    while True:
        r = t.read()
        got += r.lines
        if not r.bytes_read:
            break
    sig = max(0, old - tailer_mod.SIGNATURE_BYTES)
    if new[sig:old] == before[sig:old]:
        assert got == new[old:].split(b"\n")[:-1]
    else:
        assert got == new.split(b"\n")[:-1]


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 63), 2 ** 63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=20),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=5), c, max_size=4), max_leaves=15)


@settings(max_examples=300, deadline=None)
@given(line=st.binary(max_size=300).map(lambda b: b.replace(b"\n", b"")))
def test_decode_any_bytes_has_a_reason(line):
    """Any line decodes to an object, to None (blank), or fails with one of
    the documented reasons; NUL and invalid UTF-8 get theirs."""
    try:
        obj = decode_line(line)
    except LineError as e:
        assert e.reason in PARSE_ERROR_REASONS
        if b"\x00" in line:
            assert e.reason == "nul_bytes"
        else:
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                assert e.reason == "invalid_utf8"
        return
    assert obj is None or isinstance(obj, dict)
    if obj is None:
        assert not line.strip()


@settings(max_examples=200, deadline=None)
@given(obj=st.dictionaries(st.text(max_size=8), _json_values, max_size=6),
       sep=st.sampled_from(["\u2028", "\u2029", "\x85", "\r", "\t"]))
def test_decode_valid_objects_with_line_separators(obj, sep):
    """Valid objects, with raw U+2028/U+2029/U+0085 inside strings, decode to
    themselves (they are not line ends)."""
    obj = dict(obj, s=f"a{sep}b")
    line = json.dumps(obj, ensure_ascii=False).encode()
    assert b"\n" not in line
    assert decode_line(line) == json.loads(line)


def _real_records() -> list[tuple[str, dict]]:
    out = []
    for p in sorted(TRANSCRIPTS.glob("*/*.jsonl")) + sorted((TRANSCRIPTS.parent / "cases").glob("*.jsonl")):
        for line in p.read_bytes().split(b"\n"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(("codex" if "payload" in obj or "record_type" in obj else "claude_code", obj))
    return out


REAL_RECORDS = _real_records()
_odd = st.sampled_from([None, True, 0, -1, 2 ** 63 - 1, 1.5e308, "", "x", "end_turn", "text", "tool_use",
                        "2026-05-01T10:00:00Z", "0001-01-01T00:00:00+14:00", [], [1], [[]], {}, {"a": 1},
                        {"type": [1]}, [{"type": [1]}], [{"type": {}}], [{"type": "text", "text": [1]}],
                        [{"type": "text"}], {"subagent": [1]}, {"subagent": {"x": {"parent_thread_id": 1}}}])


def _paths(o, pre=()):
    yield pre
    if isinstance(o, dict):
        for k, v in o.items():
            yield from _paths(v, (*pre, k))
    elif isinstance(o, list):
        for i, v in enumerate(o):
            yield from _paths(v, (*pre, i))


@settings(max_examples=500, deadline=None)
@given(data=st.data())
def test_projection_survives_any_field_type(data):
    """Real records (every fixture line of both agents) with one to three
    fields replaced by a value of another JSON type: the provider projection
    never raises (an exception there used to drop the rest of a read batch
    and abort the start-up scan)."""
    from coding_agent_exporter.providers import PROVIDER_MODULES

    prov, rec = data.draw(st.sampled_from(REAL_RECORDS))
    obj = json.loads(json.dumps(rec))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(list(_paths(obj))))
        value = json.loads(json.dumps(data.draw(_odd)))
        if not path:
            continue
        cur = obj
        for k in path[:-1]:
            cur = cur[k]
        cur[path[-1]] = value
    for sidechain in (False, True):
        PROVIDER_MODULES[prov].FileDecoder(sidechain_file=sidechain).project(obj)


# -- hostile streams against the running exporter ------------------------------
MAX_LINE = 64 * 1024  # the line cap in these runs (oversized lines stay cheap)


def hostile_lines(rng: random.Random, real: list[bytes], n: int) -> list[tuple[bytes, str]]:
    """``n`` lines (without ``\\n``), each with the outcome it must have:
    a parse-error reason, ``blank``, ``oversized`` or ``ok`` (a valid object
    that changes no session state)."""
    out: list[tuple[bytes, str]] = []

    def torn():
        line = rng.choice(real)
        cut = rng.randrange(1, len(line) - 1)
        while cut > 1 and (line[cut] & 0xC0) == 0x80:  # cut on a character boundary
            cut -= 1
        return line[:cut], "invalid_json"

    makers = [
        torn,
        lambda: (rng.choice(real) + rng.choice(real), "invalid_json"),  # glued records
        # a lone surrogate escape (JSON.stringify cutting an emoji): kept through the standard library
        lambda: (b'{"type":"user","text":"\\u%04x"}' % rng.randrange(0xD800, 0xE000), "ok"),
        lambda: (b"[" * (d := rng.choice([1100, 5000, 30_000])) + b"]" * d, "invalid_json"),  # deeper than 1024
        lambda: (b'{"a":' * 2000 + b"1" + b"}" * 2000, "invalid_json"),
        # beyond a double: orjson rejects the line (invalid_json)
        lambda: (b'{"n":%de%d}' % (rng.randrange(1, 9), rng.randrange(309, 100_000)), "invalid_json"),
        lambda: (b'{"type":"x","n":' + b"9" * rng.randrange(310, 2000) + b"}", "invalid_json"),
        lambda: (b'{"n":NaN}', "invalid_json"),
        lambda: (b'{"a":1,}', "invalid_json"),
        lambda: (b"\xef\xbb\xbf" + rng.choice(real), "invalid_json"),  # byte order mark
        lambda: (bytes(rng.choice(b"#%&*<>?@^`|~") for _ in range(rng.randrange(1, 200))), "invalid_json"),
        lambda: (b'{"type":"user","m":"' + rng.choice([b"\xff", b"\xfe", b"\xc0\x80", b"\xed\xa0\x80", b"\xe2\x82",
                                                        b"\xf0\x9f\x98", b"\x80", b"\xf8\x88\x80\x80\x80"]) + b'"}',
                 "invalid_utf8"),
        lambda: (rng.choice(real)[:-3] + b"\xe2\x82" + b'"}', "invalid_utf8"),
        lambda: (bytes(rng.randrange(0x80, 0x100) for _ in range(rng.randrange(1, 300))) + b"\xff",
                 "invalid_utf8"),
        lambda: (b"\x00" * rng.randrange(1, 5000), "nul_bytes"),
        lambda: ((line := rng.choice(real))[: (k := rng.randrange(1, len(line)))] + b"\x00" * rng.randrange(1, 64)
                 + line[k:], "nul_bytes"),
        lambda: (os.urandom(rng.randrange(0, 400)).replace(b"\n", b"") + b"\x00", "nul_bytes"),
        lambda: (rng.choice([b"[]", b"[{}]", b"1", b'"str"', b"null", b"true", b"1.5e300", b'"\\u2028"',
                             b"[" * 500 + b"]" * 500, b'[{"type":"user","message":{"content":"x"}}]']), "not_object"),
        lambda: (rng.choice([b"", b" ", b"\t \r", b"\r", b"   \t"]), "blank"),
        lambda: (b'{"type":"progress","pad":"' + b"x" * rng.randrange(MAX_LINE, 3 * MAX_LINE) + b'"}', "oversized"),
        lambda: (b"\x00" * rng.randrange(MAX_LINE + 1, 2 * MAX_LINE), "oversized"),
        lambda: (os.urandom(MAX_LINE + 10).replace(b"\n", b"."), "oversized"),
        # valid objects that change no state: unknown types, odd field types,
        # raw separators inside strings, numbers beyond 64 bits, deep nesting
        lambda: (json.dumps({"type": "future-kind-%d" % rng.randrange(9), "s": "a\u2028b\x85c\u2029"},
                            ensure_ascii=False).encode(), "ok"),
        lambda: (b'{"type":"user","message":{"content":[{"type":[1]},{"type":{"a":1}}]}}', "ok"),
        lambda: (b'{"type":"assistant","message":{"content":[{"type":[]}],"id":[1]}}', "ok"),
        lambda: (b'{"type":"progress_x","n":123456789012345678901234567890,"m":-1e300}', "ok"),
        lambda: (b'{"type":"x","d":' + b"[" * 500 + b"]" * 500 + b"}", "ok"),
        lambda: (b'{"type":"system","subtype":[1],"timestamp":"0001-01-01T00:00:00+14:00"}', "ok"),
        lambda: (b'{"timestamp":"\xe2\x80\xa8","type":{"a":1},"payload":{"type":[1]}}', "ok"),
        lambda: (b'{"type":"event_msg","payload":{"type":{"x":1},"turn_id":[1]}}', "ok"),
        lambda: (b'{"type":"response_item","payload":{"type":[1],"role":{"a":1}}}', "ok"),
    ]
    for _ in range(n):
        out.append(rng.choice(makers)())
    return out


def _expected(lines: list[tuple[bytes, str]]) -> dict[str, int]:
    exp = {r: 0 for r in (*PARSE_ERROR_REASONS, "blank", "oversized", "ok", "huge_number")}
    for _line, what in lines:
        exp[what] += 1
    exp["lines"] = len(lines) - exp["oversized"]
    return exp


def _append_in_cuts(path: Path, data: bytes, rng: random.Random, pieces: int, pause: float = 0.002) -> None:
    cuts = sorted(rng.sample(range(1, len(data)), min(pieces, len(data) - 1)))
    prev = 0
    for c in cuts + [len(data)]:
        write(path, data[prev:c])
        prev = c
        if pause:
            time.sleep(pause)


def _counters(exp: Daemon, provider: str) -> dict[str, float]:
    m = exp.metrics()

    def v(name, **labels):
        return sum(val for (n, lbls), val in m.items()
                   if n == name and ("provider", provider) in lbls and all((k, x) in lbls for k, x in labels.items()))
    out = {r: v("coding_agent_transcript_parse_errors_total", reason=r) for r in PARSE_ERROR_REASONS}
    out["blank"] = v("coding_agent_transcript_skipped_lines_total", reason="blank")
    out["oversized"] = v("coding_agent_transcript_skipped_lines_total", reason="oversized")
    out["lines"] = v("coding_agent_transcript_lines_total")
    out["bytes"] = v("coding_agent_transcript_bytes_total")
    return out


REAL = [line for p in sorted(TRANSCRIPTS.glob("*/*.jsonl")) for line in p.read_bytes().split(b"\n")
        if 20 < len(line) < 16 * 1024]  # glued pairs stay under the 64 KiB cap of these runs
N_HOSTILE = 1500  # per agent


def test_hostile_stream_counted_by_reason_and_sessions_right(tmp_path):
    """1,500 hostile lines per agent, interleaved with a real turn of a
    Claude Code and a Codex session and appended in random cuts (mid-line,
    mid-character): every bad line is counted once under its reason, each
    byte is consumed once, both sessions end ``completed`` with one page,
    and the file watcher still delivers the next append (polling is 30 s
    here, so only a live watcher can)."""
    rng = random.Random(6)
    receiver = Receiver()
    (tmp_path / "claude" / "projects").mkdir(parents=True)  # roots exist: watched from the start
    (tmp_path / "codex" / "sessions").mkdir(parents=True)
    exp = Daemon(tmp_path, receiver=receiver, config={
        "sources": {"max_line_bytes": MAX_LINE, "poll_interval_seconds": 30.0}}).start()
    try:
        cc = ClaudeSession("hard0000-0000-4000-8000-000000000001")
        cx = CodexSession("0196f000-0000-7000-8000-0000000000b1")
        cpath = claude_path(tmp_path, cc.sid)
        xpath = codex_path(tmp_path, cx.sid)
        sep_text = "line\u2028separator\x85next\u2029para"
        turns = {
            "claude_code": [cc.prompt(), cc.tool_use(), cc.tool_result(), cc.text(sep_text), cc.turn_duration()],
            "codex": [cx.meta(), cx.start(), cx.call(), cx.answer(sep_text), cx.complete()],
        }
        sizes = {}
        for prov, path in (("claude_code", cpath), ("codex", xpath)):
            bad = hostile_lines(rng, REAL, N_HOSTILE)
            expected = _expected(bad)
            good = turns[prov]
            stream = [good[0]]
            slots = [bad[i::len(good) - 1] for i in range(len(good) - 1)]
            for g, junk in zip(good[1:], slots):
                stream += [line + b"\n" for line, _ in junk]
                stream.append(g)
            data = b"".join(stream)
            _append_in_cuts(path, data, rng, pieces=400)
            sizes[prov] = (expected, len(data), sum(g.count(b"\n") for g in good))
        sid_of = {"claude_code": cc.sid, "codex": cx.sid}
        for prov, (expected, size, good_lines) in sizes.items():
            exp.wait_state(sid_of[prov], "completed", timeout=30)
            got = wait_for(lambda: (c := _counters(exp, prov))["bytes"] >= size and c, timeout=30,
                           what=f"{prov} bytes read")
            assert got["bytes"] == size, "each byte consumed exactly once"
            for reason in (*PARSE_ERROR_REASONS, "blank", "oversized"):
                want = expected[reason]
                if reason == "invalid_json":  # huge numbers: invalid_json or a valid object, never lost
                    assert want <= got[reason] <= want + expected["huge_number"], (prov, reason, got, expected)
                else:
                    assert got[reason] == want, (prov, reason, got, expected)
            assert got["lines"] == expected["lines"] + good_lines, (prov, got, expected)
        for sid in sid_of.values():
            wait_for(lambda: len(alerts_for(receiver, sid, "completed")) == 1, timeout=10, what="one page")
        # the watcher is alive: a new prompt shows within a few seconds
        write(cpath, cc.prompt())
        exp.wait_state(cc.sid, "working", timeout=5)
        write(xpath, cx.start())
        exp.wait_state(cx.sid, "working", timeout=5)
        assert exp.value("coding_agent_poll_recoveries_total") == 0
        assert exp.alive()
        assert "Traceback" not in exp.log(), exp.log()[-3000:]
        time.sleep(0.5)
        assert len(receiver.messages) == 2
    finally:
        exp.stop()
        receiver.close()


def test_random_bytes_between_turns(tmp_path):
    """Random binary lines (each carrying a NUL or an invalid UTF-8 byte, so
    its reason is known) between records of a Claude session: counted,
    skipped, and the session's turns still read right."""
    rng = random.Random(61)
    exp = Daemon(tmp_path, config={"sources": {"max_line_bytes": MAX_LINE}}).start()
    try:
        cc = ClaudeSession("hard0000-0000-4000-8000-000000000002")
        path = claude_path(tmp_path, cc.sid)
        want = {"nul_bytes": 0, "invalid_utf8": 0}
        data = cc.prompt()
        for i in range(800):
            junk = bytearray(os.urandom(rng.randrange(1, 2000)).replace(b"\n", b"").replace(b"\x00", b"\x01"))
            if i % 2:
                junk.insert(rng.randrange(len(junk) + 1), 0)
                want["nul_bytes"] += 1
            else:
                junk.insert(rng.randrange(len(junk) + 1), 0xFF)
                want["invalid_utf8"] += 1
            data += bytes(junk) + b"\n"
            if i == 400:
                data += cc.tool_use()
        data += cc.text("fine") + cc.turn_duration()
        _append_in_cuts(path, data, rng, pieces=200, pause=0.001)
        exp.wait_state(cc.sid, "completed", timeout=30)
        got = wait_for(lambda: (c := _counters(exp, "claude_code"))["bytes"] >= len(data) and c, timeout=20,
                       what="all bytes")
        assert got["nul_bytes"] == want["nul_bytes"] and got["invalid_utf8"] == want["invalid_utf8"], got
        assert got["lines"] == 800 + 4
        assert exp.alive()
    finally:
        exp.stop()


def _real_layout(root: Path) -> list[tuple[Path, bytes, str]]:
    """Every real transcript placed as the agents do: (dest, bytes, provider)."""
    out = []
    for f in sorted((TRANSCRIPTS / "claude_code").glob("*.jsonl")):
        sid = next(json.loads(line)["sessionId"] for line in f.read_bytes().splitlines()
                   if b'"sessionId"' in line)
        base = root / "claude" / "projects" / "-home-user-proj"
        if "subagent" in f.name:
            dest = base / sid / "subagents" / f.name.split("_subagent_")[1]
        elif "2.1.39" in f.name:
            dest = base / f"{sid}-{'a' if 'lines1-' in f.name else 'b'}.jsonl"
        else:
            dest = base / f"{sid}.jsonl"
        out.append((dest, f.read_bytes(), "claude_code"))
    for i, f in enumerate(sorted((TRANSCRIPTS / "codex").glob("*.jsonl"))):
        dest = root / "codex" / "sessions" / "2026" / "05" / "01" / f"rollout-2026-05-01T10-00-0{i}-{f.stem[:12]}.jsonl"
        out.append((dest, f.read_bytes(), "codex"))
    return out


def test_real_transcripts_in_random_cuts_equal_scan(tmp_path):
    """Every real transcript appended live in random pieces (cut mid-line and
    mid-character, files interleaved): the running exporter ends with the
    same sessions and states as ``scan`` of the finished files, and consumed
    every byte exactly once."""
    rng = random.Random(16)
    exp = Daemon(tmp_path).start()
    try:
        files = _real_layout(tmp_path)
        queues = []
        for dest, data, prov in files:
            cuts = sorted(rng.sample(range(1, len(data)), min(25, len(data) - 1)))
            queues.append([dest, [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]])
        while queues:
            q = rng.choice(queues)
            write(q[0], q[1].pop(0))
            if not q[1]:
                queues.remove(q)
            time.sleep(0.003)
        total = {"claude_code": 0, "codex": 0}
        for _dest, data, prov in files:
            total[prov] += len(data)
        for prov in total:
            wait_for(lambda: _counters(exp, prov)["bytes"] >= total[prov], timeout=20, what=f"{prov} bytes")
            assert _counters(exp, prov)["bytes"] == total[prov]
        time.sleep(FAST_SETTLE := 4.0)  # inferred completions settle (3 s here)
        out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "scan", "--json", "--config.file",
                              str(exp.config_path), str(tmp_path / "claude" / "projects"),
                              str(tmp_path / "codex" / "sessions")], capture_output=True, text=True, timeout=60,
                             cwd=Path(__file__).resolve().parent.parent)
        assert out.returncode == 0, out.stderr
        want = {(r["provider"], r["session_id"]): (r["state"], r["evidence"], r["error_kind"])
                for r in map(json.loads, out.stdout.splitlines())}
        assert len(want) >= 10, want
        m = exp.metrics()
        got = {}
        for (name, lbls), v in m.items():
            d = dict(lbls)
            if name == "coding_agent_session_state" and v == 1:
                got[(d["provider"], d["session_id"])] = d["state"]
        assert got == {k: s for k, (s, _e, _k) in want.items()}, (got, want, FAST_SETTLE)
        assert exp.alive()
    finally:
        exp.stop()


# -- size: 100 MB line, a file of lines of every size, peak RSS -----------------
#: Documented bound (docs/hardening.md): peak RSS of the exporter reading
#: hostile input stays under the idle RSS plus 6 × max_line_bytes (16 MiB by
#: default: ≤ ~96 MiB on top of ~45 MiB) for lines whose content is mostly
#: text (docs/hardening.md, "Memory bound").
RSS_LINES_FACTOR = 6


def _sized_stream(rng: random.Random, target: int, session: ClaudeSession, max_line: int):
    """Yield pieces of a Claude transcript of about ``target`` bytes whose
    lines have every size from 0 bytes to twice ``max_line`` (log-uniform),
    valid ``progress`` records with text padding, and some junk; the counts
    of each outcome are returned at the end via ``counts``."""
    counts = {"ok": 0, "oversized": 0, "invalid_json": 0, "blank": 0}
    written = 0
    buf = []
    n = 0
    forced = [max_line - 2, max_line + 1]  # the largest line that is read, the smallest that is not
    while written < target:
        if forced:
            size = forced.pop()
        elif rng.random() < 0.002:
            size = int(2 ** rng.uniform(16, (2 * max_line).bit_length() - 1))  # 64 KiB .. 2 × the cap
        else:
            size = int(2 ** rng.uniform(0, 16))  # 1 B .. 64 KiB
        n += 1
        if size < 60:
            kind = rng.choice(["blank", "invalid_json"])
            line = b"" if kind == "blank" else b"#" * size
        else:
            head = (b'{"type":"progress","uuid":"p-%d","sessionId":"%s","data":{"type":"bash_progress","o":"'
                    % (n, session.sid.encode()))
            line = head + b"y" * max(0, size - len(head) - 3) + b'"}}'
            kind = "oversized" if len(line) > max_line else "ok"
        counts[kind] += 1
        buf.append(line + b"\n")
        written += len(line) + 1
        if sum(map(len, buf)) > 8 * MIB:
            yield b"".join(buf)
            buf = []
    if buf:
        yield b"".join(buf)
    yield counts


def _big_input(tmp_path: Path, target: int):
    receiver = Receiver()
    exp = Daemon(tmp_path, receiver=receiver).start()  # default line cap: 16 MiB
    max_line = 16 * MIB
    try:
        time.sleep(1.0)
        idle = exp.rss_mib()
        rng = random.Random(100)
        cc = ClaudeSession("hard0000-0000-4000-8000-0000000000b1")
        path = claude_path(tmp_path, cc.sid)
        # 1) a 100 MB single line inside a turn, written in 1 MiB pieces
        write(path, cc.prompt())
        exp.wait_state(cc.sid, "working")
        write(path, b'{"type":"progress","data":{"o":"')
        for _ in range(100):
            write(path, b"z" * MIB)
        write(path, b'"}}\n' + cc.text("after the big line") + cc.turn_duration())
        exp.wait_state(cc.sid, "completed", timeout=60)
        assert exp.value("coding_agent_transcript_skipped_lines_total", reason="oversized") == 1
        # 2) a file with lines of every size, appended while the exporter reads
        cc2 = ClaudeSession("hard0000-0000-4000-8000-0000000000b2")
        path2 = claude_path(tmp_path, cc2.sid)
        write(path2, cc2.prompt())
        size = path2.stat().st_size
        t0 = time.monotonic()
        counts = None
        for piece in _sized_stream(rng, target, cc2, max_line):
            if isinstance(piece, dict):
                counts = piece
                break
            write(path2, piece)
            size += len(piece)
        write(path2, cc2.text("end") + cc2.turn_duration())
        size = path2.stat().st_size
        exp.wait_state(cc2.sid, "completed", timeout=600)
        total = path.stat().st_size + size
        wait_for(lambda: exp.value("coding_agent_transcript_bytes_total", provider="claude_code") >= total,
                 timeout=120, what="every byte read")
        elapsed = time.monotonic() - t0
        assert exp.value("coding_agent_transcript_bytes_total", provider="claude_code") == total
        assert exp.value("coding_agent_transcript_skipped_lines_total", reason="oversized") == 1 + counts["oversized"]
        assert exp.value("coding_agent_transcript_skipped_lines_total", reason="blank") == counts["blank"]
        assert exp.value("coding_agent_transcript_parse_errors_total", reason="invalid_json") == \
            counts["invalid_json"]
        peak = exp.peak_rss_mib()
        bound = idle + RSS_LINES_FACTOR * max_line / MIB
        report = (f"input {total / MIB:.0f} MiB ({sum(counts.values())} lines of 0 B..{2 * max_line // MIB} MiB, "
                  f"{counts['oversized'] + 1} oversized) read in {elapsed:.1f} s; idle RSS {idle:.0f} MiB, "
                  f"peak RSS {peak:.0f} MiB, bound {bound:.0f} MiB; CPU {exp.cpu_seconds():.1f} s")
        print("\n" + report)
        assert peak <= bound, report
        wait_for(lambda: len(alerts_for(receiver, cc.sid)) == 1 and len(alerts_for(receiver, cc2.sid)) == 1,
                 what="one page per session")
        assert exp.alive()
        return report
    finally:
        exp.stop()
        receiver.close()


def test_100mb_line_and_100mb_of_every_line_size(tmp_path):
    _big_input(tmp_path, 100 * MIB)


@pytest.mark.skipif(not SLOW, reason="1 GiB input: set CAE_SLOW=1")
@pytest.mark.timeout(1200)
def test_1gib_of_every_line_size(tmp_path):
    _big_input(tmp_path, 1024 * MIB)


#: Documented worst case (docs/hardening.md): a line of millions of tiny JSON
#: values in a field the decoder reads (``message.content``) is built as
#: Python objects; transiently up to ~35 × its size.
RSS_PATHOLOGICAL_FACTOR = 40


def test_pathological_json_line_memory(tmp_path):
    """A line at the cap (2 MiB here) whose ``message.content`` is a list of
    ~700,000 empty objects: read and counted, the exporter stays up, and the
    peak RSS stays under the documented worst-case factor."""
    max_line = 2 * MIB
    exp = Daemon(tmp_path, config={"sources": {"max_line_bytes": max_line}}).start()
    try:
        time.sleep(0.5)
        idle = exp.rss_mib()
        cc = ClaudeSession("hard0000-0000-4000-8000-0000000000c1")
        path = claude_path(tmp_path, cc.sid)
        head = b'{"type":"assistant","sessionId":"%s","message":{"role":"assistant","content":[' % cc.sid.encode()
        n = (max_line - len(head) - 10) // 3
        write(path, cc.prompt() + head + b"{}," * n + b"{}]}}\n" + cc.text("ok") + cc.turn_duration())
        exp.wait_state(cc.sid, "completed", timeout=30)
        peak = exp.peak_rss_mib()
        print(f"\npathological {max_line // MIB} MiB line: idle {idle:.0f} MiB, peak {peak:.0f} MiB "
              f"(+{(peak - idle) / (max_line / MIB):.0f} x the line)")
        assert peak <= idle + RSS_PATHOLOGICAL_FACTOR * max_line / MIB
        assert exp.alive()
    finally:
        exp.stop()
