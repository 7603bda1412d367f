"""The outbox's alarm purpose as events record it (EV-1, EV-3): an event emitted while the purpose
is already recorded for no later than now adds no write of its own, and one whose transaction
(or savepoint) recorded the purpose and rolled back leaves the next event to record it, as does
one after ``delete_all``; every committed event goes out."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.mailbox import MailboxInit

IDS = {"tenant_id": "t1", "identity_id": "i1"}
NS = "identity_mailbox"


class _Undo(Exception):
    pass


def _purpose_in_file(path: Path) -> int | None:
    """``alarm:outbox`` as another connection reads it from the file (committed state)."""
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT v FROM _ma_meta WHERE k = 'alarm:outbox'").fetchone()
        return None if row is None else int(row[0])
    finally:
        conn.close()


async def _mailbox(rt: TestRuntime) -> tuple[str, Path]:
    m = rt.id_from_name(NS, "a")
    await rt.call(NS, m, MailboxInit(), **IDS)
    await rt.run_until_idle()  # identity.created goes out; the purpose is cleared
    return m, rt.node.host.path_for(NS, m)


@pytest.mark.anyio
async def test_an_event_behind_a_due_purpose_records_none_and_still_goes_out(
        tmp_path: Path) -> None:
    """EV-1, EV-3: the first event records ``alarm:outbox`` for its time; a later one, emitted
    before the run, finds it due and writes none of its own (the purpose keeps the first time);
    the run publishes both, in order, and then clears the purpose."""
    async with TestRuntime(tmp_path) as rt:
        m, path = await _mailbox(rt)
        t0 = rt.now_ms()

        def two_commits(actor: Any, storage: SqlStorage) -> list[int | None]:
            ctx = actor.ctx
            storage.transaction_sync(lambda tx: ctx.emit(tx, "identity.updated", {"n": 1}))
            first = _purpose_in_file(path)
            rt.clock.set_ms(t0 + 5)
            storage.transaction_sync(lambda tx: ctx.emit(tx, "identity.updated", {"n": 2}))
            return [first, _purpose_in_file(path)]

        assert await rt.run_in_actor(NS, m, two_commits) == [t0, t0]
        assert await rt.get_alarm(NS, m) == t0
        await rt.run_until_idle()
        assert [e.data["n"] for e in rt.events.events("identity.updated")] == [1, 2]
        assert _purpose_in_file(path) is None


def _emit_then_fail(actor: Any, tx: SqlStorage, n: int) -> None:
    actor.ctx.emit(tx, "identity.updated", {"n": n})
    raise _Undo


@pytest.mark.anyio
@pytest.mark.parametrize("undone", ["transaction", "savepoint"])
async def test_an_event_after_a_rolled_back_purpose_records_its_own(tmp_path: Path,
                                                                      undone: str) -> None:
    """EV-1, EV-3, RT-5: an event whose transaction (or savepoint) recorded the outbox purpose
    and rolled back takes the purpose with it; the next event records it again (the runtime
    forgets what it knew of the file at any rollback), and only the committed event goes out."""
    async with TestRuntime(tmp_path) as rt:
        m, path = await _mailbox(rt)

        def steps(actor: Any, storage: SqlStorage) -> int | None:
            if undone == "transaction":
                with pytest.raises(_Undo):
                    storage.transaction_sync(lambda tx: _emit_then_fail(actor, tx, -1))
                storage.transaction_sync(lambda tx: actor.ctx.emit(tx, "identity.updated",
                                                                   {"n": 1}))
            else:
                def outer(tx: SqlStorage) -> None:
                    with pytest.raises(_Undo):
                        tx.transaction_sync(lambda sp: _emit_then_fail(actor, sp, -1))
                    actor.ctx.emit(tx, "identity.updated", {"n": 1})
                storage.transaction_sync(outer)
            return _purpose_in_file(path)

        assert await rt.run_in_actor(NS, m, steps) == rt.now_ms()
        await rt.run_until_idle()
        assert [e.data["n"] for e in rt.events.events("identity.updated")] == [1]
        assert _purpose_in_file(path) is None


def _meta_in_file(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT k, v FROM _ma_meta WHERE k IN ('event_seq', "
                                 "'alarm:outbox')").fetchall())
    finally:
        conn.close()


@pytest.mark.anyio
async def test_an_event_after_delete_all_starts_the_sequence_again_and_records_its_purpose(
        tmp_path: Path) -> None:
    """RT-15, EV-1: ``delete_all`` takes the runtime's record of the actor with it (the event
    sequence, the outbox purpose); what the runtime knew of the file without a read goes too, so
    an event emitted after it (into the runtime's outbox, emptied with the rest) takes sequence 1
    and records the outbox purpose for its time in the file."""
    async with TestRuntime(tmp_path) as rt:
        m, path = await _mailbox(rt)

        def steps(actor: Any, storage: SqlStorage) -> tuple[int, int]:
            ctx = actor.ctx
            before = storage.transaction_sync(
                lambda tx: ctx.emit(tx, "identity.updated", {"n": 1})).sequence
            storage.delete_all()
            after = storage.transaction_sync(
                lambda tx: ctx.emit(tx, "identity.updated", {"n": 2})).sequence
            return before, after

        before, after = await rt.run_in_actor(NS, m, steps)
        assert before > 1 and after == 1
        assert _meta_in_file(path) == {"event_seq": "1", "alarm:outbox": str(rt.now_ms())}
