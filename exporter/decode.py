"""Line decoding: bytes of one physical line to a JSON object, or a reason.

Reasons (label values of ``coding_agent_transcript_parse_errors_total``):
``invalid_utf8``, ``nul_bytes``, ``invalid_json``, ``not_object`` (and
``unexpected_shape``, counted by the store when a provider cannot project a
record; ``bad_usage``, counted by :mod:`exporter.usage` for token counts
that are not whole numbers within bounds). Blank lines
are not errors; they are counted as skipped with reason ``blank``.
"""

from __future__ import annotations

import json
from datetime import datetime

import orjson

PARSE_ERROR_REASONS = ("invalid_json", "invalid_utf8", "nul_bytes", "not_object", "unexpected_shape", "bad_usage")
SKIP_REASONS = ("blank", "oversized")


class LineError(Exception):
    """A line that is not a JSON object; ``reason`` is the counter label."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def decode_line(line: bytes) -> dict | None:
    """Decode one line (without its ``\\n``) to a dict.

    Returns ``None`` for a blank line. Raises :class:`LineError` with a reason
    for anything else that is not a JSON object.
    """
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        if not line.strip():
            return None
        if b"\\ud" in line or b"\\uD" in line:
            # A lone surrogate escape (JavaScript's JSON.stringify writes one
            # when text is cut inside an emoji): orjson refuses it, the
            # standard library keeps the record.
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):
                obj = None
            if isinstance(obj, dict):
                return obj
        if b"\x00" in line:
            raise LineError("nul_bytes") from None
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            raise LineError("invalid_utf8") from None
        raise LineError("invalid_json") from None
    if not isinstance(obj, dict):
        raise LineError("not_object")
    return obj


def parse_timestamp(value) -> float | None:
    """ISO-8601 string (``2026-05-01T10:00:00.000Z``) or Unix seconds to Unix
    seconds; ``None`` for anything else (never raises)."""
    if isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value)
        except ValueError:
            return None
        if dt.tzinfo is None:
            return None
        return dt.timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e11:
        return float(value)
    return None
