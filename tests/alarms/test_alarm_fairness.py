"""A burst of due alarms does not starve requests (issue 28, AL-5, RT-17): the real-time loop's pool
runs alarms in turns the whole pool shares, and the loop goes round between turns.

Deterministic: the node runs on the system clock (``TestRuntime``'s fake one fires through
``run_due``, not the pool), every alarm is made due at one instant by moving the node's clock,
and the pool's turns are measured by a clock the test makes from the number of alarms run, so a
turn is exactly ``PER_TURN`` alarms. What is asserted is a count of alarms, never a time.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import socket
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.alarms import alarm_pool
from mailbox_actors.alarms import scheduler as scheduler_module
from mailbox_actors.alarms.alarm_pool import TURN_S, AlarmPool
from mailbox_actors.alarms.book import AlarmBook
from mailbox_actors.node import Node
from mailbox_actors.platform.clock import SystemClock
from mailbox_actors.runtime.actor import AlarmInfo
from mailbox_actors.runtime.settings import RuntimeSettings

GUARD_S = 60  # only against a hang
BURST = 160  # alarms due at one instant, five times the default 32 workers
PER_TURN = 4  # alarms in a turn, by the test's turn clock
ARRIVES_AFTER = 10  # the request arrives once this many alarms ran
METRICS_BURST = 60  # evicted actors' alarms whose alarms_fired_total reports are counted


class MovableClock(SystemClock):
    """The system clock, moved by ``offset_ms`` (a day later for the burst)."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def now_ms(self) -> int:
        return super().now_ms() + self.offset_ms


_FACTORIES: list[Callable[[], asyncio.AbstractEventLoop] | None] = [None]  # None: asyncio's
try:
    import uvloop
    _LOOPS = [("asyncio", {}), ("asyncio", {"use_uvloop": True})]
    _FACTORIES.append(uvloop.new_event_loop)
except ImportError:  # uvloop is optional: the node falls back to asyncio's own loop
    _LOOPS = [("asyncio", {})]


@pytest.fixture(params=_LOOPS, ids=[("uvloop" if o else "asyncio") for _, o in _LOOPS])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """Both loops a node runs on: asyncio's, and uvloop's, which ``serve`` and ``machine`` use
    (ADR 0023)."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(autouse=True)
def _clean() -> None:
    afs.reset_state()


def _turn_clock() -> float:
    """A turn is ``PER_TURN`` alarms: the pool reads this after each alarm and at each turn."""
    return len(afs.ALARM_LOG) * TURN_S / PER_TURN


def _jumping_clock() -> Callable[[], float]:
    """A turn clock that jumps past a whole turn at every read (a loaded machine at its worst:
    every turn is over at its first look)."""
    jumps = [0.0]

    def jumping() -> float:
        jumps[0] += 2 * TURN_S
        return jumps[0]
    return jumping


async def _started(tmp_path: Path, turn_clock: Callable[[], float],
                   max_active_actors: int = 10_000, file_threads: int = 4,
                   ) -> tuple[Node, MovableClock]:
    """A node on a movable clock, its pool's turns measured by ``turn_clock``, started."""
    clock = MovableClock()
    node = Node(RuntimeSettings(data_dir=str(tmp_path), max_active_actors=max_active_actors,
                                file_threads=file_threads),
                clock=clock, objects=afs.ALL_OBJECTS)
    assert node.scheduler is not None
    node.scheduler.turn_clock = turn_clock  # read when the real-time loop starts its pool
    await node.start()
    return node, clock


async def _due_together(node: Node, clock: MovableClock, n: int) -> tuple[list[str], anyio.Event]:
    """``n`` Scratch actors with their alarms at one instant a day ahead, each counted as it
    fires; (their ids, an event set once every one fired)."""
    due = clock.now_ms() + 86_400_000
    oids = [await afs.new_scratch(node, f"t{i}", alarm_at=due) for i in range(n)]
    all_fired = anyio.Event()

    async def count(actor: Scratch, info: AlarmInfo) -> None:
        if len(afs.ALARM_LOG) == len(oids):
            all_fired.set()

    for oid in oids:
        afs.ALARM_HOOKS[oid] = count
    return oids, all_fired


@pytest.mark.anyio
async def test_a_request_arriving_during_a_burst_is_served_within_a_turn_or_two(
        tmp_path: Path) -> None:
    """Issue 28 ("a burst of due alarms does not starve requests"), AL-5: 160 alarms due at one
    instant with 32 workers; a request that becomes ready after the 10th alarm is answered
    after at most two more turns of alarms (a turn is 4 alarms here), long before the burst
    ends; every alarm still fires once. With a turn per worker (the pool before) it waited
    behind every worker's turn: more than a hundred alarms."""
    node, clock = await _started(tmp_path, _turn_clock)
    assert node.scheduler is not None and node.scheduler.concurrency == 32
    try:
        due = clock.now_ms() + 86_400_000
        oids = [await afs.new_scratch(node, f"t{i}", alarm_at=due) for i in range(BURST)]
        reader = await afs.new_scratch(node, "reader")
        arrived, all_fired = anyio.Event(), anyio.Event()
        served_after: list[int] = []

        async def count(actor: Scratch, info: AlarmInfo) -> None:
            if len(afs.ALARM_LOG) == ARRIVES_AFTER:
                arrived.set()
            if len(afs.ALARM_LOG) == BURST:
                all_fired.set()

        for oid in oids:
            afs.ALARM_HOOKS[oid] = count

        async def request() -> None:
            await arrived.wait()
            await afs.scratch(node, reader, afs.GetAlarm())
            served_after.append(len(afs.ALARM_LOG))

        async with anyio.create_task_group() as tg:
            tg.start_soon(request)
            clock.offset_ms = 86_400_000 + 1
            node.scheduler.book.wake_if_before(0)  # the loop looks now
            with anyio.fail_after(GUARD_S):
                await all_fired.wait()
        assert served_after and served_after[0] <= ARRIVES_AFTER + 2 * PER_TURN, served_after
        assert sorted(seen.object_id for seen in afs.ALARM_LOG) == sorted(oids)
        assert node.scheduler.fired == BURST
    finally:
        await node.stop()


def test_a_burst_on_evicted_actors_fires_under_plain_asyncio_run(tmp_path: Path) -> None:
    """AL-5, the embedded runtime: a program that runs the node under ``asyncio.run`` (not
    anyio's) gets its alarms too. When every running worker waits inside an alarm (evicted
    actors' files opened in threads), the pool starts another from a loop callback, where anyio
    cannot tell its backend by a task: the worker is started from a task of its own, so no
    callback fails and every alarm fires once."""
    failures: list[str] = []

    async def main() -> int:
        asyncio.get_running_loop().set_exception_handler(
            lambda _loop, context: failures.append(str(context.get("message"))))
        clock = MovableClock()
        node = Node(RuntimeSettings(data_dir=str(tmp_path), max_active_actors=4), clock=clock,
                    objects=afs.ALL_OBJECTS)
        await node.start()
        try:
            due = clock.now_ms() + 86_400_000
            oids = [await afs.new_scratch(node, f"t{i}", alarm_at=due) for i in range(BURST)]
            all_fired = asyncio.Event()

            async def count(actor: Scratch, info: AlarmInfo) -> None:
                if len(afs.ALARM_LOG) == BURST:
                    all_fired.set()

            for oid in oids:
                afs.ALARM_HOOKS[oid] = count
            clock.offset_ms = 86_400_000 + 1
            assert node.scheduler is not None
            node.scheduler.book.wake_if_before(0)  # the loop looks now
            await asyncio.wait_for(all_fired.wait(), GUARD_S)
            assert sorted(seen.object_id for seen in afs.ALARM_LOG) == sorted(oids)
            return node.scheduler.fired
        finally:
            await node.stop()

    assert asyncio.run(main()) == BURST
    assert failures == []


@pytest.mark.anyio
async def test_a_turn_already_over_when_it_opens_still_runs_an_alarm(tmp_path: Path) -> None:
    """AL-5 on a loaded machine: the loop thread may be preempted between a turn's opening and
    its first look at the clock, so the turn is over before any alarm ran. The worker woken for
    it runs one alarm anyway; without that nobody was woken and the queue stayed unserved for
    good. The turn clock here jumps past a whole turn at every read."""
    node, clock = await _started(tmp_path, _jumping_clock())
    assert node.scheduler is not None
    try:
        oids, all_fired = await _due_together(node, clock, 40)
        clock.offset_ms = 86_400_000 + 1
        node.scheduler.book.wake_if_before(0)
        with anyio.fail_after(GUARD_S):
            await all_fired.wait()
        assert sorted(seen.object_id for seen in afs.ALARM_LOG) == sorted(oids)
    finally:
        await node.stop()


@pytest.mark.anyio
async def test_handlers_that_wait_on_another_service_still_run_up_to_the_concurrency(
        tmp_path: Path) -> None:
    """AL-5: when every alarm under way waits inside its handler (another service's answer), the
    next turns still start workers for the keys queued, up to ``alarm_concurrency``: before, a
    turn over with no worker waiting for the next left the pool at what one turn had started
    (here one, by a turn clock that jumps past a turn at every read) until a handler returned."""
    node, clock = await _started(tmp_path, _jumping_clock())
    assert node.scheduler is not None
    concurrency = node.settings.alarm_concurrency
    entered: list[str] = []
    answer = anyio.Event()
    full = anyio.Event()
    try:
        oids, _ = await _due_together(node, clock, 3 * concurrency)
        returned: list[str] = []
        all_returned = anyio.Event()

        async def waits_for_the_service(actor: Scratch, info: AlarmInfo) -> None:
            entered.append(actor.ctx.id)
            if len(entered) == concurrency:
                full.set()
            await answer.wait()
            returned.append(actor.ctx.id)
            if len(returned) == len(oids):
                all_returned.set()

        for oid in oids:
            afs.ALARM_HOOKS[oid] = waits_for_the_service
        clock.offset_ms = 86_400_000 + 1
        node.scheduler.book.wake_if_before(0)
        with anyio.fail_after(GUARD_S):
            await full.wait()
        for _ in range(20):  # more rounds of the loop: no more than the concurrency go in
            await asyncio.sleep(0)
        assert len(entered) == concurrency
        answer.set()
        with anyio.fail_after(GUARD_S):
            await all_returned.wait()
        assert sorted(entered) == sorted(oids)
    finally:
        answer.set()
        await node.stop()


@pytest.mark.anyio
async def test_without_the_look_a_request_read_during_a_turn_waits_for_that_turn_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28, AL-5, on a loop whose queues the pool cannot see (uvloop, ADR 0023): turns end
    by the clock alone, and a request whose bytes arrive on a socket while a turn runs is read
    by the loop's next poll and answered before the next turn runs any alarm: after the turn it
    arrived in (a turn is 4 alarms here), not one later. With the turn opened in the poll's own
    round, the worker's wake-up was queued before the request's and the request waited a whole
    turn more."""
    monkeypatch.setattr(alarm_pool, "_others_ready", lambda loop, pool: None)
    node, clock = await _started(tmp_path, _turn_clock)
    try:
        served_after = await _served_after_socket_request(node, clock)
        # The 10th alarm runs in the turn of alarms 9-12: served before the 13th runs (one more
        # for a turn's end that the float clock puts an alarm later).
        turn_end = -(-ARRIVES_AFTER // PER_TURN) * PER_TURN
        assert served_after and served_after[0] <= turn_end + 1, served_after
    finally:
        await node.stop()


EVICTED_ALARM_S = 0.0005  # about what an evicted actor's alarm takes of the loop (session 19)


@pytest.mark.anyio
async def test_alarms_as_long_as_an_evicted_actors_run_four_to_a_turn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28, AL-5: with nothing else waiting for the loop, a turn holds 2 ms of alarms, so a
    burst of alarms each taking 0.5 ms of the loop (an evicted actor's open, run and close) opens
    a turn about every fourth alarm, not at every alarm (with 0.5 ms turns: 40 openings for 40
    alarms, each two rounds of the loop and a worker's wait that no request was waiting for)."""
    opened = [0]
    open_turn = AlarmPool._open_turn

    def counted(pool: AlarmPool) -> None:
        opened[0] += 1
        open_turn(pool)

    monkeypatch.setattr(AlarmPool, "_open_turn", counted)
    # Turns end by the clock alone here: the look would end them whenever the burst's own
    # workers are ready to start, which is not what this counts.
    monkeypatch.setattr(alarm_pool, "_others_ready", lambda loop, pool: None)
    node, clock = await _started(tmp_path, lambda: len(afs.ALARM_LOG) * EVICTED_ALARM_S)
    assert node.scheduler is not None
    try:
        _, all_fired = await _due_together(node, clock, 40)
        before = opened[0]
        clock.offset_ms = 86_400_000 + 1
        node.scheduler.book.wake_if_before(0)
        with anyio.fail_after(GUARD_S):
            await all_fired.wait()
        assert len(afs.ALARM_LOG) == 40
        assert opened[0] - before <= 40 // 4 + 2, opened[0] - before
    finally:
        await node.stop()


@pytest.mark.anyio
async def test_a_burst_collects_the_young_generation_between_turns(tmp_path: Path) -> None:
    """Issue 28: in a burst the collector's own count of young objects stays near zero (each
    activation's objects come as an eviction's go), so its passes came late and long; the pool
    collects the young generation at a turn's opening instead. With the automatic collector off,
    the burst still sees young passes, and only young ones."""
    passes: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            passes.append(info["generation"])

    node, clock = await _started(tmp_path, _turn_clock)
    assert node.scheduler is not None
    try:
        _, all_fired = await _due_together(node, clock, 40)
        enabled = gc.isenabled()
        gc.disable()
        gc.callbacks.append(seen)
        try:
            clock.offset_ms = 86_400_000 + 1
            node.scheduler.book.wake_if_before(0)
            with anyio.fail_after(GUARD_S):
                await all_fired.wait()
        finally:
            gc.callbacks.remove(seen)
            if enabled:
                gc.enable()
        assert passes and set(passes) == {0}, passes
    finally:
        await node.stop()


async def _served_after_alarm(node: Node, clock: MovableClock, arrive: Callable[[], None],
                              request_ready: Callable[[], Awaitable[None]]) -> list[int]:
    """A burst of ``BURST`` Scratch actors; ``arrive()`` is called in the handler of the
    ``ARRIVES_AFTER``-th alarm, and a request that waited for ``request_ready()`` then reads
    another actor: how many alarms had run when it was answered."""
    assert node.scheduler is not None
    oids, all_fired = await _due_together(node, clock, BURST)
    reader = await afs.new_scratch(node, "reader")
    served_after: list[int] = []

    async def count(actor: Scratch, info: AlarmInfo) -> None:
        if len(afs.ALARM_LOG) == ARRIVES_AFTER:
            arrive()
        if len(afs.ALARM_LOG) == BURST:
            all_fired.set()

    for oid in oids:
        afs.ALARM_HOOKS[oid] = count

    async def request() -> None:
        await request_ready()
        await afs.scratch(node, reader, afs.GetAlarm())
        served_after.append(len(afs.ALARM_LOG))

    async with anyio.create_task_group() as tg:
        tg.start_soon(request)
        clock.offset_ms = 86_400_000 + 1
        node.scheduler.book.wake_if_before(0)
        with anyio.fail_after(GUARD_S):
            await all_fired.wait()
    assert sorted(seen.object_id for seen in afs.ALARM_LOG) == sorted(oids)
    assert node.scheduler.fired == BURST
    return served_after


async def _served_after_socket_request(node: Node, clock: MovableClock) -> list[int]:
    """``_served_after_alarm`` with the request's bytes arriving on a socket, as a client's do."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    try:
        return await _served_after_alarm(
            node, clock, lambda: theirs.send(b"r") and None,
            lambda: asyncio.get_running_loop().sock_recv(ours, 1))
    finally:
        ours.close()
        theirs.close()


@pytest.mark.anyio
async def test_a_request_arriving_on_a_socket_during_a_turn_is_served_before_the_next_alarm(
        tmp_path: Path) -> None:
    """Issue 28 ("a burst of due alarms does not starve requests"), AL-5: requests come before
    alarms. A request whose bytes arrive on a socket while an alarm of a turn runs ends the turn
    there (the pool looks between alarms whether anything else waits for the loop), and it is
    answered before the next alarm starts, though the turn had three more alarms' time left.
    Before, it waited for the rest of the turn."""
    node, clock = await _started(tmp_path, _turn_clock)
    try:
        assert await _served_after_socket_request(node, clock) == [ARRIVES_AFTER]
    finally:
        await node.stop()


@pytest.mark.anyio
async def test_alarms_whose_files_were_opened_in_threads_wait_for_a_request_first(
        tmp_path: Path) -> None:
    """Issue 28, AL-4, AL-5: in a burst on evicted actors, each alarm's file is opened ahead in
    a worker thread; an alarm whose open is done waits for a turn before its activation on the
    loop. So a request that becomes ready while alarms run is answered before any other alarm
    starts, however many opens finished meanwhile. Before, every alarm whose open had finished
    went on at once, in the loop round ahead of the request."""
    node, clock = await _started(tmp_path, _turn_clock, max_active_actors=4)
    arrived = anyio.Event()
    try:
        assert node.host.settings.file_threads > 0
        node.host.evict_all_idle()
        served_after = await _served_after_alarm(node, clock, arrived.set, arrived.wait)
        assert served_after == [ARRIVES_AFTER]
        assert node.host.activations >= BURST  # every alarm opened its evicted actor
    finally:
        await node.stop()


@pytest.mark.anyio
async def test_a_request_arriving_while_an_evicted_actor_opens_on_the_loop_goes_before_its_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28, AL-4, AL-5: an evicted actor opened on the loop for its alarm (no worker
    threads here; with them, when the disk is quiet) is one piece of the loop's work and its
    run another: a request whose bytes arrive on a socket during the open is answered before
    that alarm's handler runs. Before, the open and the run were one piece, the request after
    both (about 0.9 ms of CPU on a quiet machine, the longest a request waited in a burst).
    (Since session 18 the open itself is two pieces: ``test_alarm_open_steps``.)"""
    node, clock = await _started(tmp_path, _turn_clock, max_active_actors=4, file_threads=0)
    host = node.host
    open_on_loop = host._open_on_loop
    ours, theirs = socket.socketpair()
    ours.setblocking(False)

    async def opened_while_a_request_arrives(cls: Any, key: Any, turn: Any = None) -> Any:
        if len(afs.ALARM_LOG) == ARRIVES_AFTER and not sent:
            sent.append(theirs.send(b"r"))
        return await open_on_loop(cls, key, turn)

    sent: list[int] = []
    try:
        node.host.evict_all_idle()
        monkeypatch.setattr(host, "_open_on_loop", opened_while_a_request_arrives)
        served_after = await _served_after_alarm(
            node, clock, lambda: None, lambda: asyncio.get_running_loop().sock_recv(ours, 1))
        assert sent and served_after == [ARRIVES_AFTER]
        assert host.activations >= BURST  # every alarm opened its evicted actor
    finally:
        ours.close()
        theirs.close()
        await node.stop()


@pytest.mark.anyio
async def test_work_that_takes_a_turn_waits_for_a_request_ready_to_run(tmp_path: Path) -> None:
    """Issue 28, AL-5: what takes a turn of the pool outside its workers (a piece of the alarm
    index's writes, an alarm resuming after its file's open in a thread) waits until every
    task ready to run has run: a request of several loop steps, each ready at once, is answered
    first. (The pool's clock stands still here, so only readiness decides.)"""
    order: list[str] = []

    async def no_alarms(until: float, clock: Callable[[], float]) -> None:
        raise AssertionError("no alarm is queued")

    async with anyio.create_task_group() as tg:
        pool = AlarmPool(no_alarms, tg, 4, deque(), set(), clock=lambda: 0.0)

        async def index_writes() -> None:
            await pool.take_turn()
            order.append("index writes")

        async def request() -> None:
            for _ in range(5):  # each step queues the next at once
                await asyncio.sleep(0)
            order.append("request")

        tg.start_soon(index_writes)
        tg.start_soon(request)
    assert order == ["request", "index writes"]


@pytest.mark.anyio
async def test_the_look_sees_a_request_waiting_on_a_socket_and_leaves_it_to_the_loop() -> None:
    """Issue 28, ADR 0023, on both loops (uvloop's is the one ``serve`` runs): the pool's look
    between two alarms finds nothing else waiting for the loop while nothing is, and a request
    as soon as its bytes wait on a socket the loop watches; looking consumes nothing, the loop
    still reads them. On uvloop the look was missing (turns ended by the clock alone)."""

    async def no_alarms(until: float, clock: Callable[[], float]) -> None:
        raise AssertionError("no alarm is queued")

    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    try:
        async with anyio.create_task_group() as tg:
            pool = AlarmPool(no_alarms, tg, 4, deque(), set(), clock=lambda: 0.0)
            look = pool._others_ready
            assert look is not None
            received = loop.create_task(loop.sock_recv(ours, 1))  # the loop watches ``ours``
            for _ in range(3):  # the task's first step, the loop's next poll, and one more
                await asyncio.sleep(0)
            assert not look()
            theirs.send(b"r")
            assert look()
            assert await received == b"r"
            assert not look()
            pool.stop(AlarmBook(lambda: 0))
    finally:
        ours.close()
        theirs.close()


@pytest.mark.anyio
async def test_the_look_leaves_aside_the_loops_wake_up_by_threads() -> None:
    """ADR 0023, on both loops: the loop's own wake-up by threads (asyncio's self-pipe, libuv's
    eventfd on uvloop) is not something waiting for the loop: what a thread hands back is a
    handle in the ready queue, seen there. Without it aside, a wake-up left unread after its
    handle ran ended turns for nothing (in a burst, every open finished in a thread)."""

    async def no_alarms(until: float, clock: Callable[[], float]) -> None:
        raise AssertionError("no alarm is queued")

    loop = asyncio.get_running_loop()
    async with anyio.create_task_group() as tg:
        pool = AlarmPool(no_alarms, tg, 4, deque(), set(), clock=lambda: 0.0)
        look = pool._others_ready
        assert look is not None
        for _ in range(3):  # the pool's start settles (uvloop: its cancelled probe handle)
            await asyncio.sleep(0)
        assert not look()
        _wake_without_work(loop)
        assert not look()
        await asyncio.sleep(0)  # the loop reads its wake-up
        handed = loop.create_future()
        thread = threading.Thread(target=loop.call_soon_threadsafe,
                                  args=(handed.set_result, None))
        thread.start()
        thread.join()  # a moment's block of the loop, so that it has not run the hand-back yet
        assert look()  # a thread's hand-back is seen, in the ready queue
        await handed
        pool.stop(AlarmBook(lambda: 0))


def _wake_without_work(loop: asyncio.AbstractEventLoop) -> None:
    """Wake ``loop`` as a thread's hand-back does, with nothing handed: a byte into asyncio's
    self-pipe, or a count into the eventfd libuv's wake-ups go through (found in the loop's
    epoll set)."""
    backend = getattr(loop, "_get_backend_id", None)
    if backend is None:
        loop._write_to_self()  # type: ignore[attr-defined]
        return
    with open(f"/proc/self/fdinfo/{backend()}") as f:
        fds = [int(line.split()[1]) for line in f if line.startswith("tfd:")]
    eventfds = [fd for fd in fds if os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventfd]"]
    assert len(eventfds) == 1, eventfds
    os.eventfd_write(eventfds[0], 1)


@pytest.mark.parametrize("loop_factory", _FACTORIES,
                         ids=["asyncio", "uvloop"][:len(_FACTORIES)])
def test_a_pool_made_in_the_loops_first_round_leaves_its_wake_up_aside(
        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None) -> None:
    """ADR 0023: a pool made in the loop's very first round, before its first poll (libuv adds
    its wake-up's eventfd to the epoll set only there), still leaves the loop's wake-up by
    threads aside once it is registered: it is told on sight. Before, it was looked for only
    when the pool started, and every thread's hand-back would have ended the turn."""

    async def no_alarms(until: float, clock: Callable[[], float]) -> None:
        raise AssertionError("no alarm is queued")

    async def first_round() -> tuple[bool, bool]:
        async with anyio.create_task_group() as tg:
            pool = AlarmPool(no_alarms, tg, 4, deque(), set(), clock=lambda: 0.0)
            look = pool._others_ready
            assert look is not None
            for _ in range(3):  # the loop polls: libuv registers what it was given
                await asyncio.sleep(0)
            idle = look()
            _wake_without_work(asyncio.get_running_loop())
            woken = look()
            pool.stop(AlarmBook(lambda: 0))
        return idle, woken

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        assert runner.run(first_round()) == (False, False)


@pytest.mark.anyio
async def test_a_burst_is_handed_to_the_pool_a_piece_a_round_of_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28 ("a burst of 100,000 due alarms does not starve requests"), AL-5: the real-time
    loop hands the due keys to the pool at most HAND_OUT_AT_ONCE at a time, a round of the loop
    between pieces, so what is ready on the loop runs before the burst's last piece is handed
    out (at once, checking and queueing 100,000 keys held the loop 50 ms); every alarm fires
    once (the pieces' order is test_alarm_book_order's)."""
    monkeypatch.setattr(scheduler_module, "HAND_OUT_AT_ONCE", 16)
    node, clock = await _started(tmp_path, _turn_clock)
    assert node.scheduler is not None
    pieces: list[int] = []
    ready_ran_at: list[int] = []  # how many keys were handed out when the ready callback ran
    hand_out = AlarmPool.hand_out

    def counted(pool: AlarmPool, keys: list[Any]) -> None:
        if not pieces:  # something becomes ready on the loop as the burst begins
            asyncio.get_running_loop().call_soon(lambda: ready_ran_at.append(sum(pieces)))
        pieces.append(len(keys))
        hand_out(pool, keys)

    monkeypatch.setattr(AlarmPool, "hand_out", counted)
    try:
        oids, all_fired = await _due_together(node, clock, BURST)
        clock.offset_ms = 86_400_000 + 1
        node.scheduler.book.wake_if_before(0)
        with anyio.fail_after(GUARD_S):
            await all_fired.wait()
        assert sum(pieces) == BURST and max(pieces) <= 16 and len(pieces) >= BURST // 16
        assert ready_ran_at and ready_ran_at[0] < BURST, (ready_ran_at, pieces)
        assert sorted(seen.object_id for seen in afs.ALARM_LOG) == sorted(oids)
        assert node.scheduler.fired == BURST
    finally:
        await node.stop()


@pytest.mark.anyio
async def test_alarms_on_evicted_actors_are_reported_once_a_run_not_once_an_alarm(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``alarms_fired_total`` hears of a burst's alarms on evicted actors once a worker's run of
    the pool, as it does of open actors': not once an alarm, which was a tenth of a burst's
    scheduler work an alarm (callgrind, session 21). The pool's turns are measured by a clock
    that never moves, with no look, so a worker's run ends only when the queue is empty."""
    monkeypatch.setattr(alarm_pool, "_others_ready", lambda loop, pool: None)
    node, clock = await _started(tmp_path, lambda: 0.0, file_threads=0)
    assert node.scheduler is not None
    try:
        _, all_fired = await _due_together(node, clock, METRICS_BURST)
        node.host.evict_all_idle()
        assert node.host.active_count == 0
        reports: list[float] = []
        all_reported = anyio.Event()
        inc = node.metrics.inc

        def counted(name: str, labels: Any = (), value: float = 1) -> None:
            if name == "alarms_fired_total":
                reports.append(value)
                if sum(reports) >= METRICS_BURST:
                    all_reported.set()
            inc(name, labels, value)

        node.metrics.inc = counted  # type: ignore[method-assign]
        opened = node.host.activations
        clock.offset_ms = 86_400_000
        node.scheduler.book.wake_if_before(0)
        with anyio.fail_after(GUARD_S):
            await all_fired.wait()
            await all_reported.wait()  # the last run's report, at its end
        assert node.host.activations - opened == METRICS_BURST  # each opened for its alarm
        assert sum(reports) == METRICS_BURST
        assert node.metrics.get("alarms_fired_total", (("namespace", "scratch"),)) == \
            METRICS_BURST
        assert len(reports) <= METRICS_BURST // 4  # a report a run of several, not one each
    finally:
        await node.stop()


@pytest.mark.anyio
async def test_the_turn_clock_says_reached_as_its_reading_does_without_a_cpu_read_far_from_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """ADR 0023, issue 28: whether the pool's turn clock reached a time agrees with its reading
    (the loop thread's CPU, or a quarter of the loop's clock when more), and far from that time
    it is said without reading the thread's CPU (a system call, at every look between two
    alarms before): the CPU time since the last reading cannot exceed the real time since."""
    reads = [0]
    real_thread_time = alarm_pool.time.thread_time

    def counted() -> float:
        reads[0] += 1
        return real_thread_time()

    monkeypatch.setattr(alarm_pool.time, "thread_time", counted)
    clock, reached = alarm_pool._turn_clock(asyncio.get_running_loop())
    now = clock()
    before = reads[0]
    assert not reached(now + 3600.0)  # an hour of CPU cannot have passed since the reading
    assert reads[0] == before
    assert reached(now)  # the reading itself: reached, read again to say so
    assert reads[0] == before + 1
    for _ in range(100):  # never reached before a reading says so, always once one has
        at = clock() + 0.000_01
        if reached(at):
            assert clock() >= at
        assert reached(clock())


@pytest.mark.anyio
async def test_the_pools_look_between_alarms_ends_a_turn_for_a_request_waiting_on_a_socket() -> None:
    """ADR 0023, on both loops: the one call the pool makes between two alarms (``_over``: the
    look and the clock together) says the turn is over as soon as a request's bytes wait on a
    socket the loop watches, and not while nothing else waits and the turn's time is not up;
    at or past the turn's end it is over either way."""

    async def no_alarms(until: float, over: Callable[[float], bool]) -> None:
        raise AssertionError("no alarm is queued")

    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    try:
        async with anyio.create_task_group() as tg:
            pool = AlarmPool(no_alarms, tg, 4, deque(), set())
            assert pool._look_parts is not None  # the one-call look on both loops
            received = loop.create_task(loop.sock_recv(ours, 1))
            for _ in range(3):
                await asyncio.sleep(0)
            ends = pool._clock() + 3600.0
            assert not pool._over(ends)
            assert pool._over(pool._clock())
            theirs.send(b"r")
            assert pool._over(ends)
            assert await received == b"r"
            assert not pool._over(ends)
            pool.stop(AlarmBook(lambda: 0))
            assert not pool._over(ends)  # stopped: the clock alone
    finally:
        ours.close()
        theirs.close()


def test_a_turn_opens_two_rounds_after_the_last_one_ended() -> None:
    """ADR 0023, issue 28: between two turns the loop goes round once, its I/O polled, and the
    next turn opens in the round after that, behind whatever that poll woke, even when nothing
    waited when the pool looked (bytes arriving just after the look are read before the turn,
    not after it: session 23, the request p99 in burst windows). Counted by the loop's polls
    on asyncio's loop: three a turn of one alarm."""

    async def burst() -> list[int]:
        loop = asyncio.get_running_loop()
        selector = loop._selector  # type: ignore[attr-defined]
        polls = [0]
        real_select = selector.select

        def counted(timeout: float | None = None) -> Any:
            polls[0] += 1
            return real_select(timeout)

        selector.select = counted
        queue: deque[tuple[str, str]] = deque()
        running: set[tuple[str, str]] = set()
        at_poll: list[int] = []
        done = anyio.Event()

        async def fire(until: float, over: Callable[[float], bool]) -> bool:
            running.discard(queue.popleft())
            at_poll.append(polls[0])
            if not queue:
                done.set()
            return True  # a turn of one alarm

        async with anyio.create_task_group() as tg:
            pool = AlarmPool(fire, tg, 1, queue, running)
            pool.hand_out([("ns", f"k{i}") for i in range(6)])
            with anyio.fail_after(GUARD_S):
                await done.wait()
            pool.stop(AlarmBook(lambda: 0))
            tg.cancel_scope.cancel()  # the idle worker, as the scheduler's loop ends it
        selector.select = real_select
        return [b - a for a, b in itertools.pairwise(at_poll)]

    with asyncio.Runner() as runner:
        assert runner.run(burst()) == [3] * 5
