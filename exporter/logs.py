"""Log output: ``--log.level`` and ``--log.format`` as exporter-toolkit exporters have them.

``logfmt`` (default) writes one line per record::

    time=2026-05-01T10:00:00.123Z level=INFO source=alerts.py:301 msg="page sent" kind=completed …

``json`` writes one JSON object per line with the same keys. Structured
fields are passed as ``extra={"fields": {...}}`` and become keys after
``msg``. Apprise's per-page INFO lines go to DEBUG, and watchdog never logs
below INFO (it writes one DEBUG line per inotify event), nor does urllib3
(its request lines carry some services' tokens), so ``--log.level debug``
shows the exporter's own decisions and state transitions. Apprise's
DEBUG output (it includes the posted payload, which may hold an excerpt of
transcript text) is never shown.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}
FORMATS = ("logfmt", "json")
_LEVEL_NAMES = {logging.WARNING: "WARN", logging.CRITICAL: "ERROR"}
_BARE = re.compile(r'^[^\s"=\\]+$')


def _pairs(fmt: logging.Formatter, record: logging.LogRecord) -> list[tuple[str, object]]:
    t = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
    level = _LEVEL_NAMES.get(record.levelno, record.levelname)
    source = f"{record.module}.py:{record.lineno}" if not record.name.startswith(("apprise", "watchdog")) \
        else record.name
    pairs: list[tuple[str, object]] = [("time", t), ("level", level), ("source", source),
                                       ("msg", record.getMessage())]
    pairs += list((getattr(record, "fields", None) or {}).items())
    if record.exc_info:
        pairs.append(("err", fmt.formatException(record.exc_info)))
    return pairs


def _value(v) -> str:
    s = v if isinstance(v, str) else ("" if v is None else str(v))
    return s if _BARE.match(s) else json.dumps(s, ensure_ascii=False)


class LogfmtFormatter(logging.Formatter):
    """``key=value`` pairs; values with spaces, quotes or ``=`` are quoted."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_value(v)}" for k, v in _pairs(self, record))


class JSONFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(dict(_pairs(self, record)), ensure_ascii=False, default=str)


def _apprise_info_to_debug(record: logging.LogRecord) -> bool:
    if record.levelno == logging.INFO:
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
    return True


def setup(level: str = "info", fmt: str = "logfmt", stream=None) -> None:
    """Configure the root logger for ``level`` (``debug``/``info``/``warn``/
    ``error``) and ``fmt`` (``logfmt``/``json``), writing to ``stream``
    (default stderr)."""
    lvl = LEVELS[level]
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(lvl)
    logging.getLogger("watchdog").setLevel(max(lvl, logging.INFO))
    # urllib3's DEBUG lines name the request path, where some Apprise URLs
    # carry their token (Telegram's /bot<token>/…).
    logging.getLogger("urllib3").setLevel(max(lvl, logging.INFO))
    ap = logging.getLogger("apprise")
    ap.setLevel(logging.INFO if lvl <= logging.DEBUG else logging.WARNING)
    if _apprise_info_to_debug not in ap.filters:
        ap.addFilter(_apprise_info_to_debug)
