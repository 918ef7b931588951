"""Hardening, files: what a real machine does to the transcript folders,
each against the running exporter.

Truncation and rewrite in place, replacement by a new inode, deletion and
re-creation, rename and move, symlinks (followed out of the root, loops,
dangling, folder loops), a FIFO or a device under a followed name, permission
denied on a file or a folder (the exporter runs without CAP_DAC_OVERRIDE, as
any user would), a root that appears after start, disappears, or is replaced,
10,000 transcript files, and the inotify watch and instance limits (a user
namespace with lowered limits; else watchdog's ``inotify_add_watch`` made to
fail): polling takes over and the log says so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import claude_path, codex_path
from test_hardening_support import (ClaudeSession, CodexSession, Daemon, Receiver, alerts_for,
                                    drop_file_capabilities, permissions_apply, wait_for, write)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = tmp_path_factory.mktemp("files")
    (root / "claude" / "projects").mkdir(parents=True)
    (root / "codex" / "sessions").mkdir(parents=True)
    receiver = Receiver()
    exp = Daemon(root, receiver=receiver).start()
    exp.receiver = receiver
    yield exp
    exp.stop()
    receiver.close()


def turn(s: ClaudeSession, end: bool = True) -> bytes:
    out = s.prompt() + s.tool_use() + s.tool_result() + s.text("done")
    return out + s.turn_duration() if end else out


def pages(exp: Daemon, sid: str, n: int, wait: float = 1.5) -> None:
    """Exactly ``n`` pages for ``sid`` (waits for them, then a while more)."""
    wait_for(lambda: len(alerts_for(exp.receiver, sid)) >= n, timeout=15, what=f"{n} pages for {sid}")
    time.sleep(wait)
    assert len(alerts_for(exp.receiver, sid)) == n


def healthy(exp: Daemon) -> None:
    """Alive, no traceback, and a fresh session is still read promptly."""
    assert exp.alive()
    assert "Traceback" not in exp.log(), exp.log()[-3000:]
    probe = ClaudeSession(f"probe{time.monotonic_ns() % 10**12:012d}-4000-8000-000000000000"[:36])
    write(claude_path(exp.root, probe.sid, "-probe"), probe.prompt())
    exp.wait_state(probe.sid, "working", timeout=5)


# -- truncation, rewrite, replacement, deletion, rename ---------------------------
def test_truncated_then_rewritten_in_place(live):
    exp = live
    cc = ClaudeSession("trnc0000-0000-4000-8000-000000000001")
    path = claude_path(exp.root, cc.sid)
    write(path, turn(cc))
    exp.wait_state(cc.sid, "completed")
    pages(exp, cc.sid, 1)
    errors = exp.value("coding_agent_transcript_parse_errors_total")
    # truncated to nothing, then a new turn begins
    with open(path, "wb"):
        pass
    time.sleep(0.3)
    write(path, cc.prompt())
    exp.wait_state(cc.sid, "working")
    write(path, cc.tool_use() + cc.tool_result() + cc.text("done") + cc.turn_duration())
    exp.wait_state(cc.sid, "completed")
    pages(exp, cc.sid, 2)
    # rewritten in place (same inode), longer than what was read: read from 0
    ino = path.stat().st_ino
    new = turn(cc) * 3
    with open(path, "r+b") as f:
        f.write(new)
    assert path.stat().st_ino == ino and path.stat().st_size == len(new)
    wait_for(lambda: "truncated or replaced" in exp.log(), what="the rewrite noticed")
    exp.wait_state(cc.sid, "completed")
    pages(exp, cc.sid, 3)  # one page for the last of the rewritten turns
    assert exp.value("coding_agent_transcript_parse_errors_total") == errors, "read mid-line after the rewrite"
    healthy(exp)


def test_replaced_by_a_new_inode(live):
    exp = live
    cc = ClaudeSession("repl0000-0000-4000-8000-000000000001")
    path = claude_path(exp.root, cc.sid)
    write(path, turn(cc))
    exp.wait_state(cc.sid, "completed")
    pages(exp, cc.sid, 1)
    dups = exp.value("coding_agent_duplicate_events_total", provider="claude_code")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(path.read_bytes() + turn(cc))
    os.replace(tmp, path)  # an editor's or a sync tool's atomic save
    exp.wait_state(cc.sid, "completed")
    pages(exp, cc.sid, 2)  # the new turn, not the old one again
    assert exp.value("coding_agent_duplicate_events_total", provider="claude_code") >= dups + 5
    healthy(exp)


def test_deleted_and_recreated(live):
    exp = live
    cc = ClaudeSession("dele0000-0000-4000-8000-000000000001")
    path = claude_path(exp.root, cc.sid)
    old = turn(cc)
    write(path, old)
    exp.wait_state(cc.sid, "completed")
    pages(exp, cc.sid, 1)
    watched = exp.value("coding_agent_files_watched", provider="claude_code")
    path.unlink()
    wait_for(lambda: exp.value("coding_agent_files_watched", provider="claude_code") == watched - 1,
             what="the file dropped")
    wait_for(lambda: exp.state(cc.sid) is None, what="the session gone with its file")
    write(path, old)  # re-created with the same records: nothing new
    exp.wait_state(cc.sid, "completed")
    pages(exp, cc.sid, 1)
    path.unlink()
    time.sleep(0.8)
    write(path, turn(cc))  # re-created with a new turn
    exp.wait_state(cc.sid, "completed")
    pages(exp, cc.sid, 2)
    healthy(exp)


def test_renamed_and_moved(live):
    exp = live
    # Claude: the same records under another session file name (real session ids are UUIDs: the
    # records naming the old one are a copy, not news)
    cc = ClaudeSession("4e0e0000-0000-4000-8000-000000000001")
    path = claude_path(exp.root, cc.sid)
    write(path, turn(cc))
    exp.wait_state(cc.sid, "completed")
    pages(exp, cc.sid, 1)
    other = path.with_name("4e0e0000-0000-4000-8000-0000000000ff.jsonl")
    os.rename(path, other)
    exp.wait_state("4e0e0000-0000-4000-8000-0000000000ff", "completed")
    wait_for(lambda: exp.state(cc.sid) is None, what="the old name gone")
    # Codex: a rollout moved to another day's folder stays the same session
    cx = CodexSession("0196bbbb-0000-7000-8000-000000000001")
    xpath = codex_path(exp.root, cx.sid)
    write(xpath, cx.meta() + cx.start() + cx.call() + cx.answer() + cx.complete())
    exp.wait_state(cx.sid, "completed")
    pages(exp, cx.sid, 1)
    moved = xpath.parent.parent / "02" / xpath.name
    moved.parent.mkdir(parents=True, exist_ok=True)
    os.rename(xpath, moved)
    time.sleep(1.0)
    exp.wait_state(cx.sid, "completed")
    write(moved, cx.start())
    exp.wait_state(cx.sid, "working")
    write(moved, cx.call() + cx.answer() + cx.complete())
    exp.wait_state(cx.sid, "completed")
    pages(exp, cx.sid, 2)
    assert len(alerts_for(exp.receiver, "4e0e0000-0000-4000-8000-0000000000ff")) == 0  # no page for a rename
    assert len(alerts_for(exp.receiver, cc.sid)) == 1
    healthy(exp)


# -- symlinks, loops, FIFOs, devices ---------------------------------------------
def test_symlinks_loops_fifos_and_devices(live, tmp_path):
    exp = live
    proj = exp.root / "claude" / "projects" / "-links"
    proj.mkdir(parents=True, exist_ok=True)
    # a transcript outside the roots, linked in: followed, appends seen
    cc = ClaudeSession("link0000-0000-4000-8000-000000000001")
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_bytes(cc.prompt())
    os.symlink(outside, proj / f"{cc.sid}.jsonl")
    exp.wait_state(cc.sid, "working")
    write(outside, cc.tool_use() + cc.tool_result() + cc.text("ok") + cc.turn_duration())
    exp.wait_state(cc.sid, "completed")
    pages(exp, cc.sid, 1)
    # loops and dead ends
    os.symlink("loop0000-0000-4000-8000-000000000001.jsonl", proj / "loop0000-0000-4000-8000-000000000001.jsonl")
    os.symlink("pong0000-0000-4000-8000-000000000001.jsonl", proj / "ping0000-0000-4000-8000-000000000001.jsonl")
    os.symlink("ping0000-0000-4000-8000-000000000001.jsonl", proj / "pong0000-0000-4000-8000-000000000001.jsonl")
    os.symlink("/nonexistent/x.jsonl", proj / "dead0000-0000-4000-8000-000000000001.jsonl")
    os.symlink("..", proj / "up")
    os.symlink(".", proj / "self")
    os.symlink(proj, proj / "abs")
    # a FIFO and a device under transcript names
    os.mkfifo(proj / "fifo0000-0000-4000-8000-000000000001.jsonl")
    os.symlink("/dev/zero", proj / "zero0000-0000-4000-8000-000000000001.jsonl")
    time.sleep(1.5)  # several polls
    healthy(exp)
    # followed files swapped for a FIFO and for /dev/zero: refused, never hang
    a = ClaudeSession("swpa0000-0000-4000-8000-000000000001")
    b = ClaudeSession("swpb0000-0000-4000-8000-000000000001")
    pa, pb = proj / f"{a.sid}.jsonl", proj / f"{b.sid}.jsonl"
    write(pa, a.prompt())
    write(pb, b.prompt())
    exp.wait_state(a.sid, "working")
    exp.wait_state(b.sid, "working")
    errors = exp.value("coding_agent_transcript_read_errors_total")
    fifo = proj / "tmp.fifo"
    os.mkfifo(fifo)
    os.replace(fifo, pa)
    tmp_link = proj / "tmp.link"
    os.symlink("/dev/zero", tmp_link)
    os.replace(tmp_link, pb)
    wait_for(lambda: exp.value("coding_agent_transcript_read_errors_total") >= errors + 2, timeout=10,
             what="both refused and counted")
    time.sleep(1.5)
    healthy(exp)
    log = exp.log()
    assert log.count(f"cannot read {pa}") <= 2, "a refused file is logged once per change, not every poll"


# -- permissions -------------------------------------------------------------------
@pytest.mark.skipif(permissions_apply() is not None, reason=str(permissions_apply()))
def test_permission_denied_on_a_file_and_a_folder(tmp_path):
    """The exporter runs without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH (the
    tests run as root; a user's exporter is not): an unreadable transcript and
    an unlistable project folder are logged once and counted, the rest is
    read, and both are read once permissions allow."""
    proj = tmp_path / "claude" / "projects"
    ok, bad_file, bad_dir = (ClaudeSession(f"perm000{i}-0000-4000-8000-000000000001") for i in range(3))
    write(claude_path(tmp_path, ok.sid), turn(ok))
    fpath = claude_path(tmp_path, bad_file.sid)
    write(fpath, turn(bad_file))
    fpath.chmod(0)
    dpath = claude_path(tmp_path, bad_dir.sid, "-secret-project")
    write(dpath, turn(bad_dir))
    dpath.parent.chmod(0)
    exp = Daemon(tmp_path, preexec_fn=drop_file_capabilities if os.geteuid() == 0 else None)
    try:
        exp.start()
        exp.wait_state(ok.sid, "completed")
        time.sleep(3.0)  # six polls
        log = exp.log()
        assert exp.state(bad_file.sid) is None and exp.state(bad_dir.sid) is None
        assert exp.value("coding_agent_transcript_read_errors_total", provider="claude_code") >= 1
        assert log.count(f"cannot read {fpath}") == 1, log
        assert log.count(f"cannot list folder {dpath.parent}") == 1, log
        assert "Traceback" not in log
        fpath.chmod(0o644)
        exp.wait_state(bad_file.sid, "completed")
        dpath.parent.chmod(0o755)
        exp.wait_state(bad_dir.sid, "completed")
        assert f"folder {dpath.parent} can be listed again" in exp.log()
        assert exp.alive()
    finally:
        dpath.parent.chmod(0o755)
        exp.stop()


# -- roots ---------------------------------------------------------------------------
def test_root_appears_disappears_and_is_replaced(tmp_path):
    exp = Daemon(tmp_path, config={"sources": {"poll_interval_seconds": 1.0}}).start()
    root = tmp_path / "claude" / "projects"
    try:
        assert "waiting for claude_code folder" in exp.log()
        a = ClaudeSession("root0000-0000-4000-8000-000000000001")
        write(claude_path(tmp_path, a.sid), turn(a))  # the root appears
        exp.wait_state(a.sid, "completed", timeout=10)
        wait_for(lambda: "appeared; reading it" in exp.log(), what="appearance logged")
        shutil.rmtree(root.parent)  # it disappears, with everything in it
        wait_for(lambda: "disappeared; waiting for it" in exp.log(), what="disappearance logged")
        wait_for(lambda: exp.value("coding_agent_files_watched", provider="claude_code") == 0, what="files dropped")
        b = ClaudeSession("root0000-0000-4000-8000-000000000002")
        write(claude_path(tmp_path, b.sid), b.prompt())  # and comes back
        exp.wait_state(b.sid, "working", timeout=10)
        # replaced between two polls: the old watch died with the old folder
        os.rename(root, tmp_path / "old-projects")
        write(claude_path(tmp_path, b.sid), b.prompt() + b.tool_use())
        exp.wait_state(b.sid, "working", timeout=10)
        wait_for(lambda: "disappeared or was replaced" in exp.log(), timeout=10, what="re-watch")
        time.sleep(2.5)
        # file events work again in the new folder: an append is read without
        # the poll having to recover it
        before = exp.value("coding_agent_poll_recoveries_total", provider="claude_code")
        write(claude_path(tmp_path, b.sid), b.tool_result() + b.text("ok") + b.turn_duration())
        exp.wait_state(b.sid, "completed", timeout=0.9)
        assert exp.value("coding_agent_poll_recoveries_total", provider="claude_code") == before
        assert exp.alive() and "Traceback" not in exp.log()
    finally:
        exp.stop()


# -- 10,000 files ------------------------------------------------------------------
def test_ten_thousand_transcript_files(tmp_path):
    n, projects = 10_000, 100
    proj_root = tmp_path / "claude" / "projects"
    old = time.time() - 3600
    t0 = time.monotonic()
    for i in range(n):
        s = ClaudeSession(f"tenk{i:04d}-0000-4000-8000-000000000000", cwd=f"/home/dev/p{i % projects}")
        p = proj_root / f"-home-dev-p{i % projects}" / f"{s.sid}.jsonl"
        if i < projects:
            p.parent.mkdir(parents=True)
        p.write_bytes(turn(s))
        os.utime(p, (old, old))
    made = time.monotonic() - t0
    receiver = Receiver()
    exp = Daemon(tmp_path, receiver=receiver, config={"sources": {"poll_interval_seconds": 2.0}})
    try:
        t0 = time.monotonic()
        exp.start()
        ready = time.monotonic() - t0
        wait_for(lambda: exp.value("coding_agent_files_watched", provider="claude_code") == n, what="all files")
        assert exp.value("coding_agent_sessions", provider="claude_code", state="completed") == n
        assert exp.value("coding_agent_session_series_dropped") == n - 500  # metrics.max_sessions
        cpu0, w0 = exp.cpu_seconds(), time.monotonic()
        time.sleep(10.0)  # five polls of 10,000 files
        idle_cpu = (exp.cpu_seconds() - cpu0) / (time.monotonic() - w0)
        s = ClaudeSession("tenk0042-0000-4000-8000-000000000000", cwd="/home/dev/p42")
        s.n = 10
        p = proj_root / "-home-dev-p42" / f"{s.sid}.jsonl"
        t1 = time.monotonic()
        write(p, s.prompt())
        exp.wait_state(s.sid, "working", timeout=5)
        latency = time.monotonic() - t1
        write(p, s.tool_use() + s.tool_result() + s.text("ok") + s.turn_duration())
        exp.wait_state(s.sid, "completed")
        wait_for(lambda: len(receiver.messages) == 1, what="one page")
        time.sleep(1.0)
        assert len(receiver.messages) == 1  # none for the 10,000 old turns
        rss = exp.rss_mib()
        print(f"\n10,000 files ({made:.1f} s to make): ready in {ready:.1f} s, RSS {rss:.0f} MiB, "
              f"idle CPU {idle_cpu * 100:.1f} % (poll every 2 s), append seen in {latency:.2f} s")
        assert exp.alive() and "Traceback" not in exp.log()
    finally:
        exp.stop()
        receiver.close()


# -- inotify limits ------------------------------------------------------------------
def _userns_limits_work() -> bool:
    if not shutil.which("unshare") or not sys.platform.startswith("linux"):
        return False
    r = subprocess.run(["unshare", "-U", "-r", "sh", "-c", "echo 3 > /proc/sys/user/max_inotify_watches"],
                       capture_output=True)
    return r.returncode == 0


#: The same limits without a user namespace: watchdog's calls into libc are
#: wrapped so that they fail as the kernel's do. ``inotify_add_watch`` fails
#: with ENOSPC once ``limit`` watches are held (``inotify_rm_watch`` gives one
#: back, as watchdog does for a root it could not watch whole);
#: ``inotify_init`` (watchdog 7.x's one shared instance; ``inotify_init1`` in
#: older releases) fails with EMFILE for the instance limit.
_WRAPPER = """
import ctypes, errno, sys
import watchdog.observers.inotify_c as c
LIMIT, WHAT = int(sys.argv.pop(1)), sys.argv.pop(1)
orig_add, orig_rm, held = c.inotify_add_watch, c.inotify_rm_watch, set()
def add(fd, path, mask):
    if len(held) >= LIMIT:
        ctypes.set_errno(errno.ENOSPC)
        return -1
    wd = orig_add(fd, path, mask)
    if wd >= 0:
        held.add((fd, wd))
    return wd
def rm(fd, wd):
    held.discard((fd, wd))
    return orig_rm(fd, wd)
def init(*a):
    ctypes.set_errno(errno.EMFILE)
    return -1
if WHAT == "watches":
    c.inotify_add_watch, c.inotify_rm_watch = add, rm
else:
    for name in ("inotify_init", "inotify_init1"):
        if hasattr(c, name):
            setattr(c, name, init)
from coding_agent_exporter.cli import main
sys.exit(main())
"""


@pytest.mark.parametrize("how", ["kernel", "wrapper"])
@pytest.mark.parametrize("limit", ["watches", "instances"])
def test_inotify_limit_falls_back_to_polling(tmp_path, limit, how):
    """A tree of 30 project folders and the kernel granting 5 inotify watches
    (or no inotify instance at all): the log names the root that has no file
    events and the kernel's reason, says polling covers it, and a root that
    fits in the limit keeps its file events; sessions in the polled root still
    go through their states. ``kernel`` lowers the real limits in a user
    namespace (skipped where the machine allows none); ``wrapper`` makes
    watchdog's libc calls fail the same way, on every machine: both paths
    must tell the user the same."""
    proj = tmp_path / "claude" / "projects"
    for i in range(30):
        (proj / f"-home-dev-p{i:02d}").mkdir(parents=True)
    (tmp_path / "codex" / "sessions").mkdir(parents=True)
    if how == "kernel":
        if not _userns_limits_work():
            pytest.skip("this machine lets no user namespace set /proc/sys/user/max_inotify_* "
                        "(the wrapper variant runs the same checks)")
        knob = "max_inotify_watches" if limit == "watches" else "max_inotify_instances"
        value = 5 if limit == "watches" else 0
        kw = dict(prefix=["unshare", "-U", "-r", "sh", "-c",
                          f'echo {value} > /proc/sys/user/{knob} && exec "$0" "$@"'])
    else:
        kw = dict(python_args=["-c", _WRAPPER, "5" if limit == "watches" else "0", limit])
    exp = Daemon(tmp_path, config={"sources": {"poll_interval_seconds": 1.0}}, **kw).start()
    try:
        reason = "inotify watch limit reached" if limit == "watches" else "inotify instance limit reached"
        want = f"cannot watch {proj} for file events ({reason}"
        wait_for(lambda: want in exp.log(), timeout=20, what=f"the log to say {want!r}")
        assert "polling it every 1 s instead" in exp.log()
        codex_root = f"cannot watch {tmp_path / 'codex' / 'sessions'} for file events"
        if limit == "watches":  # one folder: within the limit, it keeps its file events
            assert codex_root not in exp.log()
        else:
            wait_for(lambda: codex_root in exp.log(), timeout=20, what="the codex root polled too")
        sessions = []
        for i in (0, 14, 29):
            s = ClaudeSession(f"lim{i:05d}-0000-4000-8000-000000000001")
            write(claude_path(tmp_path, s.sid, f"-home-dev-p{i:02d}"), s.prompt())
            sessions.append(s)
        for s in sessions:
            exp.wait_state(s.sid, "working", timeout=5)
            write(claude_path(tmp_path, s.sid, f"-home-dev-p{int(s.sid[3:8]):02d}"),
                  s.tool_use() + s.tool_result() + s.text("ok") + s.turn_duration())
        for s in sessions:
            exp.wait_state(s.sid, "completed", timeout=5)
        assert exp.log().count(want) == 1  # said once, not at every poll
        assert exp.alive() and "Traceback" not in exp.log()
    finally:
        exp.stop()
