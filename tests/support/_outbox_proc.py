"""A node process for the outbox crash tests: it makes one state change, then stops at a chosen
point of the outbox's dispatch and waits to be killed with SIGKILL.

    python tests/support/_outbox_proc.py DATA_DIR MODE
    MODE = committed  : commit an identity's init (its event sits in the outbox), print, hang
    MODE = published  : let the outbox alarm publish (event_index + queue), print before it can
                        mark the event dispatched, hang
    MODE = caught_up  : hold the outbox run's first publish until a second event is committed,
                        let the run publish that one too (its catch-up), print before its
                        closing commit can mark either dispatched, hang
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from mailbox_actors.runtime.outbox import EventSink
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.events import EmitEvent, Event
from mailbox_actors.wire.mailbox import MailboxInit


class PublishThenHang:
    def __init__(self, inner: EventSink) -> None:
        self.inner = inner

    async def publish(self, namespace: str, object_id: str, events: Sequence[Event]) -> None:
        await self.inner.publish(namespace, object_id, events)
        print("published", ",".join(e.id for e in events), flush=True)
        await anyio.Event().wait()  # never returns: the kill lands before dispatched_at is set


_FIRST_HELD, _SECOND_COMMITTED = anyio.Event(), anyio.Event()


class HoldFirstThenHang:
    """The first publish waits for the second event's commit; the next (the run's catch-up)
    publishes, prints and hangs, so neither event is marked dispatched."""

    def __init__(self, inner: EventSink) -> None:
        self.inner = inner

    async def publish(self, namespace: str, object_id: str, events: Sequence[Event]) -> None:
        if not _FIRST_HELD.is_set():
            _FIRST_HELD.set()
            await _SECOND_COMMITTED.wait()
            await self.inner.publish(namespace, object_id, events)
            return
        await self.inner.publish(namespace, object_id, events)
        print("published", ",".join(e.id for e in events), flush=True)
        await anyio.Event().wait()


async def main(data: Path, mode: str) -> None:
    wrap = {"published": PublishThenHang, "caught_up": HoldFirstThenHang}.get(mode)
    async with TestRuntime(data, control=True, wrap_event_sink=wrap) as rt:
        db = rt.node.control_db
        assert db is not None
        tenant = await db.create_tenant("crash", webhook_url=None)
        mid = rt.id_from_name("identity_mailbox", "crash-identity")
        await rt.call("identity_mailbox", mid, MailboxInit(), tenant_id=tenant.id,
                      identity_id="idt_crash")
        print("committed", mid, tenant.id, flush=True)
        if mode == "published":
            await rt.run_until_idle()
        if mode == "caught_up":
            async with anyio.create_task_group() as tg:
                tg.start_soon(rt.run_until_idle)  # the outbox run, held in its first publish
                await _FIRST_HELD.wait()
                await rt.call("identity_mailbox", mid, EmitEvent(type="identity.updated",
                                                               data={"n": 1}),
                              tenant_id=tenant.id, identity_id="idt_crash")
                print("committed-second", flush=True)
                _SECOND_COMMITTED.set()
        await anyio.Event().wait()


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]), sys.argv[2])
