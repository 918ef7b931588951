"""tests/agents/install.py says what the real-agent suite needs of Node (no npm run here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "agents"))
import install  # noqa: E402


def test_a_package_wanting_a_newer_node_is_explained(tmp_path):
    agents = {"claude_code": {"package": "@anthropic-ai/claude-code", "version": "2.1.332", "bin": "claude"},
              "codex": {"package": "@openai/codex", "version": "0.171.0", "bin": "codex"}}
    for spec, engines in ((agents["claude_code"], {"node": ">=22.0.0"}), (agents["codex"], {"node": ">=16"})):
        pkg = tmp_path / "node_modules" / spec["package"]
        pkg.mkdir(parents=True)
        (pkg / "package.json").write_text(json.dumps({"name": spec["package"], "engines": engines}))
    notes = install.engine_notes(tmp_path, agents, "v20.20.2")
    assert len(notes) == 1, notes  # Codex is content with Node 20
    assert "@anthropic-ai/claude-code 2.1.332 declares engines.node >=22" in notes[0]
    assert "Node v20.20.2" in notes[0] and "EBADENGINE" in notes[0] and "native binary" in notes[0]
    assert install.engine_notes(tmp_path, agents, "v22.1.0") == []
