"""Carrier over a host of the caller's own (CA-15): no actor runtime, only an SQLite store, a host
keeping the seed's contract (commit with a durable wake, request_wake, events, ids, a clock) and a
transport. ``send`` commits the Email with its wake, ``tick`` from the wake sends it, the wake is
kept armed while ``has_pending_work``, and a new Carrier over the same store (a restart) finds the
work left."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from mailbox_actors.carrier import SCHEMA, Carrier, Submit
from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.logging import get_logger
from mailbox_actors.platform.rng import SeededRng
from mailbox_actors.platform.storage.limits import Limits
from mailbox_actors.platform.storage.opening import open_storage
from mailbox_actors.platform.storage.runtime_access import RuntimeStorage
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.testing import RecordingTransport
from mailbox_actors.wire.transport import ProviderRejected

pytestmark = pytest.mark.anyio
T = TypeVar("T")


class ListHost:
    """A host that is not an actor: the wake is a number it keeps, events a list."""

    def __init__(self, sql: SqlStorage, clock: FakeClock) -> None:
        self.sql, self.clock = sql, clock
        self.ids = Ids(clock, SeededRng(7))
        self.wake_at: int | None = None
        self._pending: int | None = None  # a wake asked for inside the running commit
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.log = get_logger("host-contract-test")

    def commit(self, mutation: Callable[[SqlStorage], T]) -> T:
        self._pending = None
        out = self.sql.transaction_sync(mutation)
        if self._pending is not None:  # committed with the mutation, or not at all
            self.wake_at = self._pending
        return out

    def wake(self, at_ms: int) -> int:
        current = self._pending if self._pending is not None else self.wake_at
        if current is None or at_ms < current:
            self._pending = at_ms
            return at_ms
        return current

    def set_wake(self, at_ms: int) -> None:
        self._pending = at_ms

    def scheduled_wake(self) -> int | None:
        return self.wake_at

    def request_wake(self) -> None:
        self.commit(lambda tx: self.wake(tx.now_ms()))

    def emit(self, tx: SqlStorage, type_: str, data: dict[str, Any]) -> None:
        self.events.append((type_, data))

    def new_id(self, prefix: str) -> str:
        return self.ids.new_id(prefix)

    def now_ms(self) -> int:
        return self.clock.now_ms()

    @property
    def erased(self) -> bool:
        return False


def store(path: Path, clock: FakeClock) -> SqlStorage:
    sql = open_storage(path, create=True, durability="normal", limits=Limits(),
                       now_ms=clock.now_ms)
    assert sql is not None
    return sql


async def tick(carrier: Carrier, host: ListHost) -> None:
    """What the host does at its wake: tick, then disarm once nothing is pending."""
    await carrier.tick()
    if not carrier.has_pending_work():
        host.wake_at = None


async def test_a_carrier_over_a_host_of_its_own(tmp_path: Path) -> None:
    """CA-15: send commits the Email and its wake together; tick sends it; a temporary rejection
    keeps the wake armed for the retry; a Carrier built again over the same store (a restart)
    sends it then; with nothing pending the host disarms."""
    clock = FakeClock(1_800_000_000_000)
    sql = store(tmp_path / "store.sqlite", clock)
    sql.transaction_sync(lambda tx: [tx.exec(s) for s in SCHEMA])
    transport = RecordingTransport([ProviderRejected(code="451 4.3.0", klass="temporary")])
    host = ListHost(sql, clock)
    carrier = Carrier(storage=sql, host=host, transport=transport)
    receipt = carrier.send(Submit(source_id="invite-1", from_="team@acme.example",
                                  to=["bob@example.com"], subject="Hi", text="Welcome"))
    assert receipt.status == "queued" and host.wake_at == clock.now_ms()
    assert [t for t, _ in host.events] == ["email.queued"]
    assert carrier.has_pending_work()
    await tick(carrier, host)
    waiting = carrier.get("invite-1")
    assert waiting is not None and waiting.status == "queued" and waiting.attempts == 1
    assert host.wake_at == waiting.next_attempt_at_ms  # armed for the retry
    RuntimeStorage(sql).close()

    clock.set_ms(host.wake_at)  # a restart: a new store and Carrier
    sql = store(tmp_path / "store.sqlite", clock)
    again = ListHost(sql, clock)
    again.wake_at = host.wake_at
    carrier = Carrier(storage=sql, host=again, transport=transport)
    await tick(carrier, again)
    done = carrier.get("invite-1")
    assert done is not None and done.status == "provider_accepted" and done.attempts == 1
    assert transport.calls == 2 and again.wake_at is None
    assert not carrier.has_pending_work()
    RuntimeStorage(sql).close()
