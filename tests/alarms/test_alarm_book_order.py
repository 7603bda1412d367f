"""The alarm book's due keys (AL-4, AL-5, RT-12): in the book's order (time, then when each was
set), stale heap entries left out, keys running noted for later, whether a few are due or a burst
of many (then the heap is split in one pass instead of popped key by key)."""

from __future__ import annotations

import pytest

from mailbox_actors.alarms import book as book_module
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
    assert book.take_dropped(_key(1), book.entries[_key(1)].at)
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
    assert pieces.take_dropped(running, pieces.entries[running].at)
    assert pieces.next_due_ms(set()) == now + 60_000
    assert pieces.heap_size >= 1


def test_a_run_that_moved_its_key_pushes_it_again_only_for_an_entry_dropped_at_its_new_time(
        ) -> None:
    """AL-5: the loop drops a running key's heap entries it meets; when the run ends, the key is
    pushed again only if an entry for the time it has then was among them. An entry dropped for
    the time it ran from (moved since by the run's commit, which pushed the new time's) needs
    none: before, every drop pushed a second entry, one for every alarm of a burst whose keys
    had two entries each (the index's, then a request's set to the same time)."""
    book = AlarmBook(lambda: 0)
    key = _key(1)
    book.put(key, 1_000)
    book.put(key, 1_000)  # a second entry for the same time (a request set it again)
    assert book.pop_due(1_000, set()) == [key]
    assert book.next_due_ms({key}) is None  # the second entry, met while the key runs: dropped
    book.committed(key, 90_000)  # the run re-arms it: the new time's entry is pushed
    assert not book.take_dropped(key, 90_000)
    assert book.dropped == {}
    assert book.next_due_ms(set()) == 90_000
    # Dropped at the time it has when the run ends: said, so the scheduler pushes it again.
    assert book.pop_due(90_000, {key}) == []
    assert book.take_dropped(key, 90_000)


def test_a_commit_that_sets_a_keys_time_again_adds_no_heap_entry_and_it_still_fires() -> None:
    """AL-5: a commit that sets the time a key has already (a request setting it again after the
    node loaded it from the index) leaves the key's heap entry as it is: the key is due once, not
    once an entry; while it runs (its entry popped), the run's end pushes it again (the
    scheduler, ``take_dropped``/``at == due``), so it is not lost either."""
    book = AlarmBook(lambda: 0)
    key, other = _key(1), _key(2)
    book.put(key, 1_000)
    book.put(other, 2_000)
    book.committed(key, 1_000)
    assert book.heap_size == 2
    assert book.pop_due(1_000, set()) == [key]
    assert book.heap_size == 1  # nothing of the key's left behind to drop later
    book.committed(key, 1_000)  # set again while it runs: the run's end pushes it
    assert book.heap_size == 1
    book.push(1_000, key)  # what the scheduler does at the run's end (the time it ran for)
    assert book.pop_due(1_000, set()) == [key]


def test_entries_that_will_not_fire_are_dropped_a_piece_at_a_time_when_asked_to() -> None:
    """Issue 28 ("a burst of 100,000 due alarms does not starve requests"), AL-5: alarms moved
    earlier than the times the node loaded leave their old entries stale, all at the heap's top
    once the burst is handed out; the real-time loop drops at most a piece of them a round
    (``drop_passed``; dropping 100,000 in one step held the loop 175 ms), told whether more may be
    left, and the next due time is the live entry's once they are gone."""
    book = AlarmBook(lambda: 0)
    moved = [_key(i) for i in range(100)]
    for key in moved:
        book.put(key, 2_000)  # as the index had them
    for key in moved:
        book.put(key, 1_000)  # moved earlier: the entries at 2,000 are stale
    later = _key(999)
    book.put(later, 5_000)
    assert book.pop_due(1_000, set()) == moved
    running = set(moved)
    before = book.heap_size
    assert book.drop_passed(running, 16)
    assert book.heap_size == before - 16
    rounds = 1
    while book.drop_passed(running, 16):
        rounds += 1
    assert rounds == 100 // 16  # six full pieces, the seventh found the live entry on top
    assert book.heap_size == 1
    assert not book.drop_passed(running, 16)
    assert book.next_due_ms(running) == 5_000


def test_a_rest_of_stale_entries_is_looked_through_a_piece_a_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28, AL-5: with a limit, ``pop_due`` looks at a bounded number of a burst's rest in
    one call, live or not: a rest of entries gone stale (alarms moved later meanwhile) is dropped
    a piece a call, not looked through at once (99,000: 22-24 ms of the loop); the live keys
    still all come, in order, and the loop's next due time stays due meanwhile."""
    monkeypatch.setattr(book_module, "_LOOK_AT_ONCE", 16)
    book = AlarmBook(lambda: 0)
    keys = [_key(i) for i in range(200)]
    for key in keys:
        book.put(key, 1_000)
    got = book.pop_due(1_000, set(), 10)
    assert got == keys[:10]
    live = keys[10:20] + keys[190:]  # the rest: all moved later but these
    for key in keys[20:190]:
        book.put(key, 9_000)
    pieces: list[int] = []
    while len(got) < 10 + len(live):
        piece = book.pop_due(1_000, set(), 10)
        pieces.append(len(piece))
        got += piece
        assert len(pieces) < 100
    assert got == keys[:10] + live
    assert 0 in pieces  # calls that met only stale entries within their look: none given
    assert book.pop_due(1_000, set(), 10) == []
