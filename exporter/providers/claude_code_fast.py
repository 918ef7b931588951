"""Typed projection schema for Claude Code records (see ``exporter.projection``).

Names every field that ``claude_code.FileDecoder.project`` reads — nothing
else of a line is built. Keep the two in step: a field read there and missing
here would read as absent (the equivalence test over every fixture catches
it for the shapes the fixtures hold).

``message.content`` is kept raw and built afterwards only where ``project``
looks at it: in full for assistant rows (their identity is a digest of the
whole content), as block types and texts for user rows (a tool result's
output is never built).
"""

from __future__ import annotations

from typing import Any, TypedDict, Union

import msgspec
import orjson

from ..projection import DECODE_ERRORS, Raw


class _Message(TypedDict, total=False):
    content: Raw
    stop_reason: Any
    model: Any
    id: Any


class _Data(TypedDict, total=False):
    type: Any


class Record(TypedDict, total=False):
    type: Any
    subtype: Any
    uuid: Any
    timestamp: Any
    sessionId: Any
    cwd: Any
    version: Any
    isSidechain: Any
    isMeta: Any
    isCompactSummary: Any
    isApiErrorMessage: Any
    error: Any
    apiErrorStatus: Any
    durationMs: Any
    data: Union[_Data, None]
    message: Union[_Message, None]
    toolUseResult: Raw  # only its presence matters


class _Block(TypedDict, total=False):
    type: Any
    text: Any


_record = msgspec.json.Decoder(Record).decode
_user_content = msgspec.json.Decoder(Union[str, list[_Block], None]).decode
_loads = orjson.loads


def decode(line: bytes) -> dict | None:
    """The record as a dict of the fields ``project`` reads, or ``None`` when
    the orjson path must decide: a non-ASCII line, or one msgspec rejects
    (see ``exporter.projection``; inlined here: this runs for every line)."""
    if not line.isascii():
        return None
    try:
        obj = _record(line)
    except DECODE_ERRORS:
        return None
    msg = obj.get("message")
    if msg is not None:
        raw = msg.get("content")
        if raw is not None:
            rtype = obj.get("type")
            try:
                if rtype == "assistant":
                    msg["content"] = _loads(memoryview(raw))
                elif rtype == "user":
                    msg["content"] = _user_content(raw)
            except (orjson.JSONDecodeError, *DECODE_ERRORS):
                return None
    return obj
