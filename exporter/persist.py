"""Small JSON state files in ``state_dir``: atomic writes, safe reads."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path

import orjson
from filelock import FileLock, Timeout

log = logging.getLogger(__name__)


def save_json(path: Path, data) -> None:
    """Write ``data`` as JSON atomically (:func:`write_atomic`). Raises
    ``OSError`` on failure."""
    write_atomic(path, lambda f: f.write(orjson.dumps(data)))


def write_atomic(path: Path, write) -> None:
    """Replace ``path`` atomically with what ``write(f)`` writes to a binary
    file: temp file in the same folder, fsync, rename, fsync of the folder.
    Raises ``OSError`` on failure (the temp file is removed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def remove_leftovers(path: Path) -> None:
    """Delete temp files an interrupted :func:`write_atomic` left beside
    ``path`` (a crash between ``mkstemp`` and ``os.replace``)."""
    try:
        with os.scandir(path.parent) as it:
            for e in it:
                if e.name.startswith(path.name + ".") and e.name.endswith(".tmp") and e.is_file(follow_symlinks=False):
                    try:
                        os.unlink(e.path)
                    except OSError:
                        pass
    except OSError:
        pass


def set_aside(path: Path, what: str, why) -> Path:
    """Rename an unusable state file (or folder) to
    ``<name>.corrupt-<time>`` with a warning; returns the new path."""
    aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 10**9:09d}")
    try:
        os.replace(path, aside)
    except OSError:
        aside = path
    log.warning("the %s %s is unusable (%s); set it aside as %s and starting fresh", what, path, why, aside)
    return aside


def load_json(path: Path, what: str, valid=None):
    """Read a JSON state file; ``{}`` when missing. A corrupt or foreign file
    (not JSON, not an object, another ``version``, or ``valid(data)`` false)
    is renamed to ``<name>.corrupt-<time>`` with a warning, never raised.
    Temp files of an interrupted write are removed."""
    remove_leftovers(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except IsADirectoryError:
        set_aside(path, what, "a folder, not a file")
        return {}
    except OSError as e:
        log.warning("cannot read the %s %s: %s; starting without it", what, path, e.strerror or e)
        return {}
    try:
        data = orjson.loads(raw)
        if not isinstance(data, dict) or data.get("version") != 1:
            raise ValueError("not a state file of this exporter")
        if valid is not None and not valid(data):
            raise ValueError("unexpected contents")
        return data
    except (orjson.JSONDecodeError, ValueError) as e:
        set_aside(path, what, e)
        return {}


class StateDirBusy(Exception):
    """Another exporter holds the state directory."""


def lock_state_dir(state_dir: Path):
    """Take an exclusive lock on ``state_dir/lock`` for this process's life
    (the lock object is returned; keep it). Two exporters on one state
    directory would page every turn twice. ``filelock`` takes an OS lock
    (``flock`` on POSIX, ``msvcrt.locking`` on Windows) that the OS releases
    when the process dies. Raises :class:`StateDirBusy` naming the holder's
    pid (from ``state_dir/lock.pid``), or ``OSError`` when the folder cannot
    be made."""
    state_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(state_dir / "lock", timeout=0)
    try:
        lock.acquire()
    except Timeout:
        try:
            holder = (state_dir / "lock.pid").read_text().strip() or "?"
        except OSError:
            holder = "?"
        raise StateDirBusy(f"state_dir {state_dir} is in use by another coding-agent-exporter (pid {holder}); "
                           "give each exporter its own state_dir") from None
    try:
        (state_dir / "lock.pid").write_text(str(os.getpid()))
    except OSError:
        pass  # only used to name the holder
    return lock
