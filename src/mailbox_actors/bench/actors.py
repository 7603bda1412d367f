"""``BenchTicker``: the smallest useful actor, for the alarm and memory figures.

It holds one row and one alarm; its alarm handler does one small write and re-arms a day from now
in the same transaction (a recurring job, like TenantQuota's maintenance). It exists only for the
benchmark and is never registered by a real node.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, ClassVar

import anyio
import msgspec

from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.runtime.actor import Actor, AlarmInfo, Call
from mailbox_actors.runtime.migrations import Migration
from mailbox_actors.wire.errors import InvalidRequest

__all__ = ["REARM_MS", "BenchTicker", "TickInit", "TickRead", "TickRequest", "ticker_name"]

REARM_MS = 86_400_000


class TickInit(msgspec.Struct, tag="init", tag_field="op", forbid_unknown_fields=True):
    alarm_at_ms: int


class TickRead(msgspec.Struct, tag="read", tag_field="op", forbid_unknown_fields=True):
    pass


TickRequest = TickInit | TickRead


def ticker_name(i: int) -> str:
    """The name of the benchmark population's i-th actor (its id is ``id_from_name`` of it)."""
    return f"tick-{i}"


class BenchTicker(Actor):
    namespace = "bench_ticker"
    requests = TickRequest
    init_request = TickInit
    owner_kind = "tenant"
    migrations = (
        Migration(1, (
            "CREATE TABLE ticks (id INTEGER PRIMARY KEY CHECK (id = 1), fired INTEGER NOT NULL)",
        )),
    )

    async def handle(self, call: Call, req: Any) -> Any:
        match req:
            case TickRead():
                return self.sql.exec("SELECT fired FROM ticks WHERE id = 1").one()[0]
            case TickInit():
                return self.sql.transaction_sync(lambda tx: self._init(tx, call, req))
        raise InvalidRequest(f"unknown op for {self.namespace}")

    def _init(self, tx: SqlStorage, call: Call, req: TickInit) -> bool:
        created = self.ctx.claim_owner(call)
        tx.exec("INSERT OR IGNORE INTO ticks (id, fired) VALUES (1, 0)")
        tx.set_alarm(req.alarm_at_ms)
        return created

    # After this time.perf_counter() instant, the handler yields to the event loop once. The
    # scheduler's workers never yield between alarms, so without it a benchmark phase could not be
    # stopped on time; before the instant, the handler is exactly one transaction.
    yield_after: ClassVar[float | None] = None
    # time.perf_counter() when the last alarm's transaction committed (the burst figure's end).
    last_commit: ClassVar[float] = 0.0

    # The bench's pause of a burst (``ticker_figures``' interleaved windows): while ``held`` is a
    # list, an alarm handler waits in it, before its write, until the bench resolves its future.
    # None, the default: no pause.
    held: ClassVar[list[asyncio.Future[None]] | None] = None

    async def alarm(self, info: AlarmInfo) -> None:
        held = BenchTicker.held
        if held is not None:
            waiting: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            held.append(waiting)
            await waiting  # cancelled (the node stopping): before the write, no trace
        if BenchTicker.yield_after is not None and time.perf_counter() >= BenchTicker.yield_after:
            await anyio.lowlevel.checkpoint()  # before the write: a cancelled run leaves no trace

        def run(tx: SqlStorage) -> None:
            tx.exec("UPDATE ticks SET fired = fired + 1 WHERE id = 1")
            tx.set_alarm(tx.now_ms() + REARM_MS)
        self.sql.transaction_sync(run)
        BenchTicker.last_commit = time.perf_counter()
