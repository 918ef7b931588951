"""Accuracy of the turn-end pages on the project's own case corpus and real files.

Plays every field case of ``tests/fixtures/cases/cases.json`` against the real
exporter, as ``tests/test_cases.py`` does (live: files appended step by step,
hooks delivered over HTTP or the hook command, pages delivered through Apprise
to a loopback receiver; backfill: every file laid out before the start), and
reads every real transcript of ``tests/fixtures/transcripts`` (copies of the
project's transcript corpus, the ones ``tests/test_transcripts.py`` uses) with ``scan --at <last record +
120 s>``. Prints a Markdown table per agent and version range:

- cases: how many; states right: every ``expect`` step's states were met;
- pages right / false / missed, counted per step of the case: between two
  ``expect`` steps the pages that came (``alerts`` counts the case's pages
  cumulatively) against the pages the case expects; a page one step late is
  a missed page and a false one. Backfill expects no page at all;
- real files: the state a user two minutes after the last record would call
  right (the table in ``tests/test_transcripts.py``).

Usage: ``python tools/accuracy.py [--only PATTERN] [--no-live] [--write]``;
``--write`` (alias ``--readme``) also writes the table into docs/agents.md between the
``<!-- accuracy:begin -->`` and ``<!-- accuracy:end -->`` markers.
The time rules are scaled as in ``tests/test_cases.py`` (``CAE_SLOW=1`` for the
real defaults). The whole run takes a few minutes (each live case plays in real
time). Exit status 0 unless the corpus cannot be read.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import test_cases as tc  # noqa: E402  (the replay machinery the test suite uses)
import test_transcripts as tt  # noqa: E402
from harness import Receiver, wait_for  # noqa: E402

_VERSION = re.compile(rb'"(?:version|cli_version|copilotVersion)"\s*:\s*"(\d+)\.(\d+)\.(\d+)')
#: Pi names no agent version in its files, only its session format (header ``version``).
_PI_FORMAT = re.compile(rb'"type"\s*:\s*"session"[^\n]*?"version"\s*:\s*(\d+)|"version"\s*:\s*(\d+)[^\n]*?"type"\s*:\s*"session"')
AGENT = {"claude_code": "Claude Code", "codex": "Codex", "copilot_cli": "Copilot CLI", "pi": "Pi", "gemini_cli": "Gemini CLI"}
#: The file the table lives in, between BEGIN and END (README.md links it).
TARGET = ROOT / "docs" / "agents.md"


def version_range(provider: str, data: bytes) -> str:
    """The version range a file's records name: Claude ``version``
    (``2.1.2xx``), Codex ``session_meta.cli_version`` (``0.15x``), Copilot CLI
    ``session.start.data.copilotVersion`` (``1.0.7x``), Pi's session format
    (``format 3``: Pi writes no agent version); ``?`` when none is written
    (pre-envelope Codex rollouts, hand-written records)."""
    if provider == "pi":
        m = _PI_FORMAT.search(data)
        return f"format {(m.group(1) or m.group(2)).decode()}" if m else "?"
    m = _VERSION.search(data)
    if not m:
        return "?"
    major, minor, patch = (int(g) for g in m.groups())
    if provider == "claude_code":
        if (major, minor) < (2, 1):
            return f"{major}.{minor}.x"
        lo = patch // 100 * 100
        return f"{major}.{minor}.{lo}–{lo + 99}"
    if provider == "copilot_cli":
        return f"{major}.{minor}.{patch // 10}x"
    return f"{major}.{minor // 10}x" if minor >= 10 else f"{major}.{minor}"


def case_version(name: str) -> str:
    spec = tc.SPEC[name]
    data = b"".join((tc.CASES / s["write"]).read_bytes() for s in spec["steps"] if "write" in s)
    return version_range(tc.PROVIDERS[spec["provider"]], data)


class Tally:
    def __init__(self):
        self.cases = self.states_ok = self.right = self.false = self.missed = 0

    def add_steps(self, steps: list[tuple[int, int]]) -> None:
        """``steps``: (expected, got) cumulative page counts at each expect step."""
        pe = pg = 0
        for exp, got in steps:
            de, dg = exp - pe, got - pg
            self.right += min(de, dg) if de > 0 and dg > 0 else 0
            self.false += max(0, dg - max(de, 0))
            self.missed += max(0, de - max(dg, 0))
            pe, pg = exp, got


def play_live(name: str, tmp: Path) -> tuple[bool, list[tuple[int, int]]]:
    """One case live; returns (every expected state met, [(expected, got) pages per step])."""
    receiver = Receiver()
    exp = tc._exporter(tmp, receiver).start()
    case = tc.Replay(name, tmp)
    ok, steps = True, []
    try:
        for step in case.spec["steps"]:
            if "expect" not in step:
                case.play(step, exp)
            else:
                try:
                    case.expect(step, exp, receiver)
                except AssertionError:
                    ok = False
                if "alerts" in step:
                    steps.append((step["alerts"], len(case.alerts(receiver))))
        time.sleep(tc.TIMING["alerts"]["settle_seconds"] + 0.5)  # a late page after the last step counts too
        if steps:
            steps.append((steps[-1][0], len(case.alerts(receiver))))
    finally:
        case.close()
        exp.stop()
        receiver.close()
    return ok, steps


def play_backfill(names: list[str], tmp: Path) -> dict[str, tuple[bool, int]]:
    """Every case laid out before one start; per case (final states right, pages sent)."""
    for name in names:
        tc.Replay(name, tmp).lay_out()
    receiver = Receiver()
    exp = tc._exporter(tmp, receiver).start()
    out = {}
    try:
        time.sleep(1.0)
        for name in names:
            case = tc.Replay(name, tmp)
            want = {k: (v if isinstance(v, list) else [v]) for k, v in case.spec["backfill"].items()}
            try:
                wait_for(lambda: all(case.states(exp)[k] in v for k, v in want.items()), timeout=10)
                ok = True
            except AssertionError:
                ok = False
            out[name] = ok
        time.sleep(tc.TIMING["alerts"]["settle_seconds"] + 0.5)
        out = {name: (ok, len(tc.Replay(name, tmp).alerts(receiver))) for name, ok in out.items()}
    finally:
        exp.stop()
        receiver.close()
    return out


def real_files(tmp: Path) -> dict[tuple[str, str], list[int]]:
    """Real transcripts: (agent, version range) → [files, states right]."""
    out: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for prov, table in tt.AT_LAST_PLUS_120.items():
        for fname, (state, how) in table.items():
            src = tt.TRANSCRIPTS / prov / fname
            provider = prov
            key = (provider, version_range(provider, src.read_bytes()))
            f = tmp / fname
            f.write_bytes(src.read_bytes())
            rows = tt._scan(f, at=tt._last_record_time(src) + 120, provider=prov)
            if state is None:
                good = all(r["state"] == "unknown" for r in rows)
            else:
                good = len(rows) == 1 and rows[0]["state"] == state and how in (
                    None, rows[0]["evidence"], rows[0]["error_kind"])
            out[key][0] += 1
            out[key][1] += good
            f.unlink()
    return out


def gemini_runs(tmp: Path, live: dict, back: dict, wrong: list) -> None:
    """Gemini CLI 0.61's recorded runs (tests/fixtures/gemini_cli; no case entries: its record log is
    replayed by tests/gemini_replay.py, in process, in timeline order) with the hooks the CLI ran:
    the states at each screen and the pages, against tests/test_gemini_cli.py's ``EXPECT``; and each
    run laid out at once as a backfill (no page)."""
    from collections import Counter

    import gemini_replay as gr
    import test_gemini_cli as tg

    key = ("gemini_cli", "0.61")
    for run in gr.runs():
        _files_pages, hook_pages, screens = tg.EXPECT[run]
        r = gr.replay(run, tmp / "live" / run / ".gemini" / "tmp", True)
        ok = r.snaps == {label: pair[1] for label, pair in screens.items()}
        t = live[key]
        t.cases += 1
        t.states_ok += ok
        want, got = Counter(hook_pages), Counter(r.pages)
        right = sum((want & got).values())
        t.right += right
        t.false += sum(got.values()) - right
        t.missed += sum(want.values()) - right
        if not ok or want != got:
            wrong.append(f"live {run}: states {'right' if ok else 'wrong'}, pages {hook_pages} got {r.pages}")
        pages, row = gr.backfill(run, tmp / "backfill" / run / ".gemini" / "tmp")
        b = back[key]
        b.cases += 1
        good = row is not None and row["state"] in ("completed", "error", "interrupted")
        b.states_ok += good
        b.false += len(pages)
        if not good or pages:
            wrong.append(f"backfill {run}: {len(pages)} page(s)")


def _vkey(v: str):
    return [int(p) for p in re.findall(r"\d+", v)] or [-1]


BEGIN, END = "<!-- accuracy:begin -->", "<!-- accuracy:end -->"


def table(live: dict, back: dict, reals: dict) -> list[str]:
    """The Markdown table, one row per (agent, version range), and a total."""
    keys = sorted(set(live) | set(back) | set(reals), key=lambda k: (k[0], _vkey(k[1])))
    out = ["| agent | versions | cases | live: states right | live pages: right / false / missed "
           "| backfill: states right | backfill pages: false | real files: states right |",
           "|---|---|---|---|---|---|---|---|"]
    total = [0] * 9
    for k in keys:
        lt, bt, rf = live.get(k), back.get(k), reals.get(k, [0, 0])
        n = (bt or lt).cases if (bt or lt) else 0
        lcol = f"{lt.states_ok}/{lt.cases}" if lt else "–"
        lpages = f"{lt.right} / {lt.false} / {lt.missed}" if lt else "–"
        bcol = f"{bt.states_ok}/{bt.cases}" if bt else "–"
        bpages = f"{bt.false}" if bt else "–"
        rcol = f"{rf[1]}/{rf[0]}" if rf[0] else "–"
        out.append(f"| {AGENT[k[0]]} | {k[1]} | {n} | {lcol} | {lpages} | {bcol} | {bpages} | {rcol} |")
        for i, v in enumerate((n, lt.states_ok if lt else 0, lt.cases if lt else 0, lt.right if lt else 0,
                               lt.false if lt else 0, lt.missed if lt else 0, bt.states_ok if bt else 0,
                               bt.false if bt else 0, rf[1])):
            total[i] += v
    rtotal = sum(v[0] for v in reals.values())
    out.append(f"| **all** | | {total[0]} | {total[1]}/{total[2]} | {total[3]} / {total[4]} / {total[5]} "
               f"| {total[6]}/{total[0]} | {total[7]} | {total[8]}/{rtotal} |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="regular expression on case names")
    ap.add_argument("--no-live", action="store_true", help="backfill and real files only")
    ap.add_argument("--tmp", default=None, help="scratch folder (default: a new temporary one)")
    ap.add_argument("--write", "--readme", dest="write", action="store_true",
                    help="write the table into docs/agents.md between the markers")
    args = ap.parse_args(argv)
    import tempfile

    names = [n for n in tc.SPEC if not args.only or re.search(args.only, n)]
    tmp = Path(args.tmp or tempfile.mkdtemp(prefix="cae-accuracy-"))
    live: dict[tuple[str, str], Tally] = defaultdict(Tally)
    back: dict[tuple[str, str], Tally] = defaultdict(Tally)
    wrong: list[str] = []
    for name in names:
        key = (tc.PROVIDERS[tc.SPEC[name]["provider"]], case_version(name))
        if not args.no_live:
            ok, steps = play_live(name, tmp / "live" / name)
            t = live[key]
            t.cases += 1
            t.states_ok += ok
            before = (t.false, t.missed)
            t.add_steps(steps)
            if not ok or (t.false, t.missed) != before:
                wrong.append(f"live {name}: states {'right' if ok else 'wrong'}, pages (expected, got) {steps}")
            print(f"live {name}: {'ok' if ok else 'WRONG'} {steps}", file=sys.stderr)
    results = play_backfill(names, tmp / "backfill")
    for name, (ok, pages) in results.items():
        key = (tc.PROVIDERS[tc.SPEC[name]["provider"]], case_version(name))
        t = back[key]
        t.cases += 1
        t.states_ok += ok
        t.false += pages
        if not ok or pages:
            wrong.append(f"backfill {name}: states {'right' if ok else 'wrong'}, {pages} page(s)")
    if not args.only or re.search(args.only, "gemini_cli"):
        gemini_runs(tmp / "gemini", live, back, wrong)
    (tmp / "real").mkdir(parents=True, exist_ok=True)
    reals = real_files(tmp / "real")

    lines = table(live, back, reals)
    if wrong:
        lines += ["", "Not right:", *(f"- {w}" for w in wrong)]
    print("\n".join(lines))
    if args.write:
        text = TARGET.read_text()
        a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
        TARGET.write_text(text[:a] + "\n" + "\n".join(lines) + "\n" + text[b:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
