"""checkpoint.read_from in-process: where a start-up read divides backfill
from news, for every way a file can stand against the last run's
checkpoint; the file round-trips and a damaged one reads as none."""

from __future__ import annotations

import json
import os
import time

from exporter.checkpoint import At, Beginning, Checkpoint, End, until


def _cp(tmp_path, files=None, open_=()):
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    c = Checkpoint(state)
    if files is not None:
        c.save(files, sorted(open_), [])
    c = Checkpoint(state)
    c.load()
    return c


def test_first_run_reads_everything_as_backfill(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_bytes(b'{"a":1}\n')
    c = _cp(tmp_path)
    assert c.read_from(str(f)) == End() and until(End()) is None


def test_where_the_last_run_stopped_is_where_news_begins(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_bytes(b'{"a":1}\n{"b":2}\n')
    st = f.stat()
    c = _cp(tmp_path, {str(f): [st.st_ino, 8]})
    assert c.read_from(str(f)) == At(8) and until(At(8)) == 8
    assert c.knows(str(f))


def test_a_file_made_while_down_is_news_born_after_the_checkpoint(tmp_path):
    before = time.time()
    c = _cp(tmp_path, {})
    f = tmp_path / "new.jsonl"
    f.write_bytes(b'{"a":1}\n')
    got = c.read_from(str(f))
    assert isinstance(got, Beginning) and got.news_from is not None and before - 1 <= got.news_from <= time.time()
    assert until(got) == 0


def test_rewritten_replaced_or_shorter_files_are_backfill(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_bytes(b'{"a":1}\n{"b":2}\n')
    ino = f.stat().st_ino
    c = _cp(tmp_path, {str(f): [ino, 10]})  # not at a line end: rewritten
    assert c.read_from(str(f)) == End()
    c = _cp(tmp_path, {str(f): [ino, 100]})  # longer than the file: truncated
    assert c.read_from(str(f)) == End()
    c = _cp(tmp_path, {str(f): [ino + 1, 8]})  # another inode under the name
    assert c.read_from(str(f)) == End()
    os.unlink(f)
    c = _cp(tmp_path, {str(f): [ino, 8]})
    assert c.read_from(str(f)) == End()  # gone


def test_round_trip_and_damage(tmp_path):
    c = _cp(tmp_path, {"/x.jsonl": [1, 2]}, ["claude_code\tabc"])
    assert c.files == {"/x.jsonl": [1, 2]} and c.open == {("claude_code", "abc")}
    (tmp_path / "state" / "checkpoint.json").write_text(json.dumps({"version": 1, "files": {"/x": [1, "2"]}}))
    c = _cp(tmp_path)
    assert c.files is None and c.read_from("/x") == End()
