"""Record identity: the one place that says whether a record is a duplicate,
a copy of earlier history, or the session's own.

Every transcript record the store applies is judged here, once, from what
the records say; nothing later rewrites the answer:

- **duplicate**: the session already has a record with this identity
  (Claude ``uuid``, an assistant row's message id and content digest; a
  Codex line's bytes). Dropped and counted.
- **copy**: a record of earlier history repeated in another file. It moves
  the state like any record (a resumed session starts where the old one
  stood) but is never news, so it never pages. A record is a copy when
  (a) another session already holds a record with the same identity,
  whatever its record time (a resumed or forked file repeats the records it
  continues under the new ``sessionId``: Claude Code resume/fork, 2.1.332
  ``--fork-session`` keeps their uuids and timestamps; a copy stamped anew
  is a copy all the same), or
  (b) it names a session other than its file's (``Event.foreign``: Claude
  Code's copies still name the old ``sessionId``) and its own timestamp lies
  more than :data:`COPY_SLACK_SECONDS` before the file's first write (the
  news start the checkpoint gives the file: ``born``) — copies of history
  this exporter never decoded (a file left as history) are caught so.
- **own**: anything else. Two live sessions may share one record id (Claude
  Code wrote one prompt ``uuid`` into two sessions at once: field case 30):
  the second session's copy of it moves its state, and each session's later
  records are its own and page. A new file whose
  records name an older session with new ids and live timestamps (after
  ``/clear``, anthropics/claude-code#8614: field case 21, part 2b) is a
  live session of its own, keyed by its file.
"""

from __future__ import annotations

DUPLICATE, COPY, OWN = 0, 1, 2
#: How far before its file's first write (seconds) a record naming another
#: session must lie to be taken for a copy: a prompt is stamped a little
#: before the file that holds it is written.
COPY_SLACK_SECONDS = 60.0
#: Identities of forgotten sessions kept a while (a file renamed or moved is
#: forgotten under its old path before it is read under the new one: its
#: records are still copies then). Bounded: about 100 bytes each.
GONE_KEPT = 65536

_MISSING = object()


class Identity:
    """The record identities of every session of one store, with the record
    time each was first seen at (``ident → Unix seconds or None``). Memory:
    one dict entry per record of the sessions kept; :meth:`forget` drops a
    session's entries when the session is forgotten."""

    __slots__ = ("first", "gone")

    def __init__(self) -> None:
        self.first: dict = {}
        #: ``ident → record time`` of sessions forgotten lately (oldest first).
        self.gone: dict = {}

    def judge(self, seen: set, ident, ts: float | None, foreign: bool = False, born: float | None = None) -> int:
        """Judge one record of a session whose identities are ``seen`` (the
        set is updated). ``ts``: the record's time (Unix seconds);
        ``foreign``: it names another session than its file's; ``born``: its
        file's first write (Unix seconds; None: unknown, then rule (b) does
        not apply). Returns :data:`DUPLICATE`, :data:`COPY` or :data:`OWN`."""
        if ident in seen:
            return DUPLICATE
        seen.add(ident)
        t0 = self.first.get(ident, _MISSING)
        if t0 is _MISSING and self.gone:
            t0 = self.gone.pop(ident, _MISSING)  # a forgotten session's record (a renamed file)
            if t0 is not _MISSING:
                self.first[ident] = t0
        if t0 is _MISSING:
            self.first[ident] = ts
        else:
            return COPY  # another session holds this record (a resumed or forked session's copy)
        if foreign and born is not None and ts is not None and ts < born - COPY_SLACK_SECONDS:
            return COPY
        return OWN

    def forget(self, seen: set) -> None:
        """Drop the identities of a forgotten session (its ``seen`` set); the
        newest :data:`GONE_KEPT` of all forgotten sessions are kept aside, so
        that a renamed or moved file read again soon after is a copy."""
        first, gone = self.first, self.gone
        for ident in seen:
            t = first.pop(ident, _MISSING)
            if t is not _MISSING:
                gone[ident] = t
        while len(gone) > GONE_KEPT:
            del gone[next(iter(gone))]

    def merge(self, other: Identity) -> None:
        """Take over the identities of a store that read other files (a
        start-up reader process); the first record time seen stays."""
        for k, v in other.first.items():
            self.first.setdefault(k, v)
