"""The alarm book's due keys (AL-4, AL-5, RT-12): in the book's order (time, then when each was
set), stale heap entries left out, keys running noted for later, whether a few are due or a burst
of many (then the heap is split in one pass instead of popped key by key)."""

from __future__ import annotations

import pytest

from mailbox_actors.alarms.book import AlarmBook, Key


def _key(i: int) -> Key:
    return ("ns", f"a{i:04d}")


@pytest.mark.parametrize("count", [10, 3_000])
def test_due_keys_come_in_the_books_order_without_stale_or_running_ones(count: int) -> None:
    book = AlarmBook(lambda: 0)
    now = 1_000
    expected: list[tuple[int, int, Key]] = []  # (time, order set, key) of the live due keys
    order = 0
    for i in range(count):
        # Times repeat (a burst's instant) and some are later than now.
        at = (now - i % 3) if i % 4 else now + 5
        book.put(_key(i), at)
        order += 1
        if i % 5 == 0:  # moved: the first heap entry goes stale
            at = now - 7 if i % 10 == 0 else now + 50
            book.put(_key(i), at)
            order += 1
        if at <= now:
            expected.append((at, order, _key(i)))
    running = {_key(1)}
    due = book.pop_due(now, running)
    wanted = [key for _, _, key in sorted(expected) if key not in running]
    assert due == wanted
    # Nothing due is left behind; the later ones, and the running one's noted drop, remain.
    assert book.pop_due(now, set()) == []
    assert book.take_dropped(_key(1))
    assert book.next_due_ms(set()) == now + 5


@pytest.mark.parametrize("count", [40, 3_000])
def test_a_burst_is_taken_in_pieces_in_the_same_order_and_what_moves_meanwhile_is_left_out(
        count: int) -> None:
    """AL-5, issue 28 (a burst does not starve requests): with a limit, the due keys come at most
    that many a call, together in the same order as in one call, so the real-time loop hands a
    burst out a piece a round; a key moved later or deleted while it waited in the rest is not
    taken, one that is running is noted, and the rest counts as due for the loop's wait."""
    whole, pieces = AlarmBook(lambda: 0), AlarmBook(lambda: 0)
    now = 1_000
    for book in (whole, pieces):
        for i in range(count):
            book.put(_key(i), now - i % 7)
    order = whole.pop_due(now, set())
    limit = count // 8
    first = pieces.pop_due(now, set(), limit)
    assert first == order[:limit]
    assert pieces.next_due_ms(set()) is not None and pieces.next_due_ms(set()) <= now
    moved, deleted, running = order[limit + 1], order[limit + 2], order[limit + 3]
    pieces.put(moved, now + 60_000)
    pieces.forget(deleted)
    got = list(first)
    while True:
        piece = pieces.pop_due(now, {running}, limit)
        assert len(piece) <= limit
        if not piece:
            break
        got += piece
    assert got == [k for k in order if k not in (moved, deleted, running)]
    assert pieces.take_dropped(running)
    assert pieces.next_due_ms(set()) == now + 60_000
    assert pieces.heap_size >= 1
