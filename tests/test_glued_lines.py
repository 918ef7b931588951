"""Torn and glued lines, for every agent: a physical line that holds a torn
copy of a record followed by the whole record (Copilot CLI 1.0.71 after a
resume, case 57; Claude Code's torn ``pr-link``, case 01). The reader keeps
the whole records, counts the line once under ``torn_record``, and the
session ends as if the file were clean, live and as a backfill.

Each agent's turn is a field case's files; in the glued copy *every* line
after the first is a torn prefix of the line before it glued to the line:
without recovery no record at all would be read."""

from __future__ import annotations

import random
import time

import pytest

from harness import CASES, Exporter, Receiver, wait_for
from test_cases import BASES, PROVIDERS, SPEC, _stamp

from coding_agent_exporter.decode import split_glued

#: case → its pages (one turn each)
TURNS = {
    "24_one_turn_many_end_markers": 1,
    "23_codex_open_fd_appends": 1,
    "CP1_copilot_tool_round_split": 1,
    "PI1_pi_failed_tool_then_stop": 1,
}


def _records(case: str) -> list[bytes]:
    seen, out = set(), []
    for step in SPEC[case]["steps"]:
        if "write" in step and step["write"] not in seen:
            seen.add(step["write"])
            out += [x for x in (CASES / step["write"]).read_bytes().split(b"\n") if x.strip()]
    return out


def _glued(records: list[bytes], rng: random.Random) -> list[bytes]:
    """Every line after the first: a torn prefix of the line before it, then the line."""
    out = [records[0]]
    for prev, rec in zip(records, records[1:]):
        out.append(prev[: rng.randrange(2, len(prev) - 1)] + rec)
    return out


def _path(root, case: str):
    spec = SPEC[case]
    return root.joinpath(*BASES[PROVIDERS[spec["provider"]]], spec["files"]["S"]), spec["sessions"]["S"]


def _torn(exp: Exporter, case: str) -> float:
    return exp.value("coding_agent_transcript_parse_errors_total",
                     provider=PROVIDERS[SPEC[case]["provider"]], reason="torn_record")


@pytest.mark.parametrize("case", list(TURNS))
def test_torn_copy_before_each_record_backfill(tmp_path, case):
    """Backfill: the glued file ends in the case's state; one torn_record per glued line."""
    recs = _records(case)
    path, sid = _path(tmp_path, case)
    path.parent.mkdir(parents=True)
    now = time.time() - 60
    lines = _glued([_stamp(r, now) for r in recs], random.Random(case))
    path.write_bytes(b"\n".join(lines) + b"\n")
    with Exporter(tmp_path) as exp:
        exp.wait_state(sid, SPEC[case]["backfill"]["S"], timeout=15)
        wait_for(lambda: _torn(exp, case) == len(lines) - 1, timeout=10, what="torn_record counted per line")
        assert exp.value("coding_agent_transcript_parse_errors_total", reason="invalid_json") == 0


@pytest.mark.parametrize("case", list(TURNS))
def test_torn_copy_before_each_record_live(tmp_path, case):
    """Live: the glued lines appended one by one page exactly as the clean case does."""
    recs = _records(case)
    path, sid = _path(tmp_path, case)
    path.parent.mkdir(parents=True)
    receiver = Receiver()
    rng = random.Random(case)
    with Exporter(tmp_path, receiver=receiver) as exp:
        prev = None
        with open(path, "ab") as f:
            for rec in recs:
                rec = _stamp(rec, time.time())
                f.write((prev[: rng.randrange(2, len(prev) - 1)] if prev else b"") + rec + b"\n")
                f.flush()
                prev = rec
                time.sleep(0.1)
        exp.wait_state(sid, SPEC[case]["backfill"]["S"], timeout=15)
        mine = lambda: [m for m in receiver.messages if f"Session: {sid}" in m.get("message", "")]
        wait_for(lambda: len(mine()) == TURNS[case], timeout=12, what=f"{TURNS[case]} pages")
        time.sleep(1.5)
        assert len(mine()) == TURNS[case]
        assert _torn(exp, case) == len(recs) - 1
    receiver.close()


def test_split_glued_shapes():
    """What the splitter returns for each shape, and what it refuses."""
    rec = lambda o: "type" in o  # noqa: E731  (a provider's sniff: a record of its agent)
    a, b = b'{"type":"a","data":{"x":[1,{"y":2}]}}', b'{"type":"b","data":{}}'
    assert split_glued(a[:20] + b, rec) == ([b], True)  # torn, then whole
    assert split_glued(a + b, rec) == ([a, b], False)  # two whole records
    assert split_glued(a + b" " + b, rec) == ([a, b], False)
    assert split_glued(a[:9] + a + b, rec) == ([a, b], True)
    assert split_glued(a + b[:7], rec) == ([a], True)  # a torn tail
    assert split_glued(a[:-1], rec) is None  # torn alone: its fragment {"x":…} is no record
    assert split_glued(a[:30], rec) is None
    assert split_glued(b'{"a":"\xff"}' + b, rec) == ([b], True)  # not UTF-8: that part is not a record
    assert split_glued(b'{"a":"\xff"}', rec) is None
    assert split_glued(a[:20] + b, lambda o: o.get("type") == "a") is None  # not this agent's record
    # hostile lines are bounded in time
    for bad in (b'{"b":1,' * 300_000, b'{"a":' * 200_000, (b'{"x":[' * 500) * 200):
        t = time.perf_counter()
        assert split_glued(bad, lambda o: True) is None
        assert time.perf_counter() - t < 1.0
