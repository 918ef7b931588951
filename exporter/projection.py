"""Typed projection decoding: the fast path in front of :func:`decode_line`.

``orjson.loads`` builds every string and number of a line as Python objects,
although a provider's ``FileDecoder.project`` reads a dozen fields. Each
provider's ``*_fast`` module declares those fields as msgspec ``TypedDict``
schemas; msgspec then builds a dict holding only them (nested objects too)
and merely scans the rest (tool outputs, file contents, signatures). The dict
goes to the same ``project`` as before, so the provider logic exists once.

The fast path must give exactly what ``decode_line`` + ``project`` give, or
step aside. It returns ``None`` (the caller then takes the orjson path, which
also classifies malformed lines) whenever it is not sure:

- the line is not ASCII. msgspec checks the UTF-8 of the strings it keeps
  but not of those it skips, while orjson rejects any invalid byte; checking
  in Python (``bytes.decode``) costs about what msgspec saves, and orjson
  validates in SIMD. So non-ASCII lines go to orjson directly and the typed
  path only sees lines that are valid UTF-8 by construction;
- msgspec rejects the line (malformed JSON, a field of an unexpected type —
  e.g. ``message`` that is not an object —, nesting deeper than msgspec's
  limit, which is lower than orjson's).

Known difference, deliberately not guarded (it costs a scan of every line):
a number beyond the range of a double (``1e400``, a 309-digit integer) in a
field the schema does not name is skipped by msgspec, while orjson rejects
the whole line as ``invalid_json``. Neither agent writes such numbers.

What it buys (``bench/run.py``, README "Performance"): on ASCII lines the
decode costs 0.5–0.9× of ``orjson.loads``; on the whole scan pipeline the
gain is small, as decoding is about a third of the per-line work.
"""

from __future__ import annotations

import msgspec

#: What msgspec may raise for a line it will not decode (the orjson path then
#: decides). RecursionError: deeper than msgspec's nesting limit.
DECODE_ERRORS = (msgspec.DecodeError, RecursionError, ValueError, TypeError)

#: ``msgspec.Raw`` field type for values whose presence (or bytes) is all
#: that matters: scanned, never built.
Raw = msgspec.Raw


def typed_decoder(schema):
    """A ``decode(line) -> dict | None`` for a msgspec ``TypedDict`` schema
    (``None``: not decodable here; use the orjson path)."""
    dec = msgspec.json.Decoder(schema).decode

    def decode(line: bytes):
        if not line.isascii():
            return None
        try:
            return dec(line)
        except DECODE_ERRORS:
            return None

    return decode
