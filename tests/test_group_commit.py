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
