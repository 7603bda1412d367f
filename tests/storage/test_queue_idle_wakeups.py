"""An idle node sleeps between its looks at a queue (Q-1): the running consumers of one queue in a
process share its poll (one reads the file each poll interval), and ONE of them waits for that
time; the others arm no timer and wait for a wake. Counted, not timed: timers the event loop arms
per look at the file, while the consumers idle on a real clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from mailbox_actors.platform.clock import SystemClock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.queues import Consumer, Message, QueueService
from mailbox_actors.platform.rng import SeededRng

CONSUMERS = 8  # a node's webhook consumers (webhook_consumers' default since bb05723)


class CountingLoop(asyncio.SelectorEventLoop):
    """The asyncio loop, counting the timers armed (``call_later`` goes through ``call_at``)."""

    timers = 0

    def call_at(self, when: float, callback: Callable[..., object], *args: Any,
                context: Any = None) -> asyncio.TimerHandle:
        self.timers += 1
        return super().call_at(when, callback, *args, context=context)


def _looks_and_timers(path: Path, looks_wanted: int, *, message: bool = False
                      ) -> tuple[int, int, list[int]]:
    """Run CONSUMERS consumers of one queue idle until the file was read ``looks_wanted`` more
    times after a first 5 (failing if the looks stop); (those looks, timers armed meanwhile,
    messages handled)."""
    handled: list[int] = []

    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, CountingLoop)
        clock = SystemClock()
        async with QueueService(path, clock=clock, ids=Ids(clock, SeededRng(1))) as service:
            read = service.next_visible_ms
            looks = 0
            marks: dict[int, int] = {}
            enough = anyio.Event()

            async def counted(queue: str) -> int | None:
                nonlocal looks
                looks += 1
                if looks in (5, 5 + looks_wanted):
                    marks[looks] = loop.timers
                    if looks == 5 + looks_wanted:
                        enough.set()
                return await read(queue)

            service.next_visible_ms = counted  # type: ignore[method-assign]

            async def handle(msg: Message) -> None:
                handled.append(msg.body["n"])

            # No slowing down while idle here: every look waits the poll interval.
            consumers = [Consumer(service, "jobs", handle, max_batch_size=1,
                                  max_batch_timeout_s=0, poll_interval_s=0.005,
                                  idle_poll_s=0.005)
                         for _ in range(CONSUMERS)]
            async with anyio.create_task_group() as tg:
                for c in consumers:
                    tg.start_soon(c.run)
                if message:  # one handled first: the next look is then someone else's to wait for
                    await service.send("jobs", {"v": 1, "kind": "t", "n": 1})
                # A bound, not a timing: 45 looks take a quarter of a second; if nobody looked
                # any more, this says so instead of hanging.
                with anyio.fail_after(60):
                    await enough.wait()
                tg.cancel_scope.cancel()
            return looks_wanted, marks[5 + looks_wanted] - marks[5]

    looks, timers = anyio.run(main, backend="asyncio",
                              backend_options={"loop_factory": CountingLoop})
    return looks, timers, handled


def test_the_consumers_of_an_idle_queue_arm_one_timer_per_look_not_one_each(
        tmp_path: Path) -> None:
    """Eight idle consumers of one queue: the file is read once per poll interval and the loop is
    woken once for it (before: every consumer armed its own timer for the same look, one each and
    more wakeups a poll interval on an idle node)."""
    looks, timers, _ = _looks_and_timers(tmp_path / "queues.sqlite", 40)  # fails if looks stop
    assert timers <= looks + looks // 4  # one a look (before: one a consumer and more); room for a stray one


def test_after_a_message_the_next_look_is_still_waited_for_by_one_consumer(
        tmp_path: Path) -> None:
    """The consumer that handled a message lets another wait for the next look: the queue is
    still read every poll interval (a send from another process is still found), with one timer
    a look."""
    looks, timers, handled = _looks_and_timers(tmp_path / "queues.sqlite", 40, message=True)
    assert handled == [1]
    assert timers <= looks + looks // 4


POLL_S, IDLE_S = 0.01, 0.08


def test_an_idle_queue_is_read_less_often_until_a_message_is_found(tmp_path: Path) -> None:
    """Each look at an idle queue that finds nothing doubles the wait for the next, up to
    ``idle_poll_s`` (an idle node reads its queue file about once a second, not 20 times); a
    message another process sends is still found, and the look after it waits the poll interval
    again. Read from the deadline each look sets, bracketed by the loop's time just before and
    just after it is set, not from how long the looks took."""
    path = tmp_path / "queues.sqlite"
    handled: list[int] = []

    async def main() -> tuple[list[tuple[float, float]], int]:
        loop = asyncio.get_running_loop()
        clock = SystemClock()
        waits: list[tuple[float, float]] = []  # (shortest, longest) the wait set can be
        marks: list[int] = []  # how many looks had set a wait when the message was handled
        async with QueueService(path, clock=clock, ids=Ids(clock, SeededRng(1))) as service, \
                QueueService(path, clock=clock, ids=Ids(clock, SeededRng(2))) as other:
            read = service.next_visible_ms
            idle, done = anyio.Event(), anyio.Event()

            async def handle(msg: Message) -> None:
                handled.append(msg.body["n"])
                marks.append(len(waits))

            consumer = Consumer(service, "jobs", handle, max_batch_size=1, max_batch_timeout_s=0,
                                poll_interval_s=POLL_S, idle_poll_s=IDLE_S)

            async def counted(queue: str) -> int | None:
                found = await read(queue)
                before = anyio.current_time()

                def wait_set() -> None:  # runs once the look set its deadline and waits
                    assert consumer._looks is not None
                    at = consumer._looks.look_at
                    waits.append((at - anyio.current_time(), at - before))
                    if len(waits) == 8:
                        idle.set()
                    if marks and len(waits) == marks[0] + 2:
                        done.set()
                loop.call_soon(wait_set)
                return found

            service.next_visible_ms = counted  # type: ignore[method-assign]
            async with anyio.create_task_group() as tg:
                tg.start_soon(consumer.run)
                with anyio.fail_after(60):  # a bound, not a timing: the looks take about 0.7 s
                    await idle.wait()
                    await other.send("jobs", {"v": 1, "kind": "t", "n": 1})  # not announced here
                    await done.wait()
                tg.cancel_scope.cancel()
        return waits, marks[0]

    waits, mark = anyio.run(main, backend="asyncio")
    assert handled == [1]
    doubled = [0.01, 0.02, 0.04, 0.08, 0.08, 0.08, 0.08, 0.08]
    assert all(low - 1e-6 <= want <= high + 1e-6 for want, (low, high) in zip(doubled, waits[:8],
                                                                             strict=True)), waits
    low, high = waits[mark]  # the look after the message
    assert low - 1e-6 <= POLL_S <= high + 1e-6, waits
