"""A connection that stopped using what the process learnt of its schema (after a script of
several statements, or after preparing many texts of its own) still drops the file's claim to its
migrations' schema when actor SQL changes that schema (``platform/storage/known.py``): otherwise
the file's next activation would run texts learnt on other files with the authorizer off, and a
view or trigger the actor made could read or write the runtime's ``_ma_meta``."""

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

# Either of these leaves the connection screening every text, the schema's facts dropped.
FORGETS = {
    "script": ("SELECT 1; SELECT 2",),
    "33_new_texts": tuple(f"SELECT {i} AS c" for i in range(33)),
}


@pytest.fixture(autouse=True)
def _clean() -> None:
    afs.reset_state()


def _meta(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT k, v FROM _ma_meta").fetchall())
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
        assert SOURCE_KEY not in _meta(rt.node.host.path_for("scratch", b))
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
        owner = _meta(path_b)["owner_tenant"]
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
        assert _meta(path_b)["owner_tenant"] == owner
