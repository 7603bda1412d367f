"""The node's book of pending alarms (AL-1, AL-4, AL-5): one entry per actor that has an alarm, a
heap by due time, and what the durable index holds.

Every actor storage reports its alarm changes here (``sink``): an alarm earlier than the index
knows is written to the index before the actor's transaction commits; later or deleted ones are
written lazily (``flush_index``), so the index only ever wakes an actor early or for nothing. The
scheduler reads due keys from the book and records each outcome in it.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import operator
import sqlite3
from collections.abc import Callable, Collection

from mailbox_actors.alarms.index import AlarmIndex
from mailbox_actors.platform.logging import get_logger
from mailbox_actors.platform.storage.errors import StorageWriteFailed

__all__ = ["INDEX_RETRY_MS", "AlarmBook", "Entry", "Key"]

Key = tuple[str, str]
INDEX_RETRY_MS = 5_000  # a flush the disk refused is tried again this much later
# ``pop_due`` splits the heap in one pass, instead of popping, when this many entries are due.
_SPLIT_AT = 64
# Entries of a burst's rest ``pop_due`` looks at in one call with a limit, at most (about
# 0.4 us each): the real-time loop's step stays short when most of them are stale.
_LOOK_AT_ONCE = 2_048
_AT, _SEQ = operator.itemgetter(0), operator.itemgetter(1)


class Entry:
    __slots__ = ("at", "retry")

    def __init__(self, at: int, retry: int = 0) -> None:
        self.at = at
        self.retry = retry


class _Sink:
    """What one actor's storage calls when its alarm changes (``platform.storage.hooks.AlarmSink``).
    An alarm moved no earlier than the index holds needs nothing before its commit (the index
    hears of it lazily after): said here without a call into the book, the usual case of every
    alarm re-armed a day later; ``committed`` is the book's, bound to the key (no call of ours
    between)."""

    __slots__ = ("_book", "_key", "committed")

    def __init__(self, book: AlarmBook, key: Key) -> None:
        self._book = book
        self._key = key
        self.committed: Callable[[int | None], None] = functools.partial(book.committed, key)

    def before_commit(self, at_ms: int) -> None:
        book = self._book  # its index's dict is read here: ``replace_index`` makes a new one
        indexed = book._indexed.get(self._key)
        if indexed is not None and at_ms >= indexed and book._touched is None:
            return  # ``AlarmBook.before_commit`` would do nothing
        book.before_commit(self._key, at_ms)


class AlarmBook:
    """Pending alarms of one node, evicted actors included. ``open`` gives it the index."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now = now_ms
        self._log = get_logger("mailbox_actors.alarms")
        self.index: AlarmIndex | None = None
        self.entries: dict[Key, Entry] = {}
        self._heap: list[tuple[int, int, Key]] = []
        # A burst's due entries split off the heap, in order, that ``pop_due``'s limit left for
        # its next calls (reversed: the next is last). Checked for staleness when taken.
        self._due: list[tuple[int, int, Key]] = []
        self._seq = itertools.count()
        self._indexed: dict[Key, int] = {}  # what the index file durably holds
        self._lazy: dict[Key, int | None] = {}  # later-or-deleted changes not yet written
        # The real-time loop, while it sleeps: the future that wakes it and when it looks anyway.
        self._waiter: asyncio.Future[None] | None = None
        self._looks_at = 0
        # Keys whose live heap entry the loop popped while they ran (``pop_due``,
        # ``next_due_ms``), and those entries' times: the scheduler pushes a key again when its
        # run ends if the time it then has was among them (``take_dropped``).
        self.dropped: dict[Key, list[int]] = {}
        self._index_failing = False  # the last flush could not write (a full disk)
        self.retry_flush_at = 0  # after a failed flush: not before this (the real-time loop)
        # While a scan of the actor files rebuilds the index (``scanning``): the keys whose alarm
        # changed meanwhile, whose truth is then newer than what the scan read.
        self._touched: set[Key] | None = None
        # The real-time loop's, while it runs: told of a key whose commit left its alarm due
        # already (a request's event for the outbox), to run it at once (``AlarmScheduler``).
        self.on_due_now: Callable[[Key], None] | None = None

    def open(self, index: AlarmIndex, alarms: dict[Key, int]) -> None:
        """Start-up: the opened index and every alarm it (or a scan) knows, overdue ones
        included (AL-4)."""
        self.index = index
        for key, at in alarms.items():
            self.entries[key] = Entry(at)
            self._indexed[key] = at
            self.push(at, key)

    def replace_index(self, index: AlarmIndex) -> None:
        """The index was found damaged after the node began serving with it (``serve`` checks
        it after its first answer) and set aside: ``index`` is a fresh one, written now with every
        alarm the book holds (those set meanwhile); a scan of the actor files adds the rest
        (``merge_found``). Raises what the write raised (the index stays incomplete)."""
        self.index = index
        self._lazy = {}
        alarms = {key: e.at for key, e in self.entries.items()}
        self._indexed = {}
        index.apply(alarms)
        self._indexed = alarms

    def scanning(self) -> None:
        """The node serves before it knows every alarm (its index's rows are read, or the actor
        files scanned, in the background): remember which keys change until ``merge_found``'s
        last call, so that what is read cannot overwrite a newer truth."""
        self._touched = set()

    @property
    def is_scanning(self) -> bool:
        return self._touched is not None

    def merge_found(self, found: dict[Key, int], *, indexed: bool, last: bool) -> int:
        """Add alarms read in the background to the book, except keys the book knows or that
        changed since the reading began (newer than what it read). ``indexed``: they are the
        index's own rows (nothing to write); else a scan of the actor files found them, and they
        are written to the index (one transaction). A key deleted meanwhile may come back from
        a scan: a wake for nothing, which the host ignores. ``last``: nothing more will be read.
        Returns how many were added; raises what the index's write raised, after the book took
        them (the index then stays incomplete)."""
        touched = self._touched or set()
        if last:
            self._touched = None
        entries = self.entries
        added = {key: at for key, at in found.items() if key not in touched and key not in entries}
        if indexed:
            for key in touched.intersection(found):
                # Changed while the rows were read: the index holds the row read unless the change
                # wrote it (``before_commit``); a later time or a deletion still has to reach it.
                if key not in self._indexed:
                    self._indexed[key] = found[key]
                    e = entries.get(key)
                    now_at = None if e is None else e.at
                    if now_at != found[key]:
                        self._lazy[key] = now_at
            self._indexed.update(added)
        for key, at in added.items():
            entries[key] = Entry(at)
        seq = self._seq
        self._heap.extend((at, next(seq), key) for key, at in added.items())
        heapq.heapify(self._heap)
        if added:
            self.wake_if_before(min(added.values()))
        if added and not indexed:
            assert self.index is not None, "a scan merged before the node opened its index"
            # Last: if the index cannot take them (a full disk), the book still fires them, and
            # the index stays marked incomplete, so the next start scans again.
            self.index.apply(added)
            self._indexed.update(added)
        return len(added)

    def sink(self, key: Key) -> _Sink:
        return _Sink(self, key)

    @property
    def pending_count(self) -> int:
        return len(self.entries)

    @property
    def heap_size(self) -> int:
        """Entries in the heap and the burst's due rest, stale ones included (AL-5: kept within a
        multiple of the live)."""
        return len(self._heap) + len(self._due)

    @property
    def has_lazy(self) -> bool:
        return bool(self._lazy)

    def push(self, at: int, key: Key) -> None:
        heapq.heappush(self._heap, (at, next(self._seq), key))
        if len(self._heap) > 2 * len(self.entries) + 1024:
            self._rebuild()

    def _rebuild(self) -> None:
        """Moves leave stale entries behind; rebuilt before they outnumber the live ones."""
        self._heap = [(e.at, next(self._seq), k) for k, e in self.entries.items()]
        heapq.heapify(self._heap)
        self._due = []  # every live entry is in the heap again

    def put(self, key: Key, at: int, retry: int = 0) -> None:
        """The key is due at ``at`` (with ``retry`` failed runs behind it)."""
        e = self.entries.get(key)
        if e is None:
            self.entries[key] = Entry(at, retry)
        else:
            e.at, e.retry = at, retry
        self.push(at, key)

    def forget(self, key: Key, *, keep_indexed: bool = False) -> None:
        """Nothing is stored for the key any more (unless ``keep_indexed``: the index keeps it for
        a node that serves its namespace)."""
        self.entries.pop(key, None)
        if not keep_indexed and key in self._indexed:
            self._lazy[key] = None
        if self._touched is not None:
            self._touched.add(key)

    def before_commit(self, key: Key, at: int) -> None:
        if self._touched is not None:
            self._touched.add(key)
        indexed = self._indexed.get(key)
        if indexed is None or at < indexed:
            assert self.index is not None, "an alarm was set before the node opened its index"
            self._lazy.pop(key, None)
            try:
                self.index.put(key, at)
            except (sqlite3.Error, OSError) as exc:
                # The index must hear of an earlier alarm before the actor commits it: without
                # room to write it, the actor's transaction fails too, retryably (OPS-3).
                raise StorageWriteFailed(f"alarm index: {type(exc).__name__}") from exc
            self._indexed[key] = at

    def committed(self, key: Key, at: int | None) -> None:
        if at is None:
            self.forget(key)
            return
        if self._touched is not None:
            self._touched.add(key)
        entries = self.entries
        e = entries.get(key)
        if e is None or e.at != at:
            if e is None:
                entries[key] = Entry(at)
            else:
                e.at, e.retry = at, 0
            heap = self._heap
            heapq.heappush(heap, (at, next(self._seq), key))  # ``push``, written out
            if len(heap) > 2 * len(entries) + 1024:
                self._rebuild()
        else:
            # Set again to the time it has: its heap entry stands, or, popped for a run under
            # way, the run's end pushes it again (the scheduler's ``_record``). Pushed here as
            # well, a burst's keys set again to their time by a request each (the index's
            # entry, then the request's) were each handed out, dropped and pushed once more.
            e.retry = 0
        if self._indexed.get(key) != at:
            self._lazy[key] = at
        due_now = self.on_due_now
        if due_now is not None and at <= self._now():
            due_now(key)
        if at < self._looks_at:
            self.wake_if_before(at)

    # ---- the real-time loop's sleep ----------------------------------------------------------

    def sleeping(self, waiter: asyncio.Future[None], until_ms: int) -> None:
        """The loop sleeps until ``until_ms`` unless ``waiter`` is resolved sooner."""
        self._waiter = waiter
        self._looks_at = until_ms

    def awake(self) -> None:
        self._waiter = None
        self._looks_at = 0

    def wake_if_before(self, at: int) -> None:
        """An alarm is due at ``at``: wake the sleeping loop if it would look only later."""
        waiter = self._waiter
        if waiter is not None and at < self._looks_at:
            self._waiter = None
            self._looks_at = 0
            if not waiter.done():
                waiter.set_result(None)

    def take_dropped(self, key: Key, at: int | None) -> bool:
        """Whether the loop dropped the key's live heap entry for ``at`` while it ran (and forget
        what it dropped of the key's). An entry it dropped for another time (the one the run
        started from, its time since moved by the run's commit) needs no push: the commit
        pushed the new time's, still in the heap unless dropped too (then it is said here).
        Before, any entry dropped pushed the key again: in a burst whose heap held two entries
        a key (the index's, then a request's set to the same time), a second entry for every
        alarm fired."""
        ats = self.dropped.pop(key, None)
        return ats is not None and at in ats

    def flush_index(self, at_most: int | None = None) -> bool:
        """Write the lazy (later-or-deleted) changes to the index in one transaction: all of
        them, or the ``at_most`` first (the real-time loop writes a burst's in pieces, each a
        short hold of the loop: they only move entries later or delete them, so the rest can
        wait for the next piece). True: some are left to write (and the index took these)."""
        if not self._lazy or self.index is None:
            return False
        if at_most is None or len(self._lazy) <= at_most:
            changes, self._lazy = self._lazy, {}
        else:
            lazy = self._lazy
            changes = {key: lazy[key] for key in itertools.islice(lazy, at_most)}
            for key in changes:
                del lazy[key]
        try:
            self.index.apply(changes)
        except (sqlite3.Error, OSError) as exc:
            # OPS-3 (a full disk): the index may only be early, and these changes move entries
            # later or delete them, so leaving them out is safe; they are tried again at the next
            # flush, under any change made since.
            if not self._index_failing:  # once per outage, not once per try
                self._log.warning("alarm_index_write_failed", changes=len(changes),
                                  error=type(exc).__name__, retry_every_ms=INDEX_RETRY_MS)
            self._index_failing = True
            self._lazy = changes | self._lazy
            self.retry_flush_at = self._now() + INDEX_RETRY_MS
            return False
        if self._index_failing:
            self._index_failing = False
            self._log.info("alarm_index_write_recovered", changes=len(changes))
        for key, at in changes.items():
            if at is None:
                self._indexed.pop(key, None)
            else:
                self._indexed[key] = at
        return bool(self._lazy)

    def next_due_ms(self, running: Collection[Key]) -> int | None:
        """When the first live entry is due: a burst's rest (``pop_due``'s limit, due already)
        or the heap's; the entries before it, stale or running, are dropped on the way."""
        rest, heap = self._due, self._heap
        while rest and self._passed(rest[-1], running):
            rest.pop()
        while heap and self._passed(heap[0], running):
            heapq.heappop(heap)
        if rest:
            return rest[-1][0] if not heap else min(rest[-1][0], heap[0][0])
        return heap[0][0] if heap else None

    def drop_passed(self, running: Collection[Key], at_most: int) -> bool:
        """Drop at most ``at_most`` entries that will not fire (stale or running) from the top of
        the burst's rest and of the heap, as ``next_due_ms`` does on its way; True: that many
        were dropped, and more may be left (the real-time loop drops on a round later, where
        ``next_due_ms`` dropped them all in one step: alarms moved earlier than the times a node
        loaded leave their old entries stale, all at the heap's top once the burst is handed
        out, and 100,000 of them held the loop 175 ms; 20,000, 18 ms)."""
        rest, heap = self._due, self._heap
        left = at_most
        while rest and left and self._passed(rest[-1], running):
            rest.pop()
            left -= 1
        while heap and left and self._passed(heap[0], running):
            heapq.heappop(heap)
            left -= 1
        return left == 0

    def _passed(self, entry: tuple[int, int, Key], running: Collection[Key]) -> bool:
        """Whether ``entry`` will not fire: stale (its key moved or deleted since), or its key's
        alarm is running (noted: the scheduler pushes the key again when the run ends)."""
        at, _, key = entry
        e = self.entries.get(key)
        if e is None or e.at != at:
            return True
        if key in running:
            self.dropped.setdefault(key, []).append(at)
            return True
        return False

    def pop_due(self, now: int, running: Collection[Key], limit: int | None = None,
                _looked: int = 0) -> list[Key]:
        """The live keys due at ``now``, in due order, at most ``limit`` of them (None: all):
        the rest stay due for the next calls, so the real-time loop hands out a burst of
        100,000 in pieces (the first 10 ms, the heap split once; then 0.4 ms each), not in one
        step of 36 ms. With a limit, at most ``_LOOK_AT_ONCE`` entries of a burst's rest are
        looked at in one call, live or not: a rest of stale entries (alarms moved since) is
        dropped a piece a call too, where it was all looked through in one (99,000 stale:
        22-24 ms, now 0.65); fewer keys than the limit, or none, come back then, the rest still due."""
        rest = self._due
        if rest:  # a burst's rest first: due before anything the heap has had since
            n = len(rest) if limit is None else min(limit, len(rest))
            first = rest[-n:]
            del rest[-n:]
            first.reverse()
            keys = self._live(first, running)
            looked = _looked + n
            if limit is None or (len(keys) < limit and looked < _LOOK_AT_ONCE):
                keys += self.pop_due(now, running, None if limit is None else limit - len(keys),
                                     looked)
            return keys
        heap = self._heap
        if not heap or heap[0][0] > now:
            return []
        if len(heap) > _SPLIT_AT and heap[_SPLIT_AT][0] <= now:
            # Many are due (the entry there and its six ancestors at least; in a burst, all):
            # one pass splits the heap into the due, sorted, and the rest, heapified again.
            # Popping each cost a dozen tuple comparisons (equal times compare their sequence
            # numbers too): 8 K instructions a key at 3,000 entries.
            due = [entry for entry in heap if entry[0] <= now]
            self._heap = heap = [entry for entry in heap if entry[0] > now]
            heapq.heapify(heap)
            due.sort(key=_SEQ)  # the heap's order, by int keys: (time, then sequence)
            due.sort(key=_AT)
            if limit is not None and len(due) > limit:
                self._due = due[:limit - 1:-1]  # the rest, reversed: taken from the end
                del due[limit:]
            return self._live(due, running)
        taken: list[tuple[int, int, Key]] = []
        while heap and heap[0][0] <= now and (limit is None or len(taken) < limit):
            taken.append(heapq.heappop(heap))
        return self._live(taken, running)

    def _live(self, taken: list[tuple[int, int, Key]], running: Collection[Key]) -> list[Key]:
        """The keys of ``taken`` heap entries (in order) that are live: stale ones are dropped,
        and running ones noted (``_dropped``)."""
        out: list[Key] = []
        seen: set[Key] = set()
        for at, _, key in taken:
            e = self.entries.get(key)
            if e is None or e.at != at or key in seen:
                continue
            if key in running:
                self.dropped.setdefault(key, []).append(at)
                continue
            seen.add(key)
            out.append(key)
        return out
