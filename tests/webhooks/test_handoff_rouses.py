"""The hand-off rouses as many idle webhook consumers as it hands messages (Q-1, Q-4): a node runs
``webhook_consumers`` consumers of one queue, and waking all of them for each event cost a third of
a hand-off's instructions (8 consumers); the others sleep on, and every message is still handled."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.queues import Consumer, Message, QueueService
from mailbox_actors.platform.rng import SeededRng

T0 = 1_767_225_600_000
CONSUMERS = 8  # webhook_consumers' default


@pytest.fixture
def roused(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """What every hand-off's news did to a consumer: True when it roused one from its wait."""
    seen: list[bool] = []
    tell = Consumer._wake_for_handoff

    def counting(self: Consumer, rouse: bool = True) -> bool:
        out = tell(self, rouse)
        seen.append(out)
        return out

    monkeypatch.setattr(Consumer, "_wake_for_handoff", counting)
    yield seen


def _idle(c: Consumer) -> bool:
    """Waiting for news, and not woken already (a woken one still says it waits until it runs)."""
    return c.waiting and c._wake is not None and not c._wake.is_set()


async def _all_wait(consumers: list[Consumer]) -> None:
    """Until every consumer is idle. A task that awaits the queue file's thread counts as blocked
    too, so all tasks blocked is not enough: one consumer may still be reading the file (the
    others waiting for its lock), or woken and not yet run; look again each time they all are."""
    with anyio.fail_after(5):
        while not all(_idle(c) for c in consumers):
            await anyio.wait_all_tasks_blocked()
            await anyio.lowlevel.checkpoint()


async def _hand_off(tmp_path: Path, batches: list[int], roused: list[bool]) -> list[int]:
    """Run CONSUMERS idle consumers, send each batch (its size in messages) once every consumer
    waits again, and return how many consumers each batch roused."""
    clock = FakeClock(T0)
    done = anyio.Event()
    handled: list[Any] = []
    total = sum(batches)

    async def handler(msg: Message) -> None:
        handled.append(msg.body["n"])
        if len(handled) == total:
            done.set()

    per_batch: list[int] = []
    async with QueueService(tmp_path / "queues.sqlite", clock=clock,
                            ids=Ids(clock, SeededRng(1))) as queues:
        consumers = [Consumer(queues, "webhooks", handler, max_batch_size=1,
                              max_batch_timeout_s=0, poll_interval_s=3_600)
                     for _ in range(CONSUMERS)]
        async with anyio.create_task_group() as tg:
            for c in consumers:
                tg.start_soon(c.run)
            n = 0
            for size in batches:
                await _all_wait(consumers)
                roused.clear()
                await queues.send_batch("webhooks", [{"v": 1, "kind": "t", "n": n + i}
                                                     for i in range(size)])
                n += size
                per_batch.append(sum(roused))
            with anyio.fail_after(5):
                await done.wait()
            tg.cancel_scope.cancel()
    assert sorted(handled) == list(range(total))  # each once
    return per_batch


@pytest.mark.anyio
async def test_one_message_rouses_one_of_the_idle_consumers(tmp_path: Path,
                                                            roused: list[bool]) -> None:
    """Q-1: a message handed to 8 idle consumers rouses one of them, not all 8."""
    assert await _hand_off(tmp_path, [1, 1, 1], roused) == [1, 1, 1]


@pytest.mark.anyio
async def test_a_batch_rouses_as_many_idle_consumers_as_it_holds(tmp_path: Path,
                                                                roused: list[bool]) -> None:
    """Q-1: three messages handed at once rouse three idle consumers; more than there are idle
    consumers rouse them all, and every message is handled once."""
    assert await _hand_off(tmp_path, [3, 12], roused) == [3, CONSUMERS]
