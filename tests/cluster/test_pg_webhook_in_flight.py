"""Q-4, CL-7: a node's default webhook consumers on PostgreSQL let one tenant have all but one of
them in flight (7 of 8 since session 19: with 3 of 4 the consumers were the wait in the tail of
commit-to-webhook), and the one left serves the other tenants while that tenant's endpoint hangs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from mailbox_actors.node.settings import NodeSettings
from mailbox_actors.node.shared_state import open_shared_state, shared_state
from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.metrics import Metrics
from mailbox_actors.platform.rng import SeededRng
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.webhooks.delivery import EVENT_ID_HEADER, WebhookDeliverer
from mailbox_actors.webhooks.publish import ControlEventSink
from mailbox_actors.wire.events import Event
from raw_endpoint import RawEndpoint

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SECRET = "s" * 32


class _Endpoint(RawEndpoint):
    """``hold`` keeps every request unanswered until stopped (counting them in ``held``, and
    setting ``all_held`` at ``expect``), else it answers 200 and notes the event id in ``got``."""

    def __init__(self, *, hold: bool, expect: int = 0) -> None:
        super().__init__()
        self.holding = hold
        self.expect = expect
        self.held = 0
        self.all_held = asyncio.Event()
        self.got: list[str] = []
        self.answered = asyncio.Event()

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        port = await self.start()
        try:
            yield f"http://127.0.0.1:{port}/hook"
        finally:
            await self.stop()

    async def answer(self, fields: dict[str, str], writer: asyncio.StreamWriter) -> bool:
        if self.holding:
            self.held += 1
            if self.held == self.expect:
                self.all_held.set()
            await self.hold()
            return False
        self.got.append(fields[EVENT_ID_HEADER.lower()])
        self.answered.set()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        return True


def _event(tenant_id: str, n: int) -> Event:
    return Event(id=f"evt_{tenant_id}_{n:04d}", type="identity.test", tenant_id=tenant_id,
                 identity_id="idn_1", sequence=n, occurred_at_ms=1_000, data={"n": n})


async def test_a_tenant_has_all_but_one_default_consumer_in_flight(pg_dsn: str,
                                                                  tmp_path: Path) -> None:
    """Q-4: with a node's default webhook consumers (8) on PostgreSQL, a tenant whose endpoint
    never answers gets 7 attempts in flight at once, no more (its other events wait for a slot,
    then are deferred), and another tenant's event is still delivered meanwhile."""
    settings = RuntimeSettings(data_dir=str(tmp_path), postgres=pg_dsn)
    assert settings.webhook_consumers == NodeSettings().webhook_consumers == 8
    clock = FakeClock()
    made = shared_state(settings, clock=clock, ids=Ids(clock, SeededRng(1)), metrics=Metrics())
    assert made is not None
    db, queues = made
    await open_shared_state(db, queues)
    slow = _Endpoint(hold=True, expect=settings.webhook_consumers - 1)
    good = _Endpoint(hold=False)
    deliverer = WebhookDeliverer(db, queues, clock=clock, rng=SeededRng(2),
                                 attempt_timeout_s=20.0, jitter_fraction=0.0)
    try:
        async with slow.serving() as slow_url, good.serving() as good_url:
            a = (await db.create_tenant("a", webhook_url=slow_url, webhook_secret=SECRET)).id
            b = (await db.create_tenant("b", webhook_url=good_url, webhook_secret=SECRET)).id
            consumers = deliverer.consumers(count=settings.webhook_consumers)
            sink = ControlEventSink(db, queues)
            async with anyio.create_task_group() as tg:
                for c in consumers:
                    tg.start_soon(c.run)
                await sink.publish("identity_mailbox", "a" * 64, [_event(a, n) for n in range(10)])
                with anyio.fail_after(10):  # bounds, not speed checks
                    await slow.all_held.wait()
                await sink.publish("identity_mailbox", "b" * 64, [_event(b, 1)])
                with anyio.fail_after(10):
                    await good.answered.wait()
                assert slow.held == 7  # the eighth consumer stayed free of tenant a
                tg.cancel_scope.cancel()
            assert good.got == [f"evt_{b}_0001"]
    finally:
        await deliverer.aclose()
        await queues.close()
        await db.close()
