"""An actor storage's transactions (RT-4, RT-5, AL-1): explicit ones (``transaction_sync``, with
savepoints when nested), the implicit one that writes outside them coalesce into (committed at the
next turn of the event loop, or when a reply is about to leave), and what happens when SQLite ends
one itself. The stored alarm is kept here too, because it commits and rolls back with them.

The state between statements is typed (``TxState``), as is the alarm handler's run (``AlarmRun``).
"""

from __future__ import annotations

import asyncio
import enum
import sqlite3
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from types import CoroutineType
from typing import Any, Generic, Self, TypeVar

from mailbox_actors.platform.storage.connection import RUNTIME_TOKEN, ScreenedConnection
from mailbox_actors.platform.storage.errors import (
    StorageBusy,
    StorageCorrupt,
    StorageUnavailable,
    TransactionRolledBack,
)
from mailbox_actors.platform.storage.fence import DATA_VERSION, EpochFence
from mailbox_actors.platform.storage.hooks import (
    AlarmSink,
    NoAlarmSink,
    NoTransactionHooks,
    TransactionHooks,
)
from mailbox_actors.platform.storage.known import SchemaFacts
from mailbox_actors.platform.storage.limits import Limits, page_limits
from mailbox_actors.platform.storage.runtime_known import UNKNOWN, Known
from mailbox_actors.wire.errors import LimitExceeded

__all__ = ["PAST_CAP_KEY", "AlarmRun", "Transactions", "TxState"]

_NO_HOOKS = NoTransactionHooks()  # a storage opened alone: no request, no scheduler
_NO_SINK = NoAlarmSink()
# The storage whose ``ctx.transaction`` (RT-16) the running task is inside: set in that
# transaction's own task, and so in every task it starts (a task copies its creator's context);
# a task already under way when it began (another request's, an alarm run's) does not see it.
_INSIDE: ContextVar[object | None] = ContextVar("mailbox_actors_inside_transaction", default=None)
_NONE_LOST: frozenset[int] = frozenset()  # every storage's ``_lost`` until one is lost
_NOT_IN_RUN: tuple[AlarmRun | None, bool] = (None, False)  # a transaction outside an alarm run

T = TypeVar("T")
R = TypeVar("R")


_PAGE_COUNT = f"PRAGMA page_count /*{RUNTIME_TOKEN}*/"
_MAX_PAGES: dict[Limits, str] = {}  # the page limit's PRAGMA text, per limits (``_max_pages``)


def _max_pages(limits: Limits) -> str:
    """The PRAGMA that sets the pages ordinary writes may fill (``page_limits``), made once per
    limits."""
    text = _MAX_PAGES.get(limits)
    if text is None:
        text = f"PRAGMA max_page_count = {page_limits(limits)[0]} /*{RUNTIME_TOKEN}*/"
        if len(_MAX_PAGES) < 64:
            _MAX_PAGES[limits] = text
    return text


_FREELIST_COUNT = f"PRAGMA freelist_count /*{RUNTIME_TOKEN}*/"
# A freeing transaction removes content: SQLite overwrites what it frees with zeros while it runs,
# and after its commit the WAL's frames, older copies of the removed pages, are checkpointed into
# the file and the WAL truncated. Nothing removed stays readable in either file.
_TRUNCATE_WAL = f"PRAGMA wal_checkpoint(TRUNCATE) /*{RUNTIME_TOKEN}*/"

# A runtime meta key (``_ma_meta``): the file has more pages than ordinary writes may fill, which
# only a freeing transaction makes so (and for good: a file never shrinks). It sorts after every
# other key, so the runtime's first read at an open (every key from the least it asks for) brings
# it; without it the opener knows the file is within the limit (``_past_cap`` False) and no
# activation pays a statement for it.
PAST_CAP_KEY = "~past_cap"
_MARK_PAST_CAP = (f"INSERT OR REPLACE INTO _ma_meta (k, v) VALUES ('{PAST_CAP_KEY}', '1') "
                  f"/*{RUNTIME_TOKEN}*/")

_NOT_SYNCHRONOUS = ("transaction_sync takes a synchronous function, not a coroutine function (or "
                    "one returning a coroutine): no await may happen inside a transaction")


class TxState(enum.Enum):
    """Where the connection stands between statements."""

    NONE = "none"          # no transaction open
    IMPLICIT = "implicit"  # writes outside transaction_sync, committing at the next loop turn
    EXPLICIT = "explicit"  # inside transaction_sync (savepoints nest within it)
    ENDED = "ended"        # inside transaction_sync, but SQLite rolled it all back: every
    #                        statement and the commit raise TransactionRolledBack


# Python 3.11's ``EnumType`` defines ``__getattr__``, so reading a member as ``Enum.MEMBER`` in a
# function takes the slow attribute path (about 850 instructions, against a global's few dozen;
# ten such reads were 8.5 K instructions an alarm of a burst). Hot paths read these names.
_NONE, _IMPLICIT, _EXPLICIT, _ENDED = TxState.NONE, TxState.IMPLICIT, TxState.EXPLICIT, TxState.ENDED


class _made_at_first_read(Generic[R]):  # a decorator's name, as cached_property
    """``functools.cached_property`` without its lock: the value is made at the first read and
    kept in the instance's dict, which shadows this (a non-data descriptor) from then on. Python
    3.11's ``cached_property`` takes an ``RLock`` at that first read, about 60 bytecodes and two
    C calls at every activation's first transaction; nothing here is shared between threads
    (a connection is used by the event loop only)."""

    __slots__ = ("_make", "_name")

    def __init__(self, make: Callable[[Any], R]) -> None:
        self._make = make
        self._name = make.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, instance: Any, owner: type | None = None) -> R:
        if instance is None:  # read on the class: the descriptor itself
            return self  # type: ignore[return-value]
        value = instance.__dict__[self._name] = self._make(instance)
        return value


class AlarmRun:
    """While the alarm handler runs: ``get_alarm()`` is None (AL-3) and the storage notes whether
    the handler set the alarm (then the host must keep it)."""

    __slots__ = ("set_in_handler",)

    def __init__(self) -> None:
        self.set_in_handler = False


class Transactions(ScreenedConnection):
    """The transaction state of one actor's connection, and its stored alarm."""

    # Its one row (CHECK (id = 1)): no WHERE to prepare (``opening._first_read``).
    _alarm_sql = f"SELECT at_ms FROM _ma_alarm /*{RUNTIME_TOKEN}*/"

    _now: Callable[[], int]
    _hooks: TransactionHooks
    _alarm_sink: AlarmSink
    _state: TxState
    _depth: int  # transaction_sync nesting: 1 is the transaction, more are savepoints
    # A ``ctx.transaction`` (RT-16) is the open transaction: a write from a task outside it (one
    # already under way when it began) is refused (``StorageBusy``).
    _async_open: bool
    _ended_by: BaseException | None  # TxState.ENDED: what SQLite ended it with
    _txn_now: int | None
    # The stored alarm, once read (``_alarm_unread`` until then: a request's activation does
    # not read it at open, ``_stored``), and whether this connection changed it since.
    _alarm: int | None
    _alarm_unread: bool
    _alarm_dirty: bool
    _alarm_run: AlarmRun | None
    _gen: int  # the current (or last) implicit transaction
    _lost: set[int] | frozenset[int]  # implicit transactions SQLite rolled back
    # Bumped by every rollback, whole or to a savepoint, and by delete_all: what the runtime
    # learnt of the file (``_known``) holds while this has not moved since.
    _undone: int
    _known: Known
    # The slot's fence on many machines (``fence``), None elsewhere. ``_fence_version``: None
    # until a transaction of this activation passed it; then the file's data version at the last
    # transaction that read the file's stamp, and ``_fence_undone`` what ``_undone`` was then
    # (``_fenced``). ``_fence_reads``: the cursor of the data-version read, made at the first.
    _fence: EpochFence | None
    _fence_version: int | None
    _fence_undone: int
    _fence_reads: sqlite3.Cursor | None
    # Whether the file has more pages than ordinary writes may fill (``page_limits``): only a
    # freeing transaction grows it so far, and then an ordinary commit checks the pages in use
    # (``_within_cap``). None: not known; the next transaction looks (``_pages_in_use``).
    _past_cap: bool | None
    _freeing: bool  # a ``transaction_freeing`` runs: it may fill the reserve
    _used_at_begin: int  # pages in use when the transaction began (while ``_past_cap``)

    def __init__(self, conn: sqlite3.Connection, path: str | Path, limits: Limits,
                 facts: SchemaFacts | None, now_ms: Callable[[], int],
                 hooks: TransactionHooks | None, alarm_sink: AlarmSink | None,
                 alarm: tuple[int | None] | None) -> None:
        super().__init__(conn, path, limits, facts)
        self._now = now_ms
        self._hooks = hooks or _NO_HOOKS
        self._alarm_sink = alarm_sink or _NO_SINK
        self._state = _NONE
        self._depth = 0
        self._async_open = False
        self._ended_by = None
        self._txn_now = None
        if alarm is None:
            self._alarm, self._alarm_unread = None, True
        else:
            self._alarm, self._alarm_unread = alarm[0], False
        self._alarm_dirty = False
        self._alarm_run = None
        self._gen = 0
        self._lost = _NONE_LOST
        self._undone = 0
        self._known = UNKNOWN  # made at the runtime's first look (``_known_now``)
        self._fence = None  # set by the opener on many machines (``fence``)
        self._fence_version = None
        self._fence_undone = 0
        self._fence_reads = None
        self._past_cap = None
        self._freeing = False
        self._used_at_begin = 0

    @_made_at_first_read
    def _own(self) -> sqlite3.Cursor:
        """The cursor of the runtime's own statements that return no rows (BEGIN, COMMIT, the
        alarm row's writes), made at the first of them and kept: ``Connection.execute`` makes a
        cursor for each, and leaves a weak reference to it in the connection's list until 200
        more were made there; on a burst's open actors those piled up as the collector's young
        objects (about one collection in a hundred alarms) besides the cursor's own making. An
        activation that only reads (most requests' actors) never makes it: a cursor is about
        240 B an open actor (memory_per_active_actor_bytes). Once made, it is read from the
        instance's dict like any field."""
        return self._conn.cursor()

    def _stored(self) -> int | None:
        """The stored alarm, read from the file at its first use in this activation."""
        if self._alarm_unread:
            self._read_alarm()
        return self._alarm

    def _known_now(self) -> Known:
        """What the runtime knows of this file without a read (``runtime_known``): empty again after
        any rollback or ``delete_all`` since it was learnt. Only the runtime calls this."""
        known = self._known
        if known.at != self._undone:
            known = self._known = Known(self._undone)
        return known

    def _before_write(self) -> None:
        """A write is about to run: refuse it inside a transaction SQLite already ended; outside
        transaction_sync, join (or open) the implicit transaction and tell the request."""
        state = self._state
        if state is _EXPLICIT:
            if self._async_open and _INSIDE.get() is not self:
                raise StorageBusy()
            return
        if state is _ENDED:
            raise TransactionRolledBack(self._ended_by)
        if state is _NONE:
            self._open_implicit()
        self._hooks.joined_implicit(self._gen)

    def _run(self, statement: Callable[[], R]) -> R:
        """Run one statement; if SQLite ended the whole transaction with it, remember that."""
        if self._state is _ENDED:
            raise TransactionRolledBack(self._ended_by)
        try:
            return statement()
        except sqlite3.Error as e:
            raise self._failed(e) from e

    def _run_sys(self, query: str, params: Sequence[object]) -> sqlite3.Cursor:
        """``_run`` of a runtime statement (``_sys``), without a closure: the alarm's writes."""
        if self._state is _ENDED:
            raise TransactionRolledBack(self._ended_by)
        facts = self._facts
        try:
            if facts is not None and query in facts.runtime_texts:
                return self._own.execute(query, params)  # ``_sys``'s first case, written out
            return self._sys(query, params)
        except sqlite3.Error as e:
            raise self._failed(e) from e

    def _failed(self, e: sqlite3.Error) -> Exception:
        """A statement failed: the error to raise; if SQLite ended the whole transaction with
        it, remember that (``_run``, and ``exec``'s path, which inlines ``_run``)."""
        mapped = self._map_error(e)
        if not self._conn.in_transaction:  # disk full, OR ROLLBACK, RAISE(ROLLBACK)
            self._rolled_back()
            if self._state is _EXPLICIT:
                self._state, self._ended_by = _ENDED, mapped
            elif self._state is _IMPLICIT:
                self._state = _NONE
                self._lose()
                self._reload_alarm()
        return mapped

    def now_ms(self) -> int:
        """The clock, frozen for the length of a transaction (RT-12)."""
        return self._txn_now if self._txn_now is not None else self._now()

    @property
    def in_transaction(self) -> bool:
        """Inside ``transaction_sync``."""
        return self._depth > 0

    def transaction_sync(self, fn: Callable[[Self], T]) -> T:
        """Run ``fn(sql)`` in a transaction: commit when it returns, roll back when it raises.

        Nested calls become savepoints. ``fn`` must be synchronous: a coroutine function (or
        one returning a coroutine) is refused with a TypeError once called, before its body ran,
        and the transaction rolls back with nothing written. (Asking ``fn`` whether it is a
        coroutine function first cost more than the check of what it returned, on every
        transaction.)
        """
        if self._depth:
            if self._async_open and _INSIDE.get() is not self:
                raise StorageBusy()  # not a savepoint in another task's ctx.transaction
            return self._savepoint(fn)
        before = self._begin_top()
        try:
            result = fn(self)
            if isinstance(result, CoroutineType):
                result.close()
                raise TypeError(_NOT_SYNCHRONOUS)
            if self._state is _ENDED:  # fn went on after SQLite ended the transaction
                raise TransactionRolledBack(self._ended_by)
        except BaseException:
            self._end_explicit()
            self._undo_top(before)
            raise
        self._commit_top(before)
        return result

    def transaction_freeing(self, fn: Callable[[Self], T]) -> T:
        """``transaction_sync`` for a transaction that makes room (a deleted message, an erase):
        it may fill the pages kept under ``max_database_bytes`` for that (``page_limits``), so
        a file ordinary writes filled can still delete, and what it frees serves ordinary writes
        again. The file never grows past ``max_database_bytes``. Runtime objects call it only
        where the transaction removes content; nested in another transaction it is a savepoint
        under that transaction's limit. When it leaves the file with more pages than ordinary
        writes may fill, the file says so (``PAST_CAP_KEY``, read with the runtime's first read
        at every open), so every later activation counts the pages in use at its commits.
        What it removes leaves no copy in the file's free pages or in its WAL (RPC-4, IN-6):
        freed pages are overwritten with zeros, and after the commit the WAL is checkpointed
        and truncated (``_truncate_wal``; a reader holding an older snapshot keeps the frames
        it needs until the next freeing transaction). Nested in another transaction, its
        freed pages are zeroed and the WAL is left as the outer transaction leaves it."""
        if self._depth:  # its freed pages are zeroed; the outer transaction's WAL is kept
            if self._async_open and _INSIDE.get() is not self:
                raise StorageBusy()
            with self._pragma_while("secure_delete", 1):
                return self._savepoint(fn)
        if self._state is _IMPLICIT:  # writes before it commit under the ordinary limit
            self._flush()
        cap, hard = page_limits(self.limits)

        def run(tx: Self) -> T:
            result = fn(tx)
            if self._sys(_PAGE_COUNT).fetchone()[0] > cap:
                self._sys(_MARK_PAST_CAP)
            return result

        self._sys(f"PRAGMA max_page_count = {hard} /*{self._token}*/").fetchone()
        self._pages_capped = True  # set back to the cap below, never by the BEGIN's first look
        self._freeing = True
        try:
            with self._pragma_while("secure_delete", 1):
                result = self.transaction_sync(run)
        finally:
            self._freeing = False
            self._past_cap = None  # looked at again by the next transaction
            self._sys(f"PRAGMA max_page_count = {cap} /*{self._token}*/").fetchone()
        self._truncate_wal()
        return result

    def _truncate_wal(self) -> None:
        """After a freeing transaction's commit: its WAL's frames checkpointed into the file and
        the WAL truncated, without waiting. A reader holding an older snapshot (the runtime's
        inspection reads, a backup beside it) keeps the frames it needs: the checkpoint answers
        busy at once instead of holding the loop for the busy timeout, and the next freeing
        transaction takes them. A checkpoint that fails (a full disk) leaves the commit as it
        is: the delete stands, the frames wait as well."""
        with self._pragma_while("busy_timeout", 0):
            try:
                self._sys(_TRUNCATE_WAL).fetchall()
            except sqlite3.Error:
                pass  # the frames wait for the next freeing transaction, as with a reader

    @contextmanager
    def _pragma_while(self, name: str, value: int) -> Iterator[None]:
        """The connection's setting ``name`` at ``value`` while the block runs, its own value
        back after (SQLite builds differ in defaults: Debian's zeroes freed pages always)."""
        was = self._sys(f"PRAGMA {name} /*{RUNTIME_TOKEN}*/").fetchone()[0]
        self._sys(f"PRAGMA {name} = {value} /*{RUNTIME_TOKEN}*/").fetchall()
        try:
            yield
        finally:
            self._sys(f"PRAGMA {name} = {was} /*{RUNTIME_TOKEN}*/").fetchall()

    def _pages_in_use(self) -> None:
        """At a transaction's start, BEGIN run, while the file may have more pages than ordinary
        writes may fill (the opener found ``PAST_CAP_KEY``, or a freeing transaction ran): the
        pages in use, which the commit may not grow past the limit (``_within_cap``). A failure
        here rolls the BEGIN back."""
        try:
            cap = page_limits(self.limits)[0]
            pages = self._sys(_PAGE_COUNT).fetchone()[0]
            self._past_cap = pages > cap
            if pages > cap:
                self._used_at_begin = pages - self._sys(_FREELIST_COUNT).fetchone()[0]
        except BaseException:
            if self._conn.in_transaction:
                self._sys(self._rollback)
            raise

    def _within_cap(self) -> None:
        """Before an ordinary commit on a file past the cap: SQLite hands a write the free
        pages past it, so a transaction that leaves more pages in use than it found, and more
        than the cap, is ``limit_exceeded``, as if the file could not grow. One that deletes
        (or writes in place) commits."""
        cap = page_limits(self.limits)[0]
        used = self._sys(_PAGE_COUNT).fetchone()[0] - self._sys(_FREELIST_COUNT).fetchone()[0]
        if used > cap and used > self._used_at_begin:
            raise LimitExceeded("max_database_bytes", self.limits.max_database_bytes,
                                "SQLite limit max_database_bytes="
                                f"{self.limits.max_database_bytes} exceeded")

    _pages_capped = False  # the connection's page limit set (``_cap_pages``); a class default

    def _cap_pages(self) -> None:
        """At the connection's first write transaction, right after its BEGIN: the pages
        ordinary writes may fill (``page_limits``). Set here, not at the open, where its PRAGMA
        was a read transaction of its own (about 6 us, most of it the WAL's read locks) at every
        activation, though only a write can grow the file; inside the write transaction it
        takes no lock of its own. A failure here rolls the BEGIN back."""
        try:
            self._sys(_max_pages(self.limits)).fetchone()
        except BaseException:
            if self._conn.in_transaction:
                self._sys(self._rollback)
            raise
        self._pages_capped = True

    def _begin_top(self) -> tuple[AlarmRun | None, bool]:
        """BEGIN an outermost transaction; returns the alarm run it is part of and whether its
        handler had set an alarm before it, which a rollback restores (it undoes a set_alarm)."""
        self._hooks.before_transaction()
        if self._state is _IMPLICIT:
            self._flush()
        facts = self._facts
        if facts is not None and self._begin in facts.runtime_texts:
            self._own.execute(self._begin)  # ``_sys``'s first case, written out (every transaction)
        else:
            self._sys(self._begin)
        if self._fence is not None:
            self._fenced()
        if not self._pages_capped:
            self._cap_pages()
        if self._past_cap is not False:
            self._pages_in_use()
        self._depth, self._state = 1, _EXPLICIT
        self._txn_now = self._now()
        run = self._alarm_run
        return _NOT_IN_RUN if run is None else (run, run.set_in_handler)

    def _fenced(self) -> None:
        """The slot's fence, right after BEGIN (CL-10, CL-11): a refusal rolls the BEGIN back.

        The file's data version, read first, sets this transaction's snapshot. While it and
        ``_undone`` are where they were at the last transaction that read the stamp, no other
        connection committed to the file since, and this one neither rolled back (a stamp it
        wrote then went) nor ran ``delete_all`` (which removes the stamp): the lease's epoch
        is still stamped there, and only the lease is asked (``EpochFence.serving``).
        Otherwise the fence reads the stamp in this snapshot, and writes it if it is older
        (``EpochFence.check``).

        The read's cursor is its own, so it leaves BEGIN's statement on ``_own`` as it is
        (resetting that cost about 1.2 K instructions a transaction), and is kept in a plain
        field: a descriptor's lookup cost about 1 K more. Its rows are tuples: a cursor takes its
        connection's row factory, the actor's ``sqlite3.Row``, whose making cost 0.8 K more. The
        read needs no ``_sys_mode``: ``PRAGMA data_version`` is on the allowlist, so the
        authorizer, if on, passes it when SQLite prepares it again."""
        fence = self._fence
        assert fence is not None
        try:
            reads = self._fence_reads
            if reads is None:
                reads = self._fence_reads = self._conn.cursor()
                reads.row_factory = None  # tuples (the connection's is the actor's Row)
            version = reads.execute(DATA_VERSION).fetchone()[0]
            if version == self._fence_version and self._undone == self._fence_undone:
                if not fence.serving():
                    fence.serve()  # refuses, naming slot and epoch
            else:
                fence.check(self, self._fence_version is None)
                self._fence_version, self._fence_undone = version, self._undone
        except BaseException:
            if self._conn.in_transaction:
                self._sys(self._rollback)
            raise

    def _rolled_back(self) -> None:
        """Something was undone: what was cached of the file since is read again (the runtime's
        counters, ``runtime_access``; the row counter's indexes, after a CREATE or DROP INDEX
        that did not stay)."""
        self._undone += 1
        self._schema_undone()

    def _schema_undone(self) -> None:
        """Overridden by the storage that caches what the schema says."""

    def _undo_top(self, before: tuple[AlarmRun | None, bool]) -> None:
        self._rolled_back()
        if self._conn.in_transaction:  # SQLite may have rolled back already (disk full)
            self._sys(self._rollback)
        self._reload_alarm()
        run, set_in_handler = before
        if run is not None:
            run.set_in_handler = set_in_handler

    def _commit_top(self, before: tuple[AlarmRun | None, bool]) -> None:
        """Commit the outermost transaction (``transaction_sync``'s and ``_transaction_async``'s
        one path). Every transaction of every request ends here: ``_end_explicit`` and
        ``_after_commit`` are written out, not called."""
        self._depth, self._state = 0, _NONE
        self._txn_now = self._ended_by = None
        facts = self._facts
        try:
            if self._past_cap and not self._freeing:
                self._within_cap()
            if facts is not None and self._commit in facts.runtime_texts:
                self._own.execute(self._commit)  # ``_sys``'s first case, written out
            else:
                self._sys(self._commit)
        except sqlite3.Error as e:  # a full disk refuses the commit (OPS-3): nothing was stored
            self._undo_top(before)
            raise self._map_error(e) from e
        except LimitExceeded:  # more pages in use than ordinary writes may fill
            self._undo_top(before)
            raise
        if self._alarm_dirty:
            self._alarm_dirty = False
            self._alarm_sink.committed(self._alarm)

    async def _transaction_async(self, fn: Callable[[Self], Awaitable[T]]) -> T:
        """Run ``await fn(sql)`` in one transaction that may await (RT-16): commit when it
        returns, roll back when it raises. Only ``ActorContext.transaction`` calls this, holding
        the actor's input gate around it; nested inside another it is a savepoint."""
        if self._depth:
            if self._async_open and _INSIDE.get() is not self:
                raise StorageBusy()
            return await self._savepoint_async(fn)
        before = self._begin_top()
        self._async_open = True
        inside = _INSIDE.set(self)
        try:
            result = await fn(self)
            if self._state is _ENDED:
                raise TransactionRolledBack(self._ended_by)
        except BaseException:
            self._end_explicit()
            self._undo_top(before)
            raise
        finally:
            _INSIDE.reset(inside)
            self._async_open = False
        self._commit_top(before)
        return result

    def _refuse_outsider(self) -> None:
        """Raise ``StorageBusy`` in a task outside the open ``ctx.transaction`` (one already
        under way when it began): a statement of its, read or write, would see or change what
        that transaction has not committed (review s23 R7, R9)."""
        if _INSIDE.get() is not self:
            raise StorageBusy()

    @property
    def async_open(self) -> bool:
        """A ``ctx.transaction`` (RT-16) is open on this connection: a write from a task outside
        it is refused (``StorageBusy``)."""
        return self._async_open

    async def _savepoint_async(self, fn: Callable[[Self], Awaitable[T]]) -> T:
        name = f"_ma_sp{self._depth}"
        self._sys(f"SAVEPOINT {name} /*{self._token}*/")
        self._depth += 1
        try:
            result = await fn(self)
            if self._state is _ENDED:
                raise TransactionRolledBack(self._ended_by)
        except BaseException:
            self._depth -= 1
            self._rolled_back()
            if self._conn.in_transaction:
                self._sys(f"ROLLBACK TO {name} /*{self._token}*/")
                self._sys(f"RELEASE {name} /*{self._token}*/")
            if self._alarm_dirty:
                self._read_alarm()
            raise
        self._depth -= 1
        self._sys(f"RELEASE {name} /*{self._token}*/")
        return result

    def _end_explicit(self) -> None:
        self._depth, self._state = 0, _NONE
        self._txn_now = None
        self._ended_by = None

    def _call(self, fn: Callable[[Self], T]) -> T:
        result = fn(self)
        if isinstance(result, CoroutineType):
            result.close()
            raise TypeError(_NOT_SYNCHRONOUS)
        return result

    def _savepoint(self, fn: Callable[[Self], T]) -> T:
        name = f"_ma_sp{self._depth}"
        self._sys(f"SAVEPOINT {name} /*{self._token}*/")
        self._depth += 1
        run = self._alarm_run
        set_in_handler = run is not None and run.set_in_handler
        try:
            result = self._call(fn)
            if self._state is _ENDED:  # the whole transaction is gone, not just this part
                raise TransactionRolledBack(self._ended_by)
        except BaseException:
            self._depth -= 1
            self._rolled_back()
            if self._conn.in_transaction:
                self._sys(f"ROLLBACK TO {name} /*{self._token}*/")
                self._sys(f"RELEASE {name} /*{self._token}*/")
            if self._alarm_dirty:  # the savepoint may have undone an alarm change; the outer
                self._read_alarm()  # transaction still reports whatever it ends with
            if run is not None:
                run.set_in_handler = set_in_handler
            raise
        self._depth -= 1
        self._sys(f"RELEASE {name} /*{self._token}*/")
        return result

    # Writes outside transaction_sync coalesce into one implicit transaction that commits at the
    # next turn of the event loop, or earlier when a reply is about to leave (the output gate).
    def _open_implicit(self) -> None:
        self._hooks.before_transaction()  # RPC-5 holds for implicit transactions too
        self._sys(self._begin)
        if self._fence is not None:
            self._fenced()
        if not self._pages_capped:
            self._cap_pages()
        if self._past_cap is not False:
            self._pages_in_use()
        self._state = _IMPLICIT
        self._gen += 1
        if len(self._lost) > 1000:  # only the transactions of requests still running matter
            self._lost = {g for g in self._lost if g > self._gen - 1000}
        try:
            asyncio.get_running_loop().call_soon(self._flush)
        except RuntimeError:  # no loop: the caller must flush (the runtime always does)
            pass

    def _flush(self) -> None:
        """Commit the implicit transaction, if one is open (the output gate)."""
        if self._state is not _IMPLICIT:
            return
        self._state = _NONE
        if not self._conn.in_transaction:  # SQLite rolled it back itself
            self._rolled_back()
            self._lose()
            self._reload_alarm()
            return
        try:
            if self._past_cap:
                self._within_cap()
            self._sys(self._commit)
        except (sqlite3.Error, LimitExceeded) as e:
            self._lose()
            self._rolled_back()
            if self._conn.in_transaction:
                self._sys(self._rollback)
            self._reload_alarm()
            if isinstance(e, LimitExceeded):
                raise
            raise self._map_error(e) from e
        self._after_commit()

    def _lose(self) -> None:
        """The current implicit transaction was rolled back."""
        lost = self._lost
        if isinstance(lost, set):
            lost.add(self._gen)
        else:  # the shared empty one (``_NONE_LOST``): an empty set is 216 B an open actor
            self._lost = {self._gen}

    def _writes_lost(self, generations: Sequence[int]) -> bool:
        return any(g in self._lost for g in generations)

    def _after_commit(self) -> None:
        if self._alarm_dirty:
            self._alarm_dirty = False
            self._alarm_sink.committed(self._alarm)

    def _reload_alarm(self) -> None:
        """After a rollback: the stored alarm is again what the file says."""
        if self._alarm_dirty:
            self._alarm_dirty = False
            self._read_alarm()

    def _read_alarm(self) -> None:
        # The token in the text keeps user SQL off this cached statement.
        try:
            row = self._sys(self._alarm_sql).fetchone()
        except sqlite3.OperationalError as e:
            if e.sqlite_errorcode != sqlite3.SQLITE_ERROR:  # locked, I/O: as at open, retryable
                raise StorageUnavailable(type(e).__name__) from e
            raise StorageCorrupt(type(e).__name__) from e  # the runtime's table is gone: damage
        except sqlite3.DatabaseError as e:
            raise StorageCorrupt(type(e).__name__) from e
        self._alarm = row[0] if row else None
        self._alarm_unread = False
