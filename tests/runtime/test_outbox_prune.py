"""Pruning old events is a runtime purpose (EV-4, AL-2): an actor whose class has no maintenance of
its own still loses its dispatched events past the tenant's events_days; the purpose is recorded by
the outbox run, runs daily while dispatched events are kept, and leaves nothing behind after."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from mailbox_actors.runtime import outbox
from mailbox_actors.runtime.actor import Actor, Call
from mailbox_actors.runtime.migrations import Migration
from mailbox_actors.testing import TestRuntime

pytestmark = pytest.mark.anyio

DAY = 86_400_000
NS = "noter"


class Note(msgspec.Struct, tag="note", tag_field="op"):
    n: int = 0


class Look(msgspec.Struct, tag="look", tag_field="op"):
    pass


class Noter(Actor[Note | Look]):
    """Emits an event per note; no alarm purposes and no alarm handler of its own."""

    namespace = NS
    requests = Note | Look
    init_request = Note
    migrations = (Migration(1, ("CREATE TABLE notes (n INTEGER NOT NULL)",)),)

    async def handle(self, call: Call, req: Note | Look) -> Any:
        match req:
            case Note():
                self.ctx.claim_owner(call)
                self.sql.transaction_sync(lambda tx: self.ctx.emit(tx, "noter.noted", {"n": req.n}))
                return None
            case Look():
                rows = [(r[0], r[1] is not None) for r in self.sql.exec(
                    "SELECT sequence, dispatched_at FROM outbox ORDER BY sequence")]
                return {"outbox": rows, "scheduled": self.ctx.scheduled(),
                        "alarm": self.sql.get_alarm()}


async def _emit(rt: TestRuntime, oid: str, n: int) -> None:
    await rt.call(NS, oid, Note(n=n), tenant_id="t1")


async def _look(rt: TestRuntime, oid: str) -> dict[str, Any]:
    got = await rt.call(NS, oid, Look(), tenant_id="t1")
    return {**got, "outbox": [tuple(r) for r in got["outbox"]]}


async def test_an_actor_without_maintenance_has_its_old_events_pruned(tmp_path: Path) -> None:
    """EV-4, AL-2: an actor with no alarm purposes of its own emits an event; the outbox run that
    publishes it records the runtime's prune purpose for a day later; the event is kept while
    younger than the default 30 days, and pruned once older, after which no purpose and no alarm
    are left."""
    async with TestRuntime(tmp_path, objects=(Noter,)) as rt:
        oid = rt.id_from_name(NS, "a")
        start = rt.now_ms()
        await _emit(rt, oid, 1)
        await rt.run_until_idle()
        assert [e.type for e in rt.events.events()] == ["noter.noted"]
        seen = await _look(rt, oid)
        assert seen["scheduled"] == {outbox.PRUNE_PURPOSE: start + DAY}
        assert seen["alarm"] == start + DAY
        await rt.advance(29 * DAY)
        await _emit(rt, oid, 2)
        await rt.run_until_idle()
        seen = await _look(rt, oid)
        assert seen["outbox"] == [(1, True), (2, True)]
        assert seen["scheduled"].keys() == {outbox.PRUNE_PURPOSE}
        await rt.advance(2 * DAY)  # the first event is now 31 days old
        assert (await _look(rt, oid))["outbox"] == [(2, True)]
        await rt.advance(30 * DAY)
        assert await _look(rt, oid) == {"outbox": [], "scheduled": {}, "alarm": None}


async def test_undispatched_events_are_never_pruned(tmp_path: Path) -> None:
    """EV-3, EV-4: an event not yet published is kept whatever its age (the prune deletes
    dispatched events only)."""
    async with TestRuntime(tmp_path, objects=(Noter,)) as rt:
        oid = rt.id_from_name(NS, "a")
        await _emit(rt, oid, 1)
        await rt.run_until_idle()
        await rt.advance(2 * DAY)

        def steps(actor: Any, storage: Any) -> None:
            def run(tx: Any) -> None:
                tx.exec("INSERT INTO outbox (sequence, id, type, occurred_at_ms, body) "
                        "VALUES (99, 'evt_old', 'noter.noted', 0, x'7b7d')")
                outbox.prune(tx, 1)
            storage.transaction_sync(run)
        await rt.run_in_actor(NS, oid, steps)
        assert (await _look(rt, oid))["outbox"] == [(99, False)]
