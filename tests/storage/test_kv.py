"""KV as Durable Objects' storage API (RT-15): typed values, the 2 MB key+value limit, batches of
up to 128 keys, ``start_after``, ``delete_all``."""

from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.runtime.actor import Call
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError

VALUES: dict[str, Any] = {
    "bytes": b"\x00\xffbinary",
    "str": "text",
    "int": 42,
    "bigint": 2**80,
    "float": 1.5,
    "bool": True,
    "none": None,
    "list": [1, "two", [3]],
    "tuple": (1, ("nested", b"x"), [2, (3,)]),
    "dict": {"a": (1, 2), "b": {"c": b"d"}},
    "datetime": dt.datetime(2026, 12, 1, 10, 0, 0, 123456),
    "aware": dt.datetime(2026, 12, 1, 10, 0, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
}


async def kv_run(rt: TestRuntime, oid: str, fn: Any, arg: Any = None) -> Any:
    return await afs.run(rt, oid, fn, arg)


async def kv_error(rt: TestRuntime, oid: str, fn: Any, arg: Any = None) -> MailboxActorsError:
    with pytest.raises(MailboxActorsError) as e:
        await afs.run(rt, oid, fn, arg)
    return e.value


async def keys(actor: Scratch, call: Call, arg: Any) -> Any:
    return list(actor.sql.kv.list())


@pytest.mark.anyio
async def test_values_keep_their_type_across_a_restart(tmp_path: Path) -> None:
    """RT-15: bytes stay bytes, tuples tuples, datetimes datetimes (naive or with their offset),
    ints past 64 bits ints; str, float, bool, None, list and dict as written, nested or not, read
    back by the same node and by a new one on the same directory."""
    seen: dict[str, Any] = {}

    async def put_and_read(actor: Scratch, call: Call, arg: Any) -> Any:
        for k, v in VALUES.items():
            actor.sql.kv.put(k, v)
        seen.update(actor.sql.kv.get(list(VALUES)))
        seen["none_present"] = "none" in actor.sql.kv.list()

    async def read(actor: Scratch, call: Call, arg: Any) -> Any:
        seen.clear()
        seen.update(actor.sql.kv.get(list(VALUES)))

    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        await kv_run(rt, oid, put_and_read)
        assert seen.pop("none_present") is True
        for k, v in VALUES.items():
            assert seen[k] == v and type(seen[k]) is type(v), k
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        await kv_run(rt, oid, read)
        assert seen == VALUES
        assert type(seen["tuple"][1]) is tuple and type(seen["bytes"]) is bytes


@pytest.mark.anyio
async def test_key_plus_value_up_to_2_mb(tmp_path: Path) -> None:
    """RT-15: a key of 10 KB is fine (Durable Objects' SQLite storage takes keys and values up to
    2 MB together); key plus value over 2 MB is limit_exceeded naming max_value_bytes, and the
    value is not stored."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def put(actor: Scratch, call: Call, arg: Any) -> Any:
            key_len, value_len = arg
            actor.sql.kv.put("k" * key_len, b"v" * value_len)

        await kv_run(rt, oid, put, [10_000, 10])
        err = await kv_error(rt, oid, put, [1_000_000, 1_000_100])
        assert err.code == "limit_exceeded" and err.details == {"limit": "max_value_bytes",
                                                                "max": 2_000_000}
        assert [len(k) for k in await kv_run(rt, oid, keys)] == [10_000]


@pytest.mark.anyio
async def test_get_put_delete_batches_of_up_to_128_keys(tmp_path: Path) -> None:
    """RT-15: get, put and delete take one key or up to 128: get answers the keys found, put a
    dict stores them all, delete a list says how many existed. 129 keys is limit_exceeded naming
    max_kv_keys_per_call; a batch with one entry over the size limit or a key that is not a string
    stores none of it."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def batch(actor: Scratch, call: Call, arg: Any) -> Any:
            kv = actor.sql.kv
            kv.put({f"k{i:03}": i for i in range(128)})
            got = kv.get([f"k{i:03}" for i in range(0, 200, 10)])
            deleted = kv.delete(["k000", "k001", "missing"])
            return {"got": got, "deleted": deleted, "count": len(kv.list())}

        out = await kv_run(rt, oid, batch)
        assert out["got"] == {f"k{i:03}": i for i in range(0, 128, 10)}
        assert (out["deleted"], out["count"]) == (2, 126)

        async def too_many(actor: Scratch, call: Call, arg: Any) -> Any:
            kv = actor.sql.kv
            if arg == "put":
                kv.put({f"n{i}": i for i in range(129)})
            elif arg == "get":
                kv.get([f"k{i:03}" for i in range(129)])
            elif arg == "delete":
                kv.delete([f"k{i:03}" for i in range(129)])
            elif arg == "oversize":
                kv.put({"small": 1, "huge": b"x" * 2_000_001})
            else:
                kv.put({"fine": 1, 7: 2})  # type: ignore[dict-item]

        for op in ("put", "get", "delete"):
            err = await kv_error(rt, oid, too_many, op)
            assert err.code == "limit_exceeded"
            assert err.details == {"limit": "max_kv_keys_per_call", "max": 128}
        assert (await kv_error(rt, oid, too_many, "oversize")).code == "limit_exceeded"
        assert (await kv_error(rt, oid, too_many, "bad key")).code == "invalid_request"
        assert len(await kv_run(rt, oid, keys)) == 126  # nothing of a refused batch was stored


@pytest.mark.anyio
async def test_list_with_start_after_prefix_end_limit_reverse(tmp_path: Path) -> None:
    """RT-15: list(prefix, start, start_after, end, limit, reverse) as Durable Objects' list:
    start_after excludes its key, start includes it, end is exclusive; start and start_after
    together, a limit below 1 or a bound that is not a string is invalid_request."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def listing(actor: Scratch, call: Call, arg: Any) -> Any:
            kv = actor.sql.kv
            kv.put({k: k.upper() for k in ("a/1", "a/2", "a/3", "a%", "b/1", "c")})
            return {
                "after": list(kv.list(start_after="a/1", end="b/1")),
                "start": list(kv.list(start="a/1", limit=2)),
                "prefix_after": kv.list(prefix="a/", start_after="a/1"),
                "prefix_literal": list(kv.list(prefix="a%")),
                "reverse": list(kv.list(reverse=True, start_after="a/2", limit=2)),
            }

        out = await kv_run(rt, oid, listing)
        assert out["after"] == ["a/2", "a/3"]
        assert out["start"] == ["a/1", "a/2"]
        assert out["prefix_after"] == {"a/2": "A/2", "a/3": "A/3"}
        assert out["prefix_literal"] == ["a%"]
        assert out["reverse"] == ["c", "b/1"]

        async def bad(actor: Scratch, call: Call, arg: Any) -> Any:
            actor.sql.kv.list(**arg)

        for kwargs in ({"start": "a", "start_after": "b"}, {"limit": 0}, {"prefix": 3}):
            assert (await kv_error(rt, oid, bad, kwargs)).code == "invalid_request"


@pytest.mark.anyio
async def test_delete_all_removes_storage_the_alarm_and_at_last_the_file(tmp_path: Path) -> None:
    """RT-15: delete_all removes every key, every table of the actor's own and its alarm, and
    empties the runtime's outbox (kept: the runtime's tables are the file's layout); once the
    actor is idle its file is gone, and the object is as one never created (not found until
    init)."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, idle_ms=1_000) as rt:
        oid = await afs.new_scratch(rt, "a", alarm_at=rt.now_ms() + 60_000)
        await afs.scratch(rt, oid, afs.Put(k="row", v="1"))
        path = rt.node.host.path_for("scratch", oid)

        async def wipe(actor: Scratch, call: Call, arg: Any) -> Any:
            actor.sql.kv.put("key", 1)
            actor.sql.kv.delete_all()
            tables = [r[0] for r in actor.sql.exec(
                "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE '\\_%' "
                "ESCAPE '\\'")]
            events = actor.sql.exec("SELECT count(*) FROM outbox").one()[0]
            return {"tables": tables, "kv": actor.sql.kv.list(), "alarm": actor.sql.get_alarm(),
                    "events": events}

        assert await kv_run(rt, oid, wipe) == {"tables": ["outbox"], "kv": {}, "alarm": None,
                                               "events": 0}
        await rt.advance(2_000)  # idle: evicted
        assert not path.exists()
        await rt.advance(60_000)
        assert afs.ALARM_LOG == []  # the alarm went with the rest
        with pytest.raises(MailboxActorsError) as e:
            await afs.scratch(rt, oid, afs.Dump())
        assert e.value.code == "tenant_not_found"
        again = await afs.new_scratch(rt, "a")
        assert again == oid and (await afs.scratch(rt, oid, afs.Dump()))["keys"] == []


@pytest.mark.anyio
async def test_values_of_the_earlier_json_format_are_still_read(tmp_path: Path) -> None:
    """RT-15: a value the previous KV format stored as JSON reads back as it was written."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        path = rt.node.host.path_for("scratch", oid)
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO _ma_kv (k, v) VALUES ('old', ?)", (b'{"n":[1,2],"s":"x"}',))
    conn.close()
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        async def read(actor: Scratch, call: Call, arg: Any) -> Any:
            return actor.sql.kv.get("old")
        assert await kv_run(rt, oid, read) == {"n": [1, 2], "s": "x"}
