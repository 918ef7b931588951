"""The page noise controls' decisions on a fake clock (issue 33):
presence holds, drops and sends after the delay; min_turn; quiet windows
across midnight and DST; mutes and their expiry; route order; the digest's
contents. Every time here is a fixed Unix time, never the machine's clock."""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest

from exporter import config
from exporter.alerts import Alerter
from exporter.metrics import Metrics
from exporter.pagetext import headline, resume_command, session_link
from exporter.providers import PROVIDER_MODULES
from exporter.reducer import Status
from exporter.suppress import SEND, Digest, Mutes, Noise, Window, quiet_until, route_for, still_waiting

BERLIN = ZoneInfo("Europe/Berlin")


def at(y, mo, d, h, mi=0, s=0, tz=BERLIN) -> float:
    return datetime(y, mo, d, h, mi, s, tzinfo=tz).timestamp()


def alerts(**kw) -> config.Alerts:
    return config.from_mapping({"alerts": kw}).alerts


def noise(**kw) -> Noise:
    return Noise(alerts(**kw), Mutes())


def done(turn="t1", since=1000.0, duration=300.0) -> Status:
    return Status("completed", turn=turn, evidence="explicit", since=since, live=True, duration=duration)


def verdict(n: Noise, held: Status, cur: Status, now: float, kind=None, project="webapp", provider="claude_code"):
    return n.verdict(kind or held.state, provider, "s1", project, held, cur, now)


# -- presence ------------------------------------------------------------------
def test_presence_holds_then_sends_after_the_delay():
    n = noise(presence_delay_seconds=60)
    st = done(since=1000.0)
    v = verdict(n, st, st, 1002.0)
    assert v.hold_until == 1060.0 and v.reason is None
    assert verdict(n, st, st, 1059.9).hold_until == 1060.0
    assert verdict(n, st, st, 1060.0) is SEND


def test_presence_drops_a_page_when_the_user_acted():
    n = noise(presence_delay_seconds=60)
    st = done(since=1000.0)
    prompt = Status("working", turn="t2", since=1030.0, live=True)
    v = verdict(n, st, prompt, 1060.0)
    assert v.reason == "presence" and v.hold_until is None
    # an answered wait: same turn, the wait over
    wait = Status("waiting", turn="t1", since=1000.0, reason="permission", wait="w1")
    assert verdict(n, wait, Status("working", turn="t1", since=1010.0), 1060.0).reason == "presence"


def test_presence_hold_counts_from_the_record_time_not_from_a_restart():
    """A restart 50 s into a 60 s hold: 10 s left, not 60 more."""
    n = noise(presence_delay_seconds=60)
    st = done(since=1000.0)
    assert verdict(n, st, st, 1050.0).hold_until == 1060.0
    assert verdict(n, st, st, 5000.0) is SEND  # down past the delay, nobody acted: sent at once


def test_presence_leaves_errors_alone():
    n = noise(presence_delay_seconds=60)
    err = Status("error", turn="t1", since=1000.0, error_kind="rate_limit")
    assert verdict(n, err, err, 1001.0) is SEND


def test_min_turn_only_completed_turns():
    n = noise(min_turn_seconds=20)
    assert verdict(n, done(duration=12.0), done(duration=12.0), 2000.0).reason == "min_turn"
    assert verdict(n, done(duration=20.0), done(duration=20.0), 2000.0) is SEND
    assert verdict(n, done(duration=None), done(duration=None), 2000.0) is SEND  # unknown length: page
    wait = Status("waiting", turn="t1", since=1000.0, reason="question", wait="w", duration=3.0)
    assert verdict(n, wait, wait, 2000.0) is SEND


# -- quiet hours ---------------------------------------------------------------
def window(**kw) -> Window:
    return Window.from_config(config.from_mapping({"alerts": {"quiet_hours": [kw]}}).alerts.quiet_hours[0])


def test_window_edges_across_midnight():
    w = window(start="22:00", end="07:00", timezone="Europe/Berlin")
    assert w.end_of(at(2026, 6, 10, 21, 59, 59)) is None
    assert w.end_of(at(2026, 6, 10, 22, 0)) == at(2026, 6, 11, 7, 0)
    assert w.end_of(at(2026, 6, 11, 0, 0)) == at(2026, 6, 11, 7, 0)
    assert w.end_of(at(2026, 6, 11, 6, 59, 59)) == at(2026, 6, 11, 7, 0)
    assert w.end_of(at(2026, 6, 11, 7, 0)) is None


def test_window_days_are_the_days_it_starts_on():
    w = window(start="22:00", end="07:00", days=["fri"], timezone="Europe/Berlin")  # 2026-06-12 is a Friday
    assert w.end_of(at(2026, 6, 13, 3, 0)) == at(2026, 6, 13, 7, 0)  # Saturday morning: Friday's window
    assert w.end_of(at(2026, 6, 13, 23, 0)) is None  # Saturday night: no window
    assert w.end_of(at(2026, 6, 12, 3, 0)) is None  # Friday morning: Thursday's, not listed


def test_window_ends_at_its_wall_clock_time_across_dst():
    w = window(start="22:00", end="07:00", timezone="Europe/Berlin")
    # 2026-03-29 02:00 CET -> 03:00 CEST: the night is 8 hours
    end = w.end_of(at(2026, 3, 29, 1, 30))
    assert end == at(2026, 3, 29, 7, 0) and datetime.fromtimestamp(end, BERLIN).hour == 7
    assert end - at(2026, 3, 28, 22, 0) == 8 * 3600
    assert w.end_of(at(2026, 3, 28, 21, 59)) is None
    # 2026-10-25 03:00 CEST -> 02:00 CET: 10 hours
    end = w.end_of(at(2026, 10, 25, 2, 30))
    assert end - at(2026, 10, 24, 22, 0) == 10 * 3600 and datetime.fromtimestamp(end, BERLIN).hour == 7


def test_window_in_the_local_zone_and_a_whole_day(monkeypatch):
    w = window(start="09:00", end="09:00")  # start == end: all day
    assert w.tz is None
    assert w.end_of(at(2026, 6, 10, 12, 0)) is not None


def test_yaml_1_1_reads_unquoted_times_as_numbers_and_we_take_the_time_meant():
    import yaml

    data = yaml.safe_load("alerts:\n  quiet_hours:\n    - {start: 22:00, end: 7:30}\n")
    assert data["alerts"]["quiet_hours"][0] == {"start": 1320, "end": 450}  # what PyYAML gives
    w = config.from_mapping(data).alerts.quiet_hours[0]
    assert (w.start, w.end) == ("22:00", "07:30")
    with pytest.raises(config.ConfigError, match=r"quiet_hours\[0\]\.start: expected a time of day"):
        config.from_mapping({"alerts": {"quiet_hours": [{"start": 5000}]}})


def test_errors_page_through_quiet_hours_unless_listed():
    a = alerts(quiet_hours=[{"start": "22:00", "end": "07:00", "timezone": "Europe/Berlin"}])
    ws = [Window.from_config(w) for w in a.quiet_hours]
    night = at(2026, 6, 10, 23, 0)
    assert quiet_until(ws, "completed", night) == at(2026, 6, 11, 7, 0)
    assert quiet_until(ws, "error", night) is None
    ws = [window(start="22:00", end="07:00", kinds=["error"], timezone="Europe/Berlin")]
    assert quiet_until(ws, "error", night) is not None and quiet_until(ws, "waiting", night) is None


def test_verdict_in_a_window_names_its_end():
    n = noise(quiet_hours=[{"start": "22:00", "end": "07:00", "timezone": "Europe/Berlin"}])
    st = done(since=at(2026, 6, 10, 23, 0))
    v = verdict(n, st, st, at(2026, 6, 10, 23, 0, 5))
    assert v.reason == "quiet_hours" and v.quiet_until == at(2026, 6, 11, 7, 0)
    assert verdict(n, st, st, at(2026, 6, 11, 7, 0, 5)) is SEND


# -- mutes ---------------------------------------------------------------------
def test_mute_for_seconds_expires_and_survives_a_restart(tmp_path):
    m = Mutes(tmp_path / "mutes.json")
    m.set("sessions", Mutes.key("codex", "s1"), {"until": 1100.0}, now=1000.0)
    m.set("projects", "api", {"until": 1200.0}, now=1000.0)
    assert m.muted("codex", "s1", "webapp", "t1", 1099.0)
    assert not m.muted("codex", "s1", "webapp", "t1", 1100.0)
    assert not m.muted("codex", "s2", "webapp", "t1", 1050.0)
    assert "project 'api'" in m.muted("codex", "s2", "api", "t1", 1199.0)
    again = Mutes(tmp_path / "mutes.json")  # a restart
    assert again.muted("codex", "s1", "webapp", "t1", 1050.0)
    assert again.expire(1150.0) and again.rows() == {"sessions": {}, "projects": {"api": {"until": 1200.0}}}
    assert Mutes(tmp_path / "mutes.json").rows()["sessions"] == {}  # expiry was written


def test_mute_until_next_prompt_ends_with_the_turn():
    m = Mutes()
    m.set("sessions", "claude_code/s1", {"turn": "t1"}, now=1000.0)
    assert m.muted("claude_code", "s1", "p", "t1", 9e9)  # no clock: only the turn ends it
    assert not m.muted("claude_code", "s1", "p", "t2", 1001.0)
    assert not m.expire(1001.0, lambda prov, sid: "t1")
    assert m.expire(1001.0, lambda prov, sid: "t2") and not m.sessions


def test_muted_and_route_muted_verdicts():
    n = noise(routes=[{"match": {"provider": "pi"}, "mute": True}])
    st = done()
    assert verdict(n, st, st, 2000.0, provider="pi").reason == "route"
    n.mutes.set("sessions", "claude_code/s1", {"until": 3000.0}, now=1000.0)
    assert verdict(n, st, st, 2000.0).reason == "muted"
    assert verdict(n, st, st, 3000.0) is SEND


# -- routes --------------------------------------------------------------------
def test_route_order_first_match_decides():
    a = alerts(routes=[{"match": {"project": "web*", "kind": "error"}, "tags": ["pager"]},
                       {"match": {"project": "web*"}, "tags": ["phone"]},
                       {"match": {"provider": "codex"}, "tags": ["codex-room"]}])
    assert route_for(a.routes, "webapp", "codex", "error").tags == ["pager"]
    assert route_for(a.routes, "webapp", "codex", "completed").tags == ["phone"]
    assert route_for(a.routes, "api", "codex", "completed").tags == ["codex-room"]
    assert route_for(a.routes, "api", "claude_code", "completed") is None
    n = Noise(a, Mutes())
    assert n.tags_for("webapp", "codex", "completed") == {"phone"}
    assert n.tags_for("api", "claude_code", "waiting") == {"waiting"}  # the kind's default tag


def test_bad_routes_are_refused_with_the_key():
    with pytest.raises(config.ConfigError) as e:
        config.from_mapping({"alerts": {"routes": [{"match": {"provider": "gemini"}, "tags": ["x"]},
                                                   {"match": {}, "tags": ["x"], "mute": True}]}})
    assert "alerts.routes[0].match.provider" in str(e.value) and "alerts.routes[1]: mute: true and tags" in str(e.value)


# -- the page's words -------------------------------------------------------------
def test_headline_and_resume_commands():
    assert headline("Claude Code", "webapp", done(duration=252)) == "webapp: Claude Code finished after 4 min 12 s"
    wait = Status("waiting", turn="t", reason="permission", tool="Bash", wait="w")
    assert headline("Codex", "api", wait) == "api: Codex needs your approval: shell command"
    assert headline("Codex", "api", Status("waiting", reason="permission", tool="apply_patch")) == \
        'api: Codex needs your approval: tool "apply_patch"'
    assert headline("Pi", "", Status("error", error_kind="rate_limit")) == "session: Pi stopped on rate limit"
    cmds = {p: resume_command(m, "0199-ab") for p, m in PROVIDER_MODULES.items()}
    assert cmds == {"claude_code": "claude --resume 0199-ab", "codex": "codex resume 0199-ab",
                    "copilot_cli": "copilot --resume 0199-ab", "pi": "pi --session 0199-ab",
                    "gemini_cli": "gemini --resume 0199-ab"}
    assert resume_command(PROVIDER_MODULES["codex"], "a b;rm") == "codex resume 'a b;rm'"
    assert session_link("https://box.example/agents/", "codex", "s/1") == \
        "https://box.example/agents/#session=codex/s%2F1"
    assert session_link(None, "codex", "s") is None


# -- the digest --------------------------------------------------------------------
def test_digest_lists_only_sessions_still_waiting(tmp_path):
    cfg = config.from_mapping({"state_dir": str(tmp_path), "alerts": {"urls": ["json://127.0.0.1:9/x"]}})
    from exporter.alerts import build_targets

    alerter = Alerter(cfg, Metrics(), build_targets(cfg))
    end = at(2026, 6, 11, 7, 0)
    waiting = Status("waiting", turn="t1", since=end - 3 * 3600, reason="question", wait="w1")
    answered = Status("completed", turn="t1", since=end - 3600, duration=30)
    sessions = {("codex", "a"): SimpleNamespace(status=waiting),
                ("claude_code", "b"): SimpleNamespace(status=Status("working", turn="t2", since=end - 60))}
    alerter.lookup = lambda prov, sid: sessions.get((prov, sid))
    alerter.digest.hold(end, {"provider": "codex", "session_id": "a", "kind": "waiting", "unit": "w1",
                              "since": waiting.since, "project": "api", "tags": ["waiting"]})
    alerter.digest.hold(end, {"provider": "claude_code", "session_id": "b", "kind": "completed", "unit": "t1",
                              "since": answered.since, "project": "webapp", "tags": ["completed"]})
    assert Digest(tmp_path / "quiet-digest.json").next_end() == end  # kept on disk
    alerter.gate.send_digests(end - 1)
    assert alerter.courier.work.empty()  # not yet
    alerter.gate.send_digests(end + 5)
    p = alerter.courier.work.get_nowait()
    assert p.title == "Quiet hours over: 1 session waits for you"
    assert p.body.splitlines() == ["- api: Codex asks you a question (waiting, waiting 3 h)",
                                   "  Resume: codex resume a", "  Session: a"]
    assert "b" not in p.body and alerter.courier.work.empty()
    assert alerter.ledger["digest:%.0f" % end]["status"] == "pending"
    assert Digest(tmp_path / "quiet-digest.json").held == {}
    alerter.gate.send_digests(end + 10)  # nothing twice
    assert alerter.courier.work.empty()


def test_no_digest_when_every_held_session_was_answered(tmp_path):
    cfg = config.from_mapping({"state_dir": str(tmp_path), "alerts": {"urls": ["json://127.0.0.1:9/x"]}})
    from exporter.alerts import build_targets

    alerter = Alerter(cfg, Metrics(), build_targets(cfg))
    alerter.lookup = lambda prov, sid: SimpleNamespace(status=Status("working", turn="t2"))
    alerter.digest.hold(100.0, {"provider": "codex", "session_id": "a", "kind": "completed", "unit": "t1",
                                "since": 50.0, "project": "api", "tags": []})
    alerter.gate.send_digests(200.0)
    assert alerter.courier.work.empty() and not alerter.digest.held
    assert not [k for k in alerter.ledger if k.startswith("digest:")]


def test_still_waiting_drops_gone_sessions():
    st = Status("completed", turn="t1")
    items = [{"provider": "codex", "session_id": "a", "kind": "completed", "unit": "t1"},
             {"provider": "codex", "session_id": "gone", "kind": "completed", "unit": "t1"}]
    left = still_waiting(items, lambda p, s: st if s == "a" else None)
    assert [i["session_id"] for i, _ in left] == ["a"]


def test_check_config_shows_each_routes_targets(tmp_path):
    import subprocess
    import sys

    from harness import ROOT

    cfg = tmp_path / "c.yml"
    cfg.write_text(f"""state_dir: {tmp_path / 'state'}
alerts:
  urls: ["phone=json://127.0.0.1:9/phone", "completed,waiting,error=json://127.0.0.1:9/desk"]
  quiet_hours:
    - {{start: 22:00, end: "07:00", days: [fri], timezone: Europe/Berlin}}
  routes:
    - {{match: {{project: "web*"}}, tags: [phone]}}
    - {{match: {{provider: pi}}, mute: true}}
""")
    out = subprocess.run([sys.executable, "-m", "coding_agent_exporter", "check-config", "--config.file", str(cfg)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    route0 = next(ln for ln in lines if ln.startswith("routes[0]:"))
    assert "project=web*" in route0 and "/phone" in route0 and "/desk" not in route0
    assert "routes[1]: provider=pi -> muted" in out.stdout
    waiting = next(ln for ln in lines if ln.startswith("routes: otherwise waiting"))
    assert "/desk" in waiting and "/phone" not in waiting
    assert "quiet_hours[0]: 22:00-07:00 fri (Europe/Berlin)" in out.stdout  # the unquoted 22:00 taken as meant


def test_digest_leaves_out_a_session_muted_since(tmp_path):
    cfg = config.from_mapping({"state_dir": str(tmp_path), "alerts": {"urls": ["json://127.0.0.1:9/x"]}})
    from exporter.alerts import build_targets

    alerter = Alerter(cfg, Metrics(), build_targets(cfg))
    st = Status("completed", turn="t1", since=50.0, duration=60)
    alerter.lookup = lambda prov, sid: SimpleNamespace(status=st)
    for sid in ("a", "b"):
        alerter.digest.hold(100.0, {"provider": "codex", "session_id": sid, "kind": "completed", "unit": "t1",
                                    "since": 50.0, "project": "api", "tags": ["completed"]})
    alerter.noise.mutes.set("sessions", "codex/b", {"turn": "t1"}, now=90.0)
    alerter.gate.send_digests(200.0)
    p = alerter.courier.work.get_nowait()
    assert p.title == "Quiet hours over: 1 session waits for you"
    assert "Session: a" in p.body and "Session: b" not in p.body
