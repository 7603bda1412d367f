"""Event sequence numbers stay contiguous and in order when the transaction that emitted an event
rolls back, wholly or to a savepoint, and after a restart (EV-1, EV-4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.events import GetEvents
from mailbox_actors.wire.mailbox import MailboxInit

IDS = {"tenant_id": "t1", "identity_id": "i1"}


class _Undo(Exception):
    pass


def _emit_then_fail(actor: Any, tx: SqlStorage) -> None:
    actor.ctx.emit(tx, "identity.updated", {"n": -1})
    raise _Undo


def _emit_rollbacks(actor: Any, storage: SqlStorage) -> None:
    ctx = actor.ctx
    storage.transaction_sync(lambda tx: ctx.emit(tx, "identity.updated", {"n": 1}))
    with pytest.raises(_Undo):  # the whole transaction rolls back, its event with it
        storage.transaction_sync(lambda tx: _emit_then_fail(actor, tx))
    storage.transaction_sync(lambda tx: ctx.emit(tx, "identity.updated", {"n": 2}))

    def outer(tx: SqlStorage) -> None:
        with pytest.raises(_Undo):  # only the savepoint rolls back, its event with it
            tx.transaction_sync(lambda sp: _emit_then_fail(actor, sp))
        ctx.emit(tx, "identity.updated", {"n": 3})
    storage.transaction_sync(outer)

    def two(tx: SqlStorage) -> None:
        ctx.emit(tx, "identity.updated", {"n": 4})
        ctx.emit(tx, "identity.updated", {"n": 5})
    storage.transaction_sync(two)


async def _sequences(rt: TestRuntime, m: str) -> list[tuple[int, Any]]:
    got = await rt.call("identity_mailbox", m, GetEvents(), **IDS)
    return [(e["sequence"], e["data"].get("n")) for e in got["events"]]


@pytest.mark.anyio
async def test_rolled_back_events_leave_no_gap_in_the_sequence(tmp_path: Path) -> None:
    """EV-1, EV-4: an event whose transaction (or savepoint) rolled back never existed: the next
    event takes its sequence number, so replay sees 1, 2, 3... in emit order, with nothing of the
    rolled-back ones; after a restart the numbering goes on from the last stored event."""
    async with TestRuntime(tmp_path) as rt:
        m = rt.id_from_name("identity_mailbox", "a")
        await rt.call("identity_mailbox", m, MailboxInit(), **IDS)  # identity.created: 1
        await rt.run_in_actor("identity_mailbox", m, _emit_rollbacks)
        assert await _sequences(rt, m) == [(1, None), (2, 1), (3, 2), (4, 3), (5, 4), (6, 5)]
    async with TestRuntime(tmp_path) as rt:
        await rt.run_in_actor("identity_mailbox", m, lambda actor, storage: storage.transaction_sync(
            lambda tx: actor.ctx.emit(tx, "identity.updated", {"n": 6})))
        assert (await _sequences(rt, m))[-1] == (7, 6)


def _emit(n: int) -> Any:
    return lambda actor, storage: storage.transaction_sync(
        lambda tx: actor.ctx.emit(tx, "identity.updated", {"n": n})).sequence


def _delete_dispatched(actor: Any, storage: SqlStorage) -> int:
    """What an erase or the prune does: every dispatched event goes (here all of them)."""
    def delete(tx: SqlStorage) -> int:
        n = int(tx.exec("SELECT count(*) FROM outbox WHERE dispatched_at IS NOT NULL").one()[0])
        tx.exec("DELETE FROM outbox WHERE dispatched_at IS NOT NULL")
        return n

    return storage.transaction_sync(delete)


@pytest.mark.anyio
async def test_a_sequence_is_never_taken_twice_when_dispatched_events_are_deleted(
        tmp_path: Path) -> None:
    """EV-1: ``meta.event_seq`` is incremented in each event's transaction; once every event was
    dispatched and deleted (an erase, the prune) and the actor opens again, the next event still
    goes on from the last sequence ever taken, never from what the file still holds."""
    async with TestRuntime(tmp_path) as rt:
        m = rt.id_from_name("identity_mailbox", "a")
        await rt.call("identity_mailbox", m, MailboxInit(), **IDS)  # identity.created: 1
        assert [await rt.run_in_actor("identity_mailbox", m, _emit(n)) for n in (1, 2)] == [2, 3]
        await rt.run_until_idle()  # the outbox run publishes and marks them dispatched
        assert len(rt.events.events()) >= 3
        assert await rt.run_in_actor("identity_mailbox", m, _delete_dispatched) >= 3
    async with TestRuntime(tmp_path) as rt:  # a new connection: the sequence read from the file
        assert await rt.run_in_actor("identity_mailbox", m, _emit(3)) == 4
        assert (await _sequences(rt, m))[-1] == (4, 3)
