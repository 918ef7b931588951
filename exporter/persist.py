"""Small JSON state files in ``state_dir``: atomic writes, safe reads."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path

import orjson

log = logging.getLogger(__name__)


def save_json(path: Path, data) -> None:
    """Write ``data`` as JSON atomically: temp file in the same folder, fsync,
    rename, fsync of the folder. Raises ``OSError`` on failure."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(orjson.dumps(data))
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


def load_json(path: Path, what: str):
    """Read a JSON state file; ``{}`` when missing. A corrupt or foreign file
    is renamed to ``<name>.corrupt-<time>`` with a warning, never raised."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as e:
        log.warning("cannot read the %s %s: %s; starting without it", what, path, e.strerror or e)
        return {}
    try:
        data = orjson.loads(raw)
        if not isinstance(data, dict) or data.get("version") != 1:
            raise ValueError("not a state file of this exporter")
        return data
    except (orjson.JSONDecodeError, ValueError) as e:
        aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
        try:
            os.replace(path, aside)
        except OSError:
            aside = path
        log.warning("the %s %s is unreadable (%s); set it aside as %s and starting fresh", what, path, e, aside)
        return {}
