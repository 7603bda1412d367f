"""The runtime's side of one actor's storage: its ``_ma_meta`` keys (out of reach of actor SQL,
RT-14), the stored alarm as it really is, the alarm run, the output gate (flush, and whether a
request's implicit writes were kept) and closing.

Actor code holds the ``SqlStorage`` and never this: the runtime's meta writes (owner, schema
version, erasure, alarm purposes, event sequence) go through here, in the actor's own transactions.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from mailbox_actors.platform.storage.connection import RUNTIME_TOKEN
from mailbox_actors.platform.storage.errors import TransactionRolledBack
from mailbox_actors.platform.storage.handle import close_connection, shed_caches
from mailbox_actors.platform.storage.opening import (
    CACHED_STATEMENTS,
    LAYOUT_QUERY,
    SchemaLayout,
    schema_layout,
)
from mailbox_actors.platform.storage.sql import AlarmRun, SqlStorage, TxState
from mailbox_actors.platform.storage.wipe import is_empty, remove_files

__all__ = ["RuntimeStorage", "runtime_statement"]

_IMPLICIT = TxState.IMPLICIT  # a global: Python 3.11's EnumType reads members by attribute slowly


def runtime_statement(query: str) -> str:
    """``query`` as a runtime statement's text for ``RuntimeStorage.run`` (made once, at import):
    with the token that keeps user SQL off its cached, pre-authorised copy (``connection``)."""
    return f"{query} /*{RUNTIME_TOKEN}*/"


_PUT = runtime_statement("INSERT OR REPLACE INTO _ma_meta (k, v) VALUES (?, ?)")
_PUT_TWO = runtime_statement("INSERT OR REPLACE INTO _ma_meta (k, v) VALUES (?, ?), (?, ?)")
_DELETE = runtime_statement("DELETE FROM _ma_meta WHERE k = ?")
_DELETE_IF = runtime_statement("DELETE FROM _ma_meta WHERE k = ? AND v = ?")


class RuntimeStorage:
    """One actor's storage as the runtime uses it; ``sql`` is what the actor's code gets."""

    __slots__ = ("purposes_running", "sql")

    def __init__(self, sql: SqlStorage) -> None:
        self.sql = sql
        # Set by the alarm purposes' runner while it runs (``purposes.run_due``): it re-arms the
        # alarm when it ends, so a purpose recorded meanwhile need not write the alarm itself.
        self.purposes_running = False

    @property
    def schema_known(self) -> bool:
        """The file's schema is known to be its migrations' alone (``known``): made so at open
        (``KnownSchema``) or after the migrations (``SqlStorage.know_schema``)."""
        return self.sql._facts is not None

    def schema_layout(self) -> SchemaLayout:
        """The file's schema as ``opening.fresh_layout`` gives a new file's (read, not cached)."""
        return schema_layout(self.sql._runtime_exec(LAYOUT_QUERY))

    # ---- runtime statements ----------------------------------------------------------------

    def run(self, text: str, params: Sequence[Any] = ()) -> None:
        """Write with a runtime statement (``runtime_statement``'s text; not screened, rows not
        counted) in the open transaction, or the implicit one. ``_runtime_exec``'s work without
        its per-call text checks: the runtime's writes of every event go through here."""
        sql = self.sql
        sql._before_write()  # refuses a write inside a transaction SQLite already ended
        try:
            sql._sys(text, params)
        except sqlite3.Error as e:
            raise sql._failed(e) from e

    # ---- meta ------------------------------------------------------------------------------

    def meta(self, keys: Sequence[str]) -> dict[str, str]:
        """The stored values of ``keys`` (absent ones left out). The runtime's keys are written
        into the text, not bound: the actor's bound-parameter limit may be lower than their
        number, and the same text reuses one cached statement."""
        quoted = ", ".join("'" + k.replace("'", "''") + "'" for k in keys)
        rows = self.sql._runtime_exec(f"SELECT k, v FROM _ma_meta WHERE k IN ({quoted})")
        return {k: v for k, v in rows}

    def meta_range(self, start: str, end: str) -> dict[str, str]:
        """Every meta key in ``[start, end)``, with its value (from memory while known: every
        runtime meta write goes through this wrapper and follows the known ranges, and anything
        undone empties what is known, ``runtime_known``)."""
        known = self.sql._known_now()
        values = known.ranges.get((start, end))
        if values is not None:
            return dict(values)
        rows = self.sql._runtime_exec("SELECT k, v FROM _ma_meta WHERE k >= ? AND k < ?",
                                      (start, end))
        out = {k: v for k, v in rows}
        if len(known.ranges) < 4:  # a few fixed ranges (the alarm purposes')
            known.ranges[(start, end)] = dict(out)
        return out

    def known_meta(self, key: str) -> str | None:
        """``key``'s stored value when a known range holds it without a read; None when it is
        absent or not known (then the caller writes it)."""
        for (start, end), values in self.sql._known_now().ranges.items():
            if start <= key < end:
                return values.get(key)
        return None

    def _written(self, key: str, value: str | None, only_if: str | None = None) -> None:
        """A write of ``key`` (None: deleted, when it held ``only_if`` if given) went through:
        the known ranges holding it follow."""
        for (start, end), values in self.sql._known_now().ranges.items():
            if start <= key < end:
                if value is not None:
                    values[key] = value
                elif only_if is None or values.get(key) == only_if:
                    values.pop(key, None)

    def put_meta(self, key: str, value: str) -> None:
        self.run(_PUT, (key, value))
        self._written(key, value)

    def bump_meta(self, counter: str, key: str | None = None, value: str = "") -> int:
        """Add one to the integer meta key ``counter`` (absent: 0), and store ``key`` = ``value``
        with it in the same write when given (the outbox's per event: its sequence and, unless
        already recorded for no later, its alarm purpose); returns the counter's new value. Only
        this wrapper writes ``counter``: the value it last wrote is still stored (committed, or
        in the open transaction) while nothing was undone since, so it is read from the file
        only after a rollback, or first."""
        known = self.sql._known_now()
        n = known.counters.get(counter)
        if n is None:
            row = self.sql._runtime_exec("SELECT v FROM _ma_meta WHERE k = ?",
                                         (counter,)).fetchone()
            n = int(row[0]) if row else 0
        n += 1
        if key is None:
            self.run(_PUT, (counter, str(n)))
        else:
            self.run(_PUT_TWO, (counter, str(n), key, value))
        known.counters[counter] = n
        if known.ranges:
            self._written(counter, str(n))
            if key is not None:
                self._written(key, value)
        return n

    def delete_meta(self, key: str, only_if: str | None = None) -> None:
        """Delete ``key`` (only while it still holds ``only_if``, when given)."""
        if only_if is None:
            self.run(_DELETE, (key,))
        else:
            self.run(_DELETE_IF, (key, only_if))
        self._written(key, None, only_if)

    # ---- the alarm as stored ---------------------------------------------------------------

    def stored_alarm(self) -> int | None:
        """The alarm as stored, even while the handler runs."""
        return self.sql._stored()

    def begin_alarm_run(self) -> AlarmRun:
        """The handler starts: ``get_alarm()`` reads None until ``end_alarm_run`` (AL-3)."""
        run = self.sql._alarm_run = AlarmRun()
        return run

    def end_alarm_run(self) -> None:
        self.sql._alarm_run = None

    @property
    def alarm_run(self) -> AlarmRun | None:
        return self.sql._alarm_run

    # ---- the output gate -------------------------------------------------------------------

    def flush(self) -> None:
        """Commit the implicit transaction, if one is open: nothing leaves before its writes."""
        self.sql._flush()

    def clear_fired_alarm(self) -> None:
        """Remove the alarm that just ran, in its own commit, never synced: the handler's writes
        are already durable, and losing only this removal to a power cut makes the alarm run once
        more (alarms are at least once), so ``durability=full`` pays one fsync per run."""
        sql = self.sql
        synchronous = sql._sys("PRAGMA synchronous").fetchone()[0]
        sql._sys("PRAGMA synchronous = OFF")
        try:
            sql.delete_alarm()
            sql._flush()
        finally:
            sql._sys(f"PRAGMA synchronous = {int(synchronous)}")

    @property
    def writes_pending(self) -> bool:
        """Whether an implicit transaction is open (writes that the next flush commits)."""
        return self.sql._state is _IMPLICIT

    def check_writes(self, generations: Sequence[int]) -> None:
        """Raise if SQLite rolled back an implicit transaction these writes went into (never
        acknowledge a write that was not stored)."""
        if self.sql._writes_lost(generations):
            raise TransactionRolledBack(None)

    # ---- lifetime --------------------------------------------------------------------------

    def shed_caches(self) -> None:
        """Opening is done: free the pages and statements it left cached (ADR 0015); an idle
        open actor then holds little more than a bare connection does."""
        shed_caches(self.sql._conn, self.sql.path, CACHED_STATEMENTS)

    def close(self, behind: Callable[[Callable[[], None]], bool] | None = None) -> None:
        """Commit anything pending and close the file (removing it after a ``delete_all`` that
        nothing was written after). ``behind``: takes the connection's close to run in a worker
        thread (True), when the connection was made for that (``check_same_thread`` off)."""
        sql = self.sql
        remove = False
        try:
            if sql._depth == 0:
                if sql._state is _IMPLICIT:
                    sql._flush()
                remove = sql.wiped and is_empty(lambda q: sql._sys(f"{q} /*{sql._token}*/"))
        finally:
            # The log stays for the next open (ADR 0012); a file about to be removed is
            # checkpointed first, so no log outlives it.
            keep = sql.keeps_wal and not remove
            if remove or behind is None or not behind(
                    functools.partial(close_connection, sql._conn, sql.path, keep_wal=keep)):
                close_connection(sql._conn, sql.path, keep_wal=keep)
        if remove:
            remove_files(sql.path)
