"""Idle eviction and the bound on open actors (RT-9), graceful shutdown (RT-11), the clock within a
transaction and request ids (RT-12), and a corrupt actor file failing alone (REL-4)."""

from __future__ import annotations

import contextlib
import gc
import os
import re
import resource
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.runtime.actor import Call
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

REQ_ID = re.compile(r"^req_[0-9A-HJKMNP-TV-Z]{26}$")


async def remember(actor: Scratch, call: Call, arg: Any) -> Any:
    actor.memory = arg  # type: ignore[attr-defined]


async def recall(actor: Scratch, call: Call, arg: Any) -> Any:
    return getattr(actor, "memory", None)


# ---- RT-9 ----------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_idle_actor_is_evicted_after_idle_ms_and_reactivates(tmp_path: Path) -> None:
    """RT-9: an actor with nothing in flight for idle_ms is evicted (file closed, memory dropped);
    its next request reactivates it with its storage intact."""
    async with TestRuntime(tmp_path, idle_ms=10_000, objects=afs.ALL_OBJECTS) as rt:
        host = rt.node.host
        oid = await afs.new_scratch(rt, "a")
        await afs.scratch(rt, oid, afs.Put(k="k", v="v"))
        await afs.run(rt, oid, remember, "warm")
        activations = host.activations

        await rt.advance(9_999)
        assert host.is_active("scratch", oid)
        assert await afs.run(rt, oid, recall) == "warm"  # this use restarts the idle timer
        await rt.advance(9_999)
        assert host.is_active("scratch", oid)
        await rt.advance(1)
        assert not host.is_active("scratch", oid)
        assert host.active_count == 0

        assert await afs.run(rt, oid, recall) is None
        assert host.is_active("scratch", oid)
        assert host.activations == activations + 1
        assert await afs.scratch(rt, oid, afs.Get(k="k")) == "v"


@pytest.mark.anyio
async def test_evicted_actor_alarm_still_fires(tmp_path: Path) -> None:
    """RT-9, AL-4: an evicted actor's alarm fires at its time, reactivating it just for that."""
    async with TestRuntime(tmp_path, idle_ms=1_000, objects=afs.ALL_OBJECTS) as rt:
        host = rt.node.host
        start = rt.now_ms()
        oid = await afs.new_scratch(rt, "a", alarm_at=start + 60_000)
        await rt.advance(30_000)
        assert not host.is_active("scratch", oid)
        assert afs.ALARM_LOG == []
        await rt.advance(30_000)
        assert [(s.object_id, s.now_ms) for s in afs.ALARM_LOG] == [(oid, start + 60_000)]
        await rt.advance(1_000)
        assert not host.is_active("scratch", oid)


@pytest.mark.anyio
async def test_open_actors_are_bounded_least_recently_used_first(tmp_path: Path) -> None:
    """RT-9: with max_active_actors=3, opening a fourth evicts the least recently used idle one."""
    async with TestRuntime(tmp_path, max_active_actors=3, objects=afs.ALL_OBJECTS) as rt:
        host = rt.node.host
        a, b, c, d, e = [await afs.new_scratch(rt, n) for n in "abcde"]
        # Creating a..e touched them in order; only the three most recent stay open.
        assert set(host.active_keys()) == {("scratch", x) for x in (c, d, e)}
        await afs.scratch(rt, c, afs.Get(k="x"))  # c is now the most recent
        await afs.scratch(rt, a, afs.Get(k="x"))  # reopen a: d (least recent) goes
        assert set(host.active_keys()) == {("scratch", x) for x in (e, c, a)}
        assert host.active_count == 3
        for x in (a, b, c, d, e):
            assert (await afs.scratch(rt, x, afs.Dump()))["total"] == 0
            assert host.active_count <= 3


@pytest.mark.anyio
async def test_busy_actor_is_not_evicted(tmp_path: Path) -> None:
    """RT-9: an actor with a request in flight is never evicted, even past idle_ms and the bound."""
    async with TestRuntime(tmp_path, idle_ms=1_000, max_active_actors=1,
                           objects=afs.ALL_OBJECTS) as rt:
        host = rt.node.host
        oid = await afs.new_scratch(rt, "busy")
        release = anyio.Event()

        async def wait(actor: Scratch, call: Call, arg: Any) -> Any:
            actor.memory = "kept"  # type: ignore[attr-defined]
            await release.wait()
            return getattr(actor, "memory", None)

        results: list[Any] = []

        async def busy() -> None:
            results.append(await afs.run(rt, oid, wait, deadline_ms=rt.now_ms() + 3_600_000))

        async with anyio.create_task_group() as tg:
            tg.start_soon(busy)
            await anyio.wait_all_tasks_blocked()
            await rt.advance(5_000)
            other = await afs.new_scratch(rt, "other")  # over the bound of 1
            assert host.is_active("scratch", oid)
            await afs.scratch(rt, other, afs.Get(k="x"))
            release.set()
        assert results == ["kept"]
        assert host.active_count <= 1


# ---- RT-11 ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_graceful_stop_drains_in_flight_requests_and_closes_files(tmp_path: Path) -> None:
    """RT-11: stop refuses new requests (unavailable), lets the one in flight finish and commit,
    then closes every actor's file; a new node on the directory sees the committed write."""
    rt = TestRuntime(tmp_path, objects=afs.ALL_OBJECTS)
    await rt.__aenter__()
    try:
        oid = await afs.new_scratch(rt, "a")
        other = await afs.new_scratch(rt, "b")
        release = anyio.Event()

        async def slow_write(actor: Scratch, call: Call, arg: Any) -> Any:
            await release.wait()
            actor.sql.exec("INSERT INTO items (k, v) VALUES ('in-flight', '1')")
            return "finished"

        results: list[Any] = []

        async def in_flight() -> None:
            results.append(await afs.run(rt, oid, slow_write))

        async with anyio.create_task_group() as tg:
            tg.start_soon(in_flight)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(rt.node.stop)
            await anyio.wait_all_tasks_blocked()
            with pytest.raises(MailboxActorsError) as e:
                await afs.scratch(rt, other, afs.Get(k="x"))
            assert e.value.code == "unavailable" and e.value.retryable
            assert results == []
            release.set()
        assert results == ["finished"]
        assert rt.node.host.active_count == 0
    finally:
        await rt.__aexit__(None, None, None)

    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt2:
        assert await afs.scratch(rt2, oid, afs.Get(k="in-flight")) == "1"


# ---- RT-12 ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_now_is_constant_within_a_transaction(tmp_path: Path) -> None:
    """RT-12: within one transaction every read of the clock returns the same value, even if the
    clock moves meanwhile; after it, the actor sees the new time."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        t0 = rt.now_ms()

        async def tx_time(actor: Scratch, call: Call, arg: Any) -> Any:
            def fn(tx: SqlStorage) -> list[int]:
                first = tx.now_ms()
                rt.clock.set_ms(t0 + 5_000)
                second = actor.ctx.now_ms()
                inner = tx.transaction_sync(lambda t: t.now_ms())
                return [first, second, inner, tx.now_ms()]
            inside = actor.sql.transaction_sync(fn)
            return [*inside, actor.ctx.now_ms()]

        assert await afs.run(rt, oid, tx_time) == [t0, t0, t0, t0, t0 + 5_000]


@pytest.mark.anyio
async def test_fake_clock_moves_only_when_advanced(tmp_path: Path) -> None:
    """RT-12: the FakeClock does not move by itself, refuses to go backwards, and advance() moves
    it by exactly the amount asked."""
    async with TestRuntime(tmp_path, start_ms=1_000_000, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        for _ in range(3):
            await afs.scratch(rt, oid, afs.Put(k="k", v="v"))
            assert rt.now_ms() == 1_000_000
        await rt.advance(1234)
        assert rt.now_ms() == 1_001_234
        with pytest.raises(ValueError):
            await rt.advance(-1)
        with pytest.raises(ValueError):
            rt.clock.set_ms(999)


@pytest.mark.anyio
async def test_every_rpc_and_alarm_gets_a_req_id(tmp_path: Path) -> None:
    """RT-12: each RPC carries a req_ ULID id (returned in error bodies) and each alarm run is
    given a fresh one; ids minted in a process increase monotonically."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a", alarm_at=rt.now_ms() + 10)
        seen: list[str] = []

        async def fail(actor: Scratch, call: Call, arg: Any) -> Any:
            seen.append(call.request_id)
            raise MailboxActorsError(afs.ErrorCode.CONFLICT, "no")

        for _ in range(3):
            with pytest.raises(MailboxActorsError) as e:
                await afs.run(rt, oid, fail)
            assert e.value.request_id == seen[-1]
        assert all(REQ_ID.match(r) for r in seen)
        assert seen == sorted(seen) and len(set(seen)) == 3

        await rt.advance(10)
        (run,) = afs.ALARM_LOG
        assert run.request_id is not None and REQ_ID.match(run.request_id)
        assert run.request_id not in seen


# ---- REL-4 ---------------------------------------------------------------------------------------


def damage_file(path: Path, damage: str) -> None:
    for extra in ("-wal", "-shm"):
        Path(str(path) + extra).unlink(missing_ok=True)
    data = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"this is not a database" + bytes(range(256)) * 64)
    else:
        path.write_bytes(data[: len(data) // 3])


@pytest.mark.anyio
@pytest.mark.parametrize("damage", ["garbage", "truncated"])
async def test_corrupt_actor_file_fails_that_actor_alone(tmp_path: Path, damage: str) -> None:
    """REL-4: a corrupt or truncated actor file makes that actor answer internal_error (with no
    stack trace), while other actors on the node keep working and its alarms keep firing."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        bad = await afs.new_scratch(rt, "bad")
        good = await afs.new_scratch(rt, "good", alarm_at=rt.now_ms() + 60_000)
        for i in range(50):
            await afs.scratch(rt, bad, afs.Put(k=f"k{i}", v="x" * 200))
        path = rt.node.host.path_for("scratch", bad)
    damage_file(path, damage)

    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        for req in (afs.Dump(), afs.Put(k="new", v="1"), afs.Init()):
            with pytest.raises(MailboxActorsError) as e:
                await afs.scratch(rt, bad, req)
            assert e.value.code == "internal_error"
            assert "Traceback" not in e.value.message
        assert await afs.scratch(rt, good, afs.Put(k="ok", v="1")) == {"k": "ok"}
        other = await afs.new_scratch(rt, "created-after")
        assert (await afs.scratch(rt, other, afs.Dump()))["total"] == 0
        await rt.advance(60_000)
        assert [s.object_id for s in afs.ALARM_LOG] == [good]


@pytest.mark.anyio
async def test_a_background_loop_that_fails_marks_the_node_failed(tmp_path: Path) -> None:
    """RT-11: a background loop (alarms, eviction, a queue consumer) that ends with an error is
    logged with where it failed (not the error's text) and sets ``node.failed``, on which
    ``serve`` stops the node (exit status 1) for a supervisor to restart it."""
    import structlog

    from mailbox_actors.node import Node
    from mailbox_actors.runtime.settings import RuntimeSettings

    async def broken_loop() -> None:
        raise RuntimeError("a bug")

    async with Node(RuntimeSettings(data_dir=str(tmp_path))) as node:
        assert not node.failed.is_set()
        with structlog.testing.capture_logs() as logs:
            await node._guarded("alarm_scheduler", broken_loop)
        assert node.failed.is_set()
        assert node.failure == "alarm_scheduler failed (RuntimeError)"
        [entry] = [e for e in logs if e["event"] == "node_loop_failed"]
        assert entry["log_level"] == "critical" and entry["error"] == "RuntimeError"
        assert entry["at"].startswith("test_lifecycle.py:") and "a bug" not in str(entry)


T0 = 1_767_225_600_000


@pytest.mark.anyio
async def test_testruntime_that_cannot_start_leaves_no_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A TestRuntime whose settings are refused, or whose start fails, removes its own temporary
    directory (made in a temporary directory of this test's own, so no other run is counted)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(Exception):  # noqa: B017 - the settings error itself is tested elsewhere
        TestRuntime(shutdown_grace_ms=-1)
    with pytest.raises(MailboxActorsError):
        async with TestRuntime(control=True, control_db="/proc/nope/control.sqlite"):
            pass
    async with TestRuntime():  # the same place is where a TestRuntime that starts keeps its files
        assert [n.startswith("mailbox-actors-test-") for n in os.listdir(tmp_path)] == [True]
    assert os.listdir(tmp_path) == []


@pytest.mark.anyio
async def test_testruntime_reopens_a_directory_after_a_kill_mid_write(tmp_path: Path) -> None:
    """A kill that left the run counter empty does not stop the directory being opened again."""
    async with TestRuntime(tmp_path):
        pass
    (tmp_path / ".testruntime-runs").write_text("")
    async with TestRuntime(tmp_path) as rt:
        assert rt.now_ms() == T0


HOUR = 3_600_000


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
