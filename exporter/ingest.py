"""The one ingest path: decode → provider projection → session binding →
identity and dedup → ``SessionReducer.apply``, for transcript lines and hook
deliveries alike. Whether a record is news is decided here, once, from the
batch's ``live`` (:mod:`exporter.checkpoint`: where reading started) and the
record's identity (:mod:`exporter.identity`: a copy is never news), and
travels with it into the reducer; nothing later rewrites it (a turn end the
page ledger still owes is kept by the reducer: ``SessionReducer.owed``).

Functions of the :class:`~.store.SessionStore` whose state they change (its
files, sessions and identities); the store calls them under its lock. They
reach the store only through its public surface (``sessions``, ``metrics``,
``identity``, ``usage``, :meth:`~.store.SessionStore.open_session`,
:meth:`~.store.SessionStore.hook_once`, :meth:`~.store.SessionStore.changed`);
this module does not import the store (the store imports it).
"""

from __future__ import annotations

import hashlib
import logging
from functools import partial
from pathlib import Path

import orjson

from .decode import LineError, decode_line, split_glued
from .events import META, SESSION
from .identity import COPY, DUPLICATE
from .usage import take as _take_usage

log = logging.getLogger("exporter.store")


def _line_key(session_id: str, line: bytes) -> str:
    """The identity key of a record without an id: ``<session>:<blake2b-96
    hex of the line>`` (it names the turns such records start)."""
    return f"{session_id}:{hashlib.blake2b(line, digest_size=12).hexdigest()}"


def apply_lines(store, f, lines: list[bytes], live: bool) -> None:
    """Apply complete ``lines`` of ``f`` in file order: decode, project,
    bind to the session, deduplicate, reduce. Every byte read goes
    through here, so it keeps to locals and tries the common case first
    (``orjson`` gives a dict; anything else takes :func:`decode_line`,
    which names the reason). A line that holds several records glued
    together (:func:`~.decode.split_glued`; a torn copy and the whole
    record after it) is counted once as ``torn_record`` or
    ``glued_records`` and its whole records are applied in its place."""
    m = store.metrics
    prov = f.provider.NAME
    project = f.decoder.project
    loads, bad_json = orjson.loads, orjson.JSONDecodeError
    s = f.session
    judge, born = store.identity.judge, f.born
    took = f.decoder.usage  # the responses a projected record carries (exporter.usage)
    counted = store.usage.keys
    for line in lines:
        try:
            obj = loads(line)
        except bad_json:
            obj = None
        if type(obj) is not dict:
            try:
                obj = decode_line(line)
            except LineError as e:
                glued = split_glued(line, f.provider.sniff) if e.reason != "not_object" else None
                m.parse_errors.labels(prov, e.reason if glued is None else
                                      "torn_record" if glued[1] else "glued_records").inc()
                if s is not None:
                    s.counters.parse_errors += 1
                    s.counters.lines += 1
                if glued is not None:
                    apply_lines(store, f, glued[0], live)
                    s = f.session
                continue
            if obj is None:
                m.skipped.labels(prov, "blank").inc()
                continue
        try:
            ev = project(obj)
        except Exception:  # a shape the provider code did not foresee: count it, keep reading
            log.debug("record of unexpected shape in %s", f.path, exc_info=True)
            m.parse_errors.labels(prov, "unexpected_shape").inc()
            if s is not None:
                s.counters.parse_errors += 1
            took.clear()
            continue
        if ev is None:
            took.clear()
            continue
        ts = ev.ts
        if ts is None:
            ev.ts = f.last_ts
        elif f.last_ts is None or ts > f.last_ts:
            f.last_ts = ts
        kind = ev.kind
        if kind == SESSION and f.head is None:
            f.head = ev
        if s is None:
            s = bind(store, f, ev if f.head is None or kind == SESSION else f.head)
        counters = s.counters
        counters.lines += 1
        if took:
            # (another line of a response already counted, the common case, is skipped here)
            if len(took) > 1 or took[0][0] not in counted:
                _take_usage(store, s, prov, took, live and not ev.replayed, ev.ts)
            took.clear()
        if ev.cwd and not s.cwd:
            s.cwd = ev.cwd
        if kind == SESSION or kind == META:
            s.reducer.apply(ev, s.seq, live)  # keeps last_event_at
            continue
        ident = ev.ident
        if ident is None:
            # A record without an id (Codex): its bytes are its identity.
            # Deduplication keeps their 64-bit hash; the digest that names
            # a turn is made only when the record starts one.
            ident = hash(line)
            key = partial(_line_key, s.session_id, line)
        else:
            key = ident
        said = judge(s.seen, ident, ev.ts, ev.foreign, born)
        if said == DUPLICATE:
            m.duplicates.labels(prov).inc()
            counters.duplicates += 1
            continue
        s.seq += 1
        counters.events += 1
        s.reducer.apply(ev, s.seq, live and said != COPY and not ev.replayed, key)


def bind(store, f, ev):
    """Attach a file to its session once its first record is known."""
    prov = f.provider.NAME
    sid = f.name_sid
    if ev.kind == SESSION:
        if ev.subagent:
            f.sidechain = True
            f.decoder.sidechain_file = True
            sid = ev.parent_id or ev.session_id or sid
        else:
            sid = ev.session_id or sid
    elif f.sidechain and sid is None:
        sid = ev.session_id  # 2.0.x sibling agent file: parent's sessionId
    elif not f.sidechain and ev.sidechain and ev.session_id and ev.session_id != sid:
        # A subagent file outside the usual layout (renamed, copied flat):
        # its records are sidechain and name the parent session.
        f.sidechain = True
        f.decoder.sidechain_file = True
        sid = ev.session_id
    if sid is None:
        sid = ev.session_id or Path(f.path).stem
    s = store.open_session(prov, sid, hidden=f.sidechain)
    if not f.sidechain:
        s.hidden = False
    if ev.cwd and not s.cwd:
        s.cwd = ev.cwd
    s.files.add(f.path)
    f.session = s
    return s


def apply_hook(store, d, may_create: bool = True, by_file=None):
    """Apply one :class:`~.hooks.HookDelivery` (news, unless its event is
    ``replayed``: the session registry's records found so at start-up; its
    ``source`` is ``hook``, or ``registry`` for the registry's). It joins
    its session by ``transcript_path`` (``by_file``: the session the file
    table bound that file to, a subagent rollout's parent included), else
    by ``session_id``; a session no
    transcript told of yet is made from the hook only when
    ``may_create`` (its transcript lies under a watched root, so the
    agent is about to write it); otherwise the delivery is counted as
    ``unknown_session`` and dropped. Returns the session, or None when
    the delivery changes no state. The caller holds the store's lock."""
    ev = d.event
    s = by_file
    if s is None and d.session_id is not None:
        s = store.sessions.get((d.provider, d.session_id))
    if s is None and (d.session_id is None or not may_create):
        store.metrics.hook_errors.labels("unknown_session").inc()
        return None
    if s is None:
        s = store.open_session(d.provider, d.session_id)
        s.hidden = False
    if d.cwd and not s.cwd:
        s.cwd = d.cwd
    if ev is None:
        return None
    # A delivery made twice (posted and spooled, saved and applied again)
    # comes within minutes: its identity is kept in one bounded window for
    # all sessions, so memory does not grow with hook traffic.
    if not store.hook_once(d.ident):
        store.metrics.duplicates.labels(d.provider).inc()
        s.counters.duplicates += 1
        return None
    s.seq += 1
    s.counters.events += 1
    s.last_write = max(s.last_write, ev.ts)
    ev.source = ev.source or ("registry" if d.name == "registry" else "hook")
    s.reducer.apply(ev, s.seq, not ev.replayed, f"{s.session_id}:{d.ident}")
    store.changed(s)
    return s

