"""Benchmark of coding-agent-exporter: cold scan, append-to-/metrics latency,
alert latency, peak memory, idle CPU, hooks — measured in one run, printed as
a table with ratios and targets; with ``--baseline REV``, also the exporter of
another git revision, interleaved in the same run, in a second table of both
values and their ratio.

    python3 bench/run.py                 # reduced sizes, a few minutes
    python3 bench/run.py --full          # the sizes of the targets (issues 7 and 13)
    python3 bench/run.py --baseline 055728d --only scan,history,append,hooks,hookflood

``--full`` is ``--history-size 3GB --size 400MB --sessions 10000 --huge-line 200MB
--idle-files 1000 --idle-seconds 60 --appends 200 --poll-appends 40
--alerts 30 --repeat 5``. Corpora are generated under ``bench/out/``
(git-ignored) by ``bench/gen.py`` and reused while their parameters match.
``--only`` takes a comma list of parts: scan, history, append, hooks,
hookflood, alerts, rss, idlerss, idle (all by default).

Every exporter here is the real process, ``python3 -m coding_agent_exporter
run`` or ``scan``, of a source tree (:class:`Tree`): this working tree
(``new``) and, with ``--baseline REV``, a detached git worktree of REV made
under ``bench/out/baseline-<sha>`` (reused while it holds that commit),
``baseline``. Each tree's package is imported through a folder of
``bench/out/`` holding only a ``coding_agent_exporter`` symlink to its
``exporter/``, first on ``PYTHONPATH``, so the venv's install does not
matter. With a baseline, parts scan, history, append, hooks and hookflood
run on both trees, interleaved: a cold scan or a start of one tree, then of
the other, the order alternating each round (scan, history, hookflood), or
both exporters running at once with the samples alternating (append,
hooks); the others run on this tree only.

What is measured:

1. cold scan: wall time of the whole ``python3 -m coding_agent_exporter scan --json DIR``
   (start-up, discovery, decoding, reduction, output) against two loops over
   the same files in a fresh interpreter, timed around the loop only: reading
   every line (``for line in f``, the floor) and ``orjson.loads`` of every
   line. Best of ``--repeat`` interleaved runs (the page cache is warm; the
   machine may be shared, so the best run is the least disturbed one).
2. append → /metrics: a line that changes a session's state (a prompt →
   working, ``turn_duration``/``task_complete`` → completed) is appended;
   ``/metrics`` is scraped in a loop until it shows the new state. With file
   events (default config) and with polling only (``watch_events: false``,
   ``poll_interval_seconds: --poll-interval``).
3. marker → alert: an explicit completion marker is appended to a working
   session; the time until a real Apprise ``json://`` notification reaches a
   loopback HTTP receiver, minus ``alerts.settle_seconds``.
4. peak RSS (``VmHWM``) of the exporter after it has read a corpus holding a
   single ``--huge-line`` line, and one of ``--sessions`` sessions.
5. idle CPU: the exporter's user+system CPU time over ``--idle-seconds``
   while following ``--idle-files`` unchanging files (default config: events
   on, poll every 2 s, evaluation every 1 s).
6. heavy history: time to ``/-/ready`` (first start, restart), peak RSS,
   states and start-up read speed on two histories with the same active set
   (see :func:`bench_history`); every ratio is taken in the same run.
7. hook POST → /metrics: a ``PermissionRequest`` then a ``PostToolUse``
   hook POSTed to ``/hooks/claude_code`` for a live session (with the
   ``X-Coding-Agent-Hook-Token`` of ``state_dir/hook-secret`` when the
   exporter has one); ``/metrics`` scraped until it shows waiting / working
   (:func:`bench_hooks`; ``--appends`` of them).
8. hook flood: ``--flood-rate`` Claude Code 2.1.332 hooks a second for
   ``--flood-seconds`` over ``--flood-sessions`` live sessions, from
   ``--flood-threads`` threads with a keep-alive connection each, alerts
   to a real Apprise ``json://`` receiver; no turn ends, so a correct
   exporter pages nothing: achieved rate, accepted / refused / failed POSTs,
   ``coding_agent_hook_events_total`` against the accepted ones (none lost),
   POST p50/p99, pages; then one real turn end must page exactly once
   (:func:`bench_hookflood`).
9. idle RSS: ``VmRSS`` of an exporter following ``--idle-sessions``
   sessions (``gen.many_sessions``, half Claude Code, half Codex, with token
   usage), 10 s after ready and one scrape, from an empty ``state_dir``
   (a first start: no price cache); per tree, twice each, alternating, the
   lower of the two (:func:`bench_idle_rss`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import gen  # noqa: E402

#: The parts ``--only`` selects, and those ``--baseline`` also runs on the
#: baseline tree (the others run on this tree only).
PARTS = ("scan", "history", "append", "hooks", "hookflood", "alerts", "rss", "idlerss", "idle")
BASELINE_PARTS = ("scan", "history", "append", "hooks", "hookflood", "idlerss")
FULL = {"history_size": "3GB", "size": "400MB", "sessions": 10000, "huge_line": "200MB", "idle_files": 1000, "idle_seconds": 60,
        "appends": 200, "poll_appends": 40, "alerts": 30, "repeat": 5}


def parse_size(s: str) -> int:
    m = re.fullmatch(r"\s*([\d.]+)\s*([kKmMgG]?)[bB]?\s*", str(s))
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {s!r}")
    return int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()])


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- (1) cold scan -------------------------------------------------------------
LOOP = r"""
import os, sys, time
roots, mode = sys.argv[1].split(os.pathsep), sys.argv[2]
files = []
for root in roots:
    for d, _, names in os.walk(root):
        files += [os.path.join(d, n) for n in names if n.endswith(".jsonl")]
files.sort()
n = 0
if mode == "orjson":
    import orjson
    loads, err = orjson.loads, orjson.JSONDecodeError
t = time.perf_counter()
if mode == "read":
    for p in files:
        with open(p, "rb") as f:
            for line in f:
                n += 1
else:
    for p in files:
        with open(p, "rb") as f:
            for line in f:
                try:
                    loads(line)
                except err:
                    pass
                n += 1
print(time.perf_counter() - t, n)
"""


def bench_scan(corpus: Path, repeat: int, trees: list[Tree]) -> dict:
    """(1) Per tree label: the best ``scan --json`` wall time of ``repeat``
    runs, interleaved with the two loops and the other tree's scan (the
    trees' order alternates by round); the loops' figures are shared."""
    nbytes = sum(p.stat().st_size for p in corpus.rglob("*.jsonl"))
    loops: dict[str, list[float]] = {"read": [], "orjson": []}
    scans: dict[str, list[float]] = {t.label: [] for t in trees}
    sessions: dict[str, int] = {}
    for i in range(repeat):
        for mode in ("read", "orjson"):
            out = subprocess.run([sys.executable, "-c", LOOP, str(corpus), mode], capture_output=True, text=True,
                                 check=True)
            loops[mode].append(float(out.stdout.split()[0]))
        for tree in ordered(trees, i):
            t = time.perf_counter()
            out = tree.run("scan", "--json", str(corpus), capture_output=True, text=True)
            scans[tree.label].append(time.perf_counter() - t)
            sessions[tree.label] = len(out.stdout.splitlines())
        log(f"  scan run {i + 1}/{repeat}: read {loops['read'][-1]:.2f}s orjson {loops['orjson'][-1]:.2f}s "
            + " ".join(f"scan[{t.label}] {scans[t.label][-1]:.2f}s" for t in trees))
    res = {}
    for tree in trees:
        times = {**loops, "scan": scans[tree.label]}
        best = {k: min(v) for k, v in times.items()}
        res[tree.label] = {"bytes": nbytes, "sessions": sessions[tree.label], "best": best, "all": times,
                           "mb_s": {k: nbytes / v / 1e6 for k, v in best.items()},
                           "ratio_orjson": best["orjson"] / best["scan"], "ratio_floor": best["read"] / best["scan"]}
    return res


STAGES = r"""
import sys, time
import orjson
from coding_agent_exporter.config import Config
from coding_agent_exporter.decode import LineError, decode_line
from coding_agent_exporter.scan import _discover
try:  # the core of issue 19: a file table that reads, the store that applies
    from coding_agent_exporter.files import make_reader
    from coding_agent_exporter.providers import PROVIDER_MODULES, sniff as sniff_provider

    def read_all(files):
        make_reader(Config())[1].read_all(files)
except ImportError:  # an older tree (bench --baseline)
    from coding_agent_exporter.scan import _read_files, make_store, sniff_provider
    from coding_agent_exporter.store import PROVIDER_MODULES

    def read_all(files):
        _read_files(make_store(Config()), files)
from coding_agent_exporter.tailer import Tailer

files = [(fp, prov or sniff_provider(fp), root, size) for fp, prov, root, size in _discover([sys.argv[1]], Config(), None)]


def stage(n):
    t = time.process_time()
    if n == 4:
        read_all(files)
        return time.process_time() - t
    for fp, prov, _root, _size in files:
        tl, dec = Tailer(fp, 16 << 20), PROVIDER_MODULES[prov].FileDecoder()
        while True:
            res = tl.read(final=True)
            if not res.bytes_read:
                break
            for line in res.lines if n else ():
                if n == 1:
                    try:
                        orjson.loads(line)
                    except orjson.JSONDecodeError:
                        pass
                    continue
                try:
                    o = decode_line(line)
                except LineError:
                    continue
                if n == 3 and o is not None:
                    dec.project(o)
    return time.process_time() - t


best = [min(stage(n) for _ in range(int(sys.argv[2]))) for n in range(5)]
print(" ".join(map(str, best)))
"""
STAGE_NAMES = ["tailer: read and split lines", "tailer + orjson.loads", "tailer + decode_line",
               "tailer + decode_line + provider project()", "whole store: + identity digests, dedupe, reducer"]


def bench_stages(corpus: Path, repeat: int, tree: Tree) -> dict:
    """CPU seconds of the scan pipeline's stages in one process (where the
    time goes; this tree's internals, so ``new`` only)."""
    out = subprocess.run([sys.executable, "-c", STAGES, str(corpus), str(repeat)], cwd=tree.path, env=tree.env,
                         capture_output=True, text=True, check=True)
    return dict(zip(STAGE_NAMES, map(float, out.stdout.split())))


# -- (6) heavy history -----------------------------------------------------------
_DONE = re.compile(r"start-up scan done in ([\d.]+) s: read (\d+) files \(([\d.]+) (B|kB|MB|GB) in ([\d.]+) s\), "
                   r"skipped (\d+) files \(([\d.]+) (B|kB|MB|GB)\)")
_UNIT = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}


def _start_up_line(log_text: str) -> dict | None:
    """The figures of the daemon's last start-up line (None: none logged)."""
    found = _DONE.findall(log_text)
    if not found:
        return None
    m = found[-1]
    return {"took": float(m[0]), "read_files": int(m[1]), "read_bytes": float(m[2]) * _UNIT[m[3]],
            "read_s": float(m[4]), "skipped_files": int(m[5]), "skipped_bytes": float(m[6]) * _UNIT[m[7]]}


def bench_history(work: Path, size: int, repeat: int, trees: list[Tree]) -> dict:
    """(6) Heavy history (issue 13): corpus A of ``size`` bytes dated as a history
    with about 1 % of its bytes recent (``gen.history``), and A plus an
    all-old corpus B of the same size: the same active set under one and two
    histories. For each: the read-lines loop over every file, time to
    ``/-/ready`` at a first start (empty state_dir) and a restart (best of
    ``repeat``), peak RSS, the start-up log's read/skip figures, and every
    active session's state at ready against ``scan`` of its files; ``scan``
    of the active files times the per-byte speed the daemon's start-up read
    is held to. Per tree label; the trees take turns in each round (first
    start and restart of one, then of the other; the order alternates)."""
    a, b = work / f"history-a-{size // 1_000_000}MB", work / f"history-b-{size // 1_000_000}MB"
    meta = gen.history(a, size, 0.01, seed=7)
    gen.history(b, size, 0.0, seed=8)
    names = set(meta["recent_sessions"])
    recent = [p for p in sorted(a.rglob("*.jsonl")) if gen._session_of(a, p) in names]

    def scan_states(tree: Tree, at: float) -> dict:
        out = tree.run("scan", "--json", "--at", str(at), *map(str, recent), capture_output=True, text=True)
        return {r["session_id"]: r["state"] for r in map(json.loads, out.stdout.splitlines())}

    want = {t.label: scan_states(t, time.time()) for t in trees}
    scan_s: dict[str, list[float]] = {t.label: [] for t in trees}
    for i in range(repeat):
        for tree in ordered(trees, i):
            t = time.perf_counter()
            tree.run("scan", "--json", *map(str, recent), capture_output=True)
            scan_s[tree.label].append(time.perf_counter() - t)
    res = {t.label: {"recent_bytes": meta["recent_bytes"], "recent_files": len(recent), "sessions": len(want[t.label]),
                     "scan_recent_s": min(scan_s[t.label]),
                     "scan_recent_mb_s": meta["recent_bytes"] / min(scan_s[t.label]) / 1e6, "sizes": []}
           for t in trees}
    for corpora in ([a], [a, b]):
        roots = os.pathsep.join(str(c) for c in corpora)
        nbytes = sum(p.stat().st_size for c in corpora for p in c.rglob("*.jsonl"))
        files = sum(1 for c in corpora for _ in c.rglob("*.jsonl"))
        loop = min(float(subprocess.run([sys.executable, "-c", LOOP, roots, "read"], capture_output=True, text=True,
                                        check=True).stdout.split()[0]) for _ in range(repeat))
        cfg = {"sources": {"claude_code": {"paths": [str(c / "claude" / "projects") for c in corpora]},
                           "codex": {"paths": [str(c / "codex" / "sessions") for c in corpora]}}}
        rows = {t.label: {"bytes": nbytes, "files": files, "loop_s": loop, "first": [], "restart": [], "rss": [],
                          "lines": [], "wrong": 0} for t in trees}
        for i in range(repeat):
            for tree in ordered(trees, i):
                row = rows[tree.label]
                name = f"history-{len(corpora)}-{i}"
                for phase in ("first", "restart"):
                    ex = Exporter(a.parent, cfg, name, tree)
                    if phase == "first" and ex.state_dir.exists():
                        import shutil
                        shutil.rmtree(ex.state_dir)
                    ex.start()
                    try:
                        row[phase].append(ex.ready_s)
                        time.sleep(WARMUP_SECONDS)  # the file watches and the first poll's walk are done
                        row["rss"].append(ex.status("VmHWM"))
                        at = time.time()
                        text = ex.scrape()
                        got = {sid: ex.state(text, sid) for sid in want[tree.label]}
                        want[tree.label] = scan_states(tree, at)  # time-based rules (inferred, stalled): the same instant
                        row["wrong"] = max(row["wrong"], sum(got[k] != v for k, v in want[tree.label].items()))
                    finally:
                        ex.stop()
                    row["lines"].append(_start_up_line(ex.log_path.read_text()))
        for tree in trees:
            row = rows[tree.label]
            first = [ln for ln in row["lines"][::2] if ln]
            read_mb_s = [ln["read_bytes"] / ln["read_s"] / 1e6 for ln in first if ln["read_s"] > 0]
            row.update(first_s=min(row["first"]), restart_s=min(row["restart"]), peak_rss=max(row["rss"]),
                       read_mb_s=max(read_mb_s) if read_mb_s else 0.0, start_up=first[0] if first else None)
            log(f"  history {mb(nbytes)} ({files} files) [{tree.label}]: loop {loop:.2f}s, ready {row['first_s']:.2f}s "
                f"first, {row['restart_s']:.2f}s restart, peak RSS {mb(row['peak_rss'])}, start-up read "
                f"{row['read_mb_s']:.0f} MB/s, wrong states {row['wrong']}")
            res[tree.label]["sizes"].append(row)
    return res


# -- the exporter process ------------------------------------------------------
#: Seconds an exporter runs before latencies are measured (steady state:
#: the file watches are in place, the first poll and checkpoint are done).
WARMUP_SECONDS = 3.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Tree:
    """A source tree whose exporter is measured: this working tree (label
    ``new``) or a detached git worktree of ``--baseline REV`` (label
    ``baseline``). Its package is imported from a folder under
    ``bench/out/`` that holds only a ``coding_agent_exporter`` symlink to the
    tree's ``exporter/``, put first on ``PYTHONPATH`` (before the venv's
    editable install, whose finder comes after the path), so each tree runs
    its own code with the venv's dependencies; the process runs in the tree."""

    def __init__(self, label: str, path: Path, work: Path):
        self.label, self.path = label, path
        self.rev = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True,
                                  text=True).stdout.strip() or "?"
        if subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no", "exporter"],
                          capture_output=True, text=True).stdout.strip():
            self.rev += "+changes"
        shim = work / f"pkg-{label}"
        shim.mkdir(parents=True, exist_ok=True)
        link = shim / "coding_agent_exporter"
        if link.is_symlink() and os.readlink(link) != str(path / "exporter"):
            link.unlink()
        if not link.is_symlink():
            link.symlink_to(path / "exporter", target_is_directory=True)
        self.env = dict(os.environ)
        self.env.pop("CODING_AGENT_EXPORTER_APPRISE_URLS", None)
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shim), os.environ.get("PYTHONPATH")]))

    def cmd(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "coding_agent_exporter", *args]

    def run(self, *args: str, **kw) -> subprocess.CompletedProcess:
        """``python3 -m coding_agent_exporter ARGS`` of this tree (raises
        ``CalledProcessError`` when it fails)."""
        return subprocess.run(self.cmd(*args), cwd=self.path, env=self.env, check=True, **kw)

    def check(self) -> str:
        """Where this tree's package is imported from (must be its own)."""
        out = subprocess.run([sys.executable, "-c", "import coding_agent_exporter as m; print(m.__file__)"],
                             cwd=self.path, env=self.env, capture_output=True, text=True, check=True).stdout.strip()
        if Path(out).resolve().parent != (self.path / "exporter").resolve():
            raise RuntimeError(f"{self.label}: coding_agent_exporter imported from {out}, not {self.path}")
        return out


def baseline_tree(rev: str, work: Path) -> Tree:
    """A detached git worktree of ``rev`` at ``work/baseline-<sha>`` (made
    once, reused while it holds that commit)."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"], capture_output=True,
                         text=True, check=True).stdout.strip()
    path = work / f"baseline-{sha[:12]}"
    if not (path / ".git").exists():
        log(f"making a worktree of {rev} ({sha[:12]}) at {path} …")
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--force", "--detach", str(path), sha],
                       check=True, capture_output=True)
    head = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if head != sha:
        raise RuntimeError(f"{path} holds {head or 'no commit'}, not {sha}: remove it (git worktree remove)")
    return Tree("baseline", path, work)


def ordered(trees: list, i: int) -> list:
    """The trees in round ``i``'s order: A, B then B, A, so that neither
    always runs first."""
    return trees if i % 2 == 0 else trees[::-1]


class Exporter:
    def __init__(self, root: Path, config: dict, name: str, tree: Tree):
        self.root = root
        self.tree = tree
        name = f"{name}-{tree.label}"
        self.port = free_port()
        self.cfg_path = root / f"bench-{name}.yml"
        cfg = {"sources": {"claude_code": {"paths": [str(root / "claude" / "projects")]},
                           "codex": {"paths": [str(root / "codex" / "sessions")]}},
               "state_dir": str(root / f"state-{name}")}
        for k, v in config.items():
            cfg.setdefault(k, {}).update(v) if isinstance(v, dict) else cfg.__setitem__(k, v)
        self.state_dir = Path(cfg["state_dir"])
        self.cfg_path.write_text(json.dumps(cfg))  # JSON is YAML
        self.log_path = root / f"bench-{name}.log"
        self.proc: subprocess.Popen | None = None
        self.ready_s = None

    def start(self, timeout: float = 600) -> "Exporter":
        self._log = open(self.log_path, "wb")
        t = time.perf_counter()
        self.proc = subprocess.Popen(self.tree.cmd("run", "--config.file", str(self.cfg_path),
                                                   "--web.listen-address", f"127.0.0.1:{self.port}"),
                                     cwd=self.tree.path, stdout=self._log, stderr=subprocess.STDOUT, env=self.tree.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exporter exited: {self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        self.ready_s = time.perf_counter() - t
                        return self
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("exporter not ready in time")

    def hook_headers(self) -> dict:
        """The headers of a Claude Code HTTP hook: JSON, and the secret
        ``X-Coding-Agent-Hook-Token`` when the exporter keeps one in
        ``state_dir/hook-secret`` (older exporters have none)."""
        headers = {"Content-Type": "application/json"}
        secret = Path(self.state_dir) / "hook-secret"
        if secret.exists():
            headers["X-Coding-Agent-Hook-Token"] = secret.read_text().strip()
        return headers

    def scrape(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return r.read().decode()

    def state(self, text: str, sid: str) -> str | None:
        m = re.search(r'^coding_agent_session_state\{[^}]*session_id="' + re.escape(sid)
                      + r'"[^}]*state="(\w+)"\} 1\.0$', text, re.M)
        return m.group(1) if m else None

    def wait_state(self, sid: str, state: str, timeout: float = 30.0) -> float:
        """Scrape until ``sid`` shows ``state``; returns the monotonic time of
        the first scrape that showed it."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            text = self.scrape()
            if self.state(text, sid) == state:
                return time.perf_counter()
            time.sleep(0.001)  # leave the exporter's threads the GIL between scrapes
        raise RuntimeError(f"session {sid} never became {state}; last {self.state(self.scrape(), sid)}")

    def value(self, name: str, text: str | None = None) -> float:
        text = text or self.scrape()
        return sum(float(m.group(1)) for m in re.finditer(r"^" + re.escape(name) + r"(?:\{[^}]*\})? (\S+)$", text,
                                                             re.M))

    def status(self, key: str) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        return 0

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "_log", None):
            self._log.close()


# -- live sessions to append to ------------------------------------------------
def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class LiveClaude:
    def __init__(self, root: Path):
        self.sid = str(uuid.uuid4())
        self.path = root / "claude" / "projects" / "-home-dev-live" / f"{self.sid}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.parent = None

    def _rec(self, **kw) -> bytes:
        u = str(uuid.uuid4())
        d = {"parentUuid": self.parent, "isSidechain": False, "userType": "external", "cwd": "/home/dev/live",
             "sessionId": self.sid, "version": "2.1.114", "uuid": u, "timestamp": _iso(time.time()), **kw}
        self.parent = u
        return json.dumps(d, ensure_ascii=False).encode() + b"\n"

    def prompt(self) -> bytes:
        return self._rec(type="user", message={"role": "user", "content": "Tests fail again — please look ✓"})

    def marker(self) -> bytes:
        return self._rec(type="system", subtype="turn_duration", durationMs=42000, isMeta=False)


class LiveCodex:
    def __init__(self, root: Path):
        self.sid = str(uuid.uuid4())
        now = datetime.now(timezone.utc)
        self.path = root / "codex" / "sessions" / f"{now:%Y/%m/%d}" / f"rollout-{now:%Y-%m-%dT%H-%M-%S}-{self.sid}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.turn = None
        self.path.write_bytes(self._rec("session_meta", {"id": self.sid, "timestamp": _iso(time.time()),
                                                         "cwd": "/home/dev/live", "cli_version": "0.146.0",
                                                         "source": "cli"}))

    @staticmethod
    def _rec(rtype: str, payload: dict) -> bytes:
        return json.dumps({"timestamp": _iso(time.time()), "type": rtype, "payload": payload}).encode() + b"\n"

    def prompt(self) -> bytes:
        self.turn = str(uuid.uuid4())
        return self._rec("event_msg", {"type": "task_started", "turn_id": self.turn})

    def marker(self) -> bytes:
        return self._rec("event_msg", {"type": "task_complete", "turn_id": self.turn, "duration_ms": 4200,
                                       "last_agent_message": "Done."})


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(round(q / 100 * len(v) + 0.5)) - 1))]


def _latencies(lat: list[float], **extra) -> dict:
    return {"n": len(lat), "p50": pct(lat, 50), "p99": pct(lat, 99), "max": max(lat), "mean": statistics.mean(lat),
            **extra}


def bench_append(work: Path, n: int, events: bool, poll: float, trees: list[Tree]) -> dict:
    """(2) Append → /metrics, per tree label. One exporter per tree runs at
    the same time (each on its own 20-session corpus, with a live Claude and
    a live Codex session); the samples alternate between them (A, B, B, A …),
    so both see the same machine."""
    mode = "events" if events else "poll"
    cfg = {"sources": {"watch_events": events}}
    if not events:
        cfg["sources"]["poll_interval_seconds"] = poll
    runs = {}
    try:
        for tree in trees:
            root = work / f"append-{mode}-{tree.label}"
            gen.many_sessions(root, 20, seed=5)
            ex = runs[tree.label] = Exporter(root, cfg, "append", tree)
            ex.start()
            ex.lives = [LiveClaude(root), LiveCodex(root)]
            for lv in ex.lives:
                append(lv.path, lv.prompt())
                ex.wait_state(lv.sid, "working")
        time.sleep(WARMUP_SECONDS)
        lat: dict[str, list[float]] = {t.label: [] for t in trees}
        for i in range(-4, n):  # 4 warm-up appends, not counted
            for tree in ordered(trees, i):
                ex = runs[tree.label]
                lv = ex.lives[i % 2]
                line, want = (lv.marker(), "completed") if (i // 2) % 2 == 0 else (lv.prompt(), "working")
                t0 = time.perf_counter()
                append(lv.path, line)
                took = ex.wait_state(lv.sid, want) - t0
                if i >= 0:
                    lat[tree.label].append(took)
                time.sleep(0.02 if events else 0.05)
        return {t.label: _latencies(lat[t.label], poll_interval=None if events else poll) for t in trees}
    finally:
        for ex in runs.values():
            ex.stop()


def bench_hooks(work: Path, n: int, trees: list[Tree]) -> dict:
    """Hook POST → /metrics: a Claude Code session's ``PermissionRequest``
    hook (→ waiting), then ``PostToolUse`` (→ working), POSTed as the agent
    does to ``/hooks/claude_code`` (with the hook secret when the exporter
    has one); ``/metrics`` scraped until it shows the state. The time runs
    from the POST's start (the request included). Per tree label, the
    trees' exporters running at once and the samples alternating."""
    runs = {}
    try:
        for tree in trees:
            root = work / f"hooks-{tree.label}"
            gen.many_sessions(root, 20, seed=7)
            ex = runs[tree.label] = Exporter(root, {}, "hooks", tree)
            ex.start()
            ex.lv = LiveClaude(root)
            append(ex.lv.path, ex.lv.prompt())
            ex.wait_state(ex.lv.sid, "working")
        time.sleep(WARMUP_SECONDS)
        lat: dict[str, list[float]] = {t.label: [] for t in trees}
        for i in range(-4, n):
            name, want = ("PermissionRequest", "waiting") if i % 2 == 0 else ("PostToolUse", "working")
            for tree in ordered(trees, i // 2):
                ex, lv = runs[tree.label], runs[tree.label].lv
                body = json.dumps({"session_id": lv.sid, "transcript_path": str(lv.path), "cwd": "/home/dev/live",
                                   "hook_event_name": name, "tool_name": "Bash",
                                   "tool_input": {"command": f"make test {i}"}}).encode()
                req = urllib.request.Request(f"http://127.0.0.1:{ex.port}/hooks/claude_code", data=body,
                                             headers=ex.hook_headers())
                t0 = time.perf_counter()
                with urllib.request.urlopen(req, timeout=5) as r:
                    r.read()
                took = ex.wait_state(lv.sid, want) - t0
                if i >= 0:
                    lat[tree.label].append(took)
                time.sleep(0.02)
        return {t.label: _latencies(lat[t.label]) for t in trees}
    finally:
        for ex in runs.values():
            ex.stop()


# -- (3) alerts ----------------------------------------------------------------
class Receiver:
    """Loopback HTTP server taking Apprise ``json://`` posts."""

    def __init__(self):
        self.times: list[float] = []
        self.titles: list[str] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    outer.titles.append(str(json.loads(body).get("title")))
                except (ValueError, AttributeError):
                    outer.titles.append("?")
                outer.times.append(time.perf_counter())
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def bench_alerts(work: Path, n: int, settle: float, tree: Tree) -> dict:
    root = work / "alerts"
    gen.many_sessions(root, 20, seed=6)
    rx = Receiver()
    ex = Exporter(root, {"alerts": {"urls": [f"json://127.0.0.1:{rx.port}/notify"], "settle_seconds": settle,
                                    "max_age_seconds": 0}}, "alerts", tree).start()
    try:
        lives = [LiveClaude(root), LiveCodex(root)]
        time.sleep(WARMUP_SECONDS)
        over = []
        for i in range(n):
            lv = lives[i % 2]
            append(lv.path, lv.prompt())
            ex.wait_state(lv.sid, "working")
            sent = len(rx.times)
            t0 = time.perf_counter()
            append(lv.path, lv.marker())
            deadline = t0 + settle + 30
            while len(rx.times) <= sent and time.perf_counter() < deadline:
                time.sleep(0.0005)
            if len(rx.times) <= sent:
                raise RuntimeError("no alert arrived")
            over.append(rx.times[sent] - t0 - settle)
        return {"n": n, "settle": settle, "p50": pct(over, 50), "p99": pct(over, 99), "max": max(over),
                "received": len(rx.times)}
    finally:
        ex.stop()
        rx.close()


# -- (8) hook flood -------------------------------------------------------------
CLAUDE_VERSION = "2.1.332"


class LiveClaude332:
    """A live Claude Code 2.1.332 session in the middle of a turn, with the
    record and hook shapes the real CLI wrote (the offline recording
    ``tui_permission_allow`` of ``shared/live-agents``, Claude Code 2.1.332):
    mode / permission-mode / file-history-snapshot lines, a typed prompt
    (``promptId``, ``origin``, ``turnPosition`` …), one API response split
    one content block per line (a text block, then a Bash ``tool_use``, both
    ``stop_reason: "tool_use"``), ``last-prompt``. Hook bodies carry the
    envelope (``session_id``, ``transcript_path``, ``cwd``, ``prompt_id``,
    ``permission_mode``, ``effort``) and each event's fields as 2.1.332 sent
    them. :meth:`end` gives the turn end: the tool result and an
    ``end_turn`` answer, then (after the Stop hook) ``stop_hook_summary`` and
    ``turn_duration``."""

    def __init__(self, root: Path, n: int):
        self.sid = str(uuid.uuid4())
        self.cwd = f"/home/dev/work/flood-{n:02d}"
        self.path = root / "claude" / "projects" / self.cwd.replace("/", "-") / f"{self.sid}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.prompt_id = str(uuid.uuid4())
        self.parent = None
        self.tool = 0

    def _line(self, d: dict) -> bytes:
        return json.dumps(d, ensure_ascii=False).encode() + b"\n"

    def _rec(self, type: str, **kw) -> bytes:
        u = str(uuid.uuid4())
        d = {"parentUuid": self.parent, "isSidechain": False, **kw, "type": type, "uuid": u,
             "timestamp": _iso(time.time()), "userType": "external", "entrypoint": "cli", "cwd": self.cwd,
             "sessionId": self.sid, "version": CLAUDE_VERSION, "gitBranch": "HEAD"}
        self.parent = u
        return self._line(d)

    def _assistant(self, content: dict, stop: str, msg_id: str) -> bytes:
        return self._rec("assistant", message={
            "id": msg_id, "type": "message", "role": "assistant", "model": "claude-opus-5-5", "content": [content],
            "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                      "output_tokens": 20, "service_tier": "standard"}, "stop_details": None},
            requestId=f"req_{msg_id[4:]}", requestedModel="claude-opus-5-5", effort="medium", madeBy="model",
            session_id=self.sid)

    def start(self) -> bytes:
        meta = [self._line({"type": "mode", "mode": "normal", "sessionId": self.sid}),
                self._line({"type": "permission-mode", "permissionMode": "default", "sessionId": self.sid})]
        prompt = self._rec("user", promptId=self.prompt_id, message={"role": "user", "content": "Run the tests."},
                           permissionMode="default", origin={"kind": "human"}, promptSource="typed",
                           turnOrigin="human", turnPosition={"promptIndex": 1, "turnIndex": 1})
        msg = "msg_" + uuid.uuid4().hex[:20]
        text = self._assistant({"type": "text", "text": "I will run a command."}, "tool_use", msg)
        tool = self._assistant({"type": "tool_use", "id": self.tool_use_id(), "name": "Bash",
                                "input": {"command": "make test", "description": "Run the tests"}}, "tool_use", msg)
        last = self._line({"type": "last-prompt", "lastPrompt": "Run the tests.", "leafUuid": self.parent,
                           "sessionId": self.sid})
        return b"".join(meta + [prompt, text, tool, last])

    def tool_use_id(self) -> str:
        return f"toolu_{self.sid[:8]}{self.tool:08d}"

    def end(self) -> tuple[bytes, bytes]:
        tool_use = self.parent
        result = self._rec("user", promptId=self.prompt_id, message={"role": "user", "content": [
            {"tool_use_id": self.tool_use_id(), "type": "tool_result", "content": "ok", "is_error": False}]},
            toolUseResult={"stdout": "ok", "stderr": "", "interrupted": False, "isImage": False},
            sourceToolAssistantUUID=tool_use, session_id=self.sid)
        answer = self._assistant({"type": "text", "text": "Done: the tests pass."}, "end_turn",
                                 "msg_" + uuid.uuid4().hex[:20])
        summary = self._rec("system", subtype="stop_hook_summary", hookCount=1, hookInfos=[], hookErrors=[],
                            preventedContinuation=False, stopReason="", hasOutput=False, level="suggestion",
                            session_id=self.sid)
        duration = self._rec("system", subtype="turn_duration", durationMs=12000, messageCount=16, isMeta=False)
        return result + answer, summary + duration

    def hook(self, name: str) -> bytes:
        """One hook body as Claude Code 2.1.332 POSTs it."""
        d = {"session_id": self.sid, "transcript_path": str(self.path), "cwd": self.cwd, "prompt_id": self.prompt_id,
             "permission_mode": "default", "effort": {"level": "medium"}, "hook_event_name": name}
        cmd = {"command": f"make test {self.tool}", "description": "Run the tests"}
        if name == "UserPromptSubmit":
            self.prompt_id = d["prompt_id"] = str(uuid.uuid4())
            del d["effort"]
            d["prompt"] = "Run the tests again."
        elif name == "PreToolUse":
            self.tool += 1
            cmd["command"] = f"make test {self.tool}"
            d.update(tool_name="Bash", tool_input=cmd, tool_use_id=self.tool_use_id())
        elif name == "PermissionRequest":
            d.update(tool_name="Bash", tool_input=cmd, permission_suggestions=[
                {"type": "addDirectories", "directories": [self.cwd], "destination": "session"},
                {"type": "setMode", "mode": "acceptEdits", "destination": "session"}])
        elif name == "Notification":
            for k in ("permission_mode", "effort"):
                del d[k]
            d.update(message="Claude needs your permission", notification_type="permission_prompt")
        elif name == "PostToolUse":
            d.update(tool_name="Bash", tool_input=cmd, tool_response={
                "stdout": "ok", "stderr": "", "interrupted": False, "isImage": False, "noOutputExpected": False},
                tool_use_id=self.tool_use_id(), duration_ms=62)
        elif name == "Stop":
            d.update(stop_hook_active=False, last_assistant_message="Done: the tests pass.", background_tasks=[],
                     session_crons=[])
        return json.dumps(d).encode()


#: One cycle of a session's hooks in the flood: no Stop, so no turn ends;
#: every permission prompt (PermissionRequest, then the permission_prompt
#: Notification) is answered by the tool's PostToolUse, and a cycle ends
#: with the session working.
FLOOD_CYCLE = ("UserPromptSubmit", "PreToolUse", "PostToolUse", "PreToolUse", "PermissionRequest", "Notification",
               "PostToolUse", "PreToolUse", "PermissionRequest", "Notification", "PostToolUse")


def _post_loop(port: int, jobs: list[tuple[str, bytes]], headers: dict, interval: float, t0: float, out: dict):
    """Send ``jobs`` (hook name, body) over one keep-alive connection, job k
    at ``t0 + k * interval`` (at once when behind). ``out`` gets each
    POST's status (or the exception's name) and latency."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for k, (name, body) in enumerate(jobs):
        delay = t0 + k * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        t = time.perf_counter()
        try:
            conn.request("POST", "/hooks/claude_code", body=body, headers=headers)
            r = conn.getresponse()
            r.read()
            status = r.status
        except (OSError, http.client.HTTPException) as e:
            status = type(e).__name__
            conn.close()
        out["lat"].append(time.perf_counter() - t)
        out["status"].append((name, status))
    out["end"] = time.perf_counter()
    conn.close()


def bench_hookflood(work: Path, rate: int, seconds: float, n_sessions: int, threads: int, settle: float,
                    trees: list[Tree]) -> dict:
    """(8) Hook flood, per tree label (one tree after the other). An
    exporter with alerts to a real Apprise ``json://`` loopback receiver
    (``settle_seconds: settle``) follows ``n_sessions`` live Claude Code
    2.1.332 sessions (:class:`LiveClaude332`, each mid-turn). ``threads``
    threads, each with its own keep-alive connection and its own share of
    the sessions (so each session's hooks stay in order), POST
    ``rate * seconds`` hooks (:data:`FLOOD_CYCLE` repeated per session) at
    ``rate`` a second in all. Reported: the achieved rate, 2xx / refused /
    failed POSTs, ``coding_agent_hook_events_total`` delta per event name
    against the 2xx ones sent (none lost: equal), hook errors, the permission
    waits observed (``coding_agent_user_wait_seconds_count``; at most one per
    prompt: a wait is counted when an evaluation saw it, so one answered
    before the next evaluation is not), every session's state after it (working),
    POST latency p50/p99, and pages: none may arrive by ``settle + 2`` s
    after the flood (no turn ended). Then one session's turn really ends
    (tool result and ``end_turn`` answer written, the Stop hook POSTed,
    ``stop_hook_summary`` and ``turn_duration`` written): exactly one page
    must follow, so zero is not vacuous."""
    res = {}
    for tree in trees:
        root = work / f"hookflood-{tree.label}"
        if root.exists():
            import shutil
            shutil.rmtree(root)
        root.mkdir(parents=True)
        rx = Receiver()
        ex = Exporter(root, {"alerts": {"urls": [f"json://127.0.0.1:{rx.port}/notify"], "settle_seconds": settle}},
                      "hookflood", tree)
        ex.start()
        try:
            lives = [LiveClaude332(root, n) for n in range(n_sessions)]
            for lv in lives:
                lv.path.write_bytes(lv.start())
            for lv in lives:
                ex.wait_state(lv.sid, "working")
            time.sleep(WARMUP_SECONDS)
            headers = ex.hook_headers()
            per_session = -(-int(rate * seconds) // n_sessions)
            cycles = -(-per_session // len(FLOOD_CYCLE))
            names = list(FLOOD_CYCLE) * cycles
            jobs: list[list[tuple[str, bytes]]] = [[] for _ in range(threads)]
            for j in range(threads):  # round-robin over the thread's sessions, each in its own order
                mine = lives[j::threads]
                for name in names:
                    jobs[j] += [(name, lv.hook(name)) for lv in mine]
            total = sum(map(len, jobs))
            before = ex.scrape()
            pages0 = len(rx.times)
            outs = [{"lat": [], "status": []} for _ in range(threads)]
            t0 = time.perf_counter() + 0.05
            cpu0, own0 = ex.cpu_seconds(), time.process_time()
            span = total / rate  # each thread spreads its share over the same span
            workers = [threading.Thread(target=_post_loop, args=(ex.port, jobs[j], headers, span / len(jobs[j]), t0,
                                                                  outs[j])) for j in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            took = max(o["end"] for o in outs) - t0
            cpu = (ex.cpu_seconds() - cpu0) / took, (time.process_time() - own0) / took  # exporter, this client
            statuses = [st for o in outs for st in o["status"]]
            lat = [x for o in outs for x in o["lat"]]
            accepted: dict[str, int] = {}
            for name, st in statuses:
                if isinstance(st, int) and 200 <= st < 300:
                    accepted[name] = accepted.get(name, 0) + 1
            refused = sum(1 for _, st in statuses if isinstance(st, int) and not 200 <= st < 300)
            failed = sum(1 for _, st in statuses if not isinstance(st, int))
            waits_want = sum(1 for n in names if n == "PermissionRequest") * n_sessions

            def waits(text: str) -> float:
                return sum(float(m.group(1)) for m in re.finditer(
                    r'^coding_agent_user_wait_seconds_count\{[^}]*reason="permission"[^}]*\} (\S+)$', text, re.M))

            w0 = waits(before)
            deadline = time.perf_counter() + 60
            seen, still = -1.0, time.perf_counter()
            while time.perf_counter() < deadline:  # until the reader has applied every answered prompt
                text = ex.scrape()
                done = all(ex.state(text, lv.sid) == "working" for lv in lives)
                w = waits(text) - w0
                if w != seen:
                    seen, still = w, time.perf_counter()
                if done and (w >= waits_want or time.perf_counter() - still > 2):  # (or it stopped moving)
                    break
                time.sleep(0.1)
            applied_s = time.perf_counter() - t0 - took
            time.sleep(settle + 2)
            text = ex.scrape()
            delta = {n: _hook_count(text, n) - _hook_count(before, n) for n in set(FLOOD_CYCLE)}
            e0 = _hook_errors(before)
            errors = {k: v - e0.get(k, 0) for k, v in _hook_errors(text).items() if v > e0.get(k, 0)}
            flood_pages = rx.titles[pages0:]
            states = [ex.state(text, lv.sid) for lv in lives]
            # the real turn end of one session: exactly one page
            lv = lives[0]
            first, last = lv.end()
            append(lv.path, first)
            req = urllib.request.Request(f"http://127.0.0.1:{ex.port}/hooks/claude_code", data=lv.hook("Stop"),
                                         headers=headers)
            t_stop = time.perf_counter()
            with urllib.request.urlopen(req, timeout=10) as r:
                r.read()
            append(lv.path, last)
            n0 = len(rx.times)
            deadline = time.perf_counter() + settle + 30
            while len(rx.times) <= n0 and time.perf_counter() < deadline:
                time.sleep(0.005)
            page_s = rx.times[n0] - t_stop - settle if len(rx.times) > n0 else None
            time.sleep(settle + 2)  # a second page would come by now
            res[tree.label] = {
                "rate": rate, "seconds": seconds, "sessions": n_sessions, "threads": threads, "sent": total,
                "took": took, "achieved": total / took, "exporter_cpu": cpu[0], "client_cpu": cpu[1], "accepted": sum(accepted.values()), "refused": refused,
                "failed": failed, "accepted_by_name": accepted, "counted_by_name": delta,
                "counted": sum(delta.values()), "lost": sum(accepted.values()) - sum(delta.values()),
                "hook_errors": errors, "waits": waits(text) - w0, "waits_want": waits_want,
                "states_working": sum(st == "working" for st in states), "applied_after_s": applied_s,
                "p50": pct(lat, 50), "p99": pct(lat, 99), "max": max(lat),
                "flood_pages": len(flood_pages), "flood_page_titles": flood_pages[:5],
                "end_pages": len(rx.times) - n0, "end_page_titles": rx.titles[n0:], "end_page_s": page_s}
            r_ = res[tree.label]
            log(f"  hookflood [{tree.label}]: {r_['achieved']:.0f}/s for {took:.1f}s (CPU: exporter "
                f"{100 * cpu[0]:.0f} %, client {100 * cpu[1]:.0f} % of a core), {r_['accepted']} accepted, "
                f"{refused} refused, {failed} failed, counted {r_['counted']} (lost {r_['lost']}), errors {errors}, "
                f"waits {r_['waits']:.0f}/{waits_want}, working {r_['states_working']}/{n_sessions}, POST p50 "
                f"{1000 * r_['p50']:.1f} ms p99 {1000 * r_['p99']:.1f} ms, pages {len(flood_pages)} during, "
                f"{r_['end_pages']} for the turn end {rx.titles[n0:]}")
        finally:
            ex.stop()
            rx.close()
    return res


def _hook_count(text: str, event: str) -> float:
    return sum(float(m.group(1)) for m in re.finditer(
        r'^coding_agent_hook_events_total\{[^}]*event="' + re.escape(event) + r'"[^}]*\} (\S+)$', text, re.M))


def _hook_errors(text: str) -> dict:
    return {m.group(1): float(m.group(2)) for m in re.finditer(
        r'^coding_agent_hook_errors_total\{reason="(\w+)"\} (\S+)$', text, re.M)}


# -- (4) memory ----------------------------------------------------------------
def bench_rss_huge(work: Path, line_bytes: int, tree: Tree) -> dict:
    root = work / "huge"
    meta = gen.huge_line(root, line_bytes)
    ex = Exporter(root, {}, "huge", tree).start()
    try:
        ex.wait_state(meta["session_id"], "completed", timeout=120)
        text = ex.scrape()
        return {"line_bytes": line_bytes, "peak_rss": ex.status("VmHWM"), "rss": ex.status("VmRSS"),
                "oversized": ex.value('coding_agent_transcript_skipped_lines_total{provider="claude_code",'
                                      'reason="oversized"}', text) or _oversized(text),
                "ready_s": ex.ready_s}
    finally:
        ex.stop()


def _oversized(text: str) -> float:
    m = re.search(r'^coding_agent_transcript_skipped_lines_total\{[^}]*reason="oversized"[^}]*\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def bench_rss_sessions(work: Path, n: int, tree: Tree) -> dict:
    root = work / f"sessions-{n}"
    meta = gen.many_sessions(root, n)
    ex = Exporter(root, {}, "sessions", tree).start(timeout=1800)
    try:
        for _ in range(3):
            text = ex.scrape()
        total = sum(float(m.group(1)) for m in re.finditer(r"^coding_agent_sessions\{[^}]*\} (\S+)$", text, re.M))
        return {"sessions": n, "files": meta["files"], "bytes": meta["written"], "seen": total,
                "peak_rss": ex.status("VmHWM"), "rss": ex.status("VmRSS"), "ready_s": ex.ready_s}
    finally:
        ex.stop()


def bench_idle_rss(work: Path, n: int, trees: list[Tree]) -> dict:
    """(9) Idle ``VmRSS`` with ``n`` sessions, per tree label (see the module doc)."""
    import shutil

    root = work / f"idlerss-{n}"
    meta = gen.many_sessions(root, n, seed=3)
    rss: dict[str, list[int]] = {t.label: [] for t in trees}
    for i in range(2):
        for tree in ordered(trees, i):
            ex = Exporter(root, {}, f"idlerss{i}", tree)
            shutil.rmtree(ex.state_dir, ignore_errors=True)
            ex.start()
            try:
                ex.scrape()
                time.sleep(10)
                rss[tree.label].append(ex.status("VmRSS"))
            finally:
                ex.stop()
    return {t.label: {"sessions": n, "files": meta["files"], "rss": min(rss[t.label])} for t in trees}


# -- (5) idle CPU --------------------------------------------------------------
def bench_idle(work: Path, files: int, seconds: float, tree: Tree) -> dict:
    root = work / f"idle-{files}"
    meta = gen.many_sessions(root, files, seed=17, session_bytes=3000)
    ex = Exporter(root, {}, "idle", tree).start()
    try:
        time.sleep(3)  # let the start-up settle
        c0, t0 = ex.cpu_seconds(), time.monotonic()
        time.sleep(seconds)
        c1, t1 = ex.cpu_seconds(), time.monotonic()
        watched = ex.value("coding_agent_files_watched")
        return {"files": meta["files"], "watched": watched, "seconds": t1 - t0, "cpu_s": c1 - c0,
                "cpu_pct": 100 * (c1 - c0) / (t1 - t0)}
    finally:
        ex.stop()


# -- report --------------------------------------------------------------------
def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 1048576:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return f"{cpu}, {cores} cores{mem}; Linux {platform.release()}; Python {platform.python_version()}"


def mb(n: float) -> str:
    return f"{n / 1e6:.0f} MB"


def table(r: dict, args) -> str:
    rows = []
    s = r.get("scan")
    if s:
        b = s["best"]
        rows += [
            ("cold scan, whole `scan --json` command", f"{b['scan']:.2f} s ({s['mb_s']['scan']:.0f} MB/s)",
             "≥ 1.0× orjson loop (both cores)",
             ("met: " if s["ratio_orjson"] >= 1.0 else "**missed: ")
             + f"{s['ratio_orjson']:.2f}×**"[: None if s["ratio_orjson"] < 1.0 else -2]
             + f" the orjson loop, {s['ratio_floor']:.2f}× the read floor"),
            ("— loop: read lines only (floor)", f"{b['read']:.2f} s ({s['mb_s']['read']:.0f} MB/s)", "", ""),
            ("— loop: `orjson.loads` every line", f"{b['orjson']:.2f} s ({s['mb_s']['orjson']:.0f} MB/s)", "", ""),
        ]
    for key, label, target in (("append_events", "append → /metrics, file events", 0.020),
                               ("append_poll", "append → /metrics, polling only", None)):
        a = r.get(key)
        if a:
            tgt = target if target is not None else a["poll_interval"] + 0.020
            ok = "met" if a["p99"] < tgt else f"missed by {1000 * (a['p99'] - tgt):.0f} ms"
            extra = f" (poll {a['poll_interval']:.1f} s)" if a["poll_interval"] else ""
            rows.append((label + extra, f"p50 {1000 * a['p50']:.1f} ms, p99 {1000 * a['p99']:.1f} ms (n={a['n']})",
                         f"p99 < {1000 * tgt:.0f} ms", ok))
    a = r.get("hooks")
    if a:
        ok = "met" if a["p99"] < 0.020 else f"missed by {1000 * (a['p99'] - 0.020):.0f} ms"
        rows.append(("hook POST → /metrics", f"p50 {1000 * a['p50']:.1f} ms, p99 {1000 * a['p99']:.1f} ms (n={a['n']})",
                     "p99 < 20 ms", ok))
    a = r.get("alerts")
    if a:
        ok = "met" if a["p99"] < 0.1 else f"missed by {1000 * (a['p99'] - 0.1):.0f} ms"
        rows.append((f"marker → alert beyond settle ({a['settle']:.1f} s)",
                     f"p50 {1000 * a['p50']:.1f} ms, p99 {1000 * a['p99']:.1f} ms (n={a['n']})", "< 100 ms", ok))
    h = r.get("rss_huge")
    if h:
        ok = "met" if h["peak_rss"] < 150e6 else f"missed by {mb(h['peak_rss'] - 150e6)}"
        rows.append((f"peak RSS, one {mb(h['line_bytes'])} line", f"{mb(h['peak_rss'])} (skipped: {h['oversized']:.0f})",
                     "< 150 MB", ok))
    m = r.get("rss_sessions")
    if m:
        ok = "met" if m["peak_rss"] < 300e6 else f"missed by {mb(m['peak_rss'] - 300e6)}"
        rows.append((f"peak RSS, {m['sessions']} sessions ({mb(m['bytes'])})",
                     f"{mb(m['peak_rss'])} (ready in {m['ready_s']:.1f} s)", "< 300 MB", ok))
    m = r.get("idlerss")
    if m:
        ok = "met" if m["rss"] <= 30e6 else f"missed by {mb(m['rss'] - 30e6)}"
        rows.append((f"idle RSS, {m['sessions']} sessions (Irrlicht claims ~5 MB)", mb(m["rss"]), "toward 30 MB", ok))
    i = r.get("idle")
    if i:
        ok = "met" if i["cpu_pct"] < 1 else f"missed by {i['cpu_pct'] - 1:.2f} points"
        rows.append((f"idle CPU, {i['files']} files, {i['seconds']:.0f} s", f"{i['cpu_pct']:.2f} % of a core",
                     "< 1 %", ok))
    hs = r.get("history")
    if hs:
        for row in hs["sizes"]:
            tgt = 0.25 * row["loop_s"]
            worst = max(row["first_s"], row["restart_s"])
            ok = "met" if worst <= tgt else f"missed by {worst - tgt:.2f} s"
            rows.append((f"time to /-/ready, history of {mb(row['bytes'])} ({row['files']} files; {mb(hs['recent_bytes'])}"
                         f" recent), first start / restart",
                         f"{row['first_s']:.2f} s / {row['restart_s']:.2f} s (read-lines loop {row['loop_s']:.2f} s: "
                         f"{worst / row['loop_s']:.2f}×)", "≤ 0.25× the loop", ok))
        r1, r2 = hs["sizes"][0], hs["sizes"][-1]
        ok = "met" if r2["peak_rss"] <= 120e6 and r2["peak_rss"] <= r1["peak_rss"] * 1.1 else "missed"
        rows.append(("peak RSS, heavy history (one / two histories, same active set)",
                     f"{mb(r1['peak_rss'])} / {mb(r2['peak_rss'])}", "≤ 120 MB, no growth", ok))
        wrong = max(x["wrong"] for x in hs["sizes"])
        rows.append((f"active sessions' states at ready = `scan` of their files", f"{hs['sessions'] - wrong} of "
                     f"{hs['sessions']} equal", "all", "met" if not wrong else f"missed: {wrong} differ"))
        rd = min(x["read_mb_s"] for x in hs["sizes"])
        ok = "met" if rd >= hs["scan_recent_mb_s"] else f"missed: {rd / hs['scan_recent_mb_s']:.2f}×"
        rows.append(("start-up read speed (what is not history)", f"{rd:.0f} MB/s (`scan` of the same files, "
                     f"whole command: {hs['scan_recent_mb_s']:.0f} MB/s)", "≥ `scan`", ok))
    f = r.get("hookflood")
    if f:
        ok = f["lost"] == 0 and f["accepted"] == f["sent"] and f["flood_pages"] == 0 and f["end_pages"] == 1 \
            and f["achieved"] >= 0.98 * f["rate"]
        rows.append((f"hook flood: {f['rate']}/s for {f['seconds']:.0f} s over {f['sessions']} sessions "
                     f"({f['threads']} keep-alive connections)", _flood(f),
                     f"≥ {f['rate']}/s, none lost, 0 pages, then 1 page for a real turn end",
                     "met" if ok else "**missed**"))
    out = ["| measurement | result | target | verdict |", "|---|---|---|---|"]
    out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(out)


def _flood(f: dict) -> str:
    errs = ", ".join(f"{k} {v:.0f}" for k, v in f["hook_errors"].items()) or "none"
    return (f"{f['achieved']:.0f}/s (exporter CPU {100 * f['exporter_cpu']:.0f} % of a core); {f['accepted']} of {f['sent']} accepted, {f['refused']} refused, {f['failed']} "
            f"failed; counted {f['counted']:.0f} (lost {f['lost']:.0f}); hook errors {errs}; permission waits "
            f"observed {f['waits']:.0f} of {f['waits_want']}; POST p50 {1000 * f['p50']:.1f} ms, p99 "
            f"{1000 * f['p99']:.1f} ms; pages {f['flood_pages']} during, {f['end_pages']} for the turn end")


def compare(r: dict) -> str:
    """The measures run on both trees: baseline, new, and new/baseline."""
    b = r["baseline"]
    rows = []

    def ratio(new: float, old: float) -> str:
        return f"{new / old:.2f}×" if old else "–"

    if "scan" in b:
        n, o = r["scan"], b["scan"]
        rows.append(("cold scan, whole `scan --json` (best of runs)",
                     f"{o['best']['scan']:.2f} s ({o['ratio_orjson']:.2f}× orjson loop)",
                     f"{n['best']['scan']:.2f} s ({n['ratio_orjson']:.2f}× orjson loop)",
                     ratio(n["best"]["scan"], o["best"]["scan"])))
        if n["sessions"] != o["sessions"]:
            rows.append(("— sessions found by scan", str(o["sessions"]), str(n["sessions"]), "**differ**"))
    if "history" in b:
        for rn, ro in zip(r["history"]["sizes"], b["history"]["sizes"]):
            for phase in ("first", "restart"):
                rows.append((f"time to /-/ready, history of {mb(rn['bytes'])}, {'first start' if phase == 'first' else phase}",
                             f"{ro[phase + '_s']:.2f} s", f"{rn[phase + '_s']:.2f} s",
                             ratio(rn[phase + "_s"], ro[phase + "_s"])))
            rows.append((f"— peak RSS, history of {mb(rn['bytes'])}", mb(ro["peak_rss"]), mb(rn["peak_rss"]),
                         ratio(rn["peak_rss"], ro["peak_rss"])))
            if rn["wrong"] or ro["wrong"]:
                rows.append(("— active states ≠ scan", str(ro["wrong"]), str(rn["wrong"]), ""))
    for key, label in (("append_events", "append → /metrics, file events"),
                       ("append_poll", "append → /metrics, polling only"), ("hooks", "hook POST → /metrics"),
                       ("hookflood", "hook POST under the flood")):
        if key in b:
            n, o = r[key], b[key]
            for q in ("p50", "p99"):
                rows.append((f"{label}, {q} (n={n.get('n', n.get('sent'))})", f"{1000 * o[q]:.1f} ms",
                             f"{1000 * n[q]:.1f} ms", ratio(n[q], o[q])))
    if "idlerss" in b:
        n, o = r["idlerss"], b["idlerss"]
        rows.append((f"idle RSS, {n['sessions']} sessions", mb(o["rss"]), mb(n["rss"]), ratio(n["rss"], o["rss"])))
    if "hookflood" in b:
        n, o = r["hookflood"], b["hookflood"]
        rows.append(("hook flood: achieved rate", f"{o['achieved']:.0f}/s", f"{n['achieved']:.0f}/s",
                     ratio(n["achieved"], o["achieved"])))
        rows.append(("hook flood: exporter CPU (% of a core)", f"{100 * o['exporter_cpu']:.0f} %",
                     f"{100 * n['exporter_cpu']:.0f} %", ratio(n["exporter_cpu"], o["exporter_cpu"])))
        for k, label in (("accepted", "accepted (2xx)"), ("refused", "refused (4xx)"), ("failed", "failed (no reply)"),
                         ("lost", "lost (accepted − counted)"), ("flood_pages", "pages during the flood (false)"),
                         ("end_pages", "pages for the one real turn end")):
            rows.append((f"hook flood: {label}", f"{o[k]:.0f}", f"{n[k]:.0f}", ""))
        rows.append(("hook flood: permission waits observed / prompts sent", f"{o['waits']:.0f} / {o['waits_want']}",
                     f"{n['waits']:.0f} / {n['waits_want']}", ""))
        rows.append(("hook flood: sessions working after it", f"{o['states_working']} / {o['sessions']}",
                     f"{n['states_working']} / {n['sessions']}", ""))
    head = (f"| measurement | baseline {r['trees']['baseline']['rev']} | new {r['trees']['new']['rev']} "
            f"| new/baseline |")
    return "\n".join([head, "|---|---|---|---|"] + [f"| {a} | {b_} | {c} | {d} |" for a, b_, c, d in rows])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--full", action="store_true", help="target sizes: " + ", ".join(f"--{k.replace('_', '-')} {v}"
                                                                                  for k, v in FULL.items()))
    p.add_argument("--size", default="100MB", help="mixed corpus for the cold scan (default 100MB)")
    p.add_argument("--sessions", type=int, default=10000, help="sessions in the memory corpus (default 10000)")
    p.add_argument("--huge-line", default="200MB", help="the single line of the memory corpus (default 200MB)")
    p.add_argument("--idle-files", type=int, default=1000, help="files followed while idle (default 1000)")
    p.add_argument("--idle-sessions", type=int, default=500, help="sessions for the idle RSS (default 500)")
    p.add_argument("--idle-seconds", type=float, default=20, help="idle CPU window (default 20)")
    p.add_argument("--appends", type=int, default=100, help="appends with file events (default 100)")
    p.add_argument("--poll-appends", type=int, default=20, help="appends with polling only (default 20)")
    p.add_argument("--poll-interval", type=float, default=0.5, help="poll interval for polling only (default 0.5)")
    p.add_argument("--alerts", type=int, default=20, help="alerts to time (default 20)")
    p.add_argument("--settle", type=float, default=0.5, help="alerts.settle_seconds (default 0.5)")
    p.add_argument("--repeat", type=int, default=3, help="cold scan runs, best taken (default 3)")
    p.add_argument("--history-size", default="1GB",
                   help="heavy history: each of two corpora, the first 1%% recent (default 1GB)")
    p.add_argument("--flood-rate", type=int, default=1000, help="hook flood: POSTs a second in all (default 1000)")
    p.add_argument("--flood-seconds", type=float, default=10, help="hook flood: its length (default 10)")
    p.add_argument("--flood-sessions", type=int, default=20, help="hook flood: live sessions (default 20)")
    p.add_argument("--flood-threads", type=int, default=10,
                   help="hook flood: sending threads, one keep-alive connection each (default 10: one waits for "
                        "each reply, so at a few ms a reply four could not reach 1,000/s)")
    p.add_argument("--only", default=",".join(PARTS), help="comma-separated parts to run, of: " + ", ".join(PARTS))
    p.add_argument("--baseline", metavar="REV",
                   help="also measure the exporter of git revision REV (a detached worktree under --out), "
                        "interleaved with this tree's in the same run: " + ", ".join(BASELINE_PARTS))
    p.add_argument("--out", default=str(HERE / "out"), help="work folder (default bench/out)")
    args = p.parse_args(argv)
    if args.full:
        for k, v in FULL.items():
            setattr(args, k, v)
    parts = set(args.only.split(","))
    if parts - set(PARTS):
        p.error(f"unknown part(s) {', '.join(sorted(parts - set(PARTS)))}; known: {', '.join(PARTS)}")
    work = Path(args.out).resolve()
    work.mkdir(parents=True, exist_ok=True)
    new = Tree("new", ROOT, work)
    trees = [baseline_tree(args.baseline, work), new] if args.baseline else [new]
    for t in trees:
        t.check()
    results: dict = {"machine": machine(), "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                     "args": {k: v for k, v in vars(args).items() if k not in ("out",)},
                     "trees": {t.label: {"rev": t.rev, "path": str(t.path)} for t in trees}}
    base = results["baseline"] = {} if args.baseline else None
    started = time.monotonic()
    loads = results["load"] = {}

    def note(part: str) -> None:
        loads[part] = round(os.getloadavg()[0], 2)

    def keep(key: str, per_tree: dict) -> None:
        results[key] = per_tree["new"]
        if base is not None:
            base[key] = per_tree["baseline"]
        note(key)

    if "scan" in parts:
        size = parse_size(args.size)
        log(f"generating a {mb(size)} corpus …")
        corpus = work / f"corpus-{size // 1_000_000}MB"
        meta = gen.corpus(corpus, size)
        st = gen.line_stats(corpus)
        log(f"  {meta['files']} files, {meta['sessions']} sessions, {st['lines']} lines, mean line "
            f"{st['mean']:.0f} B, largest {mb(st['max'])}")
        results["corpus"] = {**meta, **st}
        log("cold scan …")
        keep("scan", bench_scan(corpus, args.repeat, trees))
        log("scan stages (CPU, one process) …")
        results["stages"] = bench_stages(corpus, min(args.repeat, 3), new)
    if "history" in parts:
        log(f"heavy history: two corpora of {mb(parse_size(args.history_size))} …")
        keep("history", bench_history(work, parse_size(args.history_size), args.repeat, trees))
    if "append" in parts:
        log("append → /metrics with file events …")
        keep("append_events", bench_append(work, args.appends, True, args.poll_interval, trees))
        log("append → /metrics with polling only …")
        keep("append_poll", bench_append(work, args.poll_appends, False, args.poll_interval, trees))
    if "hooks" in parts:
        log("hook POST → /metrics …")
        keep("hooks", bench_hooks(work, args.appends, trees))
    if "hookflood" in parts:
        log(f"hook flood: {args.flood_rate}/s for {args.flood_seconds:.0f} s over {args.flood_sessions} sessions …")
        keep("hookflood", bench_hookflood(work, args.flood_rate, args.flood_seconds, args.flood_sessions,
                                          args.flood_threads, 1.0, trees))
    if "alerts" in parts:
        log("marker → alert …")
        results["alerts"] = bench_alerts(work, args.alerts, args.settle, new)
        note("alerts")
    if "rss" in parts:
        log(f"peak RSS with one {mb(parse_size(args.huge_line))} line …")
        results["rss_huge"] = bench_rss_huge(work, parse_size(args.huge_line), new)
        note("rss_huge")
        log(f"peak RSS with {args.sessions} sessions …")
        results["rss_sessions"] = bench_rss_sessions(work, args.sessions, new)
        note("rss_sessions")
    if "idlerss" in parts:
        log(f"idle RSS with {args.idle_sessions} sessions …")
        keep("idlerss", bench_idle_rss(work, args.idle_sessions, trees))
    if "idle" in parts:
        log(f"idle CPU with {args.idle_files} files for {args.idle_seconds:.0f} s …")
        results["idle"] = bench_idle(work, args.idle_files, args.idle_seconds, new)
        note("idle")
    results["seconds"] = time.monotonic() - started
    (work / "results.json").write_text(json.dumps(results, indent=1))
    c = results.get("corpus")
    print(f"\nMachine: {results['machine']}")
    if c:
        print(f"Corpus: {mb(c['bytes'])} in {c['files']} files ({c['sessions']} sessions), {c['lines']} lines, "
              f"mean line {c['mean']:.0f} B, largest {mb(c['max'])}")
    print("Load average (1 min) after each part: " + ", ".join(f"{k} {v}" for k, v in loads.items())
          + f" — on {os.cpu_count()} cores; other work on the machine shows up as latency outliers")
    print()
    if base is not None:
        print(f"Baseline: {results['trees']['baseline']['rev']} ({args.baseline}); new: "
              f"{results['trees']['new']['rev']} (this tree). Ratio new/baseline: below 1 is faster.\n")
        print(compare(results))
        print("\nThis tree against the targets:\n")
    print(table(results, args))
    if results.get("stages"):
        nb = results["corpus"]["bytes"]
        lines = results["corpus"]["lines"]
        print("\nWhere one process spends its CPU on the scan corpus (best of runs):\n")
        print("| stage | CPU s | MB/s | µs per line |\n|---|---|---|---|")
        for k, v in results["stages"].items():
            print(f"| {k} | {v:.2f} | {nb / v / 1e6:.0f} | {1e6 * v / lines:.1f} |")
    print(f"\n(bench took {results['seconds']:.0f} s; results in {work / 'results.json'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
