"""The providers: one module per agent, each knowing its transcripts' layout
and records (see :mod:`.claude_code`, :mod:`.codex`)."""

from __future__ import annotations

from types import ModuleType

from . import claude_code, codex

#: Provider name (as in labels and config keys) → its module.
PROVIDER_MODULES: dict[str, ModuleType] = {claude_code.NAME: claude_code, codex.NAME: codex}
