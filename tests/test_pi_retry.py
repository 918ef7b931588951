"""Pi's own retry rule (Pi 1.6.0 ``AgentSession._prepareRetry``,
``_checkCompaction``; pi-ai ``isRetryableAssistantError``), as the Pi
provider applies it to ``errorMessage`` texts Pi writes. The live behaviour
is in the cases PI4–PI7 and 59 (tests/test_cases.py) and the real files in
fixtures/transcripts/pi (tests/test_transcripts.py)."""

from __future__ import annotations

import pytest

from coding_agent_exporter.providers.pi import retry_in

OVERLOADED = '529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
RATE = '429 {"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your rate limit"}}'
TOO_LONG = '400 {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 215043 tokens > 200000 maximum"}}'


@pytest.mark.parametrize("text,attempt,tried,want", [
    (OVERLOADED, 1, False, (2.0, False)),
    (OVERLOADED, 2, False, (4.0, False)),
    (OVERLOADED, 3, False, (8.0, False)),
    (OVERLOADED, 4, False, (None, False)),  # maxRetries 3 spent: the give-up
    (RATE, 1, False, (2.0, False)),
    ("fetch failed", 1, False, (2.0, False)),
    ("Connection error.", 2, False, (4.0, False)),
    ('401 {"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}', 1, False,
     (None, False)),
    ("429 insufficient_quota: You exceeded your current quota", 1, False, (None, False)),  # a limit, not a blip
    ("Monthly usage limit reached", 1, False, (None, False)),
    ("No API key found for fake", 1, False, (None, False)),
    (TOO_LONG, 1, False, (60.0, True)),  # compacted, then replayed
    (TOO_LONG, 1, True, (None, True)),  # the second overflow in a run: final
    ("Rate limit: too many tokens per minute", 1, False, (2.0, False)),  # a rate limit, not an overflow
    ("", 1, False, (None, False)),
    (None, 1, False, (None, False)),
])
def test_retry_in_follows_pi(text, attempt, tried, want):
    assert retry_in(text, attempt, tried) == want
