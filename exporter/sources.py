"""Moved to :mod:`exporter.roots` (kept for imports of the old name)."""

from .roots import WalkStats, configured_roots, describe_root, walk_jsonl  # noqa: F401
