"""Defects a review of the runtime found (RT-6, RT-7, AL-1, AL-4), each as the behaviour a user
relies on: actor SQL cannot crash the node or reach the runtime's tables or escape the size limit;
a transaction is all or nothing even when SQLite itself ends it; block_concurrency_while excludes
every other request; a stored alarm is never lost to a temporary failure."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

import actors_for_tests as afs
from mailbox_actors.platform.storage.sql import Limits, SqlStorage
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import LimitExceeded, MailboxActorsError

HERE = Path(__file__).parent
SMALL = Limits(max_database_bytes=64 * 1024)


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    afs.reset_state()
    yield
    afs.reset_state()


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
            out = []
            for sql in ("SELECT sql FROM sqlite_stmt",
                        f"INSERT OR REPLACE INTO _ma_alarm VALUES (1, 1) /*{actor.sql._token}*/"):
                try:
                    actor.sql.exec(sql).all()
                    out.append("ran")
                except MailboxActorsError as e:
                    out.append(e.code.value)
            return out

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
async def test_an_alarm_moved_in_a_rolled_back_transaction_is_not_kept_firing(
        tmp_path: Path) -> None:
    """AL-3: an alarm handler whose transaction moves the alarm and then fails leaves the alarm
    as it was: done after this run, not kept (which fired it again at once, without end)."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a", alarm_at=rt.now_ms() + 1_000)

        async def hook(actor: afs.Scratch, info: object) -> None:
            def fn(tx: SqlStorage) -> None:
                tx.set_alarm(tx.now_ms() + 3_600_000)
                raise ValueError("validation failed")
            if len(afs.ALARM_LOG) > 5:
                return  # bounds the test should the alarm be kept firing
            with contextlib.suppress(ValueError):
                actor.sql.transaction_sync(fn)

        afs.ALARM_HOOKS[oid] = hook
        await rt.advance(1_000)
        assert len(afs.ALARM_LOG) == 1
        assert await afs.scratch(rt, oid, afs.GetAlarm()) is None


@pytest.mark.anyio
async def test_block_concurrency_while_excludes_requests_already_running(tmp_path: Path) -> None:
    """RT-4: a request that was already running when another closed the gate, and then asks for
    its own critical section, waits for the other's to end: never two at once."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        seen: list[str] = []
        x_go, y_release = anyio.Event(), anyio.Event()

        def critical(name: str, hold: anyio.Event | None) -> Callable[[], Awaitable[None]]:
            async def fn() -> None:
                seen.append(f"{name}:start")
                if hold is not None:
                    await hold.wait()
                seen.append(f"{name}:end")
            return fn

        async def x(actor: afs.Scratch, call: object, arg: object) -> None:  # running first
            await x_go.wait()
            await actor.ctx.block_concurrency_while(critical("X", None))

        async def y(actor: afs.Scratch, call: object, arg: object) -> None:
            await actor.ctx.block_concurrency_while(critical("Y", y_release))

        async with anyio.create_task_group() as tg:
            tg.start_soon(afs.run, rt, oid, x)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(afs.run, rt, oid, y)
            await anyio.wait_all_tasks_blocked()
            x_go.set()
            await anyio.wait_all_tasks_blocked()
            y_release.set()
        assert seen == ["Y:start", "Y:end", "X:start", "X:end"]


@pytest.mark.anyio
async def test_block_concurrency_while_nested_in_its_own_goes_straight_in(tmp_path: Path) -> None:
    """RT-4: a critical section inside the caller's own does not wait for itself."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def hook(actor: afs.Scratch, call: object, arg: object) -> str:
            async def inner() -> str:
                return "inner ran"

            async def outer() -> str:
                return await actor.ctx.block_concurrency_while(inner)

            with anyio.fail_after(5):
                return await actor.ctx.block_concurrency_while(outer)

        assert await afs.run(rt, oid, hook) == "inner ran"
