"""YAML configuration: every key has a default, so no file is needed.

``config/config.example.yml`` lists every key with its default and meaning.
:func:`load` validates the file at start; a bad file raises
:class:`ConfigError` naming the file, the key and why.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path

from .names import ALERT_KINDS


class ConfigError(Exception):
    """A configuration problem; the message names the file and the key.
    ``errors`` lists every problem found (the message joins them by line)."""

    def __init__(self, message: str, errors: list[str] | None = None, partial=None):
        super().__init__(message)
        self.errors = errors or [message]
        #: The :class:`Config` built with defaults where a value was bad (or
        #: None): lets ``check-config`` go on checking what it can.
        self.partial = partial


@dataclass
class ProviderSource:
    enabled: bool = True
    #: Roots to watch; empty means the provider's default root.
    paths: list[str] = field(default_factory=list)


@dataclass
class Registry:
    """Claude Code's live session registry (``<pid>.json`` per process)."""

    enabled: bool = True
    #: The registry folder; empty: ``sessions`` beside each Claude Code
    #: projects folder (``$CLAUDE_CONFIG_DIR/sessions``, else ``~/.claude/sessions``).
    path: str | None = None
    #: Larger records are skipped (counted as too_large), never read whole.
    max_record_bytes: int = 65536


@dataclass
class ClaudeSource(ProviderSource):
    registry: Registry = field(default_factory=Registry)


@dataclass
class Sources:
    claude_code: ClaudeSource = field(default_factory=ClaudeSource)
    codex: ProviderSource = field(default_factory=ProviderSource)
    copilot_cli: ProviderSource = field(default_factory=ProviderSource)
    pi: ProviderSource = field(default_factory=ProviderSource)
    gemini_cli: ProviderSource = field(default_factory=ProviderSource)
    #: Use file-system events (inotify/FSEvents/…) besides polling.
    watch_events: bool = True
    #: Seconds between stat polls of every known file (the safety net).
    poll_interval_seconds: float = 2.0
    #: Longer lines are skipped (counted as oversized), never held in memory.
    max_line_bytes: int = 16 * 1024 * 1024
    #: At start-up, files not written for ``metrics.session_ttl_seconds`` are
    #: history: followed from their end, not decoded. False reads everything.
    skip_history: bool = True


@dataclass
class Reducer:
    #: Quiet seconds after a final assistant text before an inferred completion.
    inferred_settle_seconds: float = 30.0
    #: Quiet seconds to wait instead when the agent will still write an
    #: explicit end marker (Claude 2.1.x before ~2.1.126: turns over ~30 s
    #: write turn_duration).
    marker_wait_seconds: float = 300.0
    #: A working session with nothing written for this long is ``stalled``.
    stall_after_seconds: float = 600.0
    #: An API error the agent said it would retry (Claude system/api_error
    #: retryInMs) is an ``error`` once the retry is this many seconds overdue.
    api_retry_grace_seconds: float = 30.0
    #: A turn that ends with a wakeup armed (Claude Code ScheduleWakeup) due
    #: within this many seconds reads ``working`` until the wakeup is due (and
    #: ``api_retry_grace_seconds`` more); a later wakeup pages at once, naming
    #: its time.
    wakeup_hold_seconds: float = 900.0
    #: A Claude Code ``Stop`` hook of the exporter's own while the user's settings
    #: name other Stop hooks: the turn reads ``working`` until Claude Code writes
    #: ``stop_hook_summary`` (every Stop hook done), or at most this long
    #: (Claude Code's own default hook timeout is 600 s).
    stop_hook_wait_seconds: float = 600.0
    #: Seconds between evaluations of the time-based rules.
    evaluation_interval_seconds: float = 1.0


@dataclass
class Metrics:
    #: Emit per-session series (coding_agent_session_*).
    per_session: bool = True
    #: At most this many sessions get per-session series (newest first).
    max_sessions: int = 500
    #: Sessions with no record for this long are forgotten.
    session_ttl_seconds: float = 24 * 3600.0
    #: How the ``project`` label is made from the session's cwd.
    project_label: str = "basename"


@dataclass
class Price:
    """A model's prices in USD per million tokens (``usage.prices``)."""

    input: float = 0.0
    output: float = 0.0
    #: None: the input price.
    cache_read: float | None = None
    cache_write: float | None = None


@dataclass
class Usage:
    #: Add or override prices per model name as the agent records it
    #: (``{model: {input, output, cache_read, cache_write}}``, USD per
    #: million tokens); other models are priced by genai-prices.
    prices: dict[str, Price] = field(default_factory=dict)


@dataclass
class AlertKinds:
    completed: bool = True
    error: bool = True
    stalled: bool = False
    waiting: bool = True


@dataclass
class Retry:
    attempts: int = 6
    initial_backoff_seconds: float = 2.0
    max_backoff_seconds: float = 300.0


class Clock(str):
    """A time of day, ``"HH:MM"`` or ``"HH:MM:SS"`` (24 h). YAML 1.1 reads an unquoted ``22:00``
    as the sexagesimal number 1320: such a number (under 1440) is taken as
    the time it meant (:func:`_value`)."""


@dataclass
class QuietWindow:
    """One ``alerts.quiet_hours`` window (see :mod:`.suppress`)."""

    start: Clock = Clock("22:00")
    end: Clock = Clock("07:00")
    #: Days the window starts on (mon … sun); a window past midnight ends the next day.
    days: list[str] = field(default_factory=lambda: ["mon", "tue", "wed", "thu", "fri", "sat", "sun"])
    #: Kinds held in the window; errors page through unless listed.
    kinds: list[str] = field(default_factory=lambda: ["completed", "stalled", "waiting"])
    #: An IANA time zone (``Europe/Berlin``); null: the machine's local one.
    timezone: str | None = None


@dataclass
class RouteMatch:
    """What an ``alerts.routes`` entry matches (every key given must match)."""

    #: A glob on the ``project`` label (``web*``).
    project: str | None = None
    provider: str | None = None
    kind: str | None = None


@dataclass
class Route:
    """One ``alerts.routes`` entry: the first match decides."""

    match: RouteMatch = field(default_factory=RouteMatch)
    #: Apprise tags the page carries instead of its kind's ``alerts.tags`` entry.
    tags: list[str] = field(default_factory=list)
    #: True: the matched pages are not sent (counted, reason ``route``).
    mute: bool = False


@dataclass
class Alerts:
    #: Apprise URLs; secrets: prefer ``url_env`` or ``config_file``.
    urls: list[str] = field(default_factory=list)
    #: An Apprise configuration file (text or YAML format).
    config_file: str | None = None
    #: Environment variable holding whitespace-separated Apprise URLs.
    url_env: str = "CODING_AGENT_EXPORTER_APPRISE_URLS"
    kinds: AlertKinds = field(default_factory=AlertKinds)
    #: Apprise tag per kind (URLs without a tag get every kind).
    tags: dict[str, str] = field(default_factory=lambda: {"completed": "completed", "error": "error",
                                                          "stalled": "stalled", "waiting": "waiting"})
    #: Seconds a completion must stay the session's state before it pages.
    settle_seconds: float = 2.0
    #: Completions whose record is older than this never page (0: no limit).
    max_age_seconds: float = 3600.0
    #: Put the last assistant message into the body (transcript content!).
    include_excerpt: bool = False
    #: Say in a completion page what the turn cost (tokens and USD).
    include_cost: bool = False
    excerpt_chars: int = 200
    #: One reminder for a session still waiting (or still on your turn) this
    #: many seconds after its page (0: off).
    remind_after_seconds: float = 0.0
    #: At most this many pages per session within ``page_rate_window_seconds``
    #: (0: no limit); the rest are dropped, counted and logged.
    max_pages_per_session: int = 20
    page_rate_window_seconds: float = 3600.0
    retry: Retry = field(default_factory=Retry)
    #: A completed turn shorter than this (its records, prompt to end) sends no page (0: off).
    min_turn_seconds: float = 0.0
    #: Hold completed/waiting pages this long; dropped if the user acts in the session meanwhile (0: off).
    presence_delay_seconds: float = 0.0
    #: Windows in which pages are held for one digest at the window's end.
    quiet_hours: list[QuietWindow] = field(default_factory=list)
    #: Ordered routes: the first match picks a page's Apprise tags, or mutes it.
    routes: list[Route] = field(default_factory=list)
    #: The status page's address as the phone reaches it (behind a proxy);
    #: set: each page links to its session there.
    link_base_url: str | None = None


@dataclass
class Hooks:
    #: Larger hook bodies are refused with 413 (bytes; 4 MiB).
    max_body_bytes: int = 4 * 1024 * 1024
    #: Spooled hook events (the exporter was down) older than this are dropped.
    spool_max_age_seconds: float = 3600.0
    #: Hook deliveries must carry the secret of ``state_dir/hook-secret``.
    auth: bool = True
    #: A delivery's time header (the ``hook`` command's) further than this
    #: from the exporter's clock is ignored: the event counts as received now.
    max_clock_skew_seconds: float = 30.0


@dataclass
class Web:
    #: Host names (besides IP addresses, ``localhost`` and this machine's
    #: name) a request's ``Host`` may name; ``"*"``: any.
    allowed_hosts: list[str] = field(default_factory=list)
    #: Connections open at once (fewer when the open-file limit is low: a
    #: quarter of it, at least 64, stays for reading files); past it a new
    #: connection closes the oldest one that has no request in progress.
    max_connections: int = 500
    #: Seconds from connecting to a whole request head (slow or silent clients).
    header_timeout_seconds: float = 10.0
    #: Seconds from the head to the end of the response (the body included).
    request_timeout_seconds: float = 30.0
    #: Seconds from the head to the end of the request body (the whole body,
    #: not per read; at most three quarters of ``request_timeout_seconds``);
    #: a body not in by then gets 408.
    body_timeout_seconds: float = 10.0
    #: Seconds a connection may stay idle between requests.
    keep_alive_timeout_seconds: float = 5.0


@dataclass
class Fleet:
    #: Base URLs of the other exporters shown on this one's status page
    #: (``https://devbox:9877``); empty: no fleet view.
    peers: list[str] = field(default_factory=list)
    #: Seconds between polls of every peer's ``/api/v1/sessions``.
    poll_interval_seconds: float = 10.0
    #: Seconds one peer may take to answer before it counts as down.
    timeout_seconds: float = 5.0
    #: At most this many peers are polled at once.
    max_concurrency: int = 8
    #: Basic auth user for the peers (their ``basic_auth_users``); the password
    #: comes from ``password_file``, never from this file.
    username: str | None = None
    password_file: str | None = None
    #: A file holding a bearer token sent to the peers instead of basic auth.
    bearer_token_file: str | None = None
    #: CA bundle to verify the peers' TLS certificates (default: the system's).
    ca_file: str | None = None


@dataclass
class Alertmanager:
    #: Page for ``resolved`` alerts too (once per alert), not only firing ones.
    send_resolved: bool = False
    #: Alert labels whose values become Apprise tags of the page.
    tag_labels: list[str] = field(default_factory=lambda: ["severity", "project"])
    #: Larger webhook bodies are refused with 413 (bytes; 4 MiB).
    max_body_bytes: int = 4 * 1024 * 1024
    #: A notification with more alerts is refused with 413 (Alertmanager's
    #: ``webhook_configs.max_alerts`` keeps its notifications below it).
    max_alerts: int = 100
    #: Notifications must carry ``Authorization: Bearer`` and the secret of
    #: ``state_dir/alertmanager-secret``, or pass ``basic_auth_users``.
    auth: bool = True


@dataclass
class Config:
    sources: Sources = field(default_factory=Sources)
    reducer: Reducer = field(default_factory=Reducer)
    metrics: Metrics = field(default_factory=Metrics)
    alerts: Alerts = field(default_factory=Alerts)
    hooks: Hooks = field(default_factory=Hooks)
    web: Web = field(default_factory=Web)
    #: Where the alert ledger lives; default: the platform's user state folder
    #: (platformdirs: ``$XDG_STATE_HOME/coding-agent-exporter``, else
    #: ``~/.local/state/…`` on Linux; ``~/Library/Application Support/…`` on
    #: macOS; ``%LOCALAPPDATA%\\coding-agent-exporter`` on Windows).
    state_dir: str | None = None
    #: This machine's name on the fleet view and in
    #: ``coding_agent_exporter_info{machine}``; default: the host name.
    machine: str | None = None
    fleet: Fleet = field(default_factory=Fleet)
    alertmanager: Alertmanager = field(default_factory=Alertmanager)
    usage: Usage = field(default_factory=Usage)

    def resolved_machine(self) -> str:
        """``machine``, or the host name (``socket.gethostname()``)."""
        if self.machine:
            return self.machine
        import socket

        return socket.gethostname() or "localhost"

    def resolved_state_dir(self) -> Path:
        if self.state_dir:
            return Path(self.state_dir).expanduser()
        import platformdirs  # here: the commands that need no state folder (scan) start faster

        return Path(platformdirs.user_state_dir("coding-agent-exporter", appauthor=False))


_PROJECT_LABELS = ("basename", "full", "hashed", "none")
#: A number PyYAML (YAML 1.1) reads as a string: an exponent without a dot, e.g. 1e9.
_YAML11_NUMBER = re.compile(r"[-+]?[0-9]+[eE][-+]?[0-9]+\Z")


def _with_dot(text: str) -> str:
    """``1e9`` → ``1.0e9``: the same number as YAML 1.1 reads a float."""
    head, _, tail = text.lower().partition("e")
    return f"{head}.0e{tail}"


def _build(cls, data, where: str, source: str, errors: list[str]):
    """Build ``cls`` from ``data``; every bad key or value is appended to
    ``errors`` (its default is kept), so that one pass reports them all."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: {where or 'top level'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            path = f"{where}.{key}" if where else str(key)
            errors.append(f"{source}: {path}: unknown key (known: {', '.join(sorted(names))})")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        path = f"{where}.{f.name}" if where else f.name
        try:
            kwargs[f.name] = _value(hints[f.name], data[f.name], path, source, errors)
        except ConfigError as e:
            errors.append(str(e))
    return cls(**kwargs)


def _value(tp, value, path: str, source: str, errors: list[str]):
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, path, source, errors)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        if value is None and type(None) in args:
            return None
        tp = next(a for a in args if a is not type(None))
        return _value(tp, value, path, source, errors)
    if origin is list and args and dataclasses.is_dataclass(args[0]):
        if value is None:
            return []
        if not isinstance(value, list):
            raise ConfigError(f"{source}: {path}: expected a list of mappings")
        return [_build(args[0], v, f"{path}[{i}]", source, errors) for i, v in enumerate(value)]
    if tp is Clock:
        return _clock(value, path, source)
    if origin is list:
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{source}: {path}: expected a list of strings")
        return value
    if origin is dict and dataclasses.is_dataclass(args[1]):
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ConfigError(f"{source}: {path}: expected a mapping of names to mappings")
        return {k: _build(args[1], v, f"{path}.{k}", source, errors) for k, v in value.items()}
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise ConfigError(f"{source}: {path}: expected a mapping of strings")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{source}: {path}: expected true or false, got {value!r}")
        return value
    if tp in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            hint = ""
            if isinstance(value, str) and _YAML11_NUMBER.match(value.strip()):
                # YAML 1.1 (PyYAML) reads 1e9 as a string: its floats need a dot (1.0e9)
                hint = f" (YAML reads {value.strip()} as text: write it with a dot, as {_with_dot(value.strip())})"
            raise ConfigError(f"{source}: {path}: expected a number, got {value!r}{hint}")
        if not math.isfinite(value):
            raise ConfigError(f"{source}: {path}: must be a finite number, got {value!r}")
        if value < 0:
            raise ConfigError(f"{source}: {path}: must not be negative, got {value!r}")
        if tp is int and value != int(value):
            raise ConfigError(f"{source}: {path}: expected a whole number, got {value!r}")
        return tp(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{source}: {path}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{source}: {path}: unsupported value {value!r}")


def _clock(value, path: str, source: str) -> Clock:
    """``"HH:MM"`` or YAML 1.1's number for an unquoted ``H:MM`` (``22:00``
    is 1320: 22 × 60 + 0) to :class:`Clock`; raises :class:`ConfigError`."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1440:
        return Clock(f"{value // 60:02d}:{value % 60:02d}")  # YAML 1.1 sexagesimal: the time it meant
    if isinstance(value, str):
        parts = value.strip().split(":")
        if 2 <= len(parts) <= 3 and all(p.isdigit() for p in parts) and all(len(p) == 2 for p in parts[1:]) \
                and int(parts[0]) < 24 and all(int(p) < 60 for p in parts[1:]):
            return Clock(":".join([f"{int(parts[0]):02d}", *parts[1:]]))
    raise ConfigError(f"{source}: {path}: expected a time of day \"HH:MM\" or \"HH:MM:SS\" (quoted), got {value!r}")


def from_mapping(data: dict | None, source: str = "<config>") -> Config:
    """Build and validate a :class:`Config` from a parsed mapping.

    Raises :class:`ConfigError` naming ``source`` and the dotted key of
    every problem found, one per line.
    """
    errors: list[str] = []
    try:
        cfg = _build(Config, data, "", source, errors)
    except ConfigError as e:  # the top level is not a mapping
        raise ConfigError(str(e)) from None
    if cfg.metrics.project_label not in _PROJECT_LABELS:
        errors.append(f"{source}: metrics.project_label: must be one of {', '.join(_PROJECT_LABELS)}, "
                      f"got {cfg.metrics.project_label!r}")
    if cfg.sources.poll_interval_seconds <= 0:
        errors.append(f"{source}: sources.poll_interval_seconds: must be greater than 0")
    if cfg.sources.max_line_bytes < 1024:
        errors.append(f"{source}: sources.max_line_bytes: must be at least 1024")
    if cfg.web.max_connections < 1:
        errors.append(f"{source}: web.max_connections: must be at least 1")
    for key in ("header_timeout_seconds", "request_timeout_seconds", "body_timeout_seconds"):
        if getattr(cfg.web, key) <= 0:
            errors.append(f"{source}: web.{key}: must be greater than 0")
    if cfg.reducer.evaluation_interval_seconds <= 0:
        errors.append(f"{source}: reducer.evaluation_interval_seconds: must be greater than 0")
    for kind in cfg.alerts.tags:
        if kind not in ALERT_KINDS:
            errors.append(f"{source}: alerts.tags.{kind}: unknown alert kind")
    errors += _path_errors(cfg, source)
    errors += _fleet_errors(cfg, source)
    from .suppress import config_errors

    errors += [f"{source}: {e}" for e in config_errors(cfg.alerts)]
    if errors:
        raise ConfigError("\n".join(errors), errors, cfg)
    return cfg


def _path_errors(cfg: Config, source: str) -> list[str]:
    """Folders and files the exporter reads or writes must not depend on the
    folder it is started in (a service manager starts it in ``/``): the
    transcript roots, the session registry folder, ``state_dir``,
    ``alerts.config_file`` and the fleet's credential files are absolute or
    start with ``~``."""
    def relative(p) -> bool:
        return bool(p) and not (os.path.isabs(p) or p.startswith("~"))

    where = []
    for prov, src in vars(cfg.sources).items():
        if isinstance(src, ProviderSource):
            where += [(f"sources.{prov}.paths[{i}]", p) for i, p in enumerate(src.paths)]
    where += [("sources.claude_code.registry.path", cfg.sources.claude_code.registry.path), ("state_dir", cfg.state_dir),
              ("alerts.config_file", cfg.alerts.config_file)]
    where += [(f"fleet.{k}", getattr(cfg.fleet, k)) for k in ("password_file", "bearer_token_file", "ca_file")]
    return [f"{source}: {key}: {p!r} is a relative path; give an absolute path or one starting with ~"
            for key, p in where if relative(p)]


def _fleet_errors(cfg: Config, source: str) -> list[str]:
    """Checks of ``machine``, ``fleet`` and ``alertmanager`` (one line each)."""
    from urllib.parse import urlsplit

    errors = []
    if cfg.machine is not None and not (0 < len(cfg.machine) <= 128 and cfg.machine.isprintable()):
        errors.append(f"{source}: machine: expected a printable name of 1 to 128 characters")
    for i, url in enumerate(cfg.fleet.peers):
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            errors.append(f"{source}: fleet.peers[{i}]: expected an http:// or https:// base URL")
        elif parts.username is not None or parts.password is not None:
            errors.append(f"{source}: fleet.peers[{i}]: credentials do not go into the URL "
                          "(use fleet.username and fleet.password_file)")
    if cfg.alertmanager.max_alerts < 1:
        errors.append(f"{source}: alertmanager.max_alerts: must be at least 1")
    if cfg.fleet.poll_interval_seconds <= 0:
        errors.append(f"{source}: fleet.poll_interval_seconds: must be greater than 0")
    if cfg.fleet.timeout_seconds <= 0:
        errors.append(f"{source}: fleet.timeout_seconds: must be greater than 0")
    if cfg.fleet.max_concurrency < 1:
        errors.append(f"{source}: fleet.max_concurrency: must be at least 1")
    if cfg.fleet.password_file and not cfg.fleet.username:
        errors.append(f"{source}: fleet.password_file: set, but fleet.username is not")
    if cfg.fleet.bearer_token_file and cfg.fleet.username:
        errors.append(f"{source}: fleet.bearer_token_file: use either it or fleet.username, not both")
    return errors


def load(path: str | os.PathLike | None) -> Config:
    """Load the YAML file at ``path`` (``None``: all defaults).

    Raises :class:`ConfigError` when the file is missing, unreadable, not
    YAML, or has an unknown key or a bad value.
    """
    if path is None:
        return Config()
    import yaml  # here: without a file (a scan, mostly) the command starts faster

    try:
        with open(path, encoding="utf-8") as f:  # a named stream: YAML errors name the file
            data = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    return from_mapping(data, str(path))
