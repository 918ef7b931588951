"""Typed projection schema for Codex rollout records (see
``exporter.projection``).

Names every field that ``codex.FileDecoder.project`` reads — nothing else of
a line is built (reasoning blobs, tool outputs, token counts are scanned
only). Keep the two in step. A message's ``content`` is kept raw and built
afterwards as block texts, only for ``message`` items.
"""

from __future__ import annotations

from typing import Any, TypedDict, Union

import msgspec

from ..projection import DECODE_ERRORS, Raw


class _Payload(TypedDict, total=False):
    type: Any
    turn_id: Any
    role: Any
    content: Raw
    source: Any
    forked_from_id: Any
    timestamp: Any
    id: Any
    cwd: Any
    duration_ms: Any
    last_agent_message: Any
    message: Any
    reason: Any
    codex_error_info: Any


class Record(TypedDict, total=False):
    timestamp: Any
    type: Any
    payload: Union[_Payload, None]
    # pre-envelope (mid-2025) bare items and header
    id: Any
    role: Any
    content: Raw
    instructions: Raw  # only its presence matters
    record_type: Raw  # only its presence matters


class _Block(TypedDict, total=False):
    text: Any


_record = msgspec.json.Decoder(Record).decode
_content = msgspec.json.Decoder(Union[str, list[_Block], None]).decode


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
    item = obj.get("payload")
    if item is None:
        item = obj  # pre-envelope bare item
    if item.get("type") == "message":  # content is read for messages only
        raw = item.get("content")
        if raw is not None:
            try:
                item["content"] = _content(raw)
            except DECODE_ERRORS:
                return None
    return obj
