"""Line decoding: bytes of one physical line to a JSON object, or a reason.

Reasons (label values of ``coding_agent_transcript_parse_errors_total``):
``invalid_utf8``, ``nul_bytes``, ``invalid_json``, ``not_object`` (and
``unexpected_shape``, counted by the store when a provider cannot project a
record; ``bad_usage``, counted by :mod:`exporter.usage` for token counts
that are not whole numbers within bounds). Blank lines
are not errors; they are counted as skipped with reason ``blank``.

A line that is not one object may hold several records written without a
newline between them (:func:`split_glued`): ``torn_record`` when a torn
record precedes (or follows) the whole ones, which are read; ``glued_records``
when every record in the line is whole.
"""

from __future__ import annotations

import json
from datetime import datetime

import orjson

PARSE_ERROR_REASONS = ("invalid_json", "invalid_utf8", "nul_bytes", "not_object", "unexpected_shape", "bad_usage",
                       "torn_record", "glued_records")
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


#: Work bound of :func:`split_glued`: characters its attempts may scan, per
#: character of the line, plus a constant (a hostile line costs at most this).
GLUED_WORK_PER_CHAR = 8
GLUED_WORK_BASE = 1 << 16
#: ... and at most this many starts that fail to parse (each failure scans
#: the text before it again, for the error's line and column).
GLUED_MAX_FAILURES = 64
_raw_decode = json.JSONDecoder().raw_decode
_WS = " \t\r"


def split_glued(line: bytes, is_record) -> tuple[list[bytes], bool] | None:
    """The whole records in a line that is not one JSON object: a torn copy
    of a record (the agent's write was cut off) glued to the next records
    with no newline between them, or whole records glued together.

    Seen in Copilot CLI 1.0.71 after ``--resume`` (a torn copy of an event,
    then the whole event, on one line) and in Claude Code (a torn
    ``pr-link`` record glued to the next record). Agent-neutral: a record
    is any object for which ``is_record(obj)`` (the provider's ``sniff``)
    is true.

    Returns ``(records, torn)``: the records' bytes in line order, each a
    whole object (valid UTF-8) that ``orjson`` reads, and whether a torn
    part before (or after) them was dropped; or ``None`` when the line
    holds no such run of records. The records found are the first run of
    objects that starts at a ``{"`` and reaches the end of the line (or a
    last ``{`` that does not parse: a torn tail); a fragment inside a torn
    record cannot be taken for one, because its end is followed by the
    torn record's own ``,``, ``}`` or ``]``.

    Bounded: at most ``GLUED_WORK_PER_CHAR`` × len(line) +
    ``GLUED_WORK_BASE`` characters are parsed, and at most
    ``GLUED_MAX_FAILURES`` starts fail, and the line (already
    bounded by ``sources.max_line_bytes``) is held once more as text.
    Never raises.
    """
    if b'{"' not in line:
        return None
    text = line.decode("utf-8", "surrogateescape")
    n = len(text)
    budget = GLUED_WORK_PER_CHAR * n + GLUED_WORK_BASE
    failures = GLUED_MAX_FAILURES
    p = len(text) - len(text.lstrip(_WS))
    if not text.startswith("{", p):
        p = text.find('{"', p)
    while 0 <= p and budget > 0 and failures > 0:
        spans, i, j, tail, first_end = [], p, -1, False, -1
        while True:
            try:
                obj, e = _raw_decode(text, i)
            except ValueError as err:  # JSONDecodeError: a torn record
                budget -= getattr(err, "pos", n) - i + 1
                failures -= 1
                tail = bool(spans)
                break
            except RecursionError:
                budget -= n - i
                failures -= 1
                break
            budget -= e - i
            if first_end < 0:
                first_end = e
            if type(obj) is not dict or not is_record(obj):
                break
            spans.append((i, e))
            j = e
            while j < n and text[j] in _WS:
                j += 1
            if j == n or text[j] != "{":
                break
            i = j
        if spans and (tail or j == n):
            try:
                parts = [text[a:b].encode("utf-8") for a, b in spans]
            except UnicodeEncodeError:  # bytes that are not UTF-8 inside
                parts = None
            if parts:
                return parts, tail or bool(text[:p].strip(_WS))
        # a record that parsed whole holds no other start of a run: skip it
        p = text.find('{"', max(p + 1, first_end))
    return None


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
