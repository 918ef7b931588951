"""One-shot reduction of transcript files or folders (``scan``)."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from .config import Config
from .decode import LineError, decode_line
from .discovery import walk_jsonl
from .metrics import Metrics
from .reducer import Timing
from .sources import configured_roots, provider_for
from .store import PROVIDER_MODULES, SessionStore

log = logging.getLogger(__name__)


def sniff_provider(path: str, max_lines: int = 50) -> str | None:
    """Guess a file's provider from its first records (``None``: no idea)."""
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
                for name, mod in PROVIDER_MODULES.items():
                    if mod.sniff(obj):
                        return name
    except OSError:
        return None
    return None


def make_store(cfg: Config, metrics: Metrics | None = None) -> SessionStore:
    """A store configured from ``cfg``."""
    r = cfg.reducer
    return SessionStore(
        metrics or Metrics(),
        Timing(r.inferred_settle_seconds, r.marker_wait_seconds, r.stall_after_seconds),
        cfg.sources.max_line_bytes,
        cfg.metrics.project_label,
        cfg.metrics.max_sessions,
        0,  # scans show every session, however old
    )


def scan(paths: list[str], cfg: Config, provider: str | None = None, at: float | None = None,
         progress=None) -> tuple[list[dict], SessionStore]:
    """Reduce ``paths`` (files or folders) once; returns the session rows (see
    :meth:`SessionStore.rows`) evaluated at ``at`` (Unix seconds, default now)
    and the store. Files are attributed to a provider by ``provider``, else by
    the configured/default root they sit under, else by their records."""
    store = make_store(cfg)
    roots = configured_roots(cfg)
    files: list[tuple[str, str, Path]] = []
    for p in paths:
        path = Path(p).expanduser()
        if not path.exists():
            raise FileNotFoundError(f"{p}: no such file or folder")
        found = [str(path)] if path.is_file() else sorted(walk_jsonl(path))
        base = path if path.is_dir() else path.parent
        for fp in found:
            prov, root = provider, base
            if prov is None:
                hit = provider_for(Path(fp), roots)
                if hit:
                    prov, root = hit
            prov = prov or sniff_provider(fp)
            if prov is None:
                log.warning("%s: no Claude Code or Codex records found; skipped", fp)
                continue
            files.append((fp, prov, root))
    start = time.monotonic()
    total = len(files)
    for i, (fp, prov, root) in enumerate(files, 1):
        if store.track(fp, prov, root):
            while store.refresh(fp, live=False, final=True):
                pass
        if progress and (i == total or time.monotonic() - start > 2 and i % 200 == 0):
            progress(f"read {i}/{total} files")
    store.evaluate(time.time() if at is None else at)
    with store._lock:
        rows = store.rows(at)
    return rows, store


def format_row(row: dict) -> str:
    """One human-readable line per session."""
    from datetime import datetime, timezone

    last = row["last_event_at"]
    last_s = datetime.fromtimestamp(last, timezone.utc).isoformat(timespec="seconds") if last else "-"
    how = row["evidence"] or row["error_kind"] or ""
    return f"{row['provider']:<12} {row['session_id']:<38} {row['project'] or '-':<20} {row['state']:<11} " \
           f"{how:<9} {last_s}"


def print_progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
