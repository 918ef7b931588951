"""Which roots to read: configured paths or each provider's default."""

from __future__ import annotations

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
        var = "CLAUDE_CONFIG_DIR" if provider == "claude_code" else "CODEX_HOME"
        hint = f"; did you point {var} at the {root.name} folder itself? It names the folder above it"
    return "does not exist yet" + hint
