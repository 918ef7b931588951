"""Page noise controls: the decisions that keep a page from being sent, or
hold it, as pure functions of a page, its session's state and a clock (Unix
seconds), beside the ledger (:mod:`.pager`). Delivery (:mod:`.alerts`) asks
:meth:`Noise.verdict` for each page the pager found due; this module never
sends, and keeps only two small files in the state dir: ``mutes.json``
(:class:`Mutes`) and ``quiet-digest.json`` (:class:`Digest`).

Decisions, in order (the first that applies wins; reasons as in
``coding_agent_alerts_suppressed_total{kind,reason}``):

1. ``route``: the first ``alerts.routes`` entry matching (project glob,
   provider, kind) says ``mute: true``. (A route's ``tags`` do not suppress:
   they replace the kind's default tag, :meth:`Noise.tags_for`.)
2. ``muted``: the session or its project is muted (:class:`Mutes`).
3. ``min_turn``: a ``completed`` turn whose records say it took less than
   ``alerts.min_turn_seconds`` (``Status.duration``: prompt to end).
4. ``presence``: ``completed``/``waiting`` pages are held until
   ``alerts.presence_delay_seconds`` after the state began in record time
   (``Status.since``; a restart does not restart the hold). When the session
   has moved on by then (a new prompt, an answer, an Esc, a hook that says
   the user typed: anything but the same state and unit), the user was
   there: the page is dropped.
5. ``quiet_hours``: a page due inside an ``alerts.quiet_hours`` window of
   its kind is not sent; it is kept for the digest sent at the window's end
   (:class:`Digest`), which lists only the sessions that still show the held
   state then. Errors page through unless the window lists ``error``.

Windows are read in their ``timezone`` (IANA name, :mod:`zoneinfo`) or the
machine's local zone, by wall clock: ``22:00``–``07:00`` ends at 07:00 local
time on the night a DST change makes it 7 or 9 hours long. ``days`` are the
days a window starts on.
"""

from __future__ import annotations

import fnmatch
import logging
import threading
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo

from .names import ALERT_KINDS, SUPPRESS_REASONS as REASONS  # noqa: F401  (re-exported)
from .persist import load_json, save_json

log = logging.getLogger("exporter.alerts")

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
MUTES_FILE = "mutes.json"
DIGEST_FILE = "quiet-digest.json"
#: At most this many mutes are kept (oldest dropped): memory stays bounded.
MAX_MUTES = 10_000
#: At most this many held pages wait for one digest.
MAX_HELD = 1000


def _seconds(clock: str) -> int:
    """``"HH:MM"`` / ``"HH:MM:SS"`` → seconds after midnight."""
    parts = [int(p) for p in str(clock).split(":")] + [0]
    return parts[0] * 3600 + parts[1] * 60 + parts[2]


def _zone(name: str | None) -> tzinfo | None:
    """The IANA zone ``name`` (None: the machine's local zone, as None)."""
    if not name:
        return None
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


def config_errors(a) -> list[str]:
    """Problems of ``alerts.quiet_hours``, ``alerts.routes`` and
    ``alerts.link_base_url`` (``a``: :class:`.config.Alerts`), one line each,
    naming the key."""
    from .providers import PROVIDER_MODULES

    errors = []
    for i, w in enumerate(a.quiet_hours):
        where = f"alerts.quiet_hours[{i}]"
        for d in w.days:
            if d.lower() not in DAYS:
                errors.append(f"{where}.days: {d!r} is not one of {', '.join(DAYS)}")
        for k in w.kinds:
            if k not in ALERT_KINDS:
                errors.append(f"{where}.kinds: {k!r} is not an alert kind ({', '.join(ALERT_KINDS)})")
        if w.timezone:
            try:
                _zone(w.timezone)
            except Exception:  # zoneinfo raises ZoneInfoNotFoundError, ValueError for odd names
                errors.append(f"{where}.timezone: {w.timezone!r} is not a time zone this machine knows "
                              "(an IANA name such as Europe/Berlin)")
    for i, r in enumerate(a.routes):
        where = f"alerts.routes[{i}]"
        if r.match.provider is not None and r.match.provider not in PROVIDER_MODULES:
            errors.append(f"{where}.match.provider: {r.match.provider!r} is not one of {', '.join(PROVIDER_MODULES)}")
        if r.match.kind is not None and r.match.kind not in ALERT_KINDS:
            errors.append(f"{where}.match.kind: {r.match.kind!r} is not an alert kind ({', '.join(ALERT_KINDS)})")
        if r.mute and r.tags:
            errors.append(f"{where}: mute: true and tags: a muted route sends nothing; give one of them")
        if not r.mute and not r.tags:
            errors.append(f"{where}: give tags (the Apprise tags its pages carry) or mute: true")
    if a.link_base_url is not None and not a.link_base_url.startswith(("http://", "https://")):
        errors.append(f"alerts.link_base_url: expected an http:// or https:// URL, got {a.link_base_url!r}")
    return errors


# -- quiet hours ---------------------------------------------------------------
@dataclass(frozen=True)
class Window:
    """One quiet window: ``start``/``end`` seconds after midnight (wall
    clock in ``tz``, None: local), ``days`` weekday numbers (Monday 0) the
    window starts on, ``kinds`` it holds. ``start == end``: the whole day."""

    start: int
    end: int
    days: frozenset
    kinds: frozenset
    tz: tzinfo | None = None

    @classmethod
    def from_config(cls, w) -> Window:
        return cls(_seconds(w.start), _seconds(w.end), frozenset(DAYS.index(d.lower()) for d in w.days),
                   frozenset(w.kinds), _zone(w.timezone))

    def _at(self, day: date, seconds: int) -> datetime:
        naive = datetime(day.year, day.month, day.day) + timedelta(seconds=seconds)
        if self.tz is None:
            return naive.astimezone()  # local zone, the wall clock time as meant
        return naive.replace(tzinfo=self.tz)

    def end_of(self, now: float) -> float | None:
        """The end (Unix seconds) of the window occurrence ``now`` is in, or
        None when ``now`` is outside every occurrence."""
        here = datetime.fromtimestamp(now, self.tz) if self.tz else datetime.fromtimestamp(now).astimezone()
        for back in (0, 1):  # an occurrence that began today, or yesterday (past midnight)
            day = here.date() - timedelta(days=back)
            if day.weekday() not in self.days:
                continue
            s = self._at(day, self.start)
            e = self._at(day + timedelta(days=1) if self.end <= self.start else day, self.end)
            if s.timestamp() <= now < e.timestamp():
                return e.timestamp()
        return None


def quiet_until(windows, kind: str, now: float) -> float | None:
    """The latest end (Unix seconds) of the windows holding ``kind`` that
    ``now`` is in (overlapping windows hold to the last one's end), or None."""
    ends = [e for w in windows if kind in w.kinds and (e := w.end_of(now)) is not None]
    return max(ends) if ends else None


# -- routes ---------------------------------------------------------------------
def route_for(routes, project: str, provider: str, kind: str):
    """The first of ``routes`` (:class:`.config.Route`) whose every given
    match key fits (``project``: a glob on the project label, case-sensitive),
    or None."""
    for r in routes:
        m = r.match
        if m.project is not None and not fnmatch.fnmatchcase(project, m.project):
            continue
        if m.provider is not None and m.provider != provider:
            continue
        if m.kind is not None and m.kind != kind:
            continue
        return r
    return None


# -- mutes ----------------------------------------------------------------------
class Mutes:
    """Muted sessions and projects, kept in ``state_dir/mutes.json``.

    A session mute is ``{"until": Unix seconds}`` or ``{"turn": the turn it
    was muted in}`` (``until: next_prompt``: it ends when the session's turn
    changes); a project mute is ``{"until": Unix seconds}``. Expired mutes
    are dropped when looked at. Thread-safe (the HTTP threads change them,
    the reader thread reads them)."""

    def __init__(self, path=None):
        self.path = path
        self._lock = threading.Lock()
        self.sessions: dict[str, dict] = {}
        self.projects: dict[str, dict] = {}
        if path is not None:
            data = load_json(path, "mutes")
            if isinstance(data, dict):
                for name, into in (("sessions", self.sessions), ("projects", self.projects)):
                    got = data.get(name)
                    if isinstance(got, dict):
                        into.update({k: v for k, v in got.items() if isinstance(v, dict) and (
                            type(v.get("until")) in (int, float) or isinstance(v.get("turn"), str))})

    @staticmethod
    def key(provider: str, session_id: str) -> str:
        return f"{provider}/{session_id}"

    def _save(self) -> None:
        if self.path is None:
            return
        data = {"version": 1, "sessions": dict(self.sessions), "projects": dict(self.projects)}
        save_json(self.path, data)  # OSError to the caller: the API answers 503, nothing changed on disk

    def set(self, which: str, name: str, entry: dict, now: float) -> None:
        """Mute a session (``which`` ``"sessions"``, ``name`` from
        :meth:`key`) or a project (``"projects"``). Raises ``OSError`` when
        the file cannot be written (the mute is not kept then)."""
        table = self.sessions if which == "sessions" else self.projects
        with self._lock:
            old = table.get(name)
            table[name] = {**entry, "at": now}
            while len(table) > MAX_MUTES:
                table.pop(min(table, key=lambda k: table[k].get("at", 0)))
            try:
                self._save()
            except OSError:
                if old is None:
                    table.pop(name, None)
                else:
                    table[name] = old
                raise

    def clear(self, which: str, name: str) -> bool:
        """Unmute; True when there was a mute. Raises ``OSError`` as :meth:`set`."""
        table = self.sessions if which == "sessions" else self.projects
        with self._lock:
            old = table.pop(name, None)
            if old is None:
                return False
            try:
                self._save()
            except OSError:
                table[name] = old
                raise
            return True

    def muted(self, provider: str, session_id: str, project: str, turn: str | None, now: float) -> str | None:
        """Why a page of this session (its turn ``turn``) is muted at
        ``now`` (``"session muted until …"`` …), or None."""
        with self._lock:
            s = self.sessions.get(self.key(provider, session_id))
            if s is not None:
                if "turn" in s:
                    if s["turn"] == (turn or ""):
                        return "session muted until its next prompt"
                elif now < s["until"]:
                    return f"session muted until {_iso(s['until'])}"
            p = self.projects.get(project) if project else None
            if p is not None and now < p["until"]:
                return f"project {project!r} muted until {_iso(p['until'])}"
        return None

    def expire(self, now: float, turn_of=None) -> bool:
        """Drop mutes past their time, and ``next_prompt`` mutes of sessions
        whose turn moved on (``turn_of(provider, session_id)`` → the current
        turn, or ``...`` when the session is unknown). True when any went."""
        with self._lock:
            gone = [k for k, v in self.sessions.items() if ("until" in v and now >= v["until"]) or (
                "turn" in v and turn_of is not None and (t := turn_of(*k.split("/", 1))) is not ... and t != v["turn"])]
            gone_p = [k for k, v in self.projects.items() if now >= v["until"]]
            for k in gone:
                del self.sessions[k]
            for k in gone_p:
                del self.projects[k]
            if gone or gone_p:
                try:
                    self._save()
                except OSError as e:
                    log.warning("cannot write %s: %s", self.path, e.strerror or e)
            return bool(gone or gone_p)

    def rows(self) -> dict:
        """For the status page and ``/api/v1/mutes``: ``{"sessions": {"provider/id":
        {"until": Unix seconds | None, "next_prompt": bool}}, "projects": {name: {"until"}}}``."""
        with self._lock:
            return {"sessions": {k: {"until": v.get("until"), "next_prompt": "turn" in v}
                                 for k, v in self.sessions.items()},
                    "projects": {k: {"until": v["until"]} for k, v in self.projects.items()}}


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t).astimezone().isoformat(timespec="minutes")


# -- the digest ------------------------------------------------------------------
class Digest:
    """Pages held by quiet hours, by the end of their window (Unix seconds),
    kept in ``state_dir/quiet-digest.json`` so that a restart keeps them.
    Each item: ``{"provider", "session_id", "kind", "unit", "since",
    "project", "cwd", "tags"}`` (no transcript text)."""

    def __init__(self, path=None):
        self.path = path
        self.held: dict[str, list[dict]] = {}
        if path is not None:
            data = load_json(path, "quiet-hours digest")
            got = data.get("held") if isinstance(data, dict) else None
            if isinstance(got, dict):
                for end, items in got.items():
                    try:
                        float(end)
                    except ValueError:
                        continue
                    if isinstance(items, list):
                        self.held[end] = [i for i in items if isinstance(i, dict) and isinstance(
                            i.get("provider"), str) and isinstance(i.get("session_id"), str)]

    def _save(self) -> None:
        if self.path is None:
            return
        try:
            save_json(self.path, {"version": 1, "held": self.held})
        except OSError as e:
            log.error("cannot write the quiet-hours digest %s: %s", self.path, e.strerror or e)

    def hold(self, end: float, item: dict) -> None:
        """Keep ``item`` for the digest at ``end`` (one item per session and unit)."""
        key = f"{end:.0f}"
        items = self.held.setdefault(key, [])
        items[:] = [i for i in items if (i["provider"], i["session_id"], i.get("unit")) !=
                    (item["provider"], item["session_id"], item.get("unit"))][-(MAX_HELD - 1):] + [item]
        self._save()

    def next_end(self) -> float | None:
        return min((float(k) for k in self.held), default=None)

    def done(self, end: str) -> None:
        """The digest of window end ``end`` (a key of ``held``) was paged (or
        had nobody left): forget it."""
        if self.held.pop(end, None) is not None:
            self._save()


def still_waiting(items: list[dict], status_of) -> list[tuple[dict, object]]:
    """The digest's items whose session still shows the held state and unit:
    ``status_of(provider, session_id)`` → the session's current
    :class:`~.reducer.Status`, or None when the session is gone. Returns
    ``[(item, status)]``."""
    from .pager import unit_of

    out = []
    for it in items:
        st = status_of(it["provider"], it["session_id"])
        if st is not None and st.state == it["kind"] and unit_of(st) == it.get("unit"):
            out.append((it, st))
    return out


# -- the decision ------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    """What to do with a due page: ``reason`` (of :data:`REASONS`) set: do
    not send it (``why`` says it for the log); ``hold_until`` set: ask again
    at that time (Unix seconds); ``quiet_until``: keep it for that window
    end's digest. All None: send it."""

    reason: str | None = None
    why: str | None = None
    hold_until: float | None = None
    quiet_until: float | None = None


SEND = Verdict()


class Noise:
    """The controls of one configuration (:class:`.config.Alerts` ``a``),
    with the mutes (:class:`Mutes`) and the quiet windows."""

    def __init__(self, a, mutes: Mutes | None = None):
        self.a = a
        self.mutes = mutes if mutes is not None else Mutes()
        self.windows = [Window.from_config(w) for w in a.quiet_hours]

    def tags_for(self, project: str, provider: str, kind: str) -> frozenset:
        """The Apprise tags a page carries: its route's ``tags`` when a route
        matches, else ``alerts.tags[kind]`` (the kind's name by default)."""
        r = route_for(self.a.routes, project, provider, kind)
        if r is not None and r.tags:
            return frozenset(r.tags)
        return frozenset([self.a.tags.get(kind, kind)])

    def verdict(self, kind: str, provider: str, session_id: str, project: str, held, cur, now: float,
                reminder: bool = False) -> Verdict:
        """Decide on one due page (see the module doc for the order).
        ``held``: the :class:`~.reducer.Status` the page is about; ``cur``:
        the session's status now; ``now``: Unix seconds."""
        from .pager import unit_of

        r = route_for(self.a.routes, project, provider, kind)
        if r is not None and r.mute:
            return Verdict("route", f"muted by alerts.routes[{self.a.routes.index(r)}]")
        why = self.mutes.muted(provider, session_id, project, held.turn, now)
        if why:
            return Verdict("muted", why)
        if not reminder:
            if kind == "completed" and self.a.min_turn_seconds and held.duration is not None \
                    and held.duration < self.a.min_turn_seconds:
                return Verdict("min_turn", f"the turn took {held.duration:.1f} s < alerts.min_turn_seconds "
                               f"({self.a.min_turn_seconds:g} s)")
            delay = self.a.presence_delay_seconds
            if delay and kind in ("completed", "waiting"):
                if cur.state != held.state or unit_of(cur) != unit_of(held):
                    return Verdict("presence", f"the user acted in the session within alerts.presence_delay_seconds "
                                   f"(now {cur.state})")
                began = held.since if held.since is not None else now
                if now < began + delay:
                    return Verdict(hold_until=began + delay)
        end = quiet_until(self.windows, kind, now)
        if end is not None:
            return Verdict("quiet_hours", f"quiet hours until {_iso(end)}", quiet_until=end)
        return SEND


def fmt_duration(seconds: float | None) -> str | None:
    """``252`` → ``"4 min 12 s"``; ``3720`` → ``"1 h 2 min"``; None → None."""
    if seconds is None:
        return None
    seconds = int(round(max(0.0, seconds)))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    if h:
        return f"{h} h {m} min" if m else f"{h} h"
    if m:
        return f"{m} min {s} s" if s else f"{m} min"
    return f"{s} s"



def describe(a, targets) -> list[str]:
    """``check-config`` lines for the noise controls: each route with the
    targets its pages reach (``targets``: :class:`.alerts.Target` list, with
    ``name`` and ``tags``), each quiet window, the delays. Empty when none
    is set."""
    def reach(tags) -> str:
        names = [t.name for t in targets if not t.tags or "always" in t.tags or t.tags & tags]
        return ", ".join(names) if names else "no target (nothing is sent)"

    lines = []
    if a.min_turn_seconds:
        lines.append(f"pages: completed turns under {a.min_turn_seconds:g} s send none (alerts.min_turn_seconds)")
    if a.presence_delay_seconds:
        lines.append(f"pages: completed/waiting held {a.presence_delay_seconds:g} s, dropped when you act "
                     "(alerts.presence_delay_seconds)")
    for i, w in enumerate(a.quiet_hours):
        days = ",".join(w.days) if len(w.days) < 7 else "every day"
        lines.append(f"quiet_hours[{i}]: {w.start}-{w.end} {days} ({w.timezone or 'local time'}), holds "
                     f"{', '.join(w.kinds) or 'nothing'}; digest at the end")
    for i, r in enumerate(a.routes):
        m = r.match
        what = ", ".join(f"{k}={v}" for k, v in (("project", m.project), ("provider", m.provider),
                                                  ("kind", m.kind)) if v is not None) or "every page"
        if r.mute:
            lines.append(f"routes[{i}]: {what} -> muted (sent nowhere)")
        else:
            lines.append(f"routes[{i}]: {what} -> tags {', '.join(r.tags)} -> {reach(frozenset(r.tags))}")
    if a.routes:
        for kind in ALERT_KINDS:
            tag = a.tags.get(kind, kind)
            lines.append(f"routes: otherwise {kind} -> tag {tag or '(none)'} -> {reach(frozenset([tag]))}")
    return lines
