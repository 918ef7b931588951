"""Command line: ``run`` (default), ``scan``, ``check-config``, ``test-alert``, ``hooks``.

Flags follow Prometheus exporters (exporter-toolkit names).
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import sys
import threading
import time

import orjson

from . import __version__, logs
from .config import ConfigError, load
from .decode import parse_timestamp
from .providers import PROVIDER_MODULES

log = logging.getLogger("coding_agent_exporter")

DEFAULT_LISTEN = "127.0.0.1:9877"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config.file", dest="config_file", metavar="FILE",
                   help="YAML configuration file (every key has a default)")
    p.add_argument("--log.level", dest="log_level", default="info",
                   choices=["debug", "info", "warn", "error"], help="log level (default: info)")
    p.add_argument("--log.format", dest="log_format", default="logfmt", choices=["logfmt", "json"],
                   help="log line format (default: logfmt)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coding-agent-exporter", allow_abbrev=False,
        description="Prometheus exporter and pager for the session transcripts of coding agents (Claude Code, "
                    "Codex, GitHub Copilot CLI, Pi, Gemini CLI).")
    parser.add_argument("--version", action="version", version=f"coding-agent-exporter {__version__}")
    sub = parser.add_subparsers(dest="command")

    run = sub.add_parser("run", allow_abbrev=False, help="follow the transcript folders and serve /metrics (default)")
    _common(run)
    run.add_argument("--web.listen-address", dest="listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                     help=f"address to serve on (default: {DEFAULT_LISTEN}, loopback only)")
    run.add_argument("--web.telemetry-path", dest="telemetry_path", default="/metrics", metavar="PATH",
                     help="path of the metrics endpoint (default: /metrics)")
    run.add_argument("--web.config.file", dest="web_config", metavar="FILE",
                     help="exporter-toolkit web config: TLS and basic auth")

    scan = sub.add_parser("scan", allow_abbrev=False, help="reduce files or folders once and print one line per session")
    _common(scan)
    scan.add_argument("paths", nargs="*", metavar="PATH",
                      help="transcript files or folders (default: the configured roots, as `run` reads them)")
    scan.add_argument("--json", action="store_true", help="print JSON Lines: one object per session a line")
    scan.add_argument("--at", metavar="TIME",
                      help="evaluate time-based rules at TIME (ISO-8601 with zone, or Unix seconds; default now)")
    scan.add_argument("--provider", choices=list(PROVIDER_MODULES),
                      help="treat every file as this agent's (default: by folder, else by content)")
    scan.add_argument("--by", choices=["day"],
                      help="print tokens and cost per local day and model instead (as ccusage daily does)")

    check = sub.add_parser("check-config", allow_abbrev=False, help="validate the configuration and print the effective roots")
    _common(check)

    hook = sub.add_parser("hook", allow_abbrev=False,
                          help="deliver one agent hook event (JSON on stdin) to the exporter; always exits 0")
    _common(hook)
    hook.add_argument("--agent", required=True,
                      choices=[n for n, m in PROVIDER_MODULES.items() if hasattr(m, "project_hook")], help="the agent running the hook")
    hook.add_argument("--url", default=f"http://{DEFAULT_LISTEN}", metavar="URL",
                      help=f"the exporter's address, http(s)://[user:password@]host:port (default: http://{DEFAULT_LISTEN})")
    hook.add_argument("--timeout", type=float, default=2.0, metavar="SECONDS",
                      help="give up on the exporter after this long and spool the event (default: 2)")

    test = sub.add_parser("test-alert", allow_abbrev=False, help="send a test notification through the configured URLs")
    _common(test)

    from .hooksetup import add_parser as add_hooks_parser

    add_hooks_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command line (``argv``: the arguments, default ``sys.argv[1:]``);
    returns the exit status: 0, 1 (a failure), 2 (a usage or configuration
    error that a restart does not mend), 130 (Ctrl-C before the exporter's
    own handler was in place)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("coding-agent-exporter: interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
        argv = ["run", *argv]
    if argv[0] == "hook":
        # An agent runs this as its hook: an exit other than 0 would block
        # the agent (exit 2 denies a tool or keeps a Stop going), so even a
        # bad option is only reported on stderr.
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as e:
            return 0 if e.code in (0, None) else _hook_usage_error()
    else:
        args = build_parser().parse_args(argv)
    if args.command == "hooks":  # needs neither the config file nor logging
        from .hooksetup import main as hooks_main

        return hooks_main(args)
    logs.setup(args.log_level, getattr(args, "log_format", "logfmt"))
    if args.command == "hook":
        return _hook(args)
    try:
        cfg = load(args.config_file)
    except ConfigError as e:
        errors = e.errors
        if args.command == "check-config" and e.partial is not None:
            errors = errors + _problems(e.partial)  # every error at once, not one kind per run
        if len(errors) == 1:
            print(f"coding-agent-exporter: configuration error: {e}", file=sys.stderr)
        else:
            print(f"coding-agent-exporter: {len(errors)} configuration errors:", file=sys.stderr)
            for line in errors:
                print(f"  {line}", file=sys.stderr)
        return 2
    if args.command == "scan":
        return _scan(args, cfg)
    if args.command == "check-config":
        return _check(cfg)
    if args.command == "test-alert":
        from .alerts import test_alert

        return test_alert(cfg)
    return _run(args, cfg)


def _hook_usage_error() -> int:
    print("coding-agent-exporter hook: bad options (above); the event was not delivered. "
          "An agent's hook must never fail, so this exits 0.", file=sys.stderr)
    return 0


def _hook(args) -> int:
    """The ``hook`` command: an agent's hook runs it with the event's JSON on
    stdin. It must never slow down or break the agent, so it prints nothing
    on stdout (Claude Code would read it as the hook's decision), spools the
    event under ``state_dir`` when the exporter cannot be reached, and exits
    0 whatever happens."""
    try:
        from .hooks import redact_url, send

        try:
            cfg = load(args.config_file)
        except ConfigError as e:
            log.warning("hook: configuration error (using defaults): %s", e)
            from .config import Config

            cfg = Config()
        limit = cfg.hooks.max_body_bytes
        body = sys.stdin.buffer.read(limit + 1)
        if len(body) > limit:
            log.warning("hook: event larger than hooks.max_body_bytes; not delivered")
            return 0
        state_dir = cfg.resolved_state_dir()
        if not args.config_file:  # where a running exporter keeps its secret and reads the spool
            from .hooks import default_state_dir

            state_dir = default_state_dir(state_dir)
        outcome = send(args.agent, body, args.url, state_dir, timeout=args.timeout, max_body_bytes=limit)
        if outcome in ("refused", "rejected", "dropped"):  # lost: the user must hear of it
            why = {"refused": ": the exporter refused it (a wrong hook secret or password? run `hooks install` "
                              "again, with the exporter's --config.file)",
                   "rejected": ": the exporter answered that it is not a hook event it takes (see its "
                               "coding_agent_hook_errors_total)",
                   "dropped": ": it could not be spooled (full disk, or a spool folder that is not yours)"}[outcome]
            log.warning("hook: event %s (%s)%s", outcome, redact_url(args.url), why)
        elif outcome != "sent":
            log.info("hook: event %s (%s)", outcome, redact_url(args.url))
    except Exception as e:  # noqa: BLE001 - a hook must never fail the agent
        log.warning("hook: %s", e)
    return 0


def _scan_hint(args, cfg) -> str:
    """Why a scan found no session, for the plain output."""
    from pathlib import Path

    from .roots import walk_jsonl

    files = []
    for p in map(Path, args.paths):
        files.extend([str(p)] if p.is_file() else walk_jsonl(p))
    if not files:
        return f"no .jsonl files under {' '.join(args.paths)}"
    if args.provider:
        return (f"no record of {len(files)} file(s) read as {args.provider} (--provider): are they that agent's "
                "transcripts? Without --provider the agent comes from the folder or the records")
    from .providers import sniff

    if not any(sniff(f) for f in files[:200]):
        return (f"no record of a known agent in {len(files)} file(s): Claude Code, Codex, Copilot CLI, Pi and "
                "Gemini CLI transcripts are JSONL files of their records")
    return (f"no session in {len(files)} file(s): they hold only subagent (sidechain) work, or no record a "
            "session starts with; scan the folder of the parent session (Claude: <project>/<sessionId>.jsonl "
            "next to <sessionId>/subagents/)")


def _scan(args, cfg) -> int:
    from .scan import format_days, format_table, print_progress, scan

    if not args.paths:
        from .roots import configured_roots

        roots = configured_roots(cfg)
        args.paths = [str(root) for _prov, root in roots if root.is_dir()]
        if not args.paths:
            print("hint: none of the configured transcript folders exists yet: "
                  + ", ".join(str(root) for _prov, root in roots) + " (give files or folders to scan)",
                  file=sys.stderr)
            return 0
        print(f"scanning the configured folders: {' '.join(args.paths)}", file=sys.stderr)

    at = None
    if args.at:
        at = parse_timestamp(args.at)
        if at is None:
            try:
                at = float(args.at)
            except ValueError:
                print(f"coding-agent-exporter: --at: not a time: {args.at!r} "
                      "(use ISO-8601 with a zone, e.g. 2026-05-01T10:00:00Z, or Unix seconds)", file=sys.stderr)
                return 2
    try:
        rows, _store = scan(args.paths, cfg, args.provider, at, progress=print_progress, by_hour=bool(args.by))
    except FileNotFoundError as e:
        print(f"coding-agent-exporter: {e}", file=sys.stderr)
        return 2
    out = sys.stdout
    if args.by:
        from .scan import by_day

        days = by_day(rows)
        if args.json:
            out.write(orjson.dumps(days).decode() + "\n")
        else:
            for line in format_days(days):
                out.write(line + "\n")
            _usage_hint(rows)
        return 0
    if args.json:
        for row in rows:
            out.write(orjson.dumps(row).decode() + "\n")
        return 0
    if args.provider and not any(r["counters"]["events"] for r in rows):
        rows = []  # nothing of them was that agent's: rows of "unknown" would only mislead
    if not rows:
        print(f"hint: {_scan_hint(args, cfg)}", file=sys.stderr)
        return 0
    for line in format_table(rows, time.time() if at is None else at):
        out.write(line + "\n")
    _usage_hint(rows)
    return 0


def _usage_hint(rows) -> None:
    """The hints under a scan's table: tokens with no price, lines not read."""
    from .scan import usage_hint

    hint = usage_hint(rows)
    if hint:
        print(f"hint: {hint}", file=sys.stderr)
    unread = [(r["counters"].get("parse_errors", 0), r["counters"].get("skipped", 0)) for r in rows]
    bad, big = sum(u[0] for u in unread), sum(u[1] for u in unread)
    if bad or big:
        what = ", ".join(([f"{bad:,} not valid records"] if bad else []) +
                         ([f"{big:,} over sources.max_line_bytes"] if big else []))
        print(f"hint: lines not read in {sum(1 for u in unread if any(u))} session(s): {what} "
              "(skipped and counted; per session in `scan --json` counters)", file=sys.stderr)


def _check(cfg) -> int:
    from .alerts import describe_targets
    from .roots import configured_roots, describe_root

    for prov, root in configured_roots(cfg):
        print(f"{prov}: {root} ({describe_root(prov, root)})")
    for prov in PROVIDER_MODULES:
        if not getattr(cfg.sources, prov).enabled:
            print(f"{prov}: disabled (sources.{prov}.enabled: false)")
    from .registry import folders_of

    for folder in folders_of(cfg, configured_roots(cfg)):
        print(f"claude_code session registry: {folder} ({'exists' if folder.is_dir() else 'does not exist yet'})")
    state_dir = cfg.resolved_state_dir()
    print(f"state_dir: {state_dir}")
    targets, problems = _targets(cfg)
    print(describe_targets(cfg, targets) if targets is not None else
          f"alerts: {len(problems)} unusable setting(s), listed below")
    if targets is not None:
        from .suppress import describe as describe_noise

        for line in describe_noise(cfg.alerts, targets):
            print(line)
    problems += _state_dir_problems(cfg.resolved_state_dir())
    if problems:
        print(f"configuration has {len(problems)} error(s):")
        for line in problems:
            print(f"  {line}")
        return 2
    print("configuration OK")
    return 0


def _targets(cfg) -> tuple[list | None, list[str]]:
    """``(alert targets, [])``, or ``(None, every Apprise URL it cannot
    use, one per line)``. Built once: Apprise logs each URL it cannot parse
    every time it is asked."""
    from .alerts import build_targets

    try:
        return build_targets(cfg), []
    except ValueError as e:
        return None, str(e).splitlines()


def _problems(cfg) -> list[str]:
    """What ``run`` would refuse beyond the file's keys: Apprise URLs it
    cannot use (every one) and an unusable ``state_dir``."""
    return _targets(cfg)[1] + _state_dir_problems(cfg.resolved_state_dir())


def _state_dir_problems(state_dir) -> list[str]:
    """Why ``run`` could not use ``state_dir`` (a Path), without changing
    anything: not a folder, not writable (or no writable parent to make it
    in), or a hook secret or spool folder that would be refused."""
    from pathlib import Path

    from .hooks import SPOOL_DIR, read_secret, spool_folder

    where = f"state_dir: {state_dir}"
    if state_dir.exists():
        if not state_dir.is_dir():
            return [f"{where}: not a folder (set state_dir in the config file)"]
        if not os.access(state_dir, os.W_OK | os.X_OK):
            return [f"{where}: not writable by this user (set state_dir in the config file)"]
    else:
        parent = Path(state_dir).parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            return [f"{where}: cannot be made ({parent} is not writable; set state_dir in the config file)"]
        import tempfile

        try:  # access() says yes to root everywhere (/proc, a read-only mount): make a folder there and drop it
            os.rmdir(tempfile.mkdtemp(prefix=".cae-check-", dir=parent))
        except OSError as e:
            return [f"{where}: cannot be made in {parent}: {e.strerror or e} (set state_dir in the config file)"]
        return []
    out = []
    try:
        read_secret(state_dir)
    except OSError as e:
        out.append(f"{where}: {e.strerror or e}")
    try:
        spool_folder(state_dir, create=False)
    except FileNotFoundError:
        pass
    except OSError as e:
        out.append(f"{where}/{SPOOL_DIR}: {e.strerror or e}")
    return out


def _run(args, cfg) -> int:
    import faulthandler

    faulthandler.enable()  # a crash in native code (a C extension, the interpreter) leaves its stack on stderr
    # Signals first: a SIGTERM/SIGINT at any moment from here on is a clean
    # stop (exit 0, checkpoint written); a second one while stopping exits at
    # once.
    stop = threading.Event()

    def _signal(signum, _frame):
        name = signal.Signals(signum).name
        if stop.is_set():
            log.warning("received %s again while stopping; exiting now", name)
            os._exit(1)
        log.info("received %s; shutting down", name)
        stop.set()

    # SIGINT: Ctrl-C everywhere; SIGBREAK: Ctrl-Break (Windows only);
    # SIGTERM: what service managers send (POSIX).
    for name in ("SIGTERM", "SIGINT", "SIGBREAK"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), _signal)

    # The start-up walk of the transcript folders (a stat per file: the
    # larger part of the time to ready with a heavy history) begins in a
    # forked process now, while the rest is imported and set up.
    from .history import horizon, split_early
    from .roots import configured_roots

    early = split_early(configured_roots(cfg), horizon(cfg), time.time())
    try:
        return _serve(args, cfg, stop, early)
    finally:
        early.cancel()  # unless the daemon took its result


def _note_state_dir(cfg) -> None:
    """Tell commands run without ``--config.file`` (agents' hooks) where this
    exporter's state folder is (:func:`.hooks.note_state_dir`)."""
    from .config import Config
    from .hooks import default_state_dir, note_state_dir

    default = Config().resolved_state_dir()
    try:
        if not note_state_dir(cfg.resolved_state_dir(), default):
            log.info("hook commands run without --config.file keep using the state_dir of the exporter "
                     "already running on %s; give them --config.file to reach this one", default_state_dir(default))
    except OSError as e:
        log.warning("cannot note the state_dir for hook commands run without --config.file: %s", e.strerror or e)


def _serve(args, cfg, stop: threading.Event, early) -> int:
    from .alerts import Alerter
    from .daemon import Daemon
    from .metrics import Metrics, SessionCollector
    from .hooks import ensure_secret
    from .persist import StateDirBusy, lock_state_dir
    from .web import (HostCheck, Limits, hooks_app, inline_wsgi, load_web_config, make_app, parse_listen_address,
                      serve)

    try:
        web = load_web_config(args.web_config)
    except ConfigError as e:
        print(f"coding-agent-exporter: configuration error: {e}", file=sys.stderr)
        return 2
    telemetry = args.telemetry_path if args.telemetry_path.startswith("/") else "/" + args.telemetry_path
    if telemetry in ("/", "/-/healthy", "/-/ready") or telemetry.startswith(("/api/", "/hooks/")):
        print(f"coding-agent-exporter: --web.telemetry-path {telemetry}: taken by the status page, the API, "
              "the hooks or the health checks; choose another path", file=sys.stderr)
        return 2
    from .usage import Prices

    Prices.isolate = True  # genai-prices is imported by a child process, never held by the daemon
    metrics = Metrics()
    machine = cfg.resolved_machine()
    metrics.set_machine(machine)
    try:
        lock = lock_state_dir(cfg.resolved_state_dir())  # held until the process exits
        secret = ensure_secret(cfg.resolved_state_dir()) if cfg.hooks.auth else None
        _note_state_dir(cfg)
        alerter = Alerter.from_config(cfg, metrics)
    except ConfigError as e:
        print(f"coding-agent-exporter: configuration error: {e}", file=sys.stderr)
        return 2
    except StateDirBusy as e:
        print(f"coding-agent-exporter: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"coding-agent-exporter: cannot use state_dir {cfg.resolved_state_dir()}: {e.strerror or e} "
              "(set state_dir in the config file)", file=sys.stderr)
        return 2  # a setting to change: a service manager does not restart it (RestartPreventExitStatus=2)
    daemon = Daemon(cfg, metrics, alerter, early)
    alerter.lookup = daemon.store.session  # the digest's and the mute API's view of the sessions
    metrics.registry.register(SessionCollector(daemon.store.snapshot, metrics, cfg.metrics.per_session))
    from .usage import UsageCollector

    metrics.registry.register(UsageCollector(daemon.store))
    from .statuspage import status_app

    status = status_app(daemon.store.snapshot, metrics, alerter.last_sent, bool(alerter.targets),
                        daemon.ready.is_set, telemetry, machine=machine, fleet=bool(cfg.fleet.peers),
                        mutes=alerter.noise.mutes.rows)
    from .alertmanager import PATH as AM_PATH, receiver_app

    from .alertmanager import SECRET_FILE as AM_SECRET

    try:
        am_secret = ensure_secret(cfg.resolved_state_dir(), AM_SECRET) if cfg.alertmanager.auth else None
    except OSError as e:
        print(f"coding-agent-exporter: cannot use state_dir {cfg.resolved_state_dir()}: {e.strerror or e}",
              file=sys.stderr)
        return 2
    routes = {AM_PATH: receiver_app(alerter, cfg, metrics, am_secret, bool(web.users))}
    from .mute_api import PATH_MUTES, PREFIX_PROJECTS, PREFIX_SESSIONS, mute_app

    mutes = mute_app(alerter.noise.mutes, daemon.store.session)
    routes.update({PREFIX_SESSIONS: mutes, PREFIX_PROJECTS: mutes, PATH_MUTES: mutes})
    fleet = None
    if cfg.fleet.peers:
        from .fleet import PATH as FLEET_PATH, Fleet
        from .statuspage import health_payload, sessions_payload

        def local():
            return (sessions_payload(daemon.store.snapshot, daemon.ready.is_set(), machine=machine, fleet=True),
                    health_payload(metrics, alerter.last_sent, bool(alerter.targets), machine=machine))

        try:
            fleet = Fleet(cfg, machine, local)
        except ConfigError as e:
            print(f"coding-agent-exporter: configuration error: {e}", file=sys.stderr)
            return 2
        routes[FLEET_PATH] = fleet.app
    try:
        listen_host = parse_listen_address(args.listen)[0]
    except ValueError as e:
        print(f"coding-agent-exporter: {e}", file=sys.stderr)
        return 2
    host_check = HostCheck(listen_host, cfg.web.allowed_hosts)
    app = make_app(metrics.registry, telemetry, daemon.ready.is_set, web.users, web.headers, status=status,
                   host_check=host_check, routes=routes, refused=metrics.http_refused)
    hooks = hooks_app(daemon.hooks, cfg.hooks.max_body_bytes, secret, cfg.hooks.max_clock_skew_seconds, host_check,
                      web.headers, metrics.http_refused)
    try:
        server = serve(app, args.listen, web, Limits(cfg.web.max_connections, cfg.web.header_timeout_seconds,
                                                     cfg.web.request_timeout_seconds,
                                                     cfg.web.keep_alive_timeout_seconds,
                                                     cfg.web.body_timeout_seconds,
                                                     max(cfg.hooks.max_body_bytes, cfg.alertmanager.max_body_bytes)),
                       refused=metrics.http_refused, routes={"/hooks/": hooks, AM_PATH: None, **dict.fromkeys(
                           (telemetry, "/-/healthy", "/-/ready"), inline_wsgi(app))})
    except OSError as e:
        hint = ""
        if e.errno == errno.EADDRINUSE:
            hint = (" (another exporter, or another program, is listening there: stop it, or pick another "
                    f"address with --web.listen-address, e.g. {_free_address_near(args.listen)}, free now)")
        print(f"coding-agent-exporter: cannot listen on {args.listen}: {e.strerror or e}{hint}", file=sys.stderr)
        # In use: another program holds it now, a restart may find it free. Else (an address this
        # machine does not have, a port it may not bind, a name that does not resolve) a setting to
        # change: 2, which a service manager does not restart (RestartPreventExitStatus=2).
        return 1 if e.errno == errno.EADDRINUSE else 2
    scheme = "https" if web.cert_file else "http"
    host, port = server.server_address[:2]
    url = f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"
    log.info("coding-agent-exporter %s serving %s: status page /, metrics %s, API /api/v1/sessions and "
             "/api/v1/health, hooks /hooks/<agent>%s", __version__, url, telemetry,
             ", fleet /api/v1/fleet" if fleet is not None else "")
    listen_url = _note_listen_url(cfg.resolved_state_dir(), url)
    if not stop.is_set():
        alerter.start()
        daemon.start()
        if fleet is not None:
            fleet.start()
    while not stop.is_set():
        stop.wait(1.0)
    if fleet is not None:
        fleet.stop()
    daemon.stop()
    alerter.stop()
    server.shutdown()
    server.server_close()
    if listen_url is not None:
        listen_url.unlink(missing_ok=True)
    log.info("stopped")
    return 0


def _free_address_near(listen: str) -> str:
    """``HOST:PORT`` with the first port after ``listen``'s that can be
    bound on its host now (of the next 100), else port 0 (the system picks
    one; the start line and ``state_dir/listen-url`` say which)."""
    import socket

    from .web import parse_listen_address

    host, port = parse_listen_address(listen)
    shown = f"[{host}]" if ":" in host else host
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for p in range(port + 1, min(port + 101, 65536)):
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, p))
            except OSError:
                continue
        return f"{shown}:{p}"
    return f"{shown}:0"


#: In ``state_dir``: the URL the running exporter serves on (``http://127.0.0.1:PORT``), the port it
#: got when ``--web.listen-address`` asked for port 0 included; removed at a clean stop.
LISTEN_URL_FILE = "listen-url"


def _note_listen_url(state_dir, url: str):
    """Write ``url`` to ``state_dir/listen-url`` (atomically; a script, a
    test or a hook finds the port there); returns its path, or None when it
    could not be written (logged: serving goes on)."""
    from .persist import write_atomic

    path = state_dir / LISTEN_URL_FILE
    try:
        write_atomic(path, lambda f: f.write(url.encode() + b"\n"))
    except OSError as e:
        log.warning("cannot write %s: %s", path, e.strerror or e)
        return None
    return path
