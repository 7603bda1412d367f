"""Clock, Rng and Ids: the platform pieces every deterministic test stands on (RT-12)."""

from __future__ import annotations

import os
import re
import sys
import threading

import anyio
import pytest
from ulid import ULID

from mailbox_actors.platform.clock import Clock, FakeClock, SystemClock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.rng import Rng, SeededRng, SystemRng

T0 = 1_767_225_600_000
ID_RE = re.compile(r"^req_[0-9A-HJKMNP-TV-Z]{26}$")


class Recorder:
    """TimedWork with fixed due instants that records when it was run and what the clock said."""

    def __init__(self, name: str, clock: FakeClock, due: list[int], log: list[tuple[str, int]]):
        self.name = name
        self.clock = clock
        self.due = sorted(due)
        self.log = log

    def next_due_ms(self) -> int | None:
        return self.due[0] if self.due else None

    async def run_due(self, now_ms: int) -> None:
        assert now_ms == self.clock.now_ms()
        while self.due and self.due[0] <= now_ms:
            at = self.due.pop(0)
            self.log.append((self.name, at))
            # Work always runs at (or after) its due instant, never before.
            assert now_ms >= at


class StuckClock:
    """A clock that can be set to any value, including backwards (as a wall clock can be)."""

    fake = True

    def __init__(self, now: int) -> None:
        self.now = now

    def now_ms(self) -> int:
        return self.now


class MaxRng:
    """An Rng that always returns all-ones bytes, forcing ULID overflow on the second id."""

    def random_bytes(self, n: int) -> bytes:
        return b"\xff" * n

    def random(self) -> float:
        return 0.0


# -- clock --------------------------------------------------------------------------------------


def test_clocks_satisfy_the_protocol() -> None:
    """SystemClock and FakeClock are both Clocks, and each says how long a wait really takes:
    the system clock the real distance, the fake one nothing when due and forever otherwise (its
    time passes only when a test advances it) (RT-12)."""
    assert isinstance(SystemClock(), Clock)
    assert isinstance(FakeClock(), Clock)
    system = SystemClock()
    assert 59.0 < system.deadline_to_sleep_time(system.now_ms() + 60_000) <= 60.0
    assert system.deadline_to_sleep_time(system.now_ms() - 1) == 0.0
    fake = FakeClock(T0)
    assert fake.deadline_to_sleep_time(T0) == 0.0
    assert fake.deadline_to_sleep_time(T0 + 1) == float("inf")


@pytest.mark.anyio
async def test_a_sleeper_on_the_fake_clock_wakes_when_advance_reaches_its_deadline() -> None:
    """FakeClock.sleep_until returns once advance() reaches the deadline, not a step before, and
    at once when something sets its wake event first (RT-12: the clock owns waiting)."""
    clock = FakeClock(T0)
    woke: list[int] = []

    async def sleeper(deadline: int, wake: anyio.Event) -> None:
        await clock.sleep_until(deadline, wake)
        woke.append(clock.now_ms())

    early = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper, T0 + 100, anyio.Event())
        tg.start_soon(sleeper, T0 + 10_000, early)
        await anyio.wait_all_tasks_blocked()  # both are asleep now
        await clock.advance(99)
        assert woke == []
        await clock.advance(1)
        assert woke == [T0 + 100]
        early.set()
    assert woke == [T0 + 100, T0 + 100]


def test_system_clock_reads_unix_milliseconds() -> None:
    """SystemClock returns an integer count of Unix milliseconds after 2020 (RT-12)."""
    now = SystemClock().now_ms()
    assert isinstance(now, int)
    assert now > 1_577_836_800_000


def test_fake_clock_stands_still() -> None:
    """A FakeClock moves only when the test moves it (RT-12)."""
    clock = FakeClock(T0)
    assert clock.now_ms() == T0
    assert clock.now_ms() == T0


@pytest.mark.anyio
async def test_fake_clock_refuses_to_go_backwards() -> None:
    """advance by a negative amount and set_ms to an earlier time are refused (RT-12)."""
    clock = FakeClock(T0)
    with pytest.raises(ValueError, match="backwards"):
        await clock.advance(-1)
    with pytest.raises(ValueError, match="backwards"):
        clock.set_ms(T0 - 1)
    with pytest.raises(ValueError):
        FakeClock(-1)
    assert clock.now_ms() == T0


@pytest.mark.anyio
async def test_advance_moves_time_forward() -> None:
    """advance(ms) ends exactly ms later; set_ms jumps to a later instant (RT-12)."""
    clock = FakeClock(T0)
    await clock.advance(1500)
    assert clock.now_ms() == T0 + 1500
    clock.set_ms(T0 + 10_000)
    assert clock.now_ms() == T0 + 10_000


@pytest.mark.anyio
async def test_advance_drives_timed_work_in_time_order() -> None:
    """advance walks to each due instant in order across all attached work, with the clock
    reading that instant while the work runs (RT-12, AL-5)."""
    clock = FakeClock(T0)
    log: list[tuple[str, int]] = []
    a = Recorder("a", clock, [T0 + 300, T0 + 100, T0 + 5000], log)
    b = Recorder("b", clock, [T0 + 200, T0 + 300], log)
    clock.attach(a)
    clock.attach(b)
    await clock.advance(1000)
    assert log == [("a", T0 + 100), ("b", T0 + 200), ("a", T0 + 300), ("b", T0 + 300)]
    assert clock.now_ms() == T0 + 1000
    await clock.advance(4000)
    assert log[-1] == ("a", T0 + 5000)
    assert clock.now_ms() == T0 + 5000


@pytest.mark.anyio
async def test_advance_runs_work_that_schedules_more_work() -> None:
    """Work scheduled by earlier work inside the advanced window also runs, in order (RT-12)."""
    clock = FakeClock(T0)
    log: list[tuple[str, int]] = []

    class Chain(Recorder):
        async def run_due(self, now_ms: int) -> None:
            before = len(self.log)
            await super().run_due(now_ms)
            if len(self.log) > before and len(self.log) < 5:
                self.due.append(now_ms + 100)

    chain = Chain("c", clock, [T0 + 100], log)
    clock.attach(chain)
    await clock.advance(10_000)
    assert log == [("c", T0 + 100 * i) for i in range(1, 6)]


@pytest.mark.anyio
async def test_run_until_idle_runs_due_work_without_moving_time() -> None:
    """run_until_idle fires what is already due and leaves the clock where it was (RT-12)."""
    clock = FakeClock(T0)
    log: list[tuple[str, int]] = []
    clock.attach(Recorder("a", clock, [T0 - 50, T0, T0 + 1], log))
    await clock.run_until_idle()
    assert log == [("a", T0 - 50), ("a", T0)]
    assert clock.now_ms() == T0


@pytest.mark.anyio
async def test_attach_is_idempotent_and_detach_stops_driving() -> None:
    """Attaching twice runs work once; detached work is no longer driven (RT-12)."""
    clock = FakeClock(T0)
    log: list[tuple[str, int]] = []
    work = Recorder("a", clock, [T0 + 10, T0 + 20], log)
    clock.attach(work)
    clock.attach(work)
    await clock.advance(10)
    assert log == [("a", T0 + 10)]
    clock.detach(work)
    clock.detach(work)
    await clock.advance(100)
    assert log == [("a", T0 + 10)]


@pytest.mark.anyio
async def test_set_ms_does_not_run_work() -> None:
    """set_ms jumps without running anything, so a test can model a node that was down (AL-4)."""
    clock = FakeClock(T0)
    log: list[tuple[str, int]] = []
    clock.attach(Recorder("a", clock, [T0 + 10], log))
    clock.set_ms(T0 + 1000)
    assert log == []
    await clock.run_until_idle()
    assert log == [("a", T0 + 10)]


# -- rng ----------------------------------------------------------------------------------------


def test_rngs_satisfy_the_protocol() -> None:
    """SystemRng and SeededRng are both Rngs (RT-12)."""
    assert isinstance(SystemRng(), Rng)
    assert isinstance(SeededRng(1), Rng)


def test_seeded_rng_is_deterministic() -> None:
    """The same seed gives the same bytes and floats; another seed gives others (RT-12)."""
    a, b, c = SeededRng(7), SeededRng(7), SeededRng(8)
    seq_a = [a.random_bytes(10) for _ in range(5)] + [a.random() for _ in range(5)]
    seq_b = [b.random_bytes(10) for _ in range(5)] + [b.random() for _ in range(5)]
    seq_c = [c.random_bytes(10) for _ in range(5)] + [c.random() for _ in range(5)]
    assert seq_a == seq_b
    assert seq_a != seq_c


@pytest.mark.parametrize("rng", [SeededRng(3), SystemRng()], ids=["seeded", "system"])
def test_rng_ranges(rng: Rng) -> None:
    """random() is in [0, 1) and random_bytes(n) returns n bytes (RT-12)."""
    for _ in range(1000):
        assert 0.0 <= rng.random() < 1.0
    assert len(rng.random_bytes(0)) == 0
    assert len(rng.random_bytes(16)) == 16


def test_system_rng_hands_out_each_byte_once() -> None:
    """SystemRng serves small requests from one read of the OS's randomness: across refills
    and from several threads at once no chunk is handed out twice, and large requests are
    as long as asked (RT-12: ids stay unique)."""
    rng = SystemRng()
    seen: list[bytes] = []

    def draw() -> None:
        for _ in range(3000):
            seen.append(rng.random_bytes(10))

    threads = [threading.Thread(target=draw) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 12_000 and len(set(seen)) == 12_000  # 80 bits each: a repeat is a bug
    assert all(len(b) == 10 for b in seen)
    assert len(rng.random_bytes(64)) == 64 and rng.random_bytes(32) != rng.random_bytes(32)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_system_rng_forked_child_draws_its_own_bytes() -> None:
    """A forked process never repeats the bytes its parent had read ahead (RT-12)."""
    rng = SystemRng()
    rng.random_bytes(10)  # the parent now holds bytes read ahead
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: write what it draws next and leave at once
        os.close(r)
        os.write(w, rng.random_bytes(10))
        os._exit(0)
    os.close(w)
    try:
        child = os.read(r, 10)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    assert len(child) == 10 and child != rng.random_bytes(10)


# -- ids ----------------------------------------------------------------------------------------


def test_id_format() -> None:
    """Ids are ``{prefix}_`` and a 26-character Crockford ULID whose time is the clock's (RT-12)."""
    ids = Ids(FakeClock(T0), SeededRng(1))
    rid = ids.new_id("req")
    assert ID_RE.match(rid)
    assert ULID.from_str(rid[4:]).milliseconds == T0


def test_ids_strictly_increase_while_the_clock_stands_still() -> None:
    """Ids minted in the same millisecond still strictly increase (RT-12)."""
    ids = Ids(FakeClock(T0), SeededRng(2))
    minted = [ids.new_id("req") for _ in range(1000)]
    assert all(ID_RE.match(i) for i in minted)
    assert minted == sorted(minted)
    assert len(set(minted)) == len(minted)
    assert {ULID.from_str(i[4:]).milliseconds for i in minted} == {T0}


@pytest.mark.anyio
async def test_ids_increase_across_clock_steps() -> None:
    """Ids keep increasing as the clock advances, taking the new millisecond (RT-12)."""
    clock = FakeClock(T0)
    ids = Ids(clock, SeededRng(3))
    first = ids.new_id("evt")
    await clock.advance(1)
    second = ids.new_id("evt")
    assert first < second
    assert ULID.from_str(second[4:]).milliseconds == T0 + 1


def test_ids_never_go_backwards_with_the_clock() -> None:
    """A clock that steps back does not make ids go backwards (RT-12)."""
    clock = StuckClock(T0)
    ids = Ids(clock, SeededRng(4))
    first = ids.new_id("req")
    clock.now = T0 - 1000
    second = ids.new_id("req")
    assert first < second
    assert ULID.from_str(second[4:]).milliseconds == T0


def test_ids_random_overflow_moves_to_next_millisecond() -> None:
    """When the random part is all ones, the next id moves to the next millisecond (RT-12)."""
    ids = Ids(StuckClock(T0), MaxRng())
    first, second = ids.new_id("req"), ids.new_id("req")
    assert first < second
    assert ULID.from_str(first[4:]).milliseconds == T0
    assert ULID.from_str(second[4:]).milliseconds == T0 + 1


@pytest.mark.parametrize("bad", ["", "Req", "1req", "re-q", "req_", "a" * 17, "../"])
def test_bad_prefixes_are_refused(bad: str) -> None:
    """Prefixes are short lowercase words; anything else is refused (RT-12)."""
    with pytest.raises(ValueError):
        Ids(FakeClock(T0), SeededRng(0)).new_id(bad)


def test_same_seed_same_clock_same_ids() -> None:
    """With a FakeClock and a SeededRng, ids are reproducible run to run (RT-12)."""
    a = Ids(FakeClock(T0), SeededRng(9))
    b = Ids(FakeClock(T0), SeededRng(9))
    assert [a.new_id("req") for _ in range(3)] == [b.new_id("req") for _ in range(3)]


def test_ids_minted_from_several_threads_at_once_never_repeat() -> None:
    """RT-12: an alarm run's req_ id is minted where it is first read, which may be a worker
    thread (a log line of a handler's blocking helper) while the loop mints others: every id is
    unique, and each thread's ids increase. The interpreter switches threads as often as it can."""
    ids = Ids(FakeClock(T0), SeededRng(7))  # one millisecond for all: ids step by one
    minted: list[list[str]] = [[] for _ in range(6)]
    start = threading.Barrier(len(minted))

    def mint(out: list[str]) -> None:
        start.wait()
        for _ in range(5_000):
            out.append(ids.new_id("req"))

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=mint, args=(out,)) for out in minted]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    every = [i for out in minted for i in out]
    assert len(set(every)) == len(every) == 30_000
    assert all(out == sorted(out) and len(set(out)) == len(out) for out in minted)
