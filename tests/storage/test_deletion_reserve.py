"""The pages kept under max_database_bytes for transactions that make room (RT-7): ordinary
writes stop short of the limit, ``transaction_freeing`` may fill the rest and never past the limit,
and once it grew the file, ordinary writes still cannot take the free pages past their own limit
(explicit and implicit transactions alike), while they may delete."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.platform.storage.limits import RESERVE_PAGES, Limits, page_limits
from mailbox_actors.platform.storage.opening import open_storage
from mailbox_actors.platform.storage.runtime_access import RuntimeStorage
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.runtime.actor import Call
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError

pytestmark = pytest.mark.anyio
LIMITS = Limits(max_database_bytes=400_000)
ROW = "x" * 3_000  # about one row a page


def _pages(sql: SqlStorage) -> tuple[int, int]:
    count = sql._sys("PRAGMA page_count").fetchone()[0]
    return int(count), int(count - sql._sys("PRAGMA freelist_count").fetchone()[0])


def _put(sql: SqlStorage, key: str) -> None:
    sql.exec("INSERT INTO items (k, v) VALUES (?, ?)", key, ROW)


def _fill(sql: SqlStorage, prefix: str, freeing: bool = False) -> int:
    """Rows put one transaction each until the storage refuses: how many went in."""
    for n in range(1_000):
        key = f"{prefix}{n:04d}"
        try:
            if freeing:
                sql.transaction_freeing(lambda tx: _put(tx, key))  # noqa: B023 (run at once)
            else:
                sql.transaction_sync(lambda tx: _put(tx, key))  # noqa: B023 (run at once)
        except MailboxActorsError as e:
            assert e.code == "limit_exceeded"
            assert e.details is not None and e.details["limit"] == "max_database_bytes"
            return n
    raise AssertionError("never refused")


def test_the_reserve_is_a_sixteenth_of_a_small_limit_and_64_pages_of_a_large_one() -> None:
    """RT-7: ordinary writes stop 64 pages (256 KiB) short of the limit, or a sixteenth of a
    limit under 4 MiB; the limit itself is max_database_bytes's pages."""
    assert page_limits(Limits()) == ((10 << 30) // 4096 - RESERVE_PAGES, (10 << 30) // 4096)
    assert page_limits(LIMITS) == (97 - 6, 97)
    assert page_limits(Limits(max_database_bytes=4096)) == (1, 1)


async def test_only_a_freeing_transaction_fills_the_reserve(tmp_path: Path) -> None:
    """RT-7: filled by ordinary writes, the file is at the ordinary limit; a freeing
    transaction writes on into the reserve, up to max_database_bytes and no further; then
    ordinary writes are refused, explicit or implicit, even where SQLite has free pages past
    their limit, while an ordinary delete commits; once deletes brought the pages in use under
    the ordinary limit, ordinary writes go in again."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, limits=LIMITS) as rt:
        oid = await afs.new_scratch(rt, "a")
        cap, hard = page_limits(LIMITS)

        async def fill(actor: Scratch, call: Call, arg: Any) -> dict[str, Any]:
            sql = actor.sql
            ordinary = _fill(sql, "a")
            at_cap = _pages(sql)
            reserve = _fill(sql, "b", freeing=True)
            at_limit = _pages(sql)
            # Free pages past the ordinary limit: the reserve's rows deleted again.
            sql.transaction_freeing(lambda tx: tx.exec("DELETE FROM items WHERE k >= 'b'"))
            after_freeing = _pages(sql)
            return {"ordinary": ordinary, "at_cap": at_cap, "reserve": reserve,
                    "at_limit": at_limit, "after_freeing": after_freeing}

        got = await afs.run(rt, oid, fill)
        assert got["ordinary"] > 20 and got["at_cap"][0] <= cap
        assert got["reserve"] >= 1 and got["at_limit"][0] <= hard
        pages, used = got["after_freeing"]
        assert pages > cap and used <= cap  # free pages past the ordinary limit

        async def ordinary(actor: Scratch, call: Call, arg: Any) -> dict[str, Any]:
            sql = actor.sql
            refused = _fill(sql, "c")  # stops at the ordinary limit of pages in use
            return {"refused_after": refused, "pages": _pages(sql)}

        got = await afs.run(rt, oid, ordinary)
        assert got["pages"][1] <= cap and got["pages"][0] <= hard

        async def implicit(actor: Scratch, call: Call, arg: Any) -> None:
            for n in range(50):
                _put(actor.sql, f"d{n:04d}")  # outside a transaction: the implicit one

        with pytest.raises(MailboxActorsError) as info:
            await afs.run(rt, oid, implicit)
        assert info.value.code == "limit_exceeded"

        async def delete_some(actor: Scratch, call: Call, arg: Any) -> tuple[int, int]:
            actor.sql.transaction_sync(
                lambda tx: tx.exec("DELETE FROM items WHERE k IN "
                                   "(SELECT k FROM items ORDER BY k LIMIT 10)"))
            return _pages(actor.sql)

        pages, used = await afs.run(rt, oid, delete_some)
        assert used < cap

        async def one_more(actor: Scratch, call: Call, arg: Any) -> tuple[int, int]:
            actor.sql.transaction_sync(lambda tx: _put(tx, "e0000"))
            return _pages(actor.sql)

        pages, used = await afs.run(rt, oid, one_more)
        assert used <= cap and pages <= hard


async def test_the_ordinary_limit_holds_after_the_actor_opens_again(tmp_path: Path) -> None:
    """RT-7: the free pages a freeing transaction left past the ordinary limit stay out of
    ordinary writes' reach in the next activation too (the file is looked at again)."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, limits=LIMITS) as rt:
        oid = await afs.new_scratch(rt, "a")
        cap, hard = page_limits(LIMITS)

        async def grow(actor: Scratch, call: Call, arg: Any) -> tuple[int, int]:
            _fill(actor.sql, "a")
            _fill(actor.sql, "b", freeing=True)
            actor.sql.transaction_freeing(lambda tx: tx.exec("DELETE FROM items WHERE k >= 'b'"))
            return _pages(actor.sql)

        pages, used = await afs.run(rt, oid, grow)
        assert pages > cap
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, limits=LIMITS) as rt:

        async def again(actor: Scratch, call: Call, arg: Any) -> tuple[int, int]:
            _fill(actor.sql, "c")
            return _pages(actor.sql)

        pages, used = await afs.run(rt, oid, again)
        assert used <= cap and pages <= hard


@pytest.mark.parametrize("implicit", [False, True])
def test_the_page_limit_is_set_at_the_first_write_not_at_the_open(
        tmp_path: Path, implicit: bool) -> None:
    """RT-7: an open that only reads sets no page limit (its PRAGMA is a read transaction of its
    own); the connection's first write transaction, explicit or implicit, sets the ordinary
    limit before it writes, and a file reopened and filled stops there."""
    path = tmp_path / "a.sqlite"

    def opened() -> SqlStorage:
        sql = open_storage(path, create=True, durability="normal", limits=LIMITS,
                           now_ms=lambda: 0)
        assert sql is not None
        return sql

    def max_pages(sql: SqlStorage) -> int:
        return int(sql._sys("PRAGMA max_page_count").fetchone()[0])

    sql = opened()
    sql.exec("CREATE TABLE items (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
    sql.flush()
    RuntimeStorage(sql).close()
    sql = opened()
    assert sql.exec("SELECT count(*) FROM items").one()[0] == 0
    assert max_pages(sql) > page_limits(LIMITS)[1]  # SQLite's own: nothing set by the open
    if implicit:
        _put(sql, "first")
        sql.flush()
    else:
        sql.transaction_sync(lambda tx: _put(tx, "first"))
    assert max_pages(sql) == page_limits(LIMITS)[0]
    RuntimeStorage(sql).close()
    sql = opened()
    assert _fill(sql, "k") > 0
    assert _pages(sql)[0] <= page_limits(LIMITS)[0]
    RuntimeStorage(sql).close()
