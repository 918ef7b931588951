"""The test suite's guard against reading or writing the real home folder.

``tests/conftest.py`` puts this folder on ``PYTHONPATH``, so every Python
process a test starts (the exporter, its ``hook`` and ``scan`` commands, an
inner pytest) imports this file at start-up (``site`` imports
``sitecustomize``), and the test process installs the same hook itself.

An audit hook (:func:`sys.addaudithook`, PEP 578) sees every ``open`` and
every folder listing (``os.scandir``, ``os.listdir``) and the calls that
change files (``os.mkdir``, ``os.rename``, ``os.remove``, …) of the process.
Each path under one of the forbidden folders (``CAE_TEST_GUARD``: the real
HOME and the agents' folders as they were before conftest replaced them)
that is not under an allowed one (the checkout, Python's own folders, the
temporary folder) is appended, one line ``pid event path``, to the file
``CAE_TEST_GUARD_LOG``; conftest fails the test during which a line
appeared. ``os.stat`` raises no audit event, so a bare ``is_dir()`` goes
unseen; reading a file or listing a folder does not.

Without ``CAE_TEST_GUARD`` in the environment this file does nothing.
"""

from __future__ import annotations

import json
import os
import sys

#: The audit events whose first argument is a path the process reads or changes.
EVENTS = frozenset({"open", "os.scandir", "os.listdir", "os.mkdir", "os.rename", "os.remove", "os.rmdir",
                    "os.symlink", "os.link", "os.truncate", "os.chmod", "os.utime", "shutil.copyfile",
                    "shutil.rmtree"})


def _norm(p: str) -> str:
    return os.path.normpath(os.path.abspath(p))


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r + os.sep) for r in roots)


#: True once this process is audited (by this file at start-up, or by conftest).
INSTALLED = False


def install(spec: dict) -> None:
    """Audit this process (once): ``spec`` is ``{"forbidden": [folders],
    "allowed": [folders]}`` (absolute); this process's own ``sys.path`` and
    prefixes are allowed too. A forbidden path seen is appended to the file
    named by ``CAE_TEST_GUARD_LOG`` when it is seen (conftest names one per
    test)."""
    global INSTALLED
    if INSTALLED:
        return
    forbidden = tuple(_norm(p) for p in spec.get("forbidden", ()) if p)
    allowed = [*spec.get("allowed", ()), sys.prefix, sys.base_prefix, sys.exec_prefix]
    allowed += [p for p in sys.path if p and os.path.isabs(p)]
    allowed = tuple(_norm(p) for p in allowed if p)
    # An allowed folder that holds a forbidden one (a HOME inside the checkout) would hide it: not allowed.
    allowed = tuple(a for a in allowed if not any(_under(f, (a,)) and f != a for f in forbidden))
    if not forbidden:
        return
    INSTALLED = True
    busy = [False]  # the hook's own writes are not audited again

    def hook(event, args):
        if event not in EVENTS or busy[0] or not args:
            return
        path = args[0]
        if isinstance(path, int) or path is None:
            return
        try:
            path = _norm(os.fsdecode(path))
        except (TypeError, ValueError):
            return
        if not _under(path, forbidden) or _under(path, allowed):
            return
        busy[0] = True
        try:
            log_path = os.environ.get("CAE_TEST_GUARD_LOG")
            if log_path:
                with open(log_path, "a") as f:
                    f.write(f"{os.getpid()} {event} {path}\n")
        except OSError:
            pass
        finally:
            busy[0] = False

    sys.addaudithook(hook)


def _from_environment() -> None:
    raw = os.environ.get("CAE_TEST_GUARD")
    if not raw:
        return
    try:
        install(json.loads(raw))
    except (ValueError, TypeError):
        pass


if __name__ == "sitecustomize":  # (conftest imports this file under another name and installs it itself)
    _from_environment()
