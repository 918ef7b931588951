"""Hook events: the agents' own hooks, a second evidence source beside the
transcripts.

Claude Code POSTs a hook's JSON itself (a ``"type": "http"`` hook) to
``/hooks/claude_code``; Codex runs command hooks only, so
``coding-agent-exporter hook --agent codex`` reads the JSON on stdin and POSTs
it to ``/hooks/codex`` (:func:`send`). When the exporter cannot be reached the
command spools the body under ``state_dir/hook-spool``; the exporter takes
spooled bodies younger than ``hooks.spool_max_age_seconds`` when it is back.

The common envelope (``session_id``, ``transcript_path``, ``cwd``,
``hook_event_name``; both agents' hook references) is read here; what an
event means is the provider module's ``project_hook``. Deliveries are handed
to the reader thread through :class:`HookInbox`: the HTTP thread replies at
once and never touches the session store.

Privacy: hook bodies carry tool input and the last assistant message. Only
the envelope fields above and the fields a provider's ``project_hook`` names
are read; nothing of a body is logged.
"""

from __future__ import annotations

import base64
import collections
import errno
import hashlib
import logging
import os
import stat
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit
from dataclasses import dataclass
from pathlib import Path

from .decode import LineError, decode_line
from .events import Event
from .providers import PROVIDER_MODULES

log = logging.getLogger(__name__)

#: Header the ``hook`` command sets: when the agent ran the hook (Unix
#: seconds), so a spooled or retried delivery keeps its time and identity.
TIME_HEADER = "X-Coding-Agent-Hook-Time"
SPOOL_DIR = "hook-spool"
#: The hook secret: made at the exporter's first start in ``state_dir``
#: (mode 0600); every hook delivery carries it in :data:`TOKEN_HEADER`.
SECRET_FILE = "hook-secret"
#: Header a hook sends the secret in (a Claude Code HTTP hook's ``headers``,
#: the ``hook`` command). Not ``Authorization``: that one is basic auth's
#: (``--web.config.file``), and both may be needed at once.
TOKEN_HEADER = "X-Coding-Agent-Hook-Token"
#: Deliveries waiting for the reader thread; more are refused (counted).
INBOX_MAX = 10_000
#: Spooled bodies kept at most; the hook command stops spooling past it.
SPOOL_MAX_FILES = 10_000
_MAX_ID_CHARS = 128


class HookError(Exception):
    """A delivery that cannot be used; ``reason`` is its
    ``coding_agent_hook_errors_total`` label."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class HookDelivery:
    """One received hook event.

    ``provider``: ``claude_code``/``codex``; ``name``: ``hook_event_name``;
    ``session_id``: the Claude transcript's ``sessionId`` or the Codex
    ``session_meta`` id; ``transcript_path``: the transcript the agent writes
    (read before the event is applied); ``event``: what it means for the
    session's state, or None; ``ident``: identity (a digest of the body and
    its time) so that one delivery made twice is applied once.
    """

    provider: str
    name: str
    session_id: str | None
    transcript_path: str | None
    cwd: str | None
    event: Event | None
    ident: str


def _str(obj: dict, key: str, limit: int = 4096) -> str | None:
    v = obj.get(key)
    if not (isinstance(v, str) and 0 < len(v) <= limit and "\x00" not in v):
        return None
    try:
        v.encode("utf-8")  # no lone surrogate: these become labels, paths and page titles
    except UnicodeEncodeError:
        return None
    return v


def parse(provider: str, body: bytes, received_at: float) -> HookDelivery:
    """Read one hook body (the agent's JSON, bytes) received at
    ``received_at`` (Unix seconds). Raises :class:`HookError` with reason
    ``unknown_agent``, ``invalid_json``, ``not_object`` or ``no_session``."""
    mod = PROVIDER_MODULES.get(provider)
    if mod is None or not hasattr(mod, "project_hook"):  # no such agent, or one without hooks (Pi)
        raise HookError("unknown_agent")
    try:
        obj = decode_line(body)  # the transcripts' decoder: lone surrogates (text cut in an emoji) kept
    except LineError as e:
        raise HookError("not_object" if e.reason == "not_object" else "invalid_json") from None
    if obj is None:
        raise HookError("invalid_json")
    sid = next(filter(None, (_str(obj, k, _MAX_ID_CHARS) for k in getattr(mod, "HOOK_SESSION_KEYS", ("session_id",)))),
               None)
    if sid is not None and not sid.isprintable():
        sid = None
    path = _str(obj, "transcript_path")
    if sid is None and path is None:
        raise HookError("no_session")
    name = _str(obj, "hook_event_name", 64) or ""
    try:
        event = mod.project_hook(name, obj, received_at)
    except Exception:  # a shape the provider code did not foresee: counted as not an object of ours
        log.debug("hook body of unexpected shape", exc_info=True)
        raise HookError("not_object") from None
    digest = hashlib.blake2b(body + repr(received_at).encode(), digest_size=12).hexdigest()
    return HookDelivery(provider, name, sid, path, _str(obj, "cwd"), event, f"hook:{digest}")


#: ``Event`` fields a saved delivery keeps (what ``project_hook`` sets).
_SAVED_FIELDS = ("ts", "detail", "reason", "tool", "error_kind", "final", "turn_id", "told", "stop_hooks",
                "open_only")


def to_record(d: HookDelivery) -> dict:
    """What the checkpoint keeps of an applied delivery, so that a state
    only a hook reported (a permission prompt) outlives a restart: the
    envelope and the event's fields, JSON-ready; nothing of the body."""
    ev = d.event
    rec = {"provider": d.provider, "name": d.name, "session_id": d.session_id,
           "transcript_path": d.transcript_path, "cwd": d.cwd, "ident": d.ident, "kind": int(ev.kind)}
    rec.update((k, getattr(ev, k)) for k in _SAVED_FIELDS)
    return rec


def from_record(rec, now: float) -> HookDelivery | None:
    """A delivery from :func:`to_record`'s dict, checked as a received body
    is (the same limits on ids, paths and names; a time within the last
    year and not after ``now``, Unix seconds); None for anything else (a
    damaged or foreign checkpoint entry)."""
    from .events import WAIT_REASONS, Kind

    if not isinstance(rec, dict) or rec.get("provider") not in PROVIDER_MODULES:
        return None
    try:
        kind = Kind(rec["kind"])
    except (KeyError, ValueError, TypeError):
        return None
    ts, final = rec.get("ts"), rec.get("final")
    if type(ts) not in (int, float) or not now - 86400 * 366 < ts <= now + 5 or type(final) is not bool:
        return None
    told, stop_hooks = rec.get("told"), rec.get("stop_hooks", 0)  # (absent in older checkpoints)
    if told is not None and not (isinstance(told, str) and len(told) <= 128 and told.isprintable()):
        return None
    if type(stop_hooks) is not int or not 0 <= stop_hooks <= 256:
        return None
    sid = _str(rec, "session_id", _MAX_ID_CHARS)
    sid = sid if sid is not None and sid.isprintable() else None
    path = _str(rec, "transcript_path")
    if (sid is None and path is None) or (rec.get("session_id") is not None and sid is None) \
            or (rec.get("transcript_path") is not None and path is None):
        return None
    fields = {}
    for key, limit in (("name", 64), ("ident", 64), ("detail", 64), ("reason", 64), ("tool", 64),
                       ("error_kind", 64), ("turn_id", 4096)):
        v = _str(rec, key, limit)
        if rec.get(key) is not None and (v is None or not v.isprintable() and key != "turn_id"):
            return None  # (a turn id is taken as the agent wrote it, as in its rollout)
        fields[key] = v
    if fields["ident"] is None or (fields["reason"] is not None and fields["reason"] not in WAIT_REASONS):
        return None
    ev = Event(kind, ts=float(ts), detail=fields["detail"], reason=fields["reason"], tool=fields["tool"],
               error_kind=fields["error_kind"], final=final, turn_id=fields["turn_id"], told=told,
               stop_hooks=stop_hooks)
    ev.open_only = rec.get("open_only") is True  # (saved since Gemini CLI's AfterAgent)
    return HookDelivery(rec["provider"], fields["name"] or "", sid, path, _str(rec, "cwd"), ev, fields["ident"])


class HookInbox:
    """Hook deliveries from the HTTP threads to the reader thread.

    :meth:`receive` parses and counts a body and queues it (bounded by
    ``INBOX_MAX``); ``wake`` is called so the reader thread takes it at once.
    """

    def __init__(self, metrics, wake=None):
        self.metrics = metrics
        self._wake = wake or (lambda: None)
        self._items: collections.deque[HookDelivery] = collections.deque()
        self._seqs: collections.deque[int] = collections.deque()  # each item's journal line (0: none)
        self._lock = threading.Lock()
        #: The :class:`.hookjournal.HookJournal` a delivery is written to
        #: before it is queued (None: not journaled).
        self.journal = None
        #: Journal lines of the deliveries last taken (:meth:`take`).
        self.taken: list[int] = []
        self._spool_refused: str | None = None  # why the spool was last refused (logged once)

    def receive(self, provider: str, body: bytes, received_at: float | None = None, wait: bool = True) -> str | None:
        """Take one body; returns None when queued (and, with a
        :attr:`journal`, on disk), else the error reason (counted on
        ``coding_agent_hook_errors_total``; ``unsaved``: the journal could
        not be written). ``wait`` False: the journal line is queued, not
        waited for (the spool, which waits once for all: :meth:`take_spool`)."""
        d = self._admit(provider, body, received_at)
        if isinstance(d, str):
            return d
        seq = 0
        if self.journal is not None and d.event is not None:  # on disk before the 2xx (hookjournal.py)
            seq = self.journal.write(to_record(d), wait=wait)
            if not seq:
                self.metrics.hook_errors.labels("unsaved").inc()
                return "unsaved"
        self._queue(d, seq)
        return None

    async def receive_async(self, provider: str, body: bytes, received_at: float | None = None,
                            timeout: float = 5.0) -> str | None:
        """:meth:`receive` for the HTTP server's event loop: the same checks
        and answer, but the wait for the journal's flush (at most ``timeout``
        seconds) holds no thread; every body of one flush is answered by one
        wake-up of the loop (:meth:`.hookjournal.HookJournal.write_async`)."""
        import asyncio

        d = self._admit(provider, body, received_at)
        if isinstance(d, str):
            return d
        seq = 0
        if self.journal is not None and d.event is not None:
            seq, fut = self.journal.write_async(to_record(d))
            ok = False
            if fut is not None:
                try:
                    async with asyncio.timeout(timeout):
                        ok = await fut
                except TimeoutError:
                    pass
            if not ok:
                self.metrics.hook_errors.labels("unsaved").inc()
                return "unsaved"
        self._queue(d, seq)
        return None

    def _admit(self, provider: str, body: bytes, received_at: float | None) -> HookDelivery | str:
        """The delivery of one body, or the reason it is refused (counted)."""
        from .metrics import HOOK_EVENTS  # here: the hook command never loads prometheus-client

        now = time.time()
        if received_at is None or not (now - 86400 * 366 < received_at <= now + 5):
            received_at = now
        try:
            d = parse(provider, body, received_at)
        except HookError as e:
            self.metrics.hook_errors.labels(e.reason).inc()
            return e.reason
        self.metrics.hook_events.labels(provider, d.name if d.name in HOOK_EVENTS else "other").inc()
        with self._lock:
            if len(self._items) >= INBOX_MAX:
                self.metrics.hook_errors.labels("too_large").inc()
                return "too_large"
        return d

    def _queue(self, d: HookDelivery, seq: int) -> None:
        with self._lock:
            self._items.append(d)
            self._seqs.append(seq)
        self._wake()

    def take(self) -> list[HookDelivery]:
        """Every queued delivery, oldest first."""
        with self._lock:
            items = list(self._items)
            self._items.clear()
            self.taken = [q for q in self._seqs if q]
            self._seqs.clear()
        return items

    def take_spool(self, state_dir: Path, max_age: float, max_body_bytes: int = 4 << 20) -> int:
        """Queue what the ``hook`` command spooled while the exporter was
        down (younger than ``max_age`` seconds; older ones are counted as
        ``expired``), deleting each file taken. Returns how many were queued.

        The spool folder must be this user's, mode 0700, not a symlink
        (:func:`spool_folder`; else it is left alone, with one error logged).
        Only regular files are read, opened without following symlinks and
        without blocking (a FIFO cannot stall the reader thread), at most
        ``max_body_bytes`` each (larger ones are dropped as ``too_large``);
        anything else is removed and counted as ``unreadable_spool``. Temp
        files a full disk left behind (older than a minute) are removed."""
        try:
            folder = spool_folder(state_dir, create=False)
        except FileNotFoundError:
            return 0
        except OSError as e:
            if self._spool_refused != str(e):
                self._spool_refused = str(e)
                log.error("hook spool not read: %s", e.strerror or e)
            return 0
        self._spool_refused = None
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return 0
        taken = 0
        now = time.time()
        for name in names:
            path = folder / name
            if name.startswith("."):  # a temp file being written, or left by a full disk
                try:
                    if now - os.lstat(path).st_mtime > 60:
                        os.unlink(path)
                except OSError:
                    pass
                continue
            try:
                stamp, provider, _rest = name.split("-", 2)
                at = int(stamp) / 1e9
            except ValueError:
                continue  # not ours
            body = _read_spooled(path, max_body_bytes)
            try:
                os.unlink(path)
            except OSError:
                pass
            if body is None:
                self.metrics.hook_errors.labels("unreadable_spool").inc()
                continue
            if len(body) > max_body_bytes:
                self.metrics.hook_errors.labels("too_large").inc()
                continue
            if max_age and now - at > max_age:
                self.metrics.hook_errors.labels("expired").inc()
                continue
            if self.receive(provider, body, at, wait=False) is None:
                taken += 1
        if taken and self.journal is not None:
            self.journal.flush()  # one flush for every spooled body taken, not one each
        return taken


def _read_spooled(path: Path, limit: int) -> bytes | None:
    """Up to ``limit + 1`` bytes of the regular file ``path`` (opened with
    O_NOFOLLOW and O_NONBLOCK), or None when it is not one or cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        out = bytearray()
        while len(out) <= limit and (chunk := os.read(fd, min(1 << 20, limit + 1 - len(out)))):
            out += chunk
        return bytes(out)
    except OSError:
        return None
    finally:
        os.close(fd)


def spool_folder(state_dir: Path, create: bool = True) -> Path:
    """``state_dir/hook-spool``, made (mode 0700) when missing and
    ``create``. Raises ``OSError`` (``strerror`` says why and what to do)
    when it is a symlink or not a folder, is another user's, or others may
    use it (mode other than 0700, group and others: nothing); the hook
    command and the exporter both refuse such a spool (issue 22)."""
    folder = Path(state_dir) / SPOOL_DIR
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        if not create:
            raise
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode):
        raise PermissionError(errno.EPERM, f"{folder} is a symlink; remove it (the spool must be a folder of yours)")
    if not stat.S_ISDIR(st.st_mode):
        raise PermissionError(errno.ENOTDIR, f"{folder} is not a folder; remove it")
    _private(folder, st, "the hook spool folder")
    return folder


# -- the hook secret -----------------------------------------------------------
def _private(path: Path, st: os.stat_result, what: str) -> None:
    """Raise ``PermissionError`` unless ``st`` (of ``path``) is this user's
    and neither group nor others may use it (POSIX; nothing on Windows)."""
    if not hasattr(os, "getuid"):
        return
    if st.st_uid != os.getuid():
        raise PermissionError(errno.EPERM, f"{path}: {what} is owned by uid {st.st_uid}, not by this user "
                                           f"(uid {os.getuid()}); remove it or fix its owner")
    if st.st_mode & 0o077:
        raise PermissionError(errno.EPERM, f"{path}: {what} has mode {st.st_mode & 0o777:o}; "
                                           f"other users may use it (chmod {'700' if what.endswith('folder') else '600'} it)")


def ensure_secret(state_dir: Path, name: str = SECRET_FILE) -> str:
    """The hook secret of ``state_dir`` (64 hex characters), made at the
    first call: 32 random bytes written to ``state_dir/hook-secret`` with
    mode 0600 (``state_dir`` made with 0700 if missing). Raises ``OSError``
    (its ``strerror`` says why) when it cannot be written or read, or the
    file is a symlink, another user's or readable by others."""
    state_dir = Path(state_dir)
    path = state_dir / name
    try:
        return read_secret(state_dir, missing_ok=False, name=name)
    except FileNotFoundError:
        pass
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = os.urandom(32).hex()
    tmp = state_dir / f".{name}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(token + "\n")
        try:
            os.link(tmp, path)  # never over a secret another process made meanwhile
        except FileExistsError:
            pass
    finally:
        tmp.unlink(missing_ok=True)
    return read_secret(state_dir, missing_ok=False, name=name)


def read_secret(state_dir: Path, missing_ok: bool = True, name: str = SECRET_FILE) -> str | None:
    """The hook secret in ``state_dir`` (see :func:`ensure_secret`); None
    when there is none yet (``missing_ok``, else ``FileNotFoundError``).
    Raises ``OSError`` for a symlink, another user's file or one others may
    read, or one that does not hold a secret. ``name``: another secret
    file of the same kind (``alertmanager-secret``)."""
    path = Path(state_dir) / name
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        if missing_ok:
            return None
        raise
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PermissionError(errno.EPERM, f"{path}: the hook secret is a symlink; remove it") from None
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise PermissionError(errno.EPERM, f"{path}: the hook secret is not a regular file; remove it")
        _private(path, st, "the hook secret")
        token = f.read(256).strip().decode("ascii", "replace")
    if len(token) < 32 or not token.isalnum():
        raise PermissionError(errno.EINVAL, f"{path}: does not hold a hook secret; remove it (a new one is made "
                                            "at the next start; then run `hooks install` again)")
    return token


#: In the default state folder: where a running exporter's own state_dir is,
#: when its configuration moved it elsewhere.
POINTER_FILE = "exporter-state-dir"


def note_state_dir(state_dir: Path, default_dir: Path) -> bool:
    """Called by ``run``: when ``state_dir`` is not ``default_dir`` (the
    platform's default), write its path to ``default_dir/exporter-state-dir``
    (0600), so that the ``hook`` command and ``hooks install`` run without
    ``--config.file`` find the hook secret and the spool of this exporter;
    when it is the default, remove a pointer left by another configuration.
    A pointer naming the state folder of another exporter that is still
    running (its ``lock`` held) is left alone: a second exporter (a trial
    run, a test) never takes the hooks of the one that runs for the agents.
    Returns False when it left such a pointer, else True. Raises ``OSError``."""
    pointer = Path(default_dir) / POINTER_FILE
    current = default_state_dir(default_dir)
    if current.absolute() != Path(state_dir).absolute() and _in_use(current):
        return False
    if Path(state_dir).absolute() == Path(default_dir).absolute():
        pointer.unlink(missing_ok=True)
        return True
    Path(default_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = pointer.with_name(f".{POINTER_FILE}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(str(Path(state_dir).absolute()) + "\n")
    os.replace(tmp, pointer)
    return True


def _in_use(state_dir: Path) -> bool:
    """An exporter holds ``state_dir``'s lock now (:func:`.persist.lock_state_dir`)."""
    from filelock import FileLock, Timeout

    if not (Path(state_dir) / "lock").exists():
        return False
    lock = FileLock(Path(state_dir) / "lock", timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return True
    except OSError:
        return False
    lock.release()
    return False


def default_state_dir(default_dir: Path) -> Path:
    """The state folder for a command run without ``--config.file``: the one
    a running exporter noted in ``default_dir`` (:func:`note_state_dir`; only
    a pointer file of this user's that others cannot write, naming an
    existing folder), else ``default_dir``."""
    pointer = Path(default_dir) / POINTER_FILE
    try:
        fd = os.open(pointer, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return Path(default_dir)
    try:
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or (hasattr(os, "getuid") and (st.st_uid != os.getuid()
                                                                          or st.st_mode & 0o022)):
                return Path(default_dir)
            target = Path(f.read(4096).decode("utf-8").strip())
    except (OSError, UnicodeDecodeError):
        return Path(default_dir)
    return target if target.is_absolute() and target.is_dir() else Path(default_dir)


# -- the ``hook`` command ------------------------------------------------------
def send(provider: str, body: bytes, url: str, state_dir: Path, timeout: float = 2.0,
         max_body_bytes: int = 4 << 20, at: float | None = None) -> str:
    """Deliver one hook body to a running exporter at ``url`` (``http(s)://
    [user:password@]host:port``) within ``timeout`` seconds, with the hook
    secret of ``state_dir`` (:func:`read_secret`); when it cannot be
    reached (connection refused, timeout, 5xx), spool it under
    ``state_dir/hook-spool``. Never raises: returns ``sent``, ``spooled``,
    ``refused`` (the exporter answered 401/403: a wrong secret or
    credentials), ``rejected`` (another 4xx: not a hook event, too large) or
    ``dropped`` (could not spool).
    """
    at = time.time() if at is None else at
    if len(body) > max_body_bytes:
        return "dropped"
    target, headers = _target(url, provider)
    headers[TIME_HEADER] = repr(at)
    headers["Content-Type"] = "application/json"
    try:
        secret = read_secret(state_dir)
    except OSError as e:
        log.warning("hook: cannot read the hook secret: %s", e.strerror or e)
        secret = None
    if secret:
        headers[TOKEN_HEADER] = secret
    req = urllib.request.Request(target, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - the user's own exporter
            resp.read(1024)
        return "sent"
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            return "refused"
        if e.code < 500:
            return "rejected"
    except (OSError, ValueError):
        pass
    return "spooled" if spool(state_dir, provider, body, at) else "dropped"


def _split_credentials(url: str) -> tuple[SplitResult, str | None]:
    """``url`` (scheme optional: http) without its ``user:password@``, and
    that ``user:password`` (or None)."""
    parts = urlsplit(url if "://" in url else "http://" + url)
    if "@" not in parts.netloc:
        return parts, None
    cred, host = parts.netloc.rsplit("@", 1)
    return parts._replace(netloc=host), cred


def redact_url(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by ``***@`` (for logs)."""
    parts, cred = _split_credentials(url)
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc)) if cred is not None else urlunsplit(parts)


def _target(url: str, provider: str) -> tuple[str, dict]:
    parts, cred = _split_credentials(url)
    headers = {}
    if cred is not None:
        user, _, password = cred.partition(":")
        token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    path = parts.path.rstrip("/") + f"/hooks/{provider}"
    return urlunsplit((parts.scheme, parts.netloc, path, "", "")), headers


def spool(state_dir: Path, provider: str, body: bytes, at: float) -> bool:
    """Write one body to ``state_dir/hook-spool`` (atomically: a temporary
    name, then a rename; the temporary file is removed when the write fails,
    e.g. on a full disk). False when it cannot, the spool is full, or the
    spool folder is not this user's own (:func:`spool_folder`: logged)."""
    try:
        folder = spool_folder(state_dir)
    except OSError as e:
        log.warning("hook: spool refused: %s", e.strerror or e)
        return False
    tmp = None
    try:
        if len(os.listdir(folder)) >= SPOOL_MAX_FILES:
            return False
        name = f"{int(at * 1e9):020d}-{provider}-{os.getpid()}-{os.urandom(4).hex()}.json"
        tmp = folder / ("." + name)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(body)
        os.replace(tmp, folder / name)
        return True
    except OSError:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return False
