"""SQL as workerd runs it (RT-13): multi-statement exec, foreign keys on, workerd's PRAGMA
allowlist and SQLite limits, rows_read / rows_written as workerd counts them."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.runtime.actor import Call
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError


@pytest.fixture(autouse=True)
def _clean() -> None:
    afs.reset_state()


async def run(rt: TestRuntime, oid: str, fn: Any, arg: Any = None) -> Any:
    return await afs.run(rt, oid, fn, arg)


async def error_of(rt: TestRuntime, oid: str, fn: Any, arg: Any = None) -> MailboxActorsError:
    with pytest.raises(MailboxActorsError) as e:
        await afs.run(rt, oid, fn, arg)
    return e.value


async def rows(actor: Scratch, call: Call, arg: Any) -> Any:
    return [list(r) for r in actor.sql.exec(arg)]


@pytest.mark.anyio
async def test_exec_runs_a_script_and_binds_parameters_to_its_last_statement(
        tmp_path: Path) -> None:
    """RT-13: exec runs several ';'-separated statements (the Durable Objects docs' constructor
    example: several CREATE TABLE in one call); parameters bind to the last statement and the
    cursor is the last statement's. A ';' inside a string, a comment or a trigger body does not
    split it."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def script(actor: Scratch, call: Call, arg: Any) -> Any:
            sql = actor.sql
            sql.exec("""
                CREATE TABLE IF NOT EXISTS artist (artistid INTEGER PRIMARY KEY, artistname TEXT);
                CREATE TABLE IF NOT EXISTS track (trackid INTEGER, trackname TEXT, trackartist
                    INTEGER REFERENCES artist(artistid));
                -- a comment; with a semicolon
                CREATE TRIGGER IF NOT EXISTS named AFTER INSERT ON artist BEGIN
                    UPDATE artist SET artistname = artistname || '!' WHERE artistid = new.artistid;
                    INSERT INTO track (trackid, trackname, trackartist) VALUES (0, 'auto', new.artistid);
                END;
            """)
            cur = sql.exec("INSERT INTO artist VALUES (1, 'a;b'); INSERT INTO artist VALUES (2, ?) "
                           "RETURNING artistid, artistname", "c")
            returned = [list(r) for r in cur]
            return {"returned": returned, "columns": cur.column_names,
                    "artists": [list(r) for r in sql.exec("SELECT * FROM artist ORDER BY 1")],
                    "tracks": sql.exec("SELECT count(*) FROM track").one()[0]}

        out = await run(rt, oid, script)
        assert out["returned"] == [[2, "c"]]  # the RETURNING row, before the trigger ran
        assert out["columns"] == ["artistid", "artistname"]
        assert out["artists"] == [[1, "a;b!"], [2, "c!"]]
        assert out["tracks"] == 2


@pytest.mark.anyio
@pytest.mark.parametrize(("script", "code", "named"), [
    ("INSERT INTO items VALUES ('x', '1'); PRAGMA journal_mode = DELETE", "invalid_request",
     "journal_mode"),
    ("INSERT INTO items VALUES ('x', '1'); SELECT * FROM _ma_meta", "invalid_request", "reserved"),
    ("INSERT INTO items VALUES ('x', '1'); BEGIN", "invalid_request", "BEGIN"),
    ("INSERT INTO items VALUES ('x', '1'); INSERT INTO items VALUES ('y', ?); SELECT ?",
     "invalid_request", "only the last"),
    ("INSERT INTO items VALUES ('x', '1'); SELECT * FROM items WHERE v = ? OR v LIKE '"
     + "%" * 51 + "'",
     "limit_exceeded", "max_like_pattern_bytes"),
])
async def test_a_refused_statement_anywhere_runs_nothing_of_the_script(
        tmp_path: Path, script: str, code: str, named: str) -> None:
    """RT-13: a script with a refused statement anywhere in it (a PRAGMA outside the allowlist, a
    reserved table, transaction control, parameters before the last statement, a LIKE pattern
    over 50 bytes) answers invalid_request or limit_exceeded naming what was wrong, and nothing of
    it is stored, in a transaction or not."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        await afs.scratch(rt, oid, afs.Put(k="kept", v="1"))

        async def plain(actor: Scratch, call: Call, arg: Any) -> Any:
            return [list(r) for r in actor.sql.exec(arg, "p")]

        async def in_tx(actor: Scratch, call: Call, arg: Any) -> Any:
            return actor.sql.transaction_sync(lambda tx: len(tx.exec(arg, "p").all()))

        for fn in (plain, in_tx):
            err = await error_of(rt, oid, fn, script)
            assert err.code == code
            assert named in err.message + str(err.details)
        assert await run(rt, oid, rows, "SELECT k, v FROM items") == [["kept", "1"]]


@pytest.mark.anyio
async def test_a_script_failing_midway_keeps_nothing(tmp_path: Path) -> None:
    """RT-13: when a later statement of a script fails (a constraint), the statements before it
    are undone too: the script is all or nothing."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def failing(actor: Scratch, call: Call, arg: Any) -> Any:
            try:
                actor.sql.exec("INSERT INTO items VALUES ('new', '1'); "
                               "INSERT INTO items VALUES ('new', 'duplicate key')")
            except sqlite3.IntegrityError:
                return "refused"
            return "ran"

        assert await run(rt, oid, failing) == "refused"
        assert await run(rt, oid, rows, "SELECT k FROM items") == []


@pytest.mark.anyio
async def test_foreign_keys_are_enforced_by_default_and_can_be_turned_off(tmp_path: Path) -> None:
    """RT-13: foreign keys are on in a fresh actor (workerd builds SQLite so); PRAGMA foreign_keys
    and defer_foreign_keys are the actor's to read and set."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def fk(actor: Scratch, call: Call, arg: Any) -> Any:
            sql = actor.sql
            out: dict[str, Any] = {"on": sql.exec("PRAGMA foreign_keys").one()[0]}
            sql.exec("CREATE TABLE parent (id INTEGER PRIMARY KEY); "
                     "CREATE TABLE child (id INTEGER PRIMARY KEY, "
                     "parent_id INTEGER NOT NULL REFERENCES parent(id) ON DELETE CASCADE)")
            try:
                sql.transaction_sync(lambda tx: tx.exec("INSERT INTO child VALUES (1, 42)"))
                out["orphan"] = "stored"
            except sqlite3.IntegrityError as e:
                out["orphan"] = str(e)

            def deferred(tx: Any) -> None:
                tx.exec("PRAGMA defer_foreign_keys = ON")
                tx.exec("INSERT INTO child VALUES (2, 7)")  # its parent comes later in the tx
                tx.exec("INSERT INTO parent VALUES (7)")

            sql.transaction_sync(deferred)
            sql.transaction_sync(lambda tx: tx.exec("DELETE FROM parent WHERE id = 7"))
            out["cascaded"] = sql.exec("SELECT count(*) FROM child").one()[0]
            sql.flush()
            sql.exec("PRAGMA foreign_keys = OFF")
            out["off"] = sql.exec("PRAGMA foreign_keys").one()[0]
            sql.transaction_sync(lambda tx: tx.exec("INSERT INTO child VALUES (3, 99)"))
            out["orphan_when_off"] = sql.exec("SELECT count(*) FROM child").one()[0]
            return out

        out = await run(rt, oid, fk)
        assert out["on"] == 1
        assert "FOREIGN KEY constraint failed" in out["orphan"]
        assert out["cascaded"] == 0
        assert (out["off"], out["orphan_when_off"]) == (0, 1)


ALLOWED_PRAGMAS = [
    "PRAGMA foreign_keys", "PRAGMA foreign_keys = true", "PRAGMA defer_foreign_keys = 0",
    "PRAGMA case_sensitive_like = on", "PRAGMA case_sensitive_like = 'off'",
    "PRAGMA table_info(items)", "PRAGMA table_xinfo(items)", "PRAGMA table_list",
    "PRAGMA index_list(items)", "PRAGMA index_info(sqlite_autoindex_items_1)",
    "PRAGMA foreign_key_list(items)", "PRAGMA foreign_key_check", "PRAGMA quick_check",
    "PRAGMA quick_check(1)", "PRAGMA optimize", "PRAGMA data_version", "PRAGMA page_size",
    "PRAGMA recursive_triggers = 1", "PRAGMA reverse_unordered_selects = no",
]
REFUSED_PRAGMAS = [
    "PRAGMA journal_mode", "PRAGMA synchronous", "PRAGMA integrity_check", "PRAGMA user_version",
    "PRAGMA page_size = 8192", "PRAGMA cache_size = 1", "PRAGMA table_info(_ma_meta)",
    "PRAGMA index_list(_ma_kv)", "PRAGMA foreign_keys = maybe", "PRAGMA optimize = 'x'",
    "PRAGMA writable_schema", "PRAGMA compile_options", "PRAGMA database_list",
]


@pytest.mark.anyio
async def test_pragmas_follow_workerds_allowlist(tmp_path: Path) -> None:
    """RT-13: the PRAGMAs of workerd's allowlist may be read and set as workerd allows (booleans,
    object names of the actor's own, numbers); every other PRAGMA, read or write, is refused with
    invalid_request naming it, and nothing committed changes."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        await afs.scratch(rt, oid, afs.Put(k="kept", v="1"))
        for pragma in ALLOWED_PRAGMAS:
            await run(rt, oid, rows, pragma)
        for pragma in REFUSED_PRAGMAS:
            err = await error_of(rt, oid, rows, pragma)
            assert err.code == "invalid_request", pragma
            assert "PRAGMA" in err.message, pragma
        assert await run(rt, oid, rows, "SELECT k, v FROM items") == [["kept", "1"]]


@pytest.mark.anyio
@pytest.mark.parametrize(("query", "limit", "maximum"), [
    ("SELECT 'a' LIKE '" + "a" * 51 + "'", "max_like_pattern_bytes", 50),
    ("SELECT 'a' GLOB '" + "a" * 51 + "'", "max_like_pattern_bytes", 50),
    (" UNION ".join(["SELECT 1"] * 6), "max_compound_select_terms", 5),
    ("SELECT 1" + " + 1" * 120, "max_expression_depth", 100),
    ("SELECT max(" + ",".join(["1"] * 128) + ")", "max_function_args", 127),
])
async def test_sqlite_limits_are_workerds(tmp_path: Path, query: str, limit: str,
                                          maximum: int) -> None:
    """RT-13: SQLite's limits are set as workerd sets them: LIKE/GLOB patterns of 50 bytes, 5
    compound SELECT terms, expression depth 100, 127 function arguments; past one, the answer is
    limit_exceeded naming the limit and its maximum. A pattern of 50 bytes (and one bound as a
    parameter) is held to the same limit."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        err = await error_of(rt, oid, rows, query)
        assert err.code == "limit_exceeded"
        assert err.details == {"limit": limit, "max": maximum}

        async def bound(actor: Scratch, call: Call, arg: Any) -> Any:
            return actor.sql.exec("SELECT 'a' LIKE ?", arg).one()[0]

        assert await run(rt, oid, bound, "%" * 50) == 1
        assert (await error_of(rt, oid, bound, "%" * 51)).code == "limit_exceeded"
        assert await run(rt, oid, rows, " UNION ".join(["SELECT 1"] * 5)) == [[1]]


@pytest.mark.anyio
async def test_rows_read_counts_rows_scanned_and_rows_written_counts_index_rows(
        tmp_path: Path) -> None:
    """RT-13: rows_read counts the rows a statement scans, not only those it returns (a full scan
    of 200 rows reads 200 whatever it finds, so does a count(*); an indexed lookup reads about one);
    rows_written counts every row written, index rows included (an INSERT into a table with two
    indexes writes three rows; an UPDATE of an indexed column two, of a plain column one; a DELETE
    one per row)."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def counts(actor: Scratch, call: Call, arg: Any) -> Any:
            sql = actor.sql
            out: dict[str, Any] = {}
            sql.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER, b INTEGER, c TEXT); "
                     "CREATE INDEX t_a ON t (a); CREATE INDEX t_b ON t (b)")

            def fill(tx: Any) -> None:
                out["insert_one"] = tx.exec("INSERT INTO t VALUES (0, 0, 0, 'x')").rows_written
                for i in range(1, 200):
                    tx.exec("INSERT INTO t VALUES (?, ?, ?, 'x')", i, i, i)

            sql.transaction_sync(fill)
            scan = sql.exec("SELECT * FROM t WHERE c = 'nothing'")
            out["scan"] = (len(scan.all()), scan.rows_read)
            full = sql.exec("SELECT id FROM t")
            out["full"] = (len(full.all()), full.rows_read)
            count = sql.exec("SELECT count(*) FROM t")
            out["count"] = (count.one()[0], count.rows_read)
            point = sql.exec("SELECT * FROM t WHERE a = 7")
            out["point"] = (len(point.all()), point.rows_read)
            out["update_indexed"] = sql.exec("UPDATE t SET a = -1 WHERE id = 3").rows_written
            out["update_plain"] = sql.exec("UPDATE t SET c = 'y' WHERE id = 3").rows_written
            out["update_many"] = sql.exec("UPDATE t SET c = 'z' WHERE id < 10").rows_written
            out["delete"] = sql.exec("DELETE FROM t WHERE id < 5").rows_written
            return out

        out = await run(rt, oid, counts)
        assert out["insert_one"] == 3
        assert out["scan"] == [0, 200]
        assert out["full"] == [200, 200]
        assert out["count"] == [200, 200]  # count(*) reads every row, as workerd bills it
        assert out["point"][0] == 1 and 1 <= out["point"][1] <= 2
        assert out["update_indexed"] == 2
        assert out["update_plain"] == 1
        assert out["update_many"] == 10
        assert out["delete"] == 5


@pytest.mark.anyio
async def test_rows_written_of_a_statement_run_again_follows_the_schema(tmp_path: Path) -> None:
    """RT-13: the same INSERT text, run again and again, counts the indexes its table has at each
    run: one row before any index, two once an index is created, one again once it is dropped, and
    three after a schema change made by a script, and three again after a transaction that made
    a fourth index rolled back (the count is worked out once per statement and schema, never kept
    across a change of it, nor across one undone)."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def counts(actor: Scratch, call: Call, arg: Any) -> Any:
            sql = actor.sql
            insert = "INSERT INTO t (a, b) VALUES (?, ?)"
            sql.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER, b INTEGER)")
            out = [sql.exec(insert, 1, 1).rows_written, sql.exec(insert, 2, 2).rows_written]
            sql.exec("CREATE INDEX t_a ON t (a)")
            out += [sql.exec(insert, 3, 3).rows_written, sql.exec(insert, 4, 4).rows_written]
            sql.exec("DROP INDEX t_a")
            out.append(sql.exec(insert, 5, 5).rows_written)
            sql.exec("CREATE INDEX t_a ON t (a); CREATE INDEX t_b ON t (b)")
            out.append(sql.exec(insert, 6, 6).rows_written)

            def index_then_fail(tx: SqlStorage) -> None:
                tx.exec("CREATE INDEX t_ab ON t (a, b)")
                out.append(tx.exec(insert, 7, 7).rows_written)
                raise ValueError("undo it")
            with pytest.raises(ValueError):
                sql.transaction_sync(index_then_fail)
            out.append(sql.exec(insert, 8, 8).rows_written)  # t_ab was rolled back with it
            return out

        assert await run(rt, oid, counts) == [1, 1, 2, 2, 1, 3, 4, 3]


@pytest.mark.anyio
async def test_rows_written_of_a_write_with_returning_counts_its_rows(tmp_path: Path) -> None:
    """RT-13: an INSERT, UPDATE or DELETE with RETURNING counts the rows it wrote (index rows
    included), on its first run and on later runs of the same text, alone or as a script's last
    statement, before its returned rows are read; an upsert that did nothing counts none (a
    DELETE counts its table rows, as without RETURNING). SQLite
    counts such changes only when the statement finishes, so an open cursor would say 0."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def counts(actor: Scratch, call: Call, arg: Any) -> Any:
            sql = actor.sql
            sql.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER UNIQUE, b INTEGER)")
            insert = "INSERT INTO t (a, b) VALUES (?, ?) ON CONFLICT DO NOTHING RETURNING id"
            out = []
            for a in (1, 2, 2):  # first run, a run of the same text, a conflict: nothing written
                cur = sql.exec(insert, a, a)
                out.append((cur.rows_written, [tuple(r) for r in cur]))
            cur = sql.exec("UPDATE t SET b = b + 1 RETURNING id")
            out.append((cur.rows_written, len(cur.all())))
            cur = sql.exec("SELECT 1; DELETE FROM t WHERE a = 1 RETURNING id")
            out.append((cur.rows_written, [tuple(r) for r in cur]))
            return out

        assert await run(rt, oid, counts) == [
            [2, [[1]]], [2, [[2]]], [0, []], [2, 2], [1, [[1]]]]
