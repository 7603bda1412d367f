"""Group commit, shared by the event sink (EV-2) and queue acks (Q-1): concurrent callers are
written together, in order, and each learns the fate of its own group."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from mailbox_actors.platform.group_commit import GroupCommit


@pytest.mark.anyio
async def test_concurrent_submits_share_writes_in_order() -> None:
    """EV-2: items submitted while a write is in flight go out together in the next write,
    in submission order, and every caller returns after its own items are written."""
    writes: list[list[int]] = []

    async def write(items: list[int]) -> None:
        await anyio.lowlevel.checkpoint()
        writes.append(list(items))

    gc: GroupCommit[int] = GroupCommit(write, max_items=100)
    returned: list[int] = []

    async def submit(i: int) -> None:
        await gc.submit([i])
        assert any(i in w for w in writes)  # written before the caller returns
        returned.append(i)

    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(submit, i)
    assert sorted(returned) == list(range(10))
    assert [x for w in writes for x in w] == list(range(10))
    assert len(writes) < 10  # shared writes


@pytest.mark.anyio
async def test_a_failed_write_fails_only_its_own_group() -> None:
    """Q-1: when one group's write raises, its callers see the error; later groups are written."""
    async def write(items: list[str]) -> None:
        if "bad" in items:
            raise ConnectionError("queue file locked")

    gc: GroupCommit[str] = GroupCommit(write, max_items=1)
    with pytest.raises(ConnectionError):
        await gc.submit(["bad"])
    await gc.submit(["good"])  # the next group is unaffected


@pytest.mark.anyio
async def test_a_cancelled_writer_leaves_its_group_for_the_next() -> None:
    """EV-2, Q-1: when the caller doing a shared write is cancelled, the other callers of that
    group are not failed: the group is written again by the next one."""
    writes: list[list[str]] = []
    gate0, started1 = anyio.Event(), anyio.Event()
    calls = 0

    async def write(items: list[str]) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            await gate0.wait()  # p0 holds the lock while p1 and p2 join the next group
        elif calls == 2:
            started1.set()
            await anyio.sleep_forever()  # p1 writes [p1, p2] and is cancelled here
        writes.append(list(items))

    gc: GroupCommit[str] = GroupCommit(write, max_items=10)
    done: list[str] = []

    async def submit(name: str, scope: anyio.CancelScope | None = None) -> None:
        if scope is None:
            await gc.submit([name])
            done.append(name)
            return
        with scope:
            await gc.submit([name])
            done.append(name)

    p1_scope = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(submit, "p0")
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(submit, "p1", p1_scope)
        tg.start_soon(submit, "p2")
        await anyio.wait_all_tasks_blocked()
        gate0.set()
        await started1.wait()
        p1_scope.cancel()
    assert sorted(done) == ["p0", "p2"]  # p2 was not failed by p1's cancellation
    assert writes == [["p0"], ["p1", "p2"]]
