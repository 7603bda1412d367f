"""``rows_read`` and ``rows_written`` as workerd counts them for billing (RT-13).

workerd's patched SQLite counts every row a cursor visits (a full scan of 5,000 rows reads 5,000
however few it returns) and every row written to a table or an index (an INSERT into a table with
two indexes writes three rows; a DELETE counts its table rows). Python's SQLite has no such counter,
so this module rebuilds both from what SQLite does expose:

- read: the statement's full-scan steps (``nscan`` of the ``sqlite_stmt`` table, read lazily, only
  when ``rows_read`` is asked for) plus every row of a table a bare ``count(*)`` sizes up, or the
  rows returned when no table was scanned;
- written: the rows SQLite changed plus, per changed row, one per index the statement's writes
  reach (every index on INSERT; on UPDATE those covering an updated column), learnt from the
  authorizer when the statement was prepared and from the schema.

Both are estimates of workerd's figures, exact for the common shapes (scans, point lookups,
single-table writes); partial indexes count as full ones on INSERT.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["RowCounter", "WriteShape"]

# (table, updated column or None for INSERT): what a statement writes, from its authorizer calls
WriteShape = tuple[tuple[str, str | None], ...]
_MAX_SHAPES = 4096


@functools.lru_cache(maxsize=4)
def _scan_text(token: str) -> str:
    """The runtime statement reading a text's scans (one string for every connection)."""
    return f"SELECT nscan, run FROM sqlite_stmt WHERE sql = ? /*{token}*/"


class RunsSql(Protocol):
    """What a counter runs its runtime-only statements on (``ScreenedConnection._sys``)."""

    def _sys(self, query: str, params: tuple[Any, ...]) -> sqlite3.Cursor: ...


class RowCounter:
    """Per-connection bookkeeping for the two counters; ``owner`` (a weak reference to the
    connection) runs its runtime-only SQL."""

    # One per open actor: slots, not an instance dict.
    __slots__ = ("_counted", "_indexes", "_owner", "_recording", "_scan_sql", "_scans", "_shapes",
                 "index_rows")

    def __init__(self, owner: Callable[[], RunsSql | None], token: str) -> None:
        self._owner = owner
        self._scan_sql = _scan_text(token)
        self._shapes: dict[str, WriteShape] = {}
        self._recording: list[tuple[str, str | None]] | None = None
        self._indexes: dict[str, list[frozenset[str] | None]] = {}  # None: an expression index
        # Made at their first use (most actors never ask for rows read): text -> (nscan, run) when
        # last looked at; text -> tables its count(*) reads whole
        self._scans: dict[str, tuple[int, int]] | None = None
        self._counted: dict[str, tuple[str, ...]] | None = None
        # text -> index rows written per changed row, from its shape and the schema: worked out
        # once per statement, not on each run (``exec`` reads it: a statement found here has its
        # shape recorded, and needs one lookup per run); cleared with the schema
        self.index_rows: dict[str, int] = {}

    def _sys(self, query: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        """Runtime-only SQL on the counter's connection (``ScreenedConnection._sys``)."""
        owner = self._owner()
        if owner is None:  # the storage is gone: nothing can ask its counter any more
            raise sqlite3.ProgrammingError("the actor's storage is closed")
        return owner._sys(query, params)

    # ---- written --------------------------------------------------------------------------

    def needs_shape(self, query: str) -> bool:
        return query not in self._shapes and len(self._shapes) < _MAX_SHAPES

    def start_recording(self) -> None:
        self._recording = []

    def note(self, action: int, a1: str | None, a2: str | None) -> None:
        """An authorizer call of a user statement being prepared (not a trigger's)."""
        rec = self._recording
        if rec is None or a1 is None:
            return
        if action == sqlite3.SQLITE_INSERT:
            rec.append((a1, None))
        elif action == sqlite3.SQLITE_UPDATE and a2 is not None:
            rec.append((a1, a2))

    def stop_recording(self, query: str, *, keep: bool) -> None:
        rec, self._recording = self._recording, None
        if rec is not None and keep:
            self._shapes[query] = tuple(dict.fromkeys(rec))

    def schema_changed(self) -> None:
        self._indexes = {}  # never clear a dict shared with other connections (share_indexes)
        self.index_rows.clear()

    def share_indexes(self, shared: dict[str, list[frozenset[str] | None]] | None) -> None:
        """Read (and learn) tables' indexes in ``shared``, the process's for this file's schema
        (``known``), instead of asking SQLite on every connection; None: this connection's own."""
        self._indexes = {} if shared is None else shared
        self.index_rows.clear()  # every text's first run since goes through exec's checks

    def adopt(self, query: str, shape: WriteShape, per_row: int) -> None:
        """What ``query`` writes and its index rows per changed row, known from another connection
        to a file of the same schema (``known``): its first run here records nothing."""
        if len(self._shapes) < _MAX_SHAPES:
            self._shapes[query] = shape
            self.index_rows[query] = per_row

    def known_shape(self, query: str) -> WriteShape | None:
        return self._shapes.get(query)

    def _table_indexes(self, table: str) -> list[frozenset[str] | None]:
        found = self._indexes.get(table)
        if found is None:
            found = []
            without_rowid = False
            # Plain PRAGMAs, not the pragma_index_list() functions: each of those is a virtual
            # table SQLite builds on every connection (its first write to a table paid ~45 us).
            for row in self._sys(f"PRAGMA index_list({_quoted(table)})", ()).fetchall():
                name, origin = row[1], row[3]
                cols = [r[2] for r in self._sys(f"PRAGMA index_info({_quoted(name)})",
                                                ()).fetchall()]
                if origin == "pk":
                    # A WITHOUT ROWID table is its primary-key index: no row of its own.
                    without_rowid = self._sys(
                        "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ? "
                        "AND sql LIKE '%WITHOUT%ROWID%'", (table,)).fetchone() is not None
                    if without_rowid:
                        continue
                found.append(None if any(c is None for c in cols) else frozenset(cols))
            if len(self._indexes) < _MAX_SHAPES:
                self._indexes[table] = found
        return found

    def written(self, query: str, changed: int, rowcount: int) -> int:
        """Rows written by one statement: ``changed`` table rows (triggers included) plus the
        index rows of the ``rowcount`` rows the statement itself changed."""
        return changed + rowcount * self.per_row(query) if rowcount > 0 else changed

    def per_row(self, query: str) -> int:
        """Index rows one changed row of ``query`` writes, worked out once per schema."""
        extra = self.index_rows.get(query)
        if extra is None:
            extra = self._index_rows(query)
            if query in self._shapes and len(self.index_rows) < _MAX_SHAPES:
                self.index_rows[query] = extra  # a SELECT's 0 too: its next run takes exec's path
        return extra

    def _index_rows(self, query: str) -> int:
        """Index rows one changed row of ``query`` writes: every index of a table it inserts
        into, and those covering a column it updates."""
        shape = self._shapes.get(query)
        if not shape:
            return 0
        extra = 0
        inserted = {t for t, col in shape if col is None}
        for table in inserted:
            extra += len(self._table_indexes(table))
        updated: dict[str, set[str]] = {}
        for table, col in shape:
            if col is not None and table not in inserted:
                updated.setdefault(table, set()).add(col)
        for table, cols in updated.items():
            extra += sum(1 for idx in self._table_indexes(table) if idx is None or idx & cols)
        return extra

    # ---- read -----------------------------------------------------------------------------

    def scanned(self, query: str, finished: bool) -> int:
        """Rows the statement stepped through in full table scans since its last run."""
        try:
            rows = self._sys(self._scan_sql, (query,)).fetchall()
        except sqlite3.Error:  # a build without the sqlite_stmt table: count returned rows
            return 0
        if not rows:
            return 0
        nscan, run = max((int(r[0]), int(r[1])) for r in rows)
        scans = self._scans
        if scans is None:
            scans = self._scans = {}
        base_scan, base_run = scans.get(query, (0, 0))
        if run < base_run or nscan < base_scan:  # re-prepared since: counters started again
            base_scan, base_run = 0, 0
        runs = max(1, run - base_run)
        steps = (nscan - base_scan) // runs  # runs nobody asked about: their average
        if finished and len(scans) < _MAX_SHAPES:
            scans[query] = (nscan, run)
        # SQLite counts the steps from one row to the next; the first row of a scan is read too.
        return (steps + 1 if steps else 0) + self._counted_rows(query)

    def _counted_rows(self, query: str) -> int:
        """A bare ``count(*)`` never steps through its table (SQLite's Count opcode reads the
        b-tree's size), yet workerd bills every row of it: add them."""
        counted = self._counted
        if counted is None:
            counted = self._counted = {}
        tables = counted.get(query)
        if tables is None:
            tables = self._count_tables(query)
            if len(counted) < _MAX_SHAPES:
                counted[query] = tables
        total = 0
        for table in tables:
            quoted = '"' + table.replace('"', '""') + '"'
            total += int(self._sys(f"SELECT count(*) FROM {quoted}", ()).fetchone()[0])
        return total

    def _count_tables(self, query: str) -> tuple[str, ...]:
        try:
            program = self._sys(f"EXPLAIN {query}", ()).fetchall()
        except sqlite3.Error:
            return ()
        roots = {int(r[2]): int(r[3]) for r in program if r[1] in ("OpenRead", "OpenWrite")}
        counted = [roots[int(r[2])] for r in program if r[1] == "Count" and int(r[2]) in roots]
        names: list[str] = []
        for root in counted:
            row = self._sys("SELECT tbl_name FROM sqlite_schema WHERE rootpage = ?",
                            (root,)).fetchone()
            if row is not None:
                names.append(str(row[0]))
        return tuple(names)


def _quoted(name: str) -> str:
    """An identifier quoted for SQL text (a PRAGMA's argument cannot be bound)."""
    return '"' + name.replace('"', '""') + '"'
