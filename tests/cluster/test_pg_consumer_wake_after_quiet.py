"""Q-1, CL-7: on PostgreSQL an idle consumer's own looks (however far apart its back-off has
put them, b071dd3) never delay a message another process sends: the send's NOTIFY wakes it at
once."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.postgres.database import PgDatabase
from mailbox_actors.platform.queues import Consumer, Message
from mailbox_actors.platform.queues.postgres import queues_on
from mailbox_actors.platform.rng import SeededRng

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


class _Watched(Consumer):
    """A consumer that tells the test when it first waits idle (``waiting`` set True by its
    ``run``), instead of the test polling the flag."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.went_idle = anyio.Event()
        super().__init__(*args, **kwargs)

    @property  # type: ignore[override]
    def waiting(self) -> bool:
        return self._waiting

    @waiting.setter
    def waiting(self, value: bool) -> None:
        self._waiting = value
        if value:
            self.went_idle.set()


async def test_a_quiet_consumer_is_woken_by_another_process_s_send(pg_dsn: str) -> None:
    """A consumer whose own looks are an hour apart (its poll and idle intervals), idle after its
    first look, gets each of three messages another process sends, one after another: only the
    send's notification can bring them (the bounds are against a hang, not speed checks)."""
    clock = FakeClock()
    mine = queues_on(PgDatabase(pg_dsn), clock=clock, ids=Ids(clock, SeededRng(1)))
    other = queues_on(PgDatabase(pg_dsn), clock=clock, ids=Ids(clock, SeededRng(2)))
    got: list[int] = []
    arrived = anyio.Event()

    async def handler(msg: Message) -> None:
        got.append(msg.body["n"])
        arrived.set()

    async with mine, other:
        assert mine.notified
        consumer = _Watched(mine, "webhooks", handler, max_batch_size=1, max_batch_timeout_s=0,
                            poll_interval_s=3_600, idle_poll_s=3_600)
        async with anyio.create_task_group() as tg:
            tg.start_soon(consumer.run)
            with anyio.fail_after(10):  # bounds, not speed checks
                await consumer.went_idle.wait()  # it looks once first
            looks = consumer._looks
            assert looks is not None
            assert looks.look_at - anyio.current_time() > 60  # its next own look is far off
            for n in range(3):
                arrived = anyio.Event()
                await other.send("webhooks", {"v": 1, "kind": "t", "n": n})
                with anyio.fail_after(10):
                    await arrived.wait()
            assert got == [0, 1, 2]
            tg.cancel_scope.cancel()
