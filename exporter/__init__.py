"""coding-agent-exporter: Prometheus exporter and pager for Claude Code and
Codex session transcripts."""

__version__ = "0.1.0"
