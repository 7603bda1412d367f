"""What a freeing transaction removes (a deleted message, an erase: RPC-4, IN-6) leaves no copy
in the actor's files: not in the database file's freed pages, not in older WAL frames. Read as
an attacker with the files would read them: their raw bytes, the database file and its WAL."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.runtime.actor import Call
from mailbox_actors.testing import TestRuntime

pytestmark = pytest.mark.anyio
GONE = "zqxgonesecret"  # removed content: never in either file afterwards
KEPT = "zqxkeptvalue"  # kept content: still there


def _copies(path: Path, word: str) -> int:
    """How often ``word`` appears in the raw bytes of the database file and its WAL."""
    files = [path, Path(f"{path}-wal")]
    return sum(p.read_bytes().count(word.encode()) for p in files if p.exists())


def _wal_bytes(path: Path) -> int:
    return Path(f"{path}-wal").stat().st_size


def _checkpointed_copies(path: Path, word: str) -> int:
    """How often ``word`` is in the database file once its WAL is checkpointed beside the
    actor, as a copy of the files would be."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    return path.read_bytes().count(word.encode())


async def _put_rows(rt: TestRuntime, oid: str) -> None:
    async def put(actor: Scratch, call: Call, arg: Any) -> None:
        for n in range(40):  # transactions of their own: many WAL frames hold the words
            row = (f"k{n:03d}", f"{GONE if n % 2 else KEPT} " * 200)
            actor.sql.transaction_sync(
                lambda tx, row=row: tx.exec("INSERT INTO items (k, v) VALUES (?, ?)", *row))

    await afs.run(rt, oid, put)


async def test_a_freeing_delete_leaves_no_copy_in_the_file_or_its_wal(tmp_path: Path) -> None:
    """RPC-4: after ``transaction_freeing`` deleted rows, their text is in neither file's bytes
    (freed pages are zeroed, the WAL checkpointed and truncated); the rows kept are intact."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        await _put_rows(rt, oid)
        path = Path(rt.node.host.path_for("scratch", oid))
        assert _copies(path, GONE) > 0 and _copies(path, KEPT) > 0

        async def delete(actor: Scratch, call: Call, arg: Any) -> int:
            actor.sql.transaction_freeing(
                lambda tx: tx.exec("DELETE FROM items WHERE v LIKE ?", f"{GONE}%"))
            return int(actor.sql.exec("SELECT count(*) FROM items").one()["count(*)"])

        assert await afs.run(rt, oid, delete) == 20
        assert _copies(path, GONE) == 0
        assert _copies(path, KEPT) > 0
        assert _wal_bytes(path) == 0


async def test_nested_in_an_ordinary_transaction_it_zeroes_what_it_frees(
        tmp_path: Path) -> None:
    """The difference the freeing transaction makes: nested in an ordinary transaction, it
    zeroes the pages it frees, so once the WAL is checkpointed the file holds no copy; the same
    delete in an ordinary transaction leaves the text in the file's free pages. SQLite builds
    differ in whether they zero freed pages always (Debian's does): both actors' connections
    are set as a build that does not would open them."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        freeing, plain = await afs.new_scratch(rt, "a"), await afs.new_scratch(rt, "b")
        for oid in (freeing, plain):
            await _put_rows(rt, oid)

        async def nested(actor: Scratch, call: Call, arg: Any) -> None:
            actor.sql._sys("PRAGMA secure_delete = 0").fetchall()
            def outer(tx: Any) -> None:
                tx.transaction_freeing(
                    lambda t: t.exec("DELETE FROM items WHERE v LIKE ?", f"{GONE}%"))
            actor.sql.transaction_sync(outer)

        async def ordinary(actor: Scratch, call: Call, arg: Any) -> None:
            actor.sql._sys("PRAGMA secure_delete = 0").fetchall()
            actor.sql.transaction_sync(
                lambda tx: tx.exec("DELETE FROM items WHERE v LIKE ?", f"{GONE}%"))

        await afs.run(rt, freeing, nested)
        await afs.run(rt, plain, ordinary)
        left = {}
        for oid in (freeing, plain):
            path = Path(rt.node.host.path_for("scratch", oid))
            left[oid] = _checkpointed_copies(path, GONE)
            assert _checkpointed_copies(path, KEPT) > 0
        assert left[freeing] == 0
        assert left[plain] > 0  # what a plain delete leaves behind

        async def setting(actor: Scratch, call: Call, arg: Any) -> int:
            return int(actor.sql._sys("PRAGMA secure_delete").fetchone()[0])

        assert await afs.run(rt, freeing, setting) == 0  # the connection's own setting is back


# A checkpoint that waited for the reader would wait the hour out, in C: only the thread method
# ends it (the test run stops with every stack printed).
@pytest.mark.timeout(60, method="thread")
async def test_a_reader_holding_a_snapshot_does_not_hold_the_delete(tmp_path: Path) -> None:
    """A reader beside the runtime (an inspection read, a backup) holding an older snapshot
    while a freeing delete commits: the delete answers at once, however long the connection's
    busy timeout (set to an hour here), and is kept; the reader's frames stay in the WAL, and
    the actor's next freeing transaction, the reader gone, takes them."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        await _put_rows(rt, oid)
        path = Path(rt.node.host.path_for("scratch", oid))
        reader = sqlite3.connect(path, isolation_level=None)
        try:
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM items").fetchall()  # its snapshot, held

            async def delete(actor: Scratch, call: Call, arg: Any) -> list[int]:
                actor.sql._sys("PRAGMA busy_timeout = 3600000").fetchall()
                actor.sql.transaction_freeing(
                    lambda tx: tx.exec("DELETE FROM items WHERE v LIKE ?", f"{GONE}%"))
                left = actor.sql.exec("SELECT count(*) AS n FROM items").one()["n"]
                return [int(left), int(actor.sql._sys("PRAGMA busy_timeout").fetchone()[0])]

            assert await afs.run(rt, oid, delete) == [20, 3_600_000]  # as JSON carries it
            assert _wal_bytes(path) > 0  # the reader still needs older frames
        finally:
            reader.close()

        async def delete_nothing(actor: Scratch, call: Call, arg: Any) -> None:
            actor.sql.transaction_freeing(lambda tx: tx.exec("DELETE FROM items WHERE k = 'x'"))

        await afs.run(rt, oid, delete_nothing)
        assert _copies(path, GONE) == 0 and _wal_bytes(path) == 0
