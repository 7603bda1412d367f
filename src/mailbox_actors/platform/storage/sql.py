"""One actor's SQLite file (RT-2, RT-5, RT-6, RT-7, AL-1): synchronous SQL, transactions, KV, alarm.

SQL runs synchronously on the event loop thread, as it does in a Durable Object: a transaction never
interleaves with anything and costs no thread hop. User SQL is screened by an authorizer (workerd
does the same): transaction control, ATTACH, VACUUM, PRAGMA writes and the reserved ``_ma_``/``_cf_``
tables are refused (the rules are ``sql_screen``'s; the types ``sql_types``'s). This module never
decides what an actor does; it only stores. Opening a file is ``sql_open``; the key-value API is
``kv``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import secrets
import sqlite3
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

from mailbox_actors.platform.storage.counting import RowCounter
from mailbox_actors.platform.storage.kv import KvStorage
from mailbox_actors.platform.storage.screen import changes_schema, classify, denial, map_error
from mailbox_actors.platform.storage.script import split_statements
from mailbox_actors.platform.storage.types import (
    AlarmSink,
    BufferedRows,
    Durability,
    Limits,
    NoAlarmSink,
    SqlCursor,
    StatementRefused,
    StorageCorrupt,
    TransactionRolledBack,
)
from mailbox_actors.platform.storage.wipe import is_empty, remove_files, wipe_statements
from mailbox_actors.wire.errors import LimitExceeded

__all__ = [
    "AlarmSink",
    "Durability",
    "Limits",
    "SqlCursor",
    "SqlStorage",
    "StatementRefused",
    "StorageCorrupt",
    "TransactionRolledBack",
    "implicit_writes",
]

T = TypeVar("T")

# Set by the host for each request and alarm run: the implicit transactions its writes went into,
# so it is not answered as a success when SQLite rolled one of them back with another's statement.
implicit_writes: ContextVar[list[int] | None] = ContextVar("implicit_writes", default=None)

RUNTIME_SCHEMA_VERSION = 2  # 2: the runtime's keys in _ma_meta, not meta (RT-14)


class SqlStorage:
    """An actor's storage: ``exec``, ``transaction_sync``, ``kv``, and the one alarm."""

    def __init__(self, conn: sqlite3.Connection, path: Path, limits: Limits,
                 now_ms: Callable[[], int]) -> None:
        self._conn = conn
        self.path = path
        self.limits = limits
        self._now = now_ms
        self._token = secrets.token_hex(8)  # makes runtime statement texts unguessable (see _sys)
        self._sys_mode = False
        self._deny_reason: str | None = None
        self._depth = 0
        self._implicit = False
        self._txn_now: int | None = None
        # query text -> (its statements, may write?, changes the schema?), after screening
        self._plans: dict[str, tuple[tuple[str, ...], bool, bool]] = {}
        self._alarm: int | None = None
        self._alarm_dirty = False
        self._aborted: BaseException | None = None  # SQLite ended the explicit transaction: why
        self._gen = 0  # the current (or last) implicit transaction
        self._lost: set[int] = set()  # implicit transactions SQLite rolled back
        self.alarm_sink: AlarmSink = NoAlarmSink()
        self.alarm_hidden = False  # True while the alarm handler runs: get_alarm() is None
        self.alarm_set_in_handler = False
        self.before_transaction: Callable[[], None] | None = None  # deadline check (RPC-5)
        self.kv = KvStorage(self)
        self.wiped = False  # delete_all ran on this connection
        self._counter = RowCounter(lambda q, p: self._sys(q, p), self._token)
        self._begin = f"BEGIN /*{self._token}*/"
        self._commit = f"COMMIT /*{self._token}*/"
        self._rollback = f"ROLLBACK /*{self._token}*/"
        self._alarm_sql = f"SELECT at_ms FROM _ma_alarm WHERE id = 1 /*{self._token}*/"
        conn.set_authorizer(self._authorize)
        try:
            self._read_alarm()  # the token in the text keeps user SQL off this cached statement
        except sqlite3.DatabaseError as e:
            raise StorageCorrupt(type(e).__name__) from e

    # ---- screening -------------------------------------------------------------------------

    def _authorize(self, action: int, a1: str | None, a2: str | None, db: str | None,
                   trigger: str | None) -> int:
        if self._sys_mode and trigger is None:
            # A trigger is always user code, even when a runtime statement fires it.
            return sqlite3.SQLITE_OK
        if trigger is None:
            self._counter.note(action, a1, a2)
        reason = denial(action, a1, a2)
        if reason is None:
            return sqlite3.SQLITE_OK
        self._deny_reason = reason
        return sqlite3.SQLITE_DENY

    def _map_error(self, e: sqlite3.Error) -> Exception:
        denied, self._deny_reason = self._deny_reason, None
        return map_error(e, self.limits, denied, self._near_size_limit)

    def _near_size_limit(self) -> bool:
        """Whether the file is within reach of max_database_bytes (the last sixteenth, or the
        last 64 MiB): then "full" is the actor's own limit, otherwise the disk's (OPS-3)."""
        try:
            used = self.database_size
        except sqlite3.Error:
            return False
        limit = self.limits.max_database_bytes
        return used >= limit - max(64 << 20, limit // 16)

    # ---- SQL API (RT-6) --------------------------------------------------------------------

    def exec(self, query: str, *params: Any) -> SqlCursor:
        """Run a statement, or a script of ``;``-separated statements, with ``?`` parameters
        (bound to the last statement); returns the last statement's cursor. Synchronous.

        A script that writes runs all or nothing (RT-13): a statement refused or failing anywhere
        in it leaves nothing of it behind.
        """
        plan = self._plans.get(query)
        if plan is None:
            plan = self._plan(query)
        statements, writes, ddl = plan
        if len(params) > self.limits.max_bound_parameters:
            raise LimitExceeded("max_bound_parameters", self.limits.max_bound_parameters,
                                f"{len(params)} bound parameters; the limit is "
                                f"{self.limits.max_bound_parameters}")
        if writes:
            self._before_write()
        if len(statements) == 1:
            return self._exec_one(statements[0], params, ddl)
        return self._exec_script(statements, writes, ddl, params)

    def _exec_one(self, query: str, params: Sequence[Any], ddl: bool,
                  buffered: bool = False) -> SqlCursor:
        conn = self._conn
        counter = self._counter
        record = counter.needs_shape(query)
        if record:
            counter.start_recording()
        before = conn.total_changes
        ok = False
        try:
            cur = self._run(lambda: conn.execute(query, params))
            ok = True
        finally:
            if record:
                counter.stop_recording(query, keep=ok)
            if ddl:
                counter.schema_changed()
        written = counter.written(query, conn.total_changes - before, cur.rowcount)
        scanned = functools.partial(counter.scanned, query)
        if buffered:
            rows = self._run(lambda: BufferedRows(cur))
            read = scanned(True)  # its scan is over: count it now, while its text is prepared
            return SqlCursor(rows, written, lambda _done: read)
        return SqlCursor(cur, written, scanned)

    def _exec_script(self, statements: tuple[str, ...], writes: bool, ddl: bool,
                     params: Sequence[Any]) -> SqlCursor:
        conn = self._conn
        if writes:
            self._sys(f"SAVEPOINT _ma_script /*{self._token}*/")
        try:
            for stmt in statements[:-1]:
                try:
                    self._run(lambda stmt=stmt: conn.execute(stmt))  # type: ignore[misc]
                except StatementRefused as e:
                    if isinstance(e.__cause__, sqlite3.ProgrammingError):  # it has parameters
                        raise StatementRefused(
                            "when one exec runs several statements, only the last may have "
                            "parameters") from e
                    raise
            cur = self._exec_one(statements[-1], params, ddl, buffered=writes)
        except BaseException:
            if writes and conn.in_transaction:
                self._sys(f"ROLLBACK TO _ma_script /*{self._token}*/")
                self._sys(f"RELEASE _ma_script /*{self._token}*/")
            if ddl:
                self._counter.schema_changed()
            raise
        if writes:
            self._sys(f"RELEASE _ma_script /*{self._token}*/")
        return cur

    def _plan(self, query: str) -> tuple[tuple[str, ...], bool, bool]:
        """Split and screen a query once (``script``, ``screen``): its statements, whether any
        may write, whether any changes the schema. Raises for a refused statement anywhere."""
        if self._token in query:
            # The text of a runtime statement: its cached, pre-authorised copy must stay the
            # runtime's alone.
            raise StatementRefused("this statement belongs to the runtime")
        statements = split_statements(query)
        if len(statements) > 1 and len(query.encode()) > self.limits.max_statement_bytes:
            raise LimitExceeded("max_statement_bytes", self.limits.max_statement_bytes,
                                "SQL script longer than the statement limit")
        writes = ddl = False
        for stmt in statements:
            writes = classify(stmt, self.limits) or writes
            ddl = ddl or changes_schema(stmt)
        plan = (tuple(statements), writes, ddl)
        if len(self._plans) < 4096:
            self._plans[query] = plan
        return plan

    def _before_write(self) -> None:
        """A write is about to run: refuse it inside a transaction SQLite already ended; outside
        transaction_sync, join (or open) the implicit transaction and note it for the request."""
        if self._depth:
            if self._aborted is not None:
                raise TransactionRolledBack(self._aborted)
            return
        if not self._implicit:
            self._open_implicit()
        writes = implicit_writes.get()
        if writes is not None and (not writes or writes[-1] != self._gen):
            writes.append(self._gen)

    def _run(self, statement: Callable[[], T]) -> T:
        """Run one statement; if SQLite ended the whole transaction with it, remember that."""
        if self._depth and self._aborted is not None:
            raise TransactionRolledBack(self._aborted)
        try:
            return statement()
        except sqlite3.Error as e:
            mapped = self._map_error(e)
            if not self._conn.in_transaction:  # disk full, OR ROLLBACK, RAISE(ROLLBACK)
                if self._depth:
                    self._aborted = mapped
                elif self._implicit:
                    self._implicit = False
                    self._lost.add(self._gen)
                    self._reload_alarm()
            raise mapped from e

    def check_writes(self, gens: Sequence[int]) -> None:
        """Raise if SQLite rolled back an implicit transaction these writes went into (the output
        gate: never acknowledge a write that was not stored)."""
        if any(g in self._lost for g in gens):
            raise TransactionRolledBack(None)

    @property
    def database_size(self) -> int:
        """Bytes the database uses: (page_count - freelist_count) * page_size, as workerd counts."""
        pages = self._sys("PRAGMA page_count").fetchone()[0] - \
            self._sys("PRAGMA freelist_count").fetchone()[0]
        size = self._sys("PRAGMA page_size").fetchone()[0]
        return int(pages * size)

    def file_setting(self, pragma: str) -> Any:
        """The file's journal_mode or synchronous, which actor SQL may not read (RT-13): for the
        runtime, operators and tests."""
        if pragma not in ("journal_mode", "synchronous"):
            raise ValueError(f"file_setting reads journal_mode or synchronous, not {pragma!r}")
        return self._sys(f"PRAGMA {pragma}").fetchone()[0]

    def now_ms(self) -> int:
        """The clock, frozen for the length of a transaction (RT-12)."""
        return self._txn_now if self._txn_now is not None else self._now()

    @property
    def in_transaction(self) -> bool:
        return self._depth > 0

    def transaction_sync(self, fn: Callable[[SqlStorage], T]) -> T:
        """Run ``fn(sql)`` in a transaction: commit when it returns, roll back when it raises.

        Nested calls become savepoints. ``fn`` must be synchronous.
        """
        if inspect.iscoroutinefunction(fn):
            raise TypeError("transaction_sync takes a synchronous function, not a coroutine "
                            "function: no await may happen inside a transaction")
        if self._depth:
            return self._savepoint(fn)
        if self.before_transaction is not None:
            self.before_transaction()
        if self._implicit:
            self.flush()
        self._sys(self._begin)
        self._depth = 1
        self._txn_now = self._now()
        self._aborted = None
        set_in_handler = self.alarm_set_in_handler  # a rollback undoes a set_alarm, and this
        try:
            result = self._call(fn)
            if self._aborted is not None:  # fn went on after SQLite ended the transaction
                raise TransactionRolledBack(self._aborted)
        except BaseException:
            self._depth = 0
            self._txn_now = None
            self._aborted = None
            if self._conn.in_transaction:  # SQLite may have rolled back already (disk full)
                self._sys(self._rollback)
            self._reload_alarm()
            self.alarm_set_in_handler = set_in_handler
            raise
        self._depth = 0
        self._txn_now = None
        try:
            self._sys(self._commit)
        except sqlite3.Error as e:  # a full disk refuses the commit (OPS-3): nothing was stored
            if self._conn.in_transaction:
                self._sys(self._rollback)
            self._reload_alarm()
            self.alarm_set_in_handler = set_in_handler
            raise self._map_error(e) from e
        self._after_commit()
        return result

    def _call(self, fn: Callable[[SqlStorage], T]) -> T:
        result = fn(self)
        if inspect.iscoroutine(result):
            result.close()
            raise TypeError("transaction_sync's function returned a coroutine; it must be "
                            "synchronous")
        return result

    def _savepoint(self, fn: Callable[[SqlStorage], T]) -> T:
        name = f"_ma_sp{self._depth}"
        self._sys(f"SAVEPOINT {name} /*{self._token}*/")
        self._depth += 1
        set_in_handler = self.alarm_set_in_handler
        try:
            result = self._call(fn)
            if self._aborted is not None:  # the whole transaction is gone, not just this part
                raise TransactionRolledBack(self._aborted)
        except BaseException:
            self._depth -= 1
            if self._conn.in_transaction:
                self._sys(f"ROLLBACK TO {name} /*{self._token}*/")
                self._sys(f"RELEASE {name} /*{self._token}*/")
            if self._alarm_dirty:  # the savepoint may have undone an alarm change; the outer
                self._read_alarm()  # transaction still reports whatever it ends with
            self.alarm_set_in_handler = set_in_handler
            raise
        self._depth -= 1
        self._sys(f"RELEASE {name} /*{self._token}*/")
        return result

    # Writes outside transaction_sync coalesce into one implicit transaction that commits at the
    # next turn of the event loop, or earlier when a reply is about to leave (the output gate).
    def _open_implicit(self) -> None:
        if self.before_transaction is not None:
            self.before_transaction()  # RPC-5 holds for implicit transactions too
        self._sys(self._begin)
        self._implicit = True
        self._gen += 1
        if len(self._lost) > 1000:  # only the transactions of requests still running matter
            self._lost = {g for g in self._lost if g > self._gen - 1000}
        try:
            asyncio.get_running_loop().call_soon(self.flush)
        except RuntimeError:  # no loop: the caller must flush (the runtime always does)
            pass

    def flush(self) -> None:
        """Commit the implicit transaction, if one is open (the output gate)."""
        if self._implicit and self._depth == 0:
            self._implicit = False
            if not self._conn.in_transaction:  # SQLite rolled it back itself
                self._lost.add(self._gen)
                self._reload_alarm()
                return
            try:
                self._sys(self._commit)
            except sqlite3.Error as e:
                self._lost.add(self._gen)
                if self._conn.in_transaction:
                    self._sys(self._rollback)
                self._reload_alarm()
                raise self._map_error(e) from e
            self._after_commit()

    def _after_commit(self) -> None:
        if self._alarm_dirty:
            self._alarm_dirty = False
            self.alarm_sink.committed(self._alarm)

    def _reload_alarm(self) -> None:
        """After a rollback: the stored alarm is again what the file says."""
        if self._alarm_dirty:
            self._alarm_dirty = False
            self._read_alarm()

    def _read_alarm(self) -> None:
        row = self._sys(self._alarm_sql).fetchone()
        self._alarm = row[0] if row else None

    def _sys(self, query: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """Runtime-owned SQL, exempt from screening. Texts carry the connection's token so user
        SQL can never hit their cached, pre-authorised statements."""
        self._sys_mode = True
        try:
            return self._conn.execute(query, params)
        finally:
            self._sys_mode = False

    def sys_exec(self, query: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """For the runtime's own tables (meta, migrations); never exposed to actor code."""
        if not query.lstrip().upper().startswith(("SELECT", "PRAGMA")):
            self._before_write()
        return self._run(lambda: self._sys(f"{query} /*{self._token}*/", params))

    # ---- the alarm (AL-1) ------------------------------------------------------------------

    def get_alarm(self) -> int | None:
        """The alarm time in Unix ms, or None. None while the alarm handler runs (AL-3)."""
        return None if self.alarm_hidden else self._alarm

    def set_alarm(self, at_ms: int) -> None:
        """Set the actor's one alarm; it commits with the surrounding transaction."""
        if isinstance(at_ms, bool) or not isinstance(at_ms, int) or at_ms < 0:
            raise TypeError("set_alarm takes Unix milliseconds as a non-negative int")
        self._write_alarm(at_ms)

    def delete_alarm(self) -> None:
        self._write_alarm(None)

    def stored_alarm(self) -> int | None:
        """The alarm as stored, even while the handler runs (for the runtime)."""
        return self._alarm

    def _write_alarm(self, at_ms: int | None) -> None:
        self._before_write()
        if at_ms is None:
            self._run(lambda: self._sys(f"DELETE FROM _ma_alarm WHERE id = 1 /*{self._token}*/"))
        else:
            # Earlier-than-indexed alarms reach the node's index before this commits (AL-4).
            self.alarm_sink.before_commit(at_ms)
            self._run(lambda: self._sys(f"INSERT OR REPLACE INTO _ma_alarm (id, at_ms) VALUES "
                                        f"(1, ?) /*{self._token}*/", (at_ms,)))
        if self.alarm_hidden:
            self.alarm_set_in_handler = True
        self._alarm = at_ms
        self._alarm_dirty = True

    # ---- lifetime --------------------------------------------------------------------------

    def delete_all(self) -> None:
        """Remove everything the actor stored, its alarm and the runtime's record of it (RT-15,
        ``wipe``); the file goes when the storage closes, if nothing was written since."""
        def wipe(_tx: SqlStorage) -> None:
            for stmt in wipe_statements(lambda q: self._sys(f"{q} /*{self._token}*/")):
                self._run(lambda stmt=stmt: self._sys(f"{stmt} /*{self._token}*/"))  # type: ignore[misc]
            self._write_alarm(None)
        self.transaction_sync(wipe)
        self._counter.schema_changed()
        self._plans.clear()
        self.wiped = True

    def close(self) -> None:
        """Commit anything pending and close the file (removing it after a ``delete_all`` that
        nothing was written after)."""
        remove = False
        try:
            if self._depth == 0:
                self.flush()
                remove = self.wiped and is_empty(lambda q: self._sys(f"{q} /*{self._token}*/"))
        finally:
            self._conn.close()
        if remove:
            remove_files(self.path)
