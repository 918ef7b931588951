"""Claude Code's live session registry: one record per running process.

Since about 2.1.139 every live Claude Code process keeps
``$CLAUDE_CONFIG_DIR/sessions/<pid>.json`` (default ``~/.claude/sessions``)
current. The file is undocumented; everything here is read defensively
(facts: ``shared/transcripts/SOURCES.md`` "claude_sessions/", records of
2.1.139 Linux, 2.1.226 Linux/macOS, 2.1.238 Windows, 2.1.332 Linux):

- Fields read: ``pid``, ``sessionId``, ``procStart``, ``status``
  (``busy``/``idle``/``waiting``/``shell``), ``waitingFor`` (with
  ``waiting``), ``statusUpdatedAt``/``updatedAt`` (epoch ms), ``startedAt``,
  ``entrypoint``, ``cwd``, ``pidDomain``. ``name`` (a title the user may have
  typed) is never read; ``cwd`` is content and only ever becomes the project
  label the user configured.
- Records without ``status`` (the first write at registration; ``sdk-ts``
  sessions never get one) or without ``procStart`` (older builds) are
  skipped; so are legacy ``pid-<n>.json`` files and the sibling
  ``<pid>.<hash>.key`` files (secrets): :data:`RECORD_NAME` matches neither,
  and nothing else is ever opened.
- Writes are made in place (no temp+rename): a read can see cut JSON, which
  is "not written yet" (:class:`RecordCut`).
- ``procStart`` is the process start time in the OS's own form
  (:func:`proc_start_seconds`).

This module owns the mapping of a record to :class:`~..events.Event`
(:func:`evidence`); ``exporter.registry`` follows the folder and the
processes.
"""

from __future__ import annotations

import calendar
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from ..events import END, ERROR, WAIT, WORK, Event

#: The only file names read: ``<pid>.json``. Not ``pid-<n>.json`` (legacy),
#: not ``<pid>.<hash>.key`` (secrets), not ``.key.tmp.*``.
RECORD_NAME = re.compile(r"[0-9]{1,10}\.json")
STATUSES = ("busy", "idle", "waiting", "shell")
#: ``waitingFor`` → wait reason (:data:`~..events.WAIT_REASONS`). ``dialog
#: open`` (the user's own slash-command dialog) waits on nobody: absent.
WAIT_FOR = {"permission prompt": "permission", "input needed": "question", "worker request": "worker_request",
            "sandbox request": "sandbox_request", "goal proposal": "goal_proposal"}
#: Skip reasons (``coding_agent_registry_records_skipped_total{reason}``).
SKIP_REASONS = ("cut", "too_large", "invalid", "no_status", "foreign_pid_domain")
#: Seconds between 1601-01-01 (FILETIME epoch) and 1970-01-01.
_FILETIME_EPOCH = 11644473600


class RecordCut(Exception):
    """The bytes read are not a whole JSON document (a write in progress)."""


class RecordSkipped(Exception):
    """A record that is not evidence; ``reason`` is one of :data:`SKIP_REASONS`."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Record:
    """One parsed ``<pid>.json``.

    ``status_at``: ``statusUpdatedAt`` (else ``updatedAt``) in Unix seconds;
    ``started_at``: ``startedAt`` in Unix seconds (or None); ``waiting_for``
    only with ``status == "waiting"``; ``pid_domain``: ``pidDomain``
    (2.1.3xx, ``linux:<machine id>:pid:[<pid namespace inode>]``) or None.
    """

    pid: int
    session_id: str
    proc_start: str
    status: str
    waiting_for: str | None
    status_at: float | None
    started_at: float | None
    entrypoint: str | None
    cwd: str | None
    pid_domain: str | None

    @property
    def key(self) -> tuple:
        """What makes a new reading: the status, what it waits for, when it was set."""
        return self.session_id, self.status, self.waiting_for, self.status_at


def default_folders() -> list[Path]:
    """``$CLAUDE_CONFIG_DIR/sessions``, else ``~/.claude/sessions``."""
    base = os.environ.get("CLAUDE_CONFIG_DIR")
    return [(Path(base).expanduser() if base else Path.home() / ".claude") / "sessions"]


def _text(obj: dict, key: str, limit: int = 4096) -> str | None:
    v = obj.get(key)
    return v if isinstance(v, str) and 0 < len(v) <= limit and "\x00" not in v else None


def _ms(obj: dict, key: str) -> float | None:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1e14:
        return None
    return v / 1000.0


def parse(data: bytes) -> Record:
    """One record's bytes to a :class:`Record`.

    Raises :class:`RecordCut` for bytes that end inside the JSON (empty, or a
    write caught half way) and :class:`RecordSkipped` with ``invalid`` (not
    an object, bad ``pid``/``sessionId``) or ``no_status`` (no ``status`` or
    no ``procStart``: registering, ``sdk-ts``, older builds).
    """
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        # In-place writes: what does not parse is a write still under way
        # (retried at the next change), unless it is plainly no JSON at all.
        raise RecordCut() from None
    if not isinstance(obj, dict):
        raise RecordSkipped("invalid")
    pid, sid = obj.get("pid"), _text(obj, "sessionId", 128)
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 1 << 32 or sid is None \
            or not sid.isprintable():
        raise RecordSkipped("invalid")
    status, proc_start = obj.get("status"), _text(obj, "procStart", 64)
    if status not in STATUSES or proc_start is None:
        raise RecordSkipped("no_status")
    waiting = _text(obj, "waitingFor", 64) if status == "waiting" else None
    status_at = _ms(obj, "statusUpdatedAt") or _ms(obj, "updatedAt")
    entry = _text(obj, "entrypoint", 64)
    return Record(pid, sid, proc_start, status, waiting, status_at, _ms(obj, "startedAt"), entry,
                  _text(obj, "cwd"), _text(obj, "pidDomain", 256))


def proc_start_seconds(proc_start: str, boot_time: float, clock_ticks: int = 100) -> list[float]:
    """``procStart`` as Unix seconds: the candidates to compare a process's
    start time with (psutil ``create_time()``).

    - all digits, 17 or more (Windows, 2.1.238): a FILETIME, 100 ns units
      since 1601-01-01 UTC;
    - other digits (Linux): ``/proc/<pid>/stat`` field 22, clock ticks since
      boot (``boot_time``: Unix seconds; ``clock_ticks``: ``SC_CLK_TCK``);
    - text (macOS, ``ps -o lstart``: ``"Sat Aug  8 07:11:34 2026"``, 1 s
      resolution): read as UTC, and as local time (both are returned).

    Returns ``[]`` for anything else.
    """
    s = proc_start.strip()
    if s.isdigit() and s.isascii():
        n = int(s)
        if len(s) >= 17:
            return [n / 1e7 - _FILETIME_EPOCH]
        return [boot_time + n / clock_ticks]
    try:
        parts = time.strptime(" ".join(s.split()), "%a %b %d %H:%M:%S %Y")
    except ValueError:
        return []
    utc = float(calendar.timegm(parts))
    try:
        local = time.mktime(parts)
    except (OverflowError, ValueError):
        return [utc]
    return [utc] if local == utc else [utc, local]


def pid_domain(value: str) -> tuple[str, str] | None:
    """``pidDomain`` (2.1.332: ``linux:<machine id>:pid:[<namespace inode>]``,
    the machine id as in ``/etc/machine-id``) as ``(machine id,
    "pid:[<inode>]")``, or None for another form."""
    parts = value.split(":", 2)
    if len(parts) != 3 or parts[0] != "linux" or not parts[2].startswith("pid:["):
        return None
    return parts[1], parts[2]


def evidence(rec: Record, state: str, registry_wait: float | None) -> Event | None:
    """What a new reading of a live process's record means for its session,
    whose state is ``state`` now; ``registry_wait`` is the record time of the
    wait the registry reported that is still the session's state (or None).

    - ``waiting`` + a reason of :data:`WAIT_FOR`: a ``WAIT`` (``permission
      prompt`` while the transcript shows ``ExitPlanMode`` pending stays a
      ``plan``: the reducer keeps the transcript's reason for the same wait);
    - ``busy`` after a wait the registry reported: ``WORK`` (the user
      answered); ``busy`` otherwise adds nothing to the transcript (2.1.332
      writes ``busy`` again after the transcript's ``ExitPlanMode`` or
      ``AskUserQuestion`` and before it shows the prompt: no answer);
    - ``idle``/``shell``/``waiting`` + ``dialog open``: no turn end, but the
      end of a wait the registry reported (``WORK`` at that wait's own time,
      so that whatever the transcript wrote since still decides).
    """
    ts = rec.status_at if rec.status_at is not None else time.time()
    if rec.status == "waiting" and rec.waiting_for in WAIT_FOR:
        return Event(WAIT, ts=ts, reason=WAIT_FOR[rec.waiting_for], detail="registry", source="registry")
    if rec.status == "busy":
        if state != "waiting" or registry_wait is None:
            return None
        return Event(WORK, ts=ts, detail="registry", source="registry")
    if registry_wait is not None and state == "waiting":
        return Event(WORK, ts=registry_wait, detail="registry", source="registry")
    return None


def exited(state: str, removed: bool, ts: float) -> Event | None:
    """The process of a record is gone while its session is ``state``.
    ``removed``: the file went with it (a clean exit: ``/exit``, SIGTERM):
    ``END`` (the reducer makes an open turn ``interrupted``, no page).
    Otherwise the file was left behind by a dead (or reused) pid: a kill or
    crash, ``ERROR`` with kind ``agent_exited``. None unless the session was
    ``working``, ``waiting`` or ``stalled``."""
    if state not in ("working", "waiting", "stalled"):
        return None
    if removed:
        return Event(END, ts=ts, detail="registry", source="registry")
    return Event(ERROR, ts=ts, error_kind="agent_exited", detail="registry", source="registry")
