"""Benchmark of the fleet view (issue 25): one exporter serving
``/api/v1/fleet`` over ``--peers`` peers with ``--sessions`` sessions each,
against a single-machine baseline in the same run.

    python3 bench/fleet.py                      # 20 peers x 500 sessions
    python3 bench/fleet.py --peers 5 --requests 100

Three real exporter processes (``python3 -m coding_agent_exporter run`` from
this working tree) on the same generated corpus of ``--sessions`` sessions
(``bench/gen.py``, under ``bench/out/``):

- the peer: serves its ``/api/v1/sessions`` and ``/api/v1/health`` to the
  fleet exporter; listed ``--peers`` times in ``fleet.peers`` (each entry is
  polled as a machine of its own, so the fleet exporter does the work of
  that many peers; the peer's own cost is not measured);
- the baseline: the same sessions, no fleet;
- the fleet exporter: the same sessions, ``fleet.peers`` as above, polled
  every ``--poll-interval`` seconds.

Measured for the baseline and the fleet exporter: latency of ``--requests``
sequential GETs (p50, p99) of ``/api/v1/sessions`` (both) and
``/api/v1/fleet`` (fleet), the answer's size, user+system CPU time over an
idle window of ``--idle-seconds`` (fleet: its polls included) and while
answering the requests, RSS and peak RSS (``VmHWM``) at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen  # noqa: E402
from run import Exporter, machine, mb, pct  # noqa: E402


def kb(n: float) -> str:
    return f"{n / 1e3:.0f} kB"

OUT = Path(__file__).resolve().parent / "out"


def fetch(url: str) -> tuple[float, int]:
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as r:
        n = len(r.read())
    return time.perf_counter() - t, n


def measure(ex: Exporter, paths: list[str], requests: int, idle: float) -> dict:
    """Idle CPU over ``idle`` seconds, then ``requests`` GETs of each path."""
    base = f"http://127.0.0.1:{ex.port}"
    for p in paths:  # warm-up
        fetch(base + p)
    c0 = ex.cpu_seconds()
    time.sleep(idle)
    out = {"idle_cpu_s": ex.cpu_seconds() - c0, "idle_s": idle}
    for p in paths:
        c0 = ex.cpu_seconds()
        times, size = [], 0
        for _ in range(requests):
            dt, size = fetch(base + p)
            times.append(dt)
        out[p] = {"p50_ms": pct(times, 50) * 1000, "p99_ms": pct(times, 99) * 1000, "bytes": size,
                  "cpu_ms_per_request": (ex.cpu_seconds() - c0) * 1000 / requests}
    out["rss"], out["peak_rss"] = ex.status("VmRSS"), ex.status("VmHWM")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", type=int, default=20)
    ap.add_argument("--sessions", type=int, default=500)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--idle-seconds", type=float, default=30.0)
    ap.add_argument("--poll-interval", type=float, default=10.0, help="fleet.poll_interval_seconds")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)

    root = OUT / f"fleet-sessions-{args.sessions}"
    gen.many_sessions(root, args.sessions)
    # The corpus is dated in the past: keep every session (no TTL, no history skip).
    common = {"metrics": {"session_ttl_seconds": 10 * 365 * 86400.0, "max_sessions": args.sessions},
              "sources": {"skip_history": False}}
    peer = Exporter(root, {**common, "machine": "peer"}, "fleet-peer").start()
    procs = [peer]
    try:
        base = Exporter(root, {**common, "machine": "baseline"}, "fleet-baseline").start()
        procs.append(base)
        urls = [f"http://127.0.0.1:{peer.port}"] * args.peers
        fleet = Exporter(root, {**common, "machine": "fleet", "fleet": {
            "peers": urls, "poll_interval_seconds": args.poll_interval}}, "fleet-fleet").start()
        procs.append(fleet)
        deadline = time.monotonic() + 120
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{fleet.port}/api/v1/fleet", timeout=30) as r:
                ms = json.loads(r.read())["machines"]
            rows = sum(len(m["sessions"]) for m in ms)
            if all(m["up"] for m in ms) and rows == (args.peers + 1) * args.sessions:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"fleet not complete: {rows} rows, up {[m['up'] for m in ms]}")
            time.sleep(0.5)
        r_base = measure(base, ["/api/v1/sessions"], args.requests, args.idle_seconds)
        r_fleet = measure(fleet, ["/api/v1/sessions", "/api/v1/fleet"], args.requests, args.idle_seconds)
    finally:
        for p in procs:
            p.stop()

    res = {"machine": machine(), "peers": args.peers, "sessions": args.sessions, "requests": args.requests,
           "poll_interval_s": args.poll_interval, "baseline": r_base, "fleet": r_fleet}
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    s, f = r_base["/api/v1/sessions"], r_fleet["/api/v1/fleet"]
    fl = r_fleet["/api/v1/sessions"]
    print(f"# fleet view: {args.peers} peers x {args.sessions} sessions, {args.requests} requests each; {res['machine']}")
    print("| | baseline (one machine) | fleet exporter | ratio |")
    print("|---|---|---|---|")
    print(f"| answer | /api/v1/sessions {kb(s['bytes'])} | /api/v1/fleet {kb(f['bytes'])} | "
          f"{f['bytes'] / s['bytes']:.1f}x |")
    print(f"| p50 | {s['p50_ms']:.1f} ms | {f['p50_ms']:.1f} ms | {f['p50_ms'] / s['p50_ms']:.1f}x |")
    print(f"| p99 | {s['p99_ms']:.1f} ms | {f['p99_ms']:.1f} ms | {f['p99_ms'] / s['p99_ms']:.1f}x |")
    print(f"| CPU per request | {s['cpu_ms_per_request']:.1f} ms | {f['cpu_ms_per_request']:.1f} ms | "
          f"{f['cpu_ms_per_request'] / max(s['cpu_ms_per_request'], 1e-9):.1f}x |")
    print(f"| local /api/v1/sessions p99 | {s['p99_ms']:.1f} ms | {fl['p99_ms']:.1f} ms | "
          f"{fl['p99_ms'] / s['p99_ms']:.1f}x |")
    idle_b = r_base["idle_cpu_s"] / r_base["idle_s"] * 100
    idle_f = r_fleet["idle_cpu_s"] / r_fleet["idle_s"] * 100
    print(f"| idle CPU (fleet: polls every {args.poll_interval:g} s) | {idle_b:.2f} % | {idle_f:.2f} % | "
          f"{idle_f / max(idle_b, 1e-9):.1f}x |")
    print(f"| RSS | {mb(r_base['rss'])} | {mb(r_fleet['rss'])} | {r_fleet['rss'] / r_base['rss']:.1f}x |")
    print(f"| peak RSS | {mb(r_base['peak_rss'])} | {mb(r_fleet['peak_rss'])} | "
          f"{r_fleet['peak_rss'] / r_base['peak_rss']:.1f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
