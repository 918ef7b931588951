"""Command line: ``run`` (default), ``scan``, ``check-config``, ``test-alert``, ``hooks``.

Flags follow Prometheus exporters (exporter-toolkit names).
"""

from __future__ import annotations

import argparse
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
        description="Prometheus exporter and pager for Claude Code and Codex session transcripts.")
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
    scan.add_argument("paths", nargs="+", metavar="PATH", help="transcript files or folders")
    scan.add_argument("--json", action="store_true", help="print JSON lines")
    scan.add_argument("--at", metavar="TIME",
                      help="evaluate time-based rules at TIME (ISO-8601 with zone, or Unix seconds; default now)")
    scan.add_argument("--provider", choices=list(PROVIDER_MODULES),
                      help="treat every file as this agent's (default: by folder, else by content)")

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
        outcome = send(args.agent, body, args.url, cfg.resolved_state_dir(), timeout=args.timeout,
                       max_body_bytes=limit)
        if outcome != "sent":
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
    return (f"no session in {len(files)} file(s): they hold only subagent (sidechain) work, or no record a "
            "session starts with; scan the folder of the parent session (Claude: <project>/<sessionId>.jsonl "
            "next to <sessionId>/subagents/)")


def _scan(args, cfg) -> int:

    from .scan import format_table, print_progress, scan

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
        rows, _store = scan(args.paths, cfg, args.provider, at, progress=print_progress)
    except FileNotFoundError as e:
        print(f"coding-agent-exporter: {e}", file=sys.stderr)
        return 2
    out = sys.stdout
    if args.json:
        for row in rows:
            out.write(orjson.dumps(row).decode() + "\n")
        return 0
    if not rows:
        print(f"hint: {_scan_hint(args, cfg)}", file=sys.stderr)
        return 0
    for line in format_table(rows, time.time() if at is None else at):
        out.write(line + "\n")
    if args.provider and not any(r["counters"]["events"] for r in rows):
        print(f"hint: {_scan_hint(args, cfg)}", file=sys.stderr)
    return 0


def _check(cfg) -> int:
    from .alerts import build_targets, describe_targets
    from .roots import configured_roots, describe_root
    from .store import PROVIDER_MODULES

    for prov, root in configured_roots(cfg):
        print(f"{prov}: {root} ({describe_root(prov, root)})")
    for prov in PROVIDER_MODULES:
        if not getattr(cfg.sources, prov).enabled:
            print(f"{prov}: disabled (sources.{prov}.enabled: false)")
    print(f"state_dir: {cfg.resolved_state_dir()}")
    print(describe_targets(cfg))
    try:
        build_targets(cfg)
    except ValueError:
        print("configuration has errors")
        return 2
    print("configuration OK")
    return 0


def _run(args, cfg) -> int:
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


def _serve(args, cfg, stop: threading.Event, early) -> int:
    from .alerts import Alerter
    from .daemon import Daemon
    from .metrics import Metrics, SessionCollector
    from .persist import StateDirBusy, lock_state_dir
    from .web import hooks_app, load_web_config, make_app, serve

    try:
        web = load_web_config(args.web_config)
    except ConfigError as e:
        print(f"coding-agent-exporter: configuration error: {e}", file=sys.stderr)
        return 2
    telemetry = args.telemetry_path if args.telemetry_path.startswith("/") else "/" + args.telemetry_path
    metrics = Metrics()
    try:
        lock = lock_state_dir(cfg.resolved_state_dir())  # held until the process exits
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
        return 1
    daemon = Daemon(cfg, metrics, alerter, early)
    metrics.registry.register(SessionCollector(daemon.store.snapshot, metrics, cfg.metrics.per_session))
    from .statuspage import status_app

    status = status_app(daemon.store.snapshot, metrics, alerter.last_sent, bool(alerter.targets),
                        daemon.ready.is_set, telemetry)
    app = make_app(metrics.registry, telemetry, daemon.ready.is_set, web.users, web.headers,
                   hooks=hooks_app(daemon.hooks, cfg.hooks.max_body_bytes), status=status)
    try:
        server = serve(app, args.listen, web)
    except ValueError as e:
        print(f"coding-agent-exporter: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"coding-agent-exporter: cannot listen on {args.listen}: {e.strerror or e}", file=sys.stderr)
        return 1
    scheme = "https" if web.cert_file else "http"
    host, port = server.server_address[:2]
    log.info("coding-agent-exporter %s serving %s://%s:%d%s", __version__, scheme,
             f"[{host}]" if ":" in host else host, port, telemetry)
    if not stop.is_set():
        alerter.start()
        daemon.start()
    while not stop.is_set():
        stop.wait(1.0)
    daemon.stop()
    alerter.stop()
    server.shutdown()
    server.server_close()
    log.info("stopped")
    return 0
