"""What the runtime knows of one actor file without a read (``Known``), and how long it holds.

The runtime's hot paths (an event's sequence, the alarm purposes, the outbox's undispatched
events) would each read the file again and again for values only the runtime itself writes. They
keep them here instead: one object per connection, learnt from the runtime's own reads and
writes, valid while nothing was undone since it was learnt. Any rollback, whole or to a savepoint,
and ``delete_all`` move the connection's undo count, and the first look after that starts from an
empty ``Known`` (``Transactions._known_now``): everything is read from the file again, at once,
by one rule, never by a tag on each cache that each of them must check.
"""

from __future__ import annotations

__all__ = ["UNKNOWN", "Known"]


class Known:
    """One connection's runtime values as the file holds them, learnt at undo count ``at``."""

    __slots__ = ("at", "counters", "first", "last", "ranges", "unsent")

    def __init__(self, at: int) -> None:
        self.at = at
        # counter meta key -> its value as the runtime last wrote (or read) it
        self.counters: dict[str, int] = {}
        # meta keys [start, end) -> every key of the range with its value (the alarm purposes)
        self.ranges: dict[tuple[str, str], dict[str, str]] = {}
        # the outbox: a sequence at or below the first undispatched event
        self.first: int | None = None
        # the outbox: the sequence the last event appended on this connection took
        self.last: int | None = None
        # the outbox: every undispatched event's (sequence, body), oldest first, when known
        # whole (from a marking that left nothing undispatched, then each append); None: read
        self.unsent: list[tuple[int, bytes]] | None = None


# A new connection's: learnt at no undo count, so the runtime's first look makes a ``Known``
# (a request that never looks pays nothing for it).
UNKNOWN = Known(-1)
