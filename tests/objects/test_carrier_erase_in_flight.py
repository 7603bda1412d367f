"""An erase answered while a dispatch run has Emails with intent waiting for a connection (RPC-4,
CA-4): no Email's content is handed to the transport after the erase answered. The run's sends
wait their turn in worker tasks, so an Email can sit between its intent's commit and its send
while other requests run; the erase must win that race, in every interleaving tried."""

from __future__ import annotations

import random
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from _carrier import call, email, mailbox
from mailbox_actors.platform.mail.recording import RecordingTransport
from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.mailbox import MailboxErase
from mailbox_actors.wire.transport import OutboundEmail, TransportOutcome

pytestmark = pytest.mark.anyio
EMAILS = 12


class HeldPool:
    """A transport of ``slots`` connections whose sends wait at a gate; it notes each send
    called after the test said the erase had answered."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.inner = RecordingTransport()
        self._free = anyio.Semaphore(slots)
        self.gate = anyio.Event()
        self.erased = False
        self.after_erase: list[str] = []

    async def send(self, email: OutboundEmail) -> TransportOutcome:
        if self.erased:
            self.after_erase.append(email.email_id)
        async with self._free:
            await self.gate.wait()
            return await self.inner.send(email)

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize("seed", range(8))
async def test_no_email_reaches_the_transport_after_erase_answered(tmp_path: Path,
                                                                   seed: int) -> None:
    """RPC-4, CA-4: Emails queued, their dispatch run started and held at the transport, then the
    mailbox erased after a seeded number of scheduler turns: once the erase has answered, the
    transport is never called with an Email of that mailbox."""
    rng = random.Random(seed)
    pool = HeldPool(rng.choice([1, 2, 4]))
    async with TestRuntime(tmp_path, services={MAIL_TRANSPORT: pool}, seed=seed) as rt:
        mid = await mailbox(rt)
        for i in range(EMAILS):
            await call(rt, mid, email(f"e-{i}", to=[f"r{i}@example.com"]))
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.run_until_idle)
            for _ in range(rng.randint(0, 10)):
                await anyio.lowlevel.checkpoint()
            await call(rt, mid, MailboxErase())
            pool.erased = True
            pool.gate.set()
        await rt.run_until_idle()
    assert pool.after_erase == []
