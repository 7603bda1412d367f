"""Defects a review of the queue consumer and the testing API found (Q-1, Q-2), each as what a user
relies on: a failed dead-letter move does not dead-letter the rest of a batch unseen; bad input is
refused with invalid_request where it is given; TestRuntime leaves nothing behind and reopens its
directory after a kill."""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.queues import Consumer, Message, QueueService
from mailbox_actors.platform.queues.bodies import encode_body
from mailbox_actors.platform.rng import SeededRng
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

T0 = 1_767_225_600_000


def job(n: int = 0) -> dict[str, Any]:
    return {"v": 1, "kind": "job", "n": n}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
async def queues(tmp_path: Path, clock: FakeClock) -> AsyncIterator[QueueService]:
    async with QueueService(tmp_path / "q.sqlite", clock=clock, ids=Ids(clock, SeededRng(1))) as q:
        yield q


async def noop(msg: Message) -> None:
    pass


@pytest.mark.anyio
async def test_a_failed_dead_letter_move_does_not_cost_the_rest_of_the_batch(
        tmp_path: Path, queues: QueueService, clock: FakeClock) -> None:
    """Q-1: a claim that finds an exhausted message but cannot move it to the dead letters (the
    statement fails) still hands out the rest of its batch; the exhausted one is moved later."""
    await queues.send("jobs", job(1))
    await queues.receive("jobs", max_retries=0, visibility_ms=1_000)  # delivered; lease lapses
    await queues.send("jobs", job(2))
    await clock.advance(1_000)
    other = sqlite3.connect(tmp_path / "q.sqlite", isolation_level=None)
    other.execute("CREATE TRIGGER no_letters BEFORE UPDATE OF queue ON messages "
                  "WHEN NEW.queue = 'jobs-dlq' BEGIN SELECT RAISE(ABORT, 'refused'); END")
    got = await queues.receive("jobs", max_retries=0, visibility_ms=1_000)
    assert [m.body["n"] for m in got] == [2]
    other.execute("DROP TRIGGER no_letters")
    other.close()
    await clock.advance(1_000)
    assert await queues.receive("jobs", max_retries=0) == []  # both spent now: moved
    letters = await queues.receive("jobs-dlq", max_retries=None)
    assert sorted((m.body["n"], m.dead_letter.reason) for m in letters if m.dead_letter) == [
        (1, "visibility_timeout"), (2, "visibility_timeout")]


def test_a_body_nested_without_end_is_invalid_request() -> None:
    """Q-1: a body nested thousands deep is refused as invalid_request, not a RecursionError."""
    body: Any = 1
    for _ in range(5_000):
        body = [body]
    with pytest.raises(MailboxActorsError) as info:
        encode_body({"v": 1, "kind": "k", "x": body})
    assert info.value.code is ErrorCode.INVALID_REQUEST


@pytest.mark.anyio
@pytest.mark.parametrize("visibility_ms", [0, 30e3, True])
async def test_a_bad_visibility_timeout_is_refused_when_the_consumer_is_made(
        queues: QueueService, visibility_ms: Any) -> None:
    """Q-2: refused at construction (a running consumer would otherwise fail every poll)."""
    with pytest.raises(MailboxActorsError) as info:
        Consumer(queues, "jobs", noop, visibility_ms=visibility_ms)
    assert info.value.details == {"field": "visibility_ms"}


@pytest.mark.anyio
async def test_a_queue_whose_dead_letter_name_would_be_invalid_is_refused(
        queues: QueueService) -> None:
    """Q-1: also without a retry budget, a consumer whose derived dead-letter queue name would be
    too long is refused at once (give_up would strand its letters where nothing can read them)."""
    with pytest.raises(MailboxActorsError) as info:
        Consumer(queues, "q" * 61, noop, max_retries=None)
    assert info.value.details == {"field": "dead_letter_queue"}


def _ours() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("mailbox-actors-test-*")}


@pytest.mark.anyio
async def test_testruntime_that_cannot_start_leaves_no_directory() -> None:
    """A TestRuntime whose settings are refused, or whose start fails, removes its own temporary
    directory."""
    before = _ours()
    with pytest.raises(Exception):  # noqa: B017 - the settings error itself is tested elsewhere
        TestRuntime(shutdown_grace_ms=-1)
    with pytest.raises(MailboxActorsError):
        async with TestRuntime(control=True, control_db="/proc/nope/control.sqlite"):
            pass
    assert _ours() - before == set()


@pytest.mark.anyio
async def test_testruntime_reopens_a_directory_after_a_kill_mid_write(tmp_path: Path) -> None:
    """A kill that left the run counter empty does not stop the directory being opened again."""
    async with TestRuntime(tmp_path):
        pass
    (tmp_path / ".testruntime-runs").write_text("")
    async with TestRuntime(tmp_path) as rt:
        assert rt.now_ms() == T0
