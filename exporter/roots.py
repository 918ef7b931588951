"""Which roots to read (configured paths or each provider's default), the one
lookup of the root a path lies under (:meth:`Roots.root_of`) and the one walk
of the transcript files under them (:func:`walk_jsonl`), for the daemon and
``scan`` alike. Light on imports: the daemon's start-up walk
forks from here before the rest of the exporter is imported."""

from __future__ import annotations

import os
from pathlib import Path

from .config import Config
from .providers import PROVIDER_MODULES


def configured_roots(cfg: Config) -> list[tuple[str, Path]]:
    """``[(provider, root), …]`` for every enabled provider: the configured
    ``sources.<provider>.paths`` (``~`` expanded), else the provider's default
    root (``$CLAUDE_CONFIG_DIR/projects`` / ``$CODEX_HOME/sessions``)."""
    roots = []
    for name, mod in PROVIDER_MODULES.items():
        src = getattr(cfg.sources, name)
        if not src.enabled:
            continue
        paths = [Path(p).expanduser() for p in src.paths] or mod.default_roots()
        roots.extend((name, p) for p in paths)
    return roots


class Roots:
    """The configured roots (:func:`configured_roots`) and the one lookup of
    the root a path lies under. ``Path.relative_to`` done as the comparison
    of parts it is, against each root as configured and as resolved (once,
    here: a root may be reached through a symlink)."""

    def __init__(self, roots: list[tuple[str, Path]]):
        self.roots = list(roots)
        self._parts = []
        for name, root in self.roots:
            try:
                real = root.resolve().parts
            except OSError:
                real = None
            self._parts.append((name, root, root.parts, real))

    def __iter__(self):
        return iter(self.roots)

    def __len__(self) -> int:
        return len(self.roots)

    @staticmethod
    def _under(parts: tuple, root: tuple | None) -> bool:
        if root is None:
            return False
        if not root:  # Path(".") holds every relative path
            return not (parts and parts[0] == "/")
        return parts[:len(root)] == root

    def root_of(self, path: str, resolved: str | None = None) -> tuple[str, Path] | None:
        """``(provider, root)`` of the first root (in configured order) that
        holds ``path`` or its ``resolved`` form (when given), or None."""
        cands = (Path(path).parts,) if resolved is None else (Path(path).parts, Path(resolved).parts)
        for name, root, parts, real in self._parts:
            for c in cands:
                if self._under(c, parts) or self._under(c, real):
                    return name, root
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
    if provider == "gemini_cli" and root.parent.name == root.parent.parent.name == ".gemini":
        hint = "; did you point GEMINI_CLI_HOME at the .gemini folder itself? It names the folder above it"
    return "does not exist yet" + hint


class WalkStats:
    """What a walk saw: ``dirs`` folders listed, ``denied`` the folders that
    could not be listed (path → error)."""

    __slots__ = ("dirs", "denied")

    def __init__(self) -> None:
        self.dirs = 0
        self.denied: dict[str, OSError] = {}


def walk_jsonl(root: Path, stats: WalkStats | None = None, entries: bool = False, resolved: bool = False):
    """Yield every ``*.jsonl`` file path under ``root`` (no symlinked
    folders followed; unreadable folders skipped, and noted in ``stats``);
    with ``entries``, their ``os.DirEntry`` (``.path``, ``.name``, a
    ``.stat()`` that follows symlinks); with ``resolved``, ``(path, resolved
    path, size)``: the resolved path comes from the walk itself (a folder it
    enters is no symlink, so only symlinked files need a ``realpath``)."""
    stack = [(str(root), os.path.realpath(root) if resolved else None)]
    while stack:
        d, real = stack.pop()
        try:
            with os.scandir(d) as it:
                if stats is not None:
                    stats.dirs += 1
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append((e.path, os.path.join(real, e.name) if resolved else None))
                        elif e.name.endswith(".jsonl") and e.is_file():
                            if not resolved:
                                yield e if entries else e.path
                            elif e.is_symlink():
                                yield e.path, os.path.realpath(e.path), os.stat(e.path).st_size
                            else:
                                yield e.path, os.path.join(real, e.name), e.stat().st_size
                    except OSError:
                        continue
        except FileNotFoundError:
            continue
        except OSError as e:
            if stats is not None:
                stats.denied[d] = e
            continue
