"""The alarm index's lazy writes in pieces (AL-4; issue 28: a burst of due alarms must not starve
requests): the real-time loop writes a burst's later-or-deleted changes a few at a time, one
short transaction a loop round, and comes back for the rest until every one reached the index."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mailbox_actors.alarms import scheduler as scheduler_module
from mailbox_actors.alarms.book import AlarmBook, Key
from mailbox_actors.alarms.index import AlarmIndex
from mailbox_actors.bench.actors import REARM_MS, BenchTicker, TickInit, ticker_name
from mailbox_actors.node import Node
from mailbox_actors.platform.clock import SystemClock
from mailbox_actors.runtime.settings import RuntimeSettings

GUARD_S = 60  # only against a hang
NS = BenchTicker.namespace


def _key(i: int) -> Key:
    return ("ns", f"{i:064x}")


def test_a_flush_in_pieces_writes_the_oldest_changes_first_and_says_what_is_left(
        tmp_path: Path) -> None:
    """``flush_index(at_most)`` writes at most that many lazy changes, the first made first, and
    says whether some are left; the index holds every change once all pieces are written."""
    path = tmp_path / "alarms.sqlite"
    index = AlarmIndex(path)
    book = AlarmBook(lambda: 0)
    book.open(index, {})
    for i in range(70):
        book.before_commit(_key(i), 1_000 + i)  # earlier than the index knows: written at once
        book.committed(_key(i), 1_000 + i)
    for i in range(70):
        book.committed(_key(i), 5_000 + i)  # later: lazily
    assert book.flush_index(32) is True
    assert AlarmIndex.read(path) == {_key(i): (5_000 if i < 32 else 1_000) + i for i in range(70)}
    assert book.flush_index(32) is True
    assert book.flush_index(32) is False
    assert not book.has_lazy
    assert AlarmIndex.read(path) == {_key(i): 5_000 + i for i in range(70)}
    for i in range(70):
        book.forget(_key(i))
    assert book.flush_index() is False  # all at once: nothing left
    assert AlarmIndex.read(path) == {}
    index.close()


class MovableClock(SystemClock):
    def __init__(self) -> None:
        self.offset_ms = 0

    def now_ms(self) -> int:
        return super().now_ms() + self.offset_ms


@pytest.mark.anyio
async def test_the_real_time_loop_writes_a_bursts_changes_in_pieces_until_none_is_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """40 alarms due at one instant, each re-armed a day later by its handler: the real-time loop
    writes those later times to the index in pieces of at most ``_FLUSH_AT_ONCE`` (4 here), and
    comes back for the rest without waiting for its next lazy flush: the index ends holding
    every re-armed time."""
    monkeypatch.setattr(scheduler_module, "_FLUSH_AT_ONCE", 4)
    clock = MovableClock()
    node = Node(RuntimeSettings(data_dir=str(tmp_path)), clock=clock, objects=(BenchTicker,))
    await node.start()
    try:
        sched = node.scheduler
        assert sched is not None
        await node.alarms_loaded.wait()
        due = clock.now_ms() + 86_400_000
        oids = [node.id_from_name(NS, ticker_name(i)) for i in range(40)]
        for oid in oids:
            await node.call(NS, oid, TickInit(alarm_at_ms=due), tenant_id="t")
        index = sched.book.index
        assert index is not None
        pieces: list[int] = []
        apply = index.apply

        def counted(changes: dict[Key, int | None]) -> None:
            pieces.append(len(changes))
            apply(changes)

        monkeypatch.setattr(index, "apply", counted)
        BenchTicker.yield_after = None
        clock.offset_ms = 86_400_000 + 1
        sched.book.wake_if_before(0)
        with anyio.fail_after(GUARD_S):
            while sched.fired < 40 or sched.book.has_lazy:  # noqa: ASYNC110 - two conditions
                await anyio.sleep(0.001)
        assert sum(pieces) >= 40 and max(pieces) <= 4, pieces
        rows = AlarmIndex.read(index.path)
        assert all(rows[(NS, oid)] > due + REARM_MS // 2 for oid in oids)
    finally:
        await node.stop()
