"""Which roots to read (configured paths or each provider's default), and the
transcript files under them. Light on imports: the daemon's start-up walk
forks from here before the rest of the exporter is imported."""

from __future__ import annotations

import os
from pathlib import Path

from .config import Config
from .providers import PROVIDER_MODULES


def configured_roots(cfg: Config) -> list[tuple[str, Path]]:
    """``[(provider, root), …]`` for every enabled provider: the configured
    ``sources.<provider>.paths`` (``~`` expanded), else the provider's default
    root (the module's ``default_roots``: ``$CLAUDE_CONFIG_DIR/projects``,
    ``$CODEX_HOME/sessions``, ``$COPILOT_HOME/session-state``, ``~/.pi/agent/sessions``)."""
    roots = []
    for name, mod in PROVIDER_MODULES.items():
        src = getattr(cfg.sources, name)
        if not src.enabled:
            continue
        paths = [Path(p).expanduser() for p in src.paths] or mod.default_roots()
        roots.extend((name, p) for p in paths)
    return roots


def provider_for(path: Path, roots: list[tuple[str, Path]]) -> tuple[str, Path] | None:
    """The ``(provider, root)`` whose root contains ``path``, if any."""
    try:
        resolved = path.resolve()
    except OSError:
        resolved = path
    for name, root in roots:
        for candidate in (path, resolved):
            try:
                candidate.relative_to(root)
                return name, root
            except ValueError:
                pass
            try:
                candidate.relative_to(root.resolve())
                return name, root
            except (ValueError, OSError):
                pass
    return None


def describe_root(provider: str, root: Path) -> str:
    """How a root looks now, for start-up logs and ``check-config``: exists,
    is not a folder, or does not exist yet (with a hint when an environment
    variable seems to point one level too deep)."""
    if root.is_dir():
        return "exists"
    if root.exists():
        return "is not a folder"
    hint = ""
    if root.parent.name == root.name:
        var = {"claude_code": "CLAUDE_CONFIG_DIR", "codex": "CODEX_HOME", "copilot_cli": "COPILOT_HOME"}.get(provider)
        if var:
            hint = f"; did you point {var} at the {root.name} folder itself? It names the folder above it"
    return "does not exist yet" + hint


class WalkStats:
    """What a walk saw: ``dirs`` folders listed, ``denied`` the folders that
    could not be listed (path → error)."""

    __slots__ = ("dirs", "denied")

    def __init__(self) -> None:
        self.dirs = 0
        self.denied: dict[str, OSError] = {}


def walk_jsonl(root: Path, stats: WalkStats | None = None, entries: bool = False):
    """Yield every ``*.jsonl`` file path under ``root`` (no symlinked
    folders followed; unreadable folders skipped, and noted in ``stats``);
    with ``entries``, their ``os.DirEntry`` (``.path``, ``.name``, a
    ``.stat()`` that follows symlinks)."""
    stack = [str(root)]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                if stats is not None:
                    stats.dirs += 1
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                        elif e.name.endswith(".jsonl") and e.is_file():
                            yield e if entries else e.path
                    except OSError:
                        continue
        except FileNotFoundError:
            continue
        except OSError as e:
            if stats is not None:
                stats.denied[d] = e
            continue
