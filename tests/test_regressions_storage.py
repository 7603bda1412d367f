"""Regression tests for storage defects found in review (RT-4, RT-5, RT-9, AL-4, REL-4): a file
that cannot be opened for a moment, data directories with URI characters in their names, descriptor
leaks on corrupt files, the output gate before calls to other actors, and several statements in one
exec."""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.runtime.actor import Call
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

HOUR = 3_600_000


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    afs.reset_state()
    yield
    afs.reset_state()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) - 1  # less the one listdir itself holds


@contextlib.contextmanager
def no_free_descriptors() -> Iterator[None]:
    """Lower RLIMIT_NOFILE to the descriptors in use, so no file can be opened until the block
    ends; the limit is restored on the way out."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held: list[int] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_fds(), hard))
    try:
        # Fill any gaps below the limit (descriptors closed earlier), so every open fails.
        for _ in range(4_096):
            try:
                held.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for fd in held:
            os.close(fd)


# ---- RT-9, AL-4: a file that cannot be opened for a moment -----------------------------------


@pytest.mark.anyio
async def test_file_that_cannot_be_opened_for_a_moment_is_unavailable_and_keeps_its_alarm(
        tmp_path: Path) -> None:
    """RT-9, AL-4: an evicted actor whose file cannot be opened for a moment (no descriptors left)
    answers unavailable, keeps its alarm in the scheduler and the index, and the alarm fires once
    descriptors are back."""
    async with TestRuntime(tmp_path, idle_ms=1_000, objects=afs.ALL_OBJECTS) as rt:
        sched = rt.node.scheduler
        assert sched is not None
        start = rt.now_ms()
        oid = await afs.new_scratch(rt, "x", alarm_at=start + 10_000)
        await afs.scratch(rt, oid, afs.Put(k="a", v="1"))
        await rt.advance(1_000)
        assert not rt.node.host.is_active("scratch", oid)

        with no_free_descriptors():
            with pytest.raises(MailboxActorsError) as e:
                await afs.scratch(rt, oid, afs.Get(k="a"))
            await rt.advance(9_000)  # the alarm comes due while the file still cannot be opened
        assert e.value.code == ErrorCode.UNAVAILABLE and e.value.retryable
        assert afs.ALARM_LOG == []
        sched.flush_index()
        assert sched.pending(("scratch", oid)) is not None
        assert ("scratch", oid) in sched.index.load()

        await rt.advance(HOUR)
        assert [s.object_id for s in afs.ALARM_LOG] == [oid]
        assert await afs.scratch(rt, oid, afs.Get(k="a")) == "1"
        assert await afs.scratch(rt, oid, afs.GetAlarm()) is None


# ---- RT-2: data directory names --------------------------------------------------------------


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


# ---- REL-4: corrupt files leak no descriptors ------------------------------------------------


def overwrite_with_garbage(path: Path) -> None:
    for extra in ("-wal", "-shm"):
        Path(str(path) + extra).unlink(missing_ok=True)
    path.write_bytes(b"garbage" * 1_000)


@pytest.mark.anyio
async def test_repeated_calls_to_a_corrupt_file_leave_no_descriptor_open(tmp_path: Path) -> None:
    """REL-4: every call to an actor whose file is corrupt answers internal_error and leaves no file
    descriptor open, even with the garbage collector off."""
    async with TestRuntime(tmp_path, idle_ms=1_000, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "bad")
        await rt.advance(1_000)
        assert not rt.node.host.is_active("scratch", oid)
        overwrite_with_garbage(rt.node.host.path_for("scratch", oid))

        codes: set[str] = set()
        gc.disable()
        try:
            before = open_fds()
            for _ in range(100):
                with pytest.raises(MailboxActorsError) as e:
                    await afs.scratch(rt, oid, afs.Get(k="a"))
                codes.add(e.value.code)
            after = open_fds()
        finally:
            gc.enable()
        assert codes == {ErrorCode.INTERNAL_ERROR}
        assert after == before


# ---- RT-4: the output gate before calls to other actors --------------------------------------


def committed_rows(path: str) -> int:
    """Rows of ``items`` committed in the actor file at ``path``, read through a connection of
    its own (read-only)."""
    uri = Path(path).absolute().as_uri() + "?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        return int(conn.execute("SELECT count(*) FROM items").fetchone()[0])


@pytest.mark.anyio
async def test_write_outside_a_transaction_is_committed_before_another_actor_gets_the_call(
        tmp_path: Path) -> None:
    """RT-4: an actor that writes outside transaction_sync and then calls another actor has its
    write committed before the other actor receives the call (the output gate)."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        a = await afs.new_scratch(rt, "a")
        b = await afs.new_scratch(rt, "b")
        path_a = rt.node.host.path_for("scratch", a)

        async def count_committed(actor: Scratch, call: Call, arg: Any) -> Any:
            return committed_rows(arg)  # runs in b: what a's file holds by now

        peek = afs.hook(count_committed)

        async def write_then_call(actor: Scratch, call: Call, arg: Any) -> Any:
            actor.sql.exec("INSERT INTO items (k, v) VALUES ('x', '1')")  # implicit transaction
            return await actor.ctx.call("scratch", b, afs.Run(hook=peek, arg=str(path_a)),
                                        tenant_id=afs.TENANT)

        assert await afs.run(rt, a, write_then_call) == 1
        assert await afs.scratch(rt, a, afs.Get(k="x")) == "1"


# ---- RT-5: one statement per exec ------------------------------------------------------------


async def exec_all(actor: Scratch, call: Call, arg: Any) -> Any:
    return [list(r) for r in actor.sql.exec(arg)]


@pytest.mark.anyio
@pytest.mark.parametrize("query", [
    "SELECT 1; DELETE FROM items",
    "INSERT INTO items (k, v) VALUES ('a', 'b'); DROP TABLE items",
    "SELECT 1; DELETE FROM",
])
async def test_several_statements_in_one_exec_are_invalid_request(
        tmp_path: Path, query: str) -> None:
    """RT-5: exec with several statements answers invalid_request (not internal_error) and runs
    none of them."""
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


@pytest.mark.anyio
async def test_an_alarm_outlasts_a_file_that_cannot_be_opened_past_every_retry(
        tmp_path: Path) -> None:
    """AL-4: a file that cannot be opened for longer than the handler's whole retry budget (here
    ten minutes without descriptors) is not the handler failing: the alarm is neither abandoned
    nor dropped from the index, and fires once the file opens again."""
    async with TestRuntime(tmp_path, idle_ms=1_000, objects=afs.ALL_OBJECTS) as rt:
        sched = rt.node.scheduler
        assert sched is not None
        oid = await afs.new_scratch(rt, "x", alarm_at=rt.now_ms() + 10_000)
        await rt.advance(1_000)
        assert not rt.node.host.is_active("scratch", oid)
        with no_free_descriptors():
            await rt.advance(600_000)
        assert afs.ALARM_LOG == [] and sched.abandoned == 0
        sched.flush_index()
        assert ("scratch", oid) in sched.index.load()
        await rt.advance(HOUR)
        assert [s.object_id for s in afs.ALARM_LOG] == [oid]


@pytest.mark.anyio
async def test_a_start_without_a_namespace_keeps_its_alarms_for_a_later_start(
        tmp_path: Path) -> None:
    """AL-4: a node started once without an object class (a deploy that left it out) does not
    drop that class's alarms from the index: the next start with the class fires them."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a", alarm_at=rt.now_ms() + 60_000)
    async with TestRuntime(tmp_path) as rt:  # the default objects only: no Scratch
        await rt.advance(120_000)
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        await rt.advance(HOUR)
        assert [s.object_id for s in afs.ALARM_LOG] == [oid]
