"""The providers: one module per agent, each knowing its transcripts' layout
and records (see :mod:`.claude_code`, :mod:`.codex`, :mod:`.copilot_cli`,
:mod:`.pi`, :mod:`.gemini_cli`)."""

from __future__ import annotations

from types import ModuleType

from ..decode import LineError, decode_line

from . import claude_code, codex, copilot_cli, gemini_cli, pi

#: Provider name (as in labels and config keys) → its module.
PROVIDER_MODULES: dict[str, ModuleType] = {claude_code.NAME: claude_code, codex.NAME: codex,
                                           copilot_cli.NAME: copilot_cli, pi.NAME: pi,
                                           gemini_cli.NAME: gemini_cli}


#: The order ``sniff`` asks the providers in: the most specific test first (a Gemini CLI metadata line
#: has a ``sessionId``, which Claude Code's test takes for its own).
_SNIFF_ORDER: dict[str, ModuleType] = {gemini_cli.NAME: gemini_cli,
                                       **{k: v for k, v in PROVIDER_MODULES.items() if k != gemini_cli.NAME}}


def sniff(path: str, max_lines: int = 50) -> str | None:
    """Guess a file's provider from its first ``max_lines`` records (each
    provider's ``sniff(record)``); None: no idea, or the file cannot be
    read."""
    try:
        with open(path, "rb") as f:
            for _ in range(max_lines):
                line = f.readline(1 << 20)
                if not line:
                    break
                try:
                    obj = decode_line(line.rstrip(b"\n"))
                except LineError:
                    continue
                if not obj:
                    continue
                for name, mod in _SNIFF_ORDER.items():
                    if mod.sniff(obj):
                        return name
    except OSError:
        return None
    return None
