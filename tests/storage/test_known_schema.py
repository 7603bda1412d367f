"""A file whose schema is its class's migrations' alone is screened from what the process learnt
on other files of that schema (``platform/storage/known.py``): the same refusals, the same row
counts, and a file whose schema actor SQL changed is screened on its own again."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.platform.storage.known import SOURCE_KEY
from mailbox_actors.runtime.actor import Call
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _clean() -> None:
    afs.reset_state()


def _source(path: Path) -> list[Any]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT v FROM _ma_meta WHERE k = ?", (SOURCE_KEY,)).fetchall()
    finally:
        conn.close()


async def _outcomes(rt: TestRuntime, oid: str, queries: tuple[str, ...]) -> list[str]:
    async def go(actor: Scratch, call: Call, arg: Any) -> Any:
        return afs.exec_outcomes(actor, arg)
    return list(await afs.run(rt, oid, go, queries))


def _cold(rt: TestRuntime, oid: str) -> None:
    host = rt.node.host
    act = host._active.get(("scratch", oid))
    if act is not None:
        host.evict(act)


async def test_a_text_one_file_ran_is_refused_where_actor_sql_made_it_read_the_runtimes_keys(
        tmp_path: Path) -> None:
    """RT-14, RT-6: ``SELECT * FROM items`` runs in one Scratch (its schema its migrations'),
    so the process knows the text; in another Scratch whose own SQL replaced ``items`` by a view
    of the runtime's ``_ma_meta`` the same text is refused, in that activation and after the file
    is opened again, and that file no longer claims its migrations' schema."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        a = await afs.new_scratch(rt, "a")
        b = await afs.new_scratch(rt, "b")
        host = rt.node.host
        assert _source(host.path_for("scratch", a)) and _source(host.path_for("scratch", b))
        _cold(rt, a)
        assert await _outcomes(rt, a, ("SELECT * FROM items",)) == ["ran"]
        changed = await _outcomes(rt, b, ("DROP TABLE items",
                                          "CREATE VIEW items AS SELECT k, v FROM _ma_meta"))
        assert changed == ["ran", "ran"]  # the view is made: reading through it is refused
        assert await _outcomes(rt, b, ("SELECT * FROM items",)) == ["invalid_request"]
        _cold(rt, b)
        assert await _outcomes(rt, b, ("SELECT * FROM items",)) == ["invalid_request"]
        assert _source(host.path_for("scratch", b)) == []
        _cold(rt, a)
        assert await _outcomes(rt, a, ("SELECT * FROM items",)) == ["ran"]


async def test_refused_statements_stay_refused_on_every_file_of_a_known_schema(
        tmp_path: Path) -> None:
    """RT-14, RT-5: statements touching the runtime's tables, or refused by their first word,
    are refused in the first actor of the schema and in every actor opened after it."""
    queries = ("SELECT * FROM _ma_meta", "UPDATE _ma_alarm SET at_ms = 1", "SELECT * FROM _ma_kv",
               "PRAGMA journal_mode = DELETE", "SELECT k FROM items")
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oids = [await afs.new_scratch(rt, f"s{i}") for i in range(3)]
        for _round in range(2):
            for oid in oids:
                _cold(rt, oid)
                assert await _outcomes(rt, oid, queries) == ["invalid_request"] * 4 + ["ran"]


async def test_rows_written_are_counted_alike_on_every_file_of_a_known_schema(
        tmp_path: Path) -> None:
    """RT-13: an INSERT into a table with an index counts its table row and its index row on the
    file where the process first ran it and on the others, which take what it writes from it."""
    async def count(actor: Scratch, call: Call, arg: Any) -> Any:
        c = actor.sql.exec("INSERT INTO fired (n, at_ms, scheduled_ms, retry_count) "
                           "VALUES (?, 1, 1, 0)", arg)
        return c.rows_written

    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oids = [await afs.new_scratch(rt, f"w{i}") for i in range(3)]
        written = []
        for i, oid in enumerate(oids):
            _cold(rt, oid)
            written.append(await afs.run(rt, oid, count, 1000 + i))
        assert written == [written[0]] * 3 and written[0] >= 1

        async def index(actor: Scratch, call: Call, arg: Any) -> Any:
            actor.sql.exec("CREATE INDEX fired_at ON fired (at_ms)")
            return None
        await afs.run(rt, oids[2], index)
        # The changed file counts the new index; the others still count as before.
        assert await afs.run(rt, oids[2], count, 2000) == written[0] + 1
        _cold(rt, oids[0])
        assert await afs.run(rt, oids[0], count, 2001) == written[0]


async def test_a_schema_change_rolled_back_leaves_the_file_as_its_migrations_made_it(
        tmp_path: Path) -> None:
    """RT-5, RT-8: a CREATE TABLE in a transaction that then raises is undone with the record
    that the schema changed; delete_all removes the record with everything else, and the next
    init makes the file its migrations' again."""
    async def create_then_fail(actor: Scratch, call: Call, arg: Any) -> Any:
        def body(tx: Any) -> None:
            tx.exec("CREATE TABLE extra (x)")
            raise RuntimeError("no")
        try:
            actor.sql.transaction_sync(body)
        except RuntimeError:
            pass
        return None

    async def wipe(actor: Scratch, call: Call, arg: Any) -> Any:
        actor.sql.delete_all()
        return None

    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "r")
        path = rt.node.host.path_for("scratch", oid)
        before = _source(path)
        await afs.run(rt, oid, create_then_fail)
        _cold(rt, oid)
        assert _source(path) == before != []
        async def tables(actor: Scratch, call: Call, arg: Any) -> Any:
            return [r[0] for r in actor.sql.exec(
                "SELECT name FROM sqlite_schema WHERE name = 'extra'")]
        assert await afs.run(rt, oid, tables) == []
        await afs.run(rt, oid, wipe)
        _cold(rt, oid)
        oid2 = await afs.new_scratch(rt, "r")
        assert oid2 == oid and _source(path) == before


# ---- a connection that stopped using the schema's facts (review) ----------------------------

# Either of these leaves the connection screening every text, the schema's facts dropped.
FORGETS = {
    "script": ("SELECT 1; SELECT 2",),
    "33_new_texts": tuple(f"SELECT {i} AS c" for i in range(33)),
}


def _owner(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("SELECT v FROM _ma_meta WHERE k = 'owner_tenant'").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize("forget", sorted(FORGETS))
async def test_a_view_of_the_runtimes_keys_stays_refused_after_the_file_is_opened_again(
        tmp_path: Path, forget: str) -> None:
    """RT-14, RT-6: in a Scratch whose connection stopped using the schema's facts, actor SQL
    replaces ``items`` by a view of ``_ma_meta``; the file loses its ``schema_source`` claim, and
    after it is opened again ``SELECT * FROM items`` (a text another file ran) is refused."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        a = await afs.new_scratch(rt, "a")
        b = await afs.new_scratch(rt, "b")
        _cold(rt, a)
        assert await _outcomes(rt, a, ("SELECT * FROM items",)) == ["ran"]  # a known text now
        _cold(rt, b)
        assert set(await _outcomes(rt, b, FORGETS[forget])) == {"ran"}
        assert await _outcomes(rt, b, ("DROP TABLE items",
                                       "CREATE VIEW items AS SELECT k, v FROM _ma_meta")) \
            == ["ran", "ran"]
        assert not _source(rt.node.host.path_for("scratch", b))
        _cold(rt, b)
        assert await _outcomes(rt, b, ("SELECT * FROM items",)) == ["invalid_request"]


async def test_a_trigger_of_the_actor_cannot_rewrite_the_owner_after_the_file_is_opened_again(
        tmp_path: Path) -> None:
    """RT-14, RT-3: after a script, a Scratch's SQL creates a trigger that would rewrite the
    runtime's ``owner_tenant``; once the file is opened again, an INSERT another file ran (so a
    known text) fires it and is refused, and the owner in ``_ma_meta`` is unchanged."""
    async def insert(actor: Scratch, call: Call, arg: Any) -> Any:
        actor.sql.exec("INSERT INTO fired (n, at_ms, scheduled_ms, retry_count) "
                       "VALUES (?, 1, 1, 0)", arg)
        return None

    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        a = await afs.new_scratch(rt, "a")
        b = await afs.new_scratch(rt, "b")
        path_b = rt.node.host.path_for("scratch", b)
        owner = _owner(path_b)
        _cold(rt, a)
        await afs.run(rt, a, insert, 1)
        _cold(rt, b)
        assert await _outcomes(rt, b, ("SELECT 1; SELECT 2",
                                       "CREATE TRIGGER t AFTER INSERT ON fired BEGIN UPDATE "
                                       "_ma_meta SET v = 'mallory' WHERE k = 'owner_tenant'; END"
                                       )) == ["ran", "ran"]
        _cold(rt, b)
        with pytest.raises(MailboxActorsError) as refused:
            await afs.run(rt, b, insert, 2)
        assert refused.value.code is ErrorCode.INVALID_REQUEST
        assert _owner(path_b) == owner
