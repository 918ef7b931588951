"""The providers: one module per agent, each knowing its transcripts' layout
and records (see :mod:`.claude_code`, :mod:`.codex`, :mod:`.copilot_cli`,
:mod:`.pi`)."""

from __future__ import annotations

from types import ModuleType

from . import claude_code, codex, copilot_cli, pi

#: Provider name (as in labels and config keys) → its module.
PROVIDER_MODULES: dict[str, ModuleType] = {claude_code.NAME: claude_code, codex.NAME: codex,
                                           copilot_cli.NAME: copilot_cli, pi.NAME: pi}
