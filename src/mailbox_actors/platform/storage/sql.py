"""One actor's SQLite file as its code sees it (RT-2, RT-5, RT-6, RT-7, RT-13, AL-1): synchronous
SQL (a statement or a ``;``-separated script), transactions, KV and the one alarm.

SQL runs synchronously on the event loop thread, as it does in a Durable Object: a transaction never
interleaves with anything and costs no thread hop. User SQL is screened as workerd screens it
(``connection``, ``screen``, ``allowlist``); transactions are ``transactions``'. This module never
decides what an actor does; it only stores. The runtime's own reads and writes (its ``_ma_meta``
keys, the output gate, closing) go through ``RuntimeStorage`` (``runtime_access``), never through a
name actor code can reach; opening a file is ``opening``; the key-value API is ``kv``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mailbox_actors.platform.storage.connection import RUNTIME_TOKEN
from mailbox_actors.platform.storage.cursor import BufferedRows, SqlCursor
from mailbox_actors.platform.storage.errors import (
    StatementRefused,
    StorageCorrupt,
    StorageWriteFailed,
    TransactionRolledBack,
)
from mailbox_actors.platform.storage.hooks import (
    AlarmSink,
    TransactionHooks,
)
from mailbox_actors.platform.storage.known import MAX_TEXT_LEN, MAX_TEXTS, SOURCE_KEY, SchemaFacts
from mailbox_actors.platform.storage.kv import KvStorage
from mailbox_actors.platform.storage.limits import Durability, Limits
from mailbox_actors.platform.storage.transactions import AlarmRun, Transactions, TxState
from mailbox_actors.platform.storage.wipe import wipe_statements
from mailbox_actors.wire.errors import LimitExceeded

# Python 3.11's ``EnumType`` defines ``__getattr__``, so reading a member as ``Enum.MEMBER`` in a
# function takes the slow attribute path (about 850 instructions, against a global's few dozen;
# ten such reads were 8.5 K instructions an alarm of a burst). Hot paths read these names, as in
# ``transactions``.
_ENDED, _EXPLICIT = TxState.ENDED, TxState.EXPLICIT

__all__ = ["RUNTIME_SCHEMA_VERSION", "AlarmRun", "Durability", "Limits", "SqlCursor", "SqlStorage",
           "StatementRefused", "StorageCorrupt", "StorageWriteFailed", "TransactionRolledBack",
           "TxState"]

# 2: the runtime's keys in _ma_meta, not meta (RT-14); 3: the outbox is the runtime's (opening)
RUNTIME_SCHEMA_VERSION = 3
_DELETE_ALARM = f"DELETE FROM _ma_alarm WHERE id = 1 /*{RUNTIME_TOKEN}*/"
_INSERT_ALARM = f"INSERT OR REPLACE INTO _ma_alarm (id, at_ms) VALUES (1, ?) /*{RUNTIME_TOKEN}*/"
_MOVE_ALARM = f"UPDATE _ma_alarm SET at_ms = ? WHERE id = 1 /*{RUNTIME_TOKEN}*/"


class SqlStorage(Transactions):
    """An actor's storage: ``exec``, ``transaction_sync``, ``kv``, and the one alarm."""

    __slots__ = ("_kv", "keeps_wal", "made", "upgraded", "wiped")  # ``ScreenedConnection``'s why

    def __init__(self, conn: sqlite3.Connection, path: str | Path, limits: Limits,
                 now_ms: Callable[[], int], hooks: TransactionHooks | None = None,
                 alarm_sink: AlarmSink | None = None, alarm: tuple[int | None] | None = None,
                 facts: SchemaFacts | None = None) -> None:
        """``alarm``: the stored alarm as the opener read it (None: read at its first use).
        ``facts``: the file's schema is known to be its migrations' alone (``known``), so the
        authorizer is never set on this connection."""
        super().__init__(conn, path, limits, facts, now_ms, hooks, alarm_sink, alarm)
        # this API's
        self._kv: KvStorage | None = None
        self.wiped = False  # delete_all ran on this connection
        self.keeps_wal = False  # closing leaves the log for the next open (``handle``)
        self.made = False  # this open made the file: its schema is the runtime's alone (``known``)
        self.upgraded = False  # this open brought the file from an earlier runtime schema

    @property
    def kv(self) -> KvStorage:
        """The key-value API over this file (made at its first use)."""
        kv = self._kv
        if kv is None:
            kv = self._kv = KvStorage(self._kv_exec, self.transaction_sync,
                                        self.limits.max_value_bytes, self.delete_all)
        return kv

    def know_schema(self, facts: SchemaFacts | None) -> None:
        """The file's schema is its class's migrations' alone, the one ``facts`` describe
        (``known``; the activation decides it from ``SOURCE_KEY`` after the migrations)."""
        self._know(facts)

    # ---- SQL API (RT-6, RT-13) -------------------------------------------------------------

    def flush(self) -> None:
        """Commit the writes made outside ``transaction_sync`` now, instead of at the next turn
        of the event loop (before a PRAGMA that SQLite refuses inside a transaction)."""
        self._flush()

    def exec(self, query: str, *params: Any) -> SqlCursor:
        """Run a statement, or a script of ``;``-separated statements, with ``?`` parameters
        (bound to the last statement); returns the last statement's cursor. Synchronous.

        A script that writes runs all or nothing (RT-13): a statement refused or failing anywhere
        in it leaves nothing of it behind.
        """
        if self._async_open:  # a ctx.transaction: this task's, or refused (StorageBusy)
            self._refuse_outsider()
        plan = self._plans.get(query)
        if plan is None:
            plan = self._plan(query)
        statements, writes, ddl = plan
        if len(params) > self.limits.max_bound_parameters:
            raise LimitExceeded("max_bound_parameters", self.limits.max_bound_parameters,
                                f"{len(params)} bound parameters; the limit is "
                                f"{self.limits.max_bound_parameters}")
        if writes and (self._state is not _EXPLICIT or self._async_open):
            self._before_write()  # in transaction_sync: nothing to do; in ctx.transaction: whose
        if len(statements) > 1:
            return self._exec_script(statements, writes, ddl, params)
        query = statements[0]
        per_row = self._counter.index_rows.get(query)
        if per_row is None or ddl:
            facts = self._facts
            known = None if facts is None or ddl else facts.statements.get(query)
            if known is None:
                return self._exec_one(query, params, ddl, returning_writes=writes)
            # Prepared on a file of this schema before (``known``): what it writes and its
            # index count too, so its first run here takes this path, with no authorizer.
            per_row = known[1]
            self._counter.adopt(query, known[0], per_row)
        # A statement run before (its write shape and index count known): ``_run`` inlined, the
        # rows written from the cached count, the rows read only when asked for (``SqlCursor``).
        if self._state is _ENDED:
            raise TransactionRolledBack(self._ended_by)
        conn = self._conn
        before = conn.total_changes
        try:
            cur = conn.execute(query, params)
        except sqlite3.Error as e:
            raise self._failed(e) from e
        if writes and cur.description is not None:  # a write with RETURNING: see _exec_one
            return self._read_out(cur, query, before, per_row)
        changed = conn.total_changes - before
        rowcount = cur.rowcount
        return SqlCursor(cur, changed + rowcount * per_row if rowcount > 0 else changed,
                         self._counter, query)

    def _read_out(self, cur: sqlite3.Cursor, query: str, before: int, per_row: int) -> SqlCursor:
        """The statement read out at once, then counted: a write with RETURNING (SQLite makes
        every change at its first step but counts them, changes and rowcount, only when the
        statement finishes, so rows_written would read 0 on a cursor left open: RT-13), or a
        script's last statement (its savepoint is released after). Its scan is over: rows read
        are counted now, while its text is prepared."""
        rows = self._run(lambda: BufferedRows(cur))
        changed = self._conn.total_changes - before
        written = changed + rows.rowcount * per_row if rows.rowcount > 0 else changed
        return SqlCursor(rows, written, read=self._counter.scanned(query, True))

    def _exec_one(self, query: str, params: Sequence[Any], ddl: bool,
                  buffered: bool = False, returning_writes: bool = False) -> SqlCursor:
        """A statement whose write shape is not known yet (``counting``), one that changes the
        schema, or a script's last: SQLite's authorizer records what it writes while it is
        prepared, and its index count is worked out."""
        conn = self._conn
        counter = self._counter
        facts = self._facts
        if ddl:
            self._schema_changing()
        elif facts is not None:
            known = facts.statements.get(query)
            if known is not None:  # prepared on a file of this schema before: what it writes too
                counter.adopt(query, *known)
                before = conn.total_changes
                cur = self._run(lambda: conn.execute(query, params))  # no authorizer: _know
                return self._counted(cur, query, before, known[1], buffered, returning_writes)
        record = counter.needs_shape(query)
        if record:
            counter.start_recording()
        before = conn.total_changes
        ok = False
        try:
            if facts is not None and not ddl:
                cur = self._run(lambda: self._screened(lambda: conn.execute(query, params)))
            else:
                cur = self._run(lambda: conn.execute(query, params))
            ok = True
        finally:
            if record:
                counter.stop_recording(query, keep=ok)
            if ddl:
                counter.schema_changed()
        # Worked out now for every statement, a SELECT's 0 too (``written`` asks only when rows
        # changed): once known, the statement's next run takes exec's short path.
        per_row = counter.per_row(query)
        if facts is not None and facts is self._facts and len(query) < MAX_TEXT_LEN \
                and len(facts.statements) < MAX_TEXTS:
            shape = counter.known_shape(query)
            if shape is not None:  # prepared without a denial: so it is on every such file
                facts.statements[query] = (shape, per_row)
        return self._counted(cur, query, before, per_row, buffered, returning_writes)

    def _counted(self, cur: sqlite3.Cursor, query: str, before: int, per_row: int,
                 buffered: bool, returning_writes: bool) -> SqlCursor:
        conn = self._conn
        if buffered or (returning_writes and cur.description is not None):
            return self._read_out(cur, query, before, per_row)
        changed = conn.total_changes - before
        rowcount = cur.rowcount
        return SqlCursor(cur, changed + rowcount * per_row if rowcount > 0 else changed,
                         self._counter, query)

    def _schema_changing(self) -> None:
        """Actor SQL is about to change the schema: the file is no longer its migrations' alone
        (``known``); the record of that goes in the change's own transaction (a write has
        joined or opened one), so a rollback keeps both as they were. The key goes whether or
        not this connection still uses the schema's facts: one that stopped (after a script, or
        too many new texts) would otherwise leave the file claiming a schema it no longer has,
        and its next activation would run the texts learnt elsewhere unscreened (review)."""
        self._forget_schema()
        self._sys(f"DELETE FROM _ma_meta WHERE k = '{SOURCE_KEY}' /*{self._token}*/")

    def _exec_script(self, statements: tuple[str, ...], writes: bool, ddl: bool,
                     params: Sequence[Any]) -> SqlCursor:
        conn = self._conn
        if writes:
            self._sys(f"SAVEPOINT _ma_script /*{self._token}*/")
            if ddl:
                self._schema_changing()
        # Its statements but the last run here as they are: with the authorizer (``known``).
        self._forget_schema()
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

    def _kv_exec(self, query: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """``_runtime_exec`` for the KV API (the actor's own reads and writes): refused, as
        ``exec``'s statements are, to a task outside an open ctx.transaction."""
        if self._async_open:
            self._refuse_outsider()
        return self._runtime_exec(query, params)

    def _runtime_exec(self, query: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """A statement on the runtime's own tables (meta, KV), in the actor's transactions; only
        ``kv`` and ``RuntimeStorage`` call it."""
        if not query.lstrip().upper().startswith(("SELECT", "PRAGMA")):
            self._before_write()
        return self._run(lambda: self._sys(f"{query} /*{self._token}*/", params))

    # ---- the alarm (AL-1) ------------------------------------------------------------------

    def get_alarm(self) -> int | None:
        """The alarm time in Unix ms, or None. Inside the alarm handler: None until the handler
        sets (or deletes) the alarm, then what it set (AL-3, AL-7, as workerd's deferred delete)."""
        run = self._alarm_run
        return None if run is not None and not run.set_in_handler else self._stored()

    def set_alarm(self, at_ms: int) -> None:
        """Set the actor's one alarm; it commits with the surrounding transaction."""
        if type(at_ms) is not int or at_ms < 0:
            if isinstance(at_ms, bool) or not isinstance(at_ms, int) or at_ms < 0:
                raise TypeError("set_alarm takes Unix milliseconds as a non-negative int")
        now = self._txn_now  # ``now_ms``, written out
        if now is None:
            now = self._now()
        self._write_alarm(at_ms if at_ms > now else now)  # a time in the past stores now (AL-7)

    def delete_alarm(self) -> None:
        self._write_alarm(None)

    def _write_alarm(self, at_ms: int | None) -> None:
        if self._state is not _EXPLICIT or self._async_open:  # in transaction_sync: nothing
            self._before_write()
        if at_ms is None:
            self._run_sys(_DELETE_ALARM, ())
        else:
            # Earlier-than-indexed alarms reach the node's index before this commits (AL-4).
            self._alarm_sink.before_commit(at_ms)
            # The row is there while an alarm is known stored (in this transaction too: a
            # rollback reads it again), and usually when none was read yet (a request's
            # activation does not read it): moved by an UPDATE, whose text is then prepared on
            # this connection for the alarm's own re-arm too (REPLACE's prepare costs ~26 K
            # instructions more, its run the same); inserted when no row is known or found.
            if (self._alarm is None and not self._alarm_unread) or \
                    self._run_sys(_MOVE_ALARM, (at_ms,)).rowcount != 1:
                self._run_sys(_INSERT_ALARM, (at_ms,))
        if self._alarm_run is not None:
            self._alarm_run.set_in_handler = True
        self._alarm, self._alarm_unread = at_ms, False
        self._alarm_dirty = True

    # ---- deleting everything (RT-15) -------------------------------------------------------

    def _schema_undone(self) -> None:
        self._counter.schema_changed()  # a rolled-back CREATE/DROP INDEX: count indexes again

    def delete_all(self) -> None:
        """Remove everything the actor stored, its alarm and the runtime's record of it (RT-15,
        ``wipe``); the file goes when the storage closes, if nothing was written since."""
        self._forget_schema()  # its DROPs are screened; the key goes with the rest of _ma_meta

        def wipe(_tx: SqlStorage) -> None:
            for stmt in wipe_statements(lambda q: self._sys(f"{q} /*{self._token}*/")):
                self._run(lambda stmt=stmt: self._sys(f"{stmt} /*{self._token}*/"))  # type: ignore[misc]
            self._write_alarm(None)
        self.transaction_sync(wipe)
        self._undone += 1  # the runtime's meta went with everything else
        self._counter.schema_changed()
        self._plans.clear()
        self.wiped = True
