"""An actor's storage as its own code sees it: file mode (RT-2), transactions and refused statements
(RT-5), the SQL cursor and KV API (RT-6), and the limits (RT-7). Each test runs its SQL inside a
Scratch actor's handler through the full RPC path."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.platform.storage.sql import Limits, SqlStorage
from mailbox_actors.runtime.actor import Call
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import ErrorCode, LimitExceeded, MailboxActorsError


def read_file(path: Path, query: str) -> list[tuple[Any, ...]]:
    """Read an actor's file with a separate, plain sqlite3 connection (what is committed)."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return conn.execute(query).fetchall()


async def code_of(rt: TestRuntime, oid: str, fn: afs.Hook) -> MailboxActorsError:
    with pytest.raises(MailboxActorsError) as e:
        await afs.run(rt, oid, fn)
    return e.value


# ---- RT-2 ----------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(("durability", "synchronous"), [("normal", 1), ("full", 2)])
async def test_actor_file_is_wal_with_the_configured_durability(
        tmp_path: Path, durability: str, synchronous: int) -> None:
    """RT-2: each actor's file is in WAL mode; durability normal is synchronous=NORMAL, full FULL."""
    async with TestRuntime(tmp_path, durability=durability, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def pragmas(actor: Scratch, call: Call, arg: Any) -> Any:
            return [actor.sql.file_setting("journal_mode"), actor.sql.file_setting("synchronous")]

        assert await afs.run(rt, oid, pragmas) == ["wal", synchronous]
        path = rt.node.host.path_for("scratch", oid)
    assert read_file(path, "PRAGMA journal_mode") == [("wal",)]
    # Every actor file has the runtime's own meta table (RT-14), not a user-visible meta.
    cols = read_file(path, "PRAGMA table_info(_ma_meta)")
    assert [(c[1], c[2], c[5]) for c in cols] == [("k", "TEXT", 1), ("v", "TEXT", 0)]
    assert read_file(path, "SELECT name FROM sqlite_master WHERE name = 'meta'") == []


# ---- RT-5: transactions --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_transaction_commits_on_return_and_rolls_back_on_raise(tmp_path: Path) -> None:
    """RT-5: transaction_sync commits when fn returns (with its value) and rolls back when it
    raises, the exception propagating to the caller."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        path = rt.node.host.path_for("scratch", oid)

        async def commit(actor: Scratch, call: Call, arg: Any) -> Any:
            def fn(tx: SqlStorage) -> str:
                tx.exec("INSERT INTO items (k, v) VALUES ('c', '1')")
                assert tx.in_transaction
                return "committed"
            result = actor.sql.transaction_sync(fn)
            # Committed before transaction_sync returns, not later.
            assert read_file(path, "SELECT v FROM items WHERE k = 'c'") == [("1",)]
            return result

        assert await afs.run(rt, oid, commit) == "committed"

        class Boom(Exception):
            pass

        async def rollback(actor: Scratch, call: Call, arg: Any) -> Any:
            def fn(tx: SqlStorage) -> None:
                tx.exec("INSERT INTO items (k, v) VALUES ('r', '1')")
                tx.exec("UPDATE items SET v = 'changed' WHERE k = 'c'")
                tx.set_alarm(rt.now_ms() + 1000)
                raise Boom()
            with pytest.raises(Boom):
                actor.sql.transaction_sync(fn)
            return [list(r) for r in actor.sql.exec("SELECT k, v FROM items ORDER BY k")]

        assert await afs.run(rt, oid, rollback) == [["c", "1"]]
        # The alarm set in the rolled-back transaction is gone with it (AL-1).
        assert await afs.scratch(rt, oid, afs.GetAlarm()) is None
        await rt.advance(5000)
        assert afs.ALARM_LOG == []
        assert read_file(path, "SELECT k, v FROM items ORDER BY k") == [("c", "1")]


@pytest.mark.anyio
async def test_nested_transactions_are_savepoints(tmp_path: Path) -> None:
    """RT-5: a nested transaction_sync that raises rolls back only its own writes; the outer one
    commits the rest; an exception leaving the outer one rolls back everything."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def nested(actor: Scratch, call: Call, arg: Any) -> Any:
            def inner_ok(tx: SqlStorage) -> None:
                tx.exec("INSERT INTO items (k, v) VALUES ('inner_ok', '1')")

            def inner_bad(tx: SqlStorage) -> None:
                tx.exec("INSERT INTO items (k, v) VALUES ('inner_bad', '1')")
                raise ValueError("inner")

            def outer(tx: SqlStorage) -> None:
                tx.exec("INSERT INTO items (k, v) VALUES ('outer', '1')")
                tx.transaction_sync(inner_ok)
                with pytest.raises(ValueError):
                    tx.transaction_sync(inner_bad)
                tx.transaction_sync(lambda t: t.transaction_sync(
                    lambda t2: t2.exec("INSERT INTO items (k, v) VALUES ('deep', '1')")))

            actor.sql.transaction_sync(outer)

            def outer_bad(tx: SqlStorage) -> None:
                tx.transaction_sync(
                    lambda t: t.exec("INSERT INTO items (k, v) VALUES ('lost', '1')"))
                raise KeyError("outer")

            with pytest.raises(KeyError):
                actor.sql.transaction_sync(outer_bad)
            return [r[0] for r in actor.sql.exec("SELECT k FROM items ORDER BY k")]

        assert await afs.run(rt, oid, nested) == ["deep", "inner_ok", "outer"]


@pytest.mark.anyio
async def test_transaction_sync_refuses_coroutine_functions(tmp_path: Path) -> None:
    """RT-5: passing a coroutine function (or a function returning a coroutine) is a TypeError and
    writes nothing."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def coro_fn(tx: SqlStorage) -> None:
            tx.exec("INSERT INTO items (k, v) VALUES ('x', '1')")

        async def check(actor: Scratch, call: Call, arg: Any) -> Any:
            with pytest.raises(TypeError):
                actor.sql.transaction_sync(coro_fn)  # type: ignore[arg-type]
            with pytest.raises(TypeError):
                actor.sql.transaction_sync(lambda tx: coro_fn(tx))
            with pytest.raises(TypeError):  # nested, too
                actor.sql.transaction_sync(
                    lambda tx: tx.transaction_sync(coro_fn))  # type: ignore[arg-type]
            return actor.sql.exec("SELECT count(*) FROM items").one()[0]

        assert await afs.run(rt, oid, check) == 0


REFUSED = [
    "BEGIN",
    "begin transaction",
    "BEGIN IMMEDIATE",
    "COMMIT",
    "END",
    "ROLLBACK",
    "SAVEPOINT s1",
    "RELEASE s1",
    "ROLLBACK TO s1",
    "/* hidden */ BEGIN",
    "-- comment\nCOMMIT",
    "ATTACH DATABASE ':memory:' AS other",
    "DETACH DATABASE other",
    "VACUUM",
    "PRAGMA journal_mode = DELETE",
    "PRAGMA synchronous = OFF",
    "PRAGMA user_version = 7",
    "PRAGMA writable_schema = 1",
    "PRAGMA integrity_check",
    "PRAGMA page_size = 8192",
    "SELECT * FROM _ma_meta",
    "UPDATE _ma_meta SET v = '99' WHERE k = 'schema_version'",
    "CREATE TABLE _ma_mine (x)",
    "CREATE TABLE _cf_mine (x)",
    "CREATE TABLE _MA_upper (x)",
    "SELECT * FROM _ma_alarm",
    "SELECT * FROM _ma_kv",
    "INSERT INTO _ma_alarm (id, at_ms) VALUES (1, 0)",
    "DELETE FROM _ma_kv",
    "DROP TABLE _ma_alarm",
    "CREATE INDEX _ma_idx ON items (v)",
]


@pytest.mark.anyio
async def test_refused_statements_are_invalid_request(tmp_path: Path) -> None:
    """RT-5: BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE, ATTACH, DETACH, VACUUM, PRAGMA writes and
    the reserved _ma_/_cf_ tables are refused with invalid_request, inside or outside a
    transaction, and leave committed data untouched."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        await afs.scratch(rt, oid, afs.Put(k="kept", v="1"))
        at = rt.now_ms() + 60_000
        await afs.scratch(rt, oid, afs.SetAlarm(at_ms=at))
        for stmt in REFUSED:
            async def plain(actor: Scratch, call: Call, arg: Any, stmt: str = stmt) -> Any:
                return [list(r) for r in actor.sql.exec(stmt)]

            async def in_tx(actor: Scratch, call: Call, arg: Any, stmt: str = stmt) -> Any:
                return actor.sql.transaction_sync(lambda tx: len(tx.exec(stmt).all()))

            for fn in (plain, in_tx):
                err = await code_of(rt, oid, fn)
                assert err.code == "invalid_request", stmt
                assert "refused" in err.message, stmt

        async def state(actor: Scratch, call: Call, arg: Any) -> Any:
            return {"items": [list(r) for r in actor.sql.exec("SELECT k, v FROM items")],
                    "sync": actor.sql.file_setting("synchronous"),
                    "journal": actor.sql.file_setting("journal_mode"),
                    "tables": sorted(r[0] for r in actor.sql.exec(
                        "SELECT name FROM sqlite_master WHERE type = 'table'"))}

        s = await afs.run(rt, oid, state)
        assert s["items"] == [["kept", "1"]]
        assert (s["sync"], s["journal"]) == (1, "wal")
        assert not [t for t in s["tables"] if t.lower().startswith(("_ma_mine", "_cf_", "_ma_upper"))]
        assert await afs.scratch(rt, oid, afs.GetAlarm()) == at
        # Reading pragmas and ordinary SQL still works.

        async def allowed(actor: Scratch, call: Call, arg: Any) -> Any:
            cols = [r[1] for r in actor.sql.exec("PRAGMA table_info(items)")]
            actor.sql.exec("CREATE TABLE mine (x)")
            actor.sql.exec("CREATE TABLE ma_like (x)")
            return cols

        assert await afs.run(rt, oid, allowed) == ["k", "v"]


# ---- RT-6: cursor, size, KV ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_sql_cursor_api_and_database_size(tmp_path: Path) -> None:
    """RT-6: exec returns a cursor with one(), all(), iteration, rows_read, rows_written and
    column_names; database_size is the file's size in bytes and grows with data."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def cursor(actor: Scratch, call: Call, arg: Any) -> Any:
            sql = actor.sql
            size0 = sql.database_size
            out: dict[str, Any] = {}

            def fill(tx: SqlStorage) -> None:
                cur = tx.exec("INSERT INTO items (k, v) VALUES ('a', '1'), ('b', '2'), ('c', '3')")
                out["inserted"] = cur.rows_written
                out["updated"] = tx.exec("UPDATE items SET v = v || '!' WHERE k != 'b'").rows_written
                tx.exec("CREATE TABLE big (x BLOB)")
                for _ in range(20):
                    tx.exec("INSERT INTO big (x) VALUES (zeroblob(10000))")

            sql.transaction_sync(fill)
            cur = sql.exec("SELECT k AS key, v AS value FROM items ORDER BY k")
            out["columns"] = cur.column_names
            out["iter"] = [tuple(r) for r in cur]
            out["rows_read"] = cur.rows_read
            all_cur = sql.exec("SELECT k FROM items ORDER BY k")
            out["all"] = [r[0] for r in all_cur.all()]
            out["all_read"] = all_cur.rows_read
            out["one"] = sql.exec("SELECT v FROM items WHERE k = 'b'").one()[0]
            for q in ("SELECT v FROM items", "SELECT v FROM items WHERE k = 'zz'"):
                with pytest.raises(ValueError):
                    sql.exec(q).one()
            out["param"] = sql.exec("SELECT v FROM items WHERE k = ? OR k = ? ORDER BY k",
                                    "a", "c").all()
            out["param"] = [r[0] for r in out["param"]]
            out["size0"], out["size1"] = size0, sql.database_size
            return out

        out = await afs.run(rt, oid, cursor)
        # items' TEXT primary key is an index of its own: each inserted row writes two (RT-13)
        assert out["inserted"] == 6 and out["updated"] == 2
        assert out["columns"] == ["key", "value"]
        assert out["iter"] == [["a", "1!"], ["b", "2"], ["c", "3!"]]
        assert out["rows_read"] == 3
        assert out["all"] == ["a", "b", "c"] and out["all_read"] == 3
        assert out["one"] == "2"
        assert out["param"] == ["1!", "3!"]
        assert out["size0"] > 0 and out["size0"] % 512 == 0
        assert out["size1"] >= out["size0"] + 200_000


@pytest.mark.anyio
async def test_kv_api_over_the_same_file(tmp_path: Path) -> None:
    """RT-6: the synchronous KV API stores JSON values by string key in the actor's file, lists
    by prefix, start, end, limit and reverse, and commits with the surrounding transaction."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def kv(actor: Scratch, call: Call, arg: Any) -> Any:
            k = actor.sql.kv
            out: dict[str, Any] = {}
            for key in ("a/1", "a/2", "a/3", "b/1", "c"):
                k.put(key, {"key": key, "n": [1, 2]})
            out["get"] = k.get("a/2")
            out["missing"] = k.get("nope")
            out["prefix"] = list(k.list(prefix="a/"))
            out["range"] = list(k.list(start="a/2", end="b/1"))
            out["limit_rev"] = list(k.list(reverse=True, limit=2))
            out["all"] = list(k.list())
            out["deleted"] = [k.delete("c"), k.delete("c")]

            def rolled_back(tx: SqlStorage) -> None:
                tx.kv.put("tx", 1)
                tx.kv.delete("a/1")
                raise RuntimeError("undo")
            with pytest.raises(RuntimeError):
                actor.sql.transaction_sync(rolled_back)
            out["after_rollback"] = list(k.list())
            return out

        out = await afs.run(rt, oid, kv)
        assert out["get"] == {"key": "a/2", "n": [1, 2]}
        assert out["missing"] is None
        assert out["prefix"] == ["a/1", "a/2", "a/3"]
        assert out["range"] == ["a/2", "a/3"]
        assert out["limit_rev"] == ["c", "b/1"]
        assert out["all"] == ["a/1", "a/2", "a/3", "b/1", "c"]
        assert out["deleted"] == [True, False]
        assert out["after_rollback"] == ["a/1", "a/2", "a/3", "b/1"]

    # Durable: a new node on the same directory reads the same values.
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        async def read(actor: Scratch, call: Call, arg: Any) -> Any:
            return actor.sql.kv.get("b/1")
        assert await afs.run(rt, oid, read) == {"key": "b/1", "n": [1, 2]}


# ---- RT-7: limits --------------------------------------------------------------------------------


def _sql(stmt: str, *params: Any) -> afs.Hook:
    async def fn(actor: Scratch, call: Call, arg: Any) -> Any:
        return [list(r) for r in actor.sql.exec(stmt, *params)]
    return fn


def _sql_tx(stmt: str, *params: Any) -> afs.Hook:
    async def fn(actor: Scratch, call: Call, arg: Any) -> Any:
        def work(tx: SqlStorage) -> None:
            tx.exec("INSERT INTO items (k, v) VALUES ('in-same-tx', '1')")
            tx.exec(stmt, *params)
        return actor.sql.transaction_sync(work)
    return fn


def _kv_put(value: Any) -> afs.Hook:
    async def fn(actor: Scratch, call: Call, arg: Any) -> Any:
        actor.sql.kv.put("big", value)
    return fn


BIG = "x" * 2_000_001
COLS_101 = ", ".join(f"c{i}" for i in range(101))

LIMIT_CASES: list[tuple[str, afs.Hook, str]] = [
    ("101 bound parameters", _sql("SELECT " + ", ".join("?" * 101), *range(101)),
     "max_bound_parameters"),
    ("101 params in a write", _sql_tx(
        "INSERT INTO items (k, v) SELECT ?, ? WHERE ? IN (" + ", ".join("?" * 98) + ")",
        *range(101)), "max_bound_parameters"),
    ("statement over 100 KB", _sql("SELECT 1 " + " " * 100_001), "max_statement_bytes"),
    ("write statement over 100 KB", _sql_tx(
        "INSERT INTO items (k, v) VALUES ('long', '" + "y" * 100_001 + "')"),
     "max_statement_bytes"),
    ("string over 2 MB", _sql_tx("INSERT INTO items (k, v) VALUES ('big', ?)", BIG),
     "max_value_bytes"),
    ("blob over 2 MB", _sql_tx("INSERT INTO items (k, v) VALUES ('big', ?)", BIG.encode()),
     "max_value_bytes"),
    ("row over 2 MB", _sql_tx("INSERT INTO items (k, v) VALUES (?, ?)", "k" * 1_200_000,
                              "v" * 1_200_000), "max_value_bytes"),
    ("value built over 2 MB", _sql("SELECT zeroblob(2000001)"), "max_value_bytes"),
    ("kv value over 2 MB", _kv_put(BIG), "max_value_bytes"),
    ("table of 101 columns", _sql("CREATE TABLE wide (" + COLS_101 + ")"), "max_columns"),
    ("select of 101 columns", _sql("SELECT " + ", ".join(["1"] * 101)), "max_columns"),
]


@pytest.mark.anyio
async def test_limits_are_limit_exceeded_naming_the_limit(tmp_path: Path) -> None:
    """RT-7: 101 bound parameters, a statement over 100 KB, a value over 2 MB and 101 columns are
    each refused with limit_exceeded naming the limit in details, and nothing already committed
    (nor anything else in the failed transaction) is changed."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        await afs.scratch(rt, oid, afs.Put(k="kept", v="1"))
        for why, fn, limit in LIMIT_CASES:
            err = await code_of(rt, oid, fn)
            assert err.code == "limit_exceeded", why
            assert err.details is not None and err.details["limit"] == limit, (why, err.details)
            assert isinstance(err.details["max"], int) and err.message, why
            assert await afs.scratch(rt, oid, afs.Dump()) == {"keys": ["kept"], "total": 1}, why

        async def tables(actor: Scratch, call: Call, arg: Any) -> Any:
            return sorted(r[0] for r in actor.sql.exec(
                "SELECT name FROM sqlite_master WHERE type = 'table'"))
        assert "wide" not in await afs.run(rt, oid, tables)

        # Right at the limits is allowed.
        async def at_limits(actor: Scratch, call: Call, arg: Any) -> Any:
            actor.sql.exec("SELECT " + ", ".join("?" * 100), *range(100)).all()
            actor.sql.exec("CREATE TABLE wide100 (" + ", ".join(f"c{i}" for i in range(100)) + ")")
            actor.sql.transaction_sync(lambda tx: tx.exec(
                "INSERT INTO items (k, v) VALUES ('edge', ?)", "z" * 1_000_000))
            return len(actor.sql.exec("SELECT v FROM items WHERE k = 'edge'").one()[0])
        assert await afs.run(rt, oid, at_limits) == 1_000_000


@pytest.mark.anyio
async def test_limits_are_settings(tmp_path: Path) -> None:
    """RT-7: the limits are settings; a lower max_bound_parameters is enforced and named."""
    from mailbox_actors.platform.storage.sql import Limits

    async with TestRuntime(tmp_path, limits=Limits(max_bound_parameters=3),
                           objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        assert await afs.run(rt, oid, _sql("SELECT ?, ?, ?", 1, 2, 3)) == [[1, 2, 3]]
        err = await code_of(rt, oid, _sql("SELECT ?, ?, ?, ?", 1, 2, 3, 4))
        assert err.code == "limit_exceeded"
        assert err.details == {"limit": "max_bound_parameters", "max": 3}


@pytest.mark.anyio
@pytest.mark.parametrize("stmt", [
    "ALTER TABLE items RENAME TO _ma_items",
    "ALTER TABLE items RENAME TO _cf_items",
])
async def test_renaming_a_table_to_a_reserved_name_is_refused(tmp_path: Path, stmt: str) -> None:
    """RT-5: _ma_/_cf_ names are reserved for the runtime: a user table cannot be renamed into one
    (invalid_request), and the table keeps its name."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        err = await code_of(rt, oid, _sql(stmt))
        assert err.code == "invalid_request"
        assert (await afs.scratch(rt, oid, afs.Dump()))["total"] == 0


@pytest.mark.anyio
async def test_user_trigger_cannot_write_reserved_tables_through_runtime_writes(
        tmp_path: Path) -> None:
    """RT-5, RT-14, AL-1: user SQL cannot reach the runtime's _ma_ tables indirectly: a trigger on
    the runtime's _ma_meta is refused, and one on the actor's own meta (which it may create) that
    would write _ma_kv and _ma_alarm never runs with the runtime's rights when the runtime records
    its state (here: ctx.schedule)."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        t0 = rt.now_ms()

        async def plant(actor: Scratch, call: Call, arg: Any) -> Any:
            out = []
            actor.sql.exec("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT)")
            for table in ("_ma_meta", "meta"):
                try:
                    actor.sql.exec(
                        f"CREATE TRIGGER sneaky_{table.strip('_')} AFTER INSERT ON {table} BEGIN "
                        "INSERT OR REPLACE INTO _ma_kv (k, v) VALUES ('planted', '1'); "
                        "DELETE FROM _ma_alarm; END")
                except MailboxActorsError as e:
                    out.append(e.code.value)
                else:
                    out.append("created")
            return out

        planted = await afs.run(rt, oid, plant)
        assert planted[0] == "invalid_request" and planted[1] in ("created", "invalid_request")

        async def runtime_writes_meta(actor: Scratch, call: Call, arg: Any) -> Any:
            try:
                actor.sql.transaction_sync(lambda tx: actor.ctx.schedule("x", t0 + 5_000))
            except MailboxActorsError as e:
                return e.code.value
            return "scheduled"

        scheduled = await afs.run(rt, oid, runtime_writes_meta)

        async def reserved_state(actor: Scratch, call: Call, arg: Any) -> Any:
            return {"kv": actor.sql.kv.get("planted"), "alarm": actor.sql.get_alarm()}

        state = await afs.run(rt, oid, reserved_state)
        assert state["kv"] is None
        if scheduled == "scheduled":
            assert state["alarm"] == t0 + 5_000


@pytest.mark.anyio
@pytest.mark.parametrize("in_tx", [True, False], ids=["transaction", "implicit"])
async def test_database_size_limit_is_limit_exceeded(tmp_path: Path, in_tx: bool) -> None:
    """RT-7: writing past max_database_bytes is refused with limit_exceeded naming
    max_database_bytes; what was committed before stays, and the actor keeps working."""
    from mailbox_actors.platform.storage.sql import Limits

    async with TestRuntime(tmp_path, limits=Limits(max_database_bytes=200_000),
                           objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        await afs.scratch(rt, oid, afs.Put(k="kept", v="1"))

        async def fill(actor: Scratch, call: Call, arg: Any) -> Any:
            def work(sql: SqlStorage) -> None:
                for i in range(100):
                    sql.exec("INSERT INTO items (k, v) VALUES (?, ?)", f"fill{i:03d}", "x" * 10_000)
            if in_tx:
                actor.sql.transaction_sync(work)
            else:
                work(actor.sql)

        err = await code_of(rt, oid, fill)
        assert err.code == "limit_exceeded"
        assert err.details is not None and err.details["limit"] == "max_database_bytes"
        keys = (await afs.scratch(rt, oid, afs.Dump()))["keys"]
        assert "kept" in keys
        if in_tx:
            assert keys == ["kept"]
        assert await afs.scratch(rt, oid, afs.Put(k="small", v="2")) == {"k": "small"}


HERE = Path(__file__).resolve().parents[1] / "support"


SMALL = Limits(max_database_bytes=64 * 1024)


def test_actor_sql_cannot_call_fts3_tokenizer(tmp_path: Path) -> None:
    """RT-6: fts3_tokenizer takes a raw pointer; a crafted one would crash the whole node
    (SIGSEGV). It is refused, in a process of its own so a crash cannot take the tests down."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), *sys.path]))
    proc = subprocess.run([sys.executable, str(HERE / "_sql_escape_proc.py"), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr[-500:]
    assert "refused: invalid_request" in proc.stdout.splitlines()


@pytest.mark.anyio
async def test_actor_sql_cannot_reuse_the_runtimes_statements(tmp_path: Path) -> None:
    """RT-6: the table of prepared statements (which would show the runtime's statement texts)
    is refused, and so is any text carrying the runtime's token: the cached, pre-authorised
    statement that writes _ma_alarm stays the runtime's."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a", alarm_at=rt.now_ms() + 10**9)

        async def evil(actor: afs.Scratch, call: object, arg: object) -> list[str]:
            return afs.exec_outcomes(actor, (
                "SELECT sql FROM sqlite_stmt",
                f"INSERT OR REPLACE INTO _ma_alarm VALUES (1, 1) /*{actor.sql._token}*/"))

        assert await afs.run(rt, oid, evil) == ["invalid_request", "invalid_request"]


@pytest.mark.anyio
async def test_temporary_tables_cannot_escape_the_size_limit(tmp_path: Path) -> None:
    """RT-7: temporary tables live outside the file and its max_database_bytes: refused."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, limits=SMALL) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def hook(actor: afs.Scratch, call: object, arg: object) -> None:
            actor.sql.exec("CREATE TEMP TABLE big (v TEXT)")

        with pytest.raises(MailboxActorsError) as info:
            await afs.run(rt, oid, hook)
        assert info.value.code.value == "invalid_request" and "temporary" in info.value.message


def stored_keys(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as c:
        return [r[0] for r in c.execute("SELECT k FROM items ORDER BY k")]


@pytest.mark.anyio
async def test_a_transaction_sqlite_ends_itself_stays_all_or_nothing(tmp_path: Path) -> None:
    """RT-5: a statement that makes SQLite roll the whole transaction back (here the file is
    full) cannot leave half of it stored, even when the function catches that error and goes on:
    the transaction raises and nothing of it is in the file."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, limits=SMALL) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def hook(actor: afs.Scratch, call: object, arg: object) -> str:
            def fn(tx: SqlStorage) -> None:
                tx.exec("INSERT INTO items (k, v) VALUES ('a', '1')")
                try:  # too big for the file: carry on without it
                    tx.exec("INSERT INTO items (k, v) VALUES ('big', ?)", "x" * 200_000)
                except LimitExceeded:
                    pass
                tx.exec("INSERT INTO items (k, v) VALUES ('b', '1')")
            try:
                actor.sql.transaction_sync(fn)
            except MailboxActorsError as e:
                return e.code.value
            return "committed"

        assert await afs.run(rt, oid, hook) == "limit_exceeded"
        assert stored_keys(rt.node.host.path_for("scratch", oid)) == []


@pytest.mark.anyio
async def test_a_write_sqlite_rolled_back_with_another_requests_is_not_acknowledged(
        tmp_path: Path) -> None:
    """RT-5, the output gate: two requests' writes share one implicit transaction; when the
    second's statement makes SQLite roll it all back, the first is not answered as a success
    (its write is not in the file)."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, limits=SMALL) as rt:
        oid = await afs.new_scratch(rt, "a")
        go = anyio.Event()
        answers: dict[str, str] = {}

        async def b(actor: afs.Scratch, call: object, arg: object) -> str:
            await go.wait()
            actor.sql.exec("INSERT INTO items (k, v) VALUES ('b', '1')")  # implicit
            await anyio.lowlevel.checkpoint()  # c writes before this transaction commits
            return "ok"

        async def c(actor: afs.Scratch, call: object, arg: object) -> str:
            await go.wait()
            actor.sql.exec("INSERT INTO items (k, v) VALUES ('c', ?)", "x" * 200_000)
            return "ok"

        async def call(label: str, fn: afs.Hook) -> None:
            try:
                answers[label] = await afs.run(rt, oid, fn)
            except MailboxActorsError as e:
                answers[label] = e.code.value

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "b", b)
            tg.start_soon(call, "c", c)
            await anyio.wait_all_tasks_blocked()
            go.set()
        assert answers["c"] == "limit_exceeded"
        stored = stored_keys(rt.node.host.path_for("scratch", oid))
        assert (answers["b"] == "ok") == ("b" in stored), (answers, stored)


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["run#1", "50%25off", "why?not"])
async def test_data_dir_with_uri_characters_in_its_name_reactivates_evicted_actors(
        tmp_path: Path, name: str) -> None:
    """RT-2, RT-9: in a data directory whose name holds '#', '%25' or '?', evicted actors
    reactivate for requests and for their alarms, with their storage intact."""
    async with TestRuntime(tmp_path / name, idle_ms=1_000, objects=afs.ALL_OBJECTS) as rt:
        start = rt.now_ms()
        oid = await afs.new_scratch(rt, "a", alarm_at=start + 60_000)
        await afs.scratch(rt, oid, afs.Put(k="k", v="v"))
        await rt.advance(1_000)
        assert not rt.node.host.is_active("scratch", oid)
        assert await afs.scratch(rt, oid, afs.Get(k="k")) == "v"
        await rt.advance(60_000)
        assert [(s.object_id, s.now_ms) for s in afs.ALARM_LOG] == [(oid, start + 60_000)]


async def exec_all(actor: Scratch, call: Call, arg: Any) -> Any:
    return [list(r) for r in actor.sql.exec(arg)]


@pytest.mark.anyio
@pytest.mark.parametrize("query", [
    "SELECT 1; DELETE FROM",
    "DELETE FROM items; DELETE FROM",
    "DELETE FROM items; BEGIN",
])
async def test_a_script_with_a_malformed_or_refused_statement_is_invalid_request(
        tmp_path: Path, query: str) -> None:
    """RT-13: a script whose statement is malformed or refused answers invalid_request (not
    internal_error) and runs none of it."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        await afs.scratch(rt, oid, afs.Put(k="kept", v="1"))
        with pytest.raises(MailboxActorsError) as e:
            await afs.run(rt, oid, exec_all, query)
        assert e.value.code == ErrorCode.INVALID_REQUEST
        assert await afs.run(rt, oid, exec_all, "SELECT k, v FROM items") == [["kept", "1"]]


@pytest.mark.anyio
async def test_incomplete_statement_is_invalid_request(tmp_path: Path) -> None:
    """RT-5: exec with an incomplete statement answers invalid_request, not internal_error."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        with pytest.raises(MailboxActorsError) as e:
            await afs.run(rt, oid, exec_all, "INSERT INTO items (k, v) VALUES ('a',")
        assert e.value.code == ErrorCode.INVALID_REQUEST
        assert await afs.run(rt, oid, exec_all, "SELECT k FROM items") == []
