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
