"""The SMTP door's group commit (IN-5, IN-1): messages for one mailbox whose DATA ends in the same
turn of the event loop, or while another session's message for it is on its way, are ingested in
one transaction, and each is answered exactly as it would have been alone: 250 only after the
commit, 552 over the cap, a replay deduplicated, a conflict its own; a call that fails as a whole
is answered message by message. A message waits only for company that is coming: one on its way
that ends otherwise (RSET, a refused DATA, the connection gone) holds nothing up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiosmtplib
import anyio
import pytest

from mailbox_actors.core.inbound.limits import InboundLimits
from mailbox_actors.node.app import NodeApp
from mailbox_actors.node.control_ops import create_identity
from mailbox_actors.node.smtp_door import SmtpDoor
from mailbox_actors.objects.identity_mailbox.ingest_batch import BATCH_MAX_ITEMS, IngestBatch
from mailbox_actors.platform.control.addresses import Recipient, resolve
from mailbox_actors.platform.storage.sql import Limits
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.envelope import ENVELOPE_VERSION, Envelope
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.events import GetEvents
from mailbox_actors.wire.inbound import GetMessage, Ingest, IngestReply
from mailbox_actors.wire.mailbox import MailboxErase, MailboxStatus

TOKEN = "cluster-token-0123456789abcdef"
NS = "identity_mailbox"
OK = "250 2.0.0 Delivered"
DELIVERED = "2.0.0 Delivered"  # the client's reading of OK
TOO_BIG = "552 5.3.4 Message exceeds the mailbox's size cap"


def letter(subject: str, *, reply_to: str | None = None, size: int = 0) -> bytes:
    parent = f"In-Reply-To: <{reply_to}@example.com>\r\n" if reply_to else ""
    return (f"From: Alice <alice@example.com>\r\nTo: bob@example.com\r\nSubject: {subject}\r\n"
            f"Message-ID: <{subject}@example.com>\r\n{parent}\r\nbody\r\n"
            + ("x" * 76 + "\r\n") * (size // 78)).encode()


@dataclass
class Door:
    rt: TestRuntime
    smtp: SmtpDoor
    bob: Recipient
    carol: Recipient
    port: int

    async def together(self, rcpt: Recipient, raws: list[bytes]) -> list[str]:
        """Each message's DATA ending in the same turn of the loop, as concurrent sessions'."""
        return list(await asyncio.gather(*(self.smtp.deliver("bob@example.com", rcpt, raw)
                                           for raw in raws)))

    async def one_by_one(self, rcpt: Recipient, raws: list[bytes]) -> list[str]:
        return [await self.smtp.deliver("bob@example.com", rcpt, raw) for raw in raws]

    async def call(self, rcpt: Recipient, req: object) -> object:
        return await self.rt.call(NS, rcpt.mailbox_id, req, tenant_id=rcpt.tenant_id,
                                  identity_id=rcpt.identity_id)

    async def threads_of(self, rcpt: Recipient) -> list[int]:
        """How many messages each thread holds, by the order of the messages' events."""
        events = (await self.call(rcpt, GetEvents()))["events"]  # type: ignore[index]
        threads = [e["data"]["thread_id"] for e in events if e["type"] == "message.received"]
        return [threads.count(t) for t in dict.fromkeys(threads)]

    def ops(self, op: str) -> float:
        return self.rt.node.metrics.get("rpc_requests_total", (
            ("namespace", NS), ("op", op), ("code", "ok")))


@asynccontextmanager
async def door(tmp_path: Path, max_message_bytes: int = 8 * 1024,
               limits: Limits | None = None, linger_s: float = 60.0) -> AsyncIterator[Door]:
    """The door on a loopback port. Its linger is a minute unless given: a test that passes
    does not wait on it (a message on its way either comes or is released)."""
    kw = {} if limits is None else {"limits": limits}
    async with TestRuntime(tmp_path, control=True,
                           inbound=InboundLimits(max_message_bytes=max_message_bytes), **kw) as rt:
        db = rt.node.control_db
        assert db is not None
        tenant = await db.create_tenant("acme")
        await create_identity(db, rt.node, tenant.id, "bob", ["bob@example.com"])
        await create_identity(db, rt.node, tenant.id, "carol", ["carol@example.com"])
        bob, carol = await resolve(db, "bob@example.com"), await resolve(db, "carol@example.com")
        assert bob is not None and carol is not None
        smtp = SmtpDoor.for_node(NodeApp(rt.node, cluster_token=TOKEN, operator_token=TOKEN + "-op"), rt.node,
                        TOKEN, max_message_bytes=rt.settings.inbound.max_message_bytes,
                        linger_s=linger_s)
        port = await smtp.start("127.0.0.1", 0)
        try:
            yield Door(rt, smtp, bob, carol, port)
        finally:
            await smtp.stop()


@pytest.mark.anyio
async def test_messages_ending_data_together_commit_together_each_answered(tmp_path: Path) -> None:
    """IN-5, IN-1: messages for one mailbox that end DATA in the same turn go to it in one call
    (more than a batch holds: in several), each is answered 250 once stored, and each is stored
    with its own message.received event."""
    async with door(tmp_path) as d:
        count = BATCH_MAX_ITEMS + 3
        replies = await d.together(d.bob, [letter(f"m{i}") for i in range(count)])
        assert replies == [OK] * count
        assert d.ops("ingest_batch") == 2 and d.ops("ingest") == 0  # 8 together, then 3
        status = await d.call(d.bob, MailboxStatus())
        assert status["messages"] == count  # type: ignore[index]
        assert await d.threads_of(d.bob) == [1] * count


@pytest.mark.anyio
async def test_a_batch_answers_each_message_as_it_alone_would_be(tmp_path: Path) -> None:
    """IN-5, IN-1, IN-2: in one batch a message, its exact replay (a client's retry: deduplicated),
    one over the cap (552, not stored) and a reply to the first (threaded with it, seeing the
    batch's earlier message) are answered and stored as the same messages one by one are, into
    another mailbox."""
    raws = [letter("first"), letter("first"), letter("big", size=9 * 1024),
            letter("second", reply_to="first")]
    async with door(tmp_path) as d:
        together = await d.together(d.bob, raws)
        alone = await d.one_by_one(d.carol, raws)
        assert together == alone == [OK, OK, TOO_BIG, OK]
        assert d.ops("ingest_batch") == 1
        for rcpt in (d.bob, d.carol):
            assert (await d.call(rcpt, MailboxStatus()))["messages"] == 2  # type: ignore[index]
            assert await d.threads_of(rcpt) == [2]


@pytest.mark.anyio
async def test_a_conflict_in_a_batch_is_that_message_s_alone(tmp_path: Path) -> None:
    """IN-1: in one ingest_batch, a source id replayed with other bytes is that message's
    conflict (nothing of it stored) while the others of the batch are stored; the same batch
    again answers each as a duplicate with the ids first given."""
    async with door(tmp_path) as d:
        first = await d.call(d.bob, Ingest(source_id="src-a", raw=letter("a")))

        async def batch(items: list[Ingest]) -> list[object]:
            env = Envelope(v=ENVELOPE_VERSION, tenant_id=d.bob.tenant_id,
                           identity_id=d.bob.identity_id, request_id=d.rt.node.ids.new_id("req"),
                           deadline_ms=d.rt.now_ms() + 60_000, req=IngestBatch(items=items))
            return list(await d.rt.node.router.call_envelope(NS, d.bob.mailbox_id, env))

        items = [Ingest(source_id="src-b", raw=letter("b")),
                 Ingest(source_id="src-a", raw=letter("not-a")),
                 Ingest(source_id="src-c", raw=letter("c"))]
        answers = await batch(items)
        assert isinstance(answers[1], MailboxActorsError)
        assert answers[1].code is ErrorCode.CONFLICT
        b, c = answers[0], answers[2]
        assert isinstance(b, IngestReply) and isinstance(c, IngestReply)
        assert not b.duplicate and not c.duplicate
        again = await batch([items[0], items[2]])
        assert [(a.message_id, a.duplicate) for a in again if isinstance(a, IngestReply)] == [
            (b.message_id, True), (c.message_id, True)]
        assert (await d.call(d.bob, MailboxStatus()))["messages"] == 3  # type: ignore[index]
        view = await d.call(d.bob, GetMessage(message_id=first["message_id"]))  # type: ignore[index]
        assert view["subject"] == "a"  # type: ignore[index]


@pytest.mark.anyio
async def test_a_batch_failing_as_a_whole_is_answered_message_by_message(tmp_path: Path) -> None:
    """IN-5: when the mailbox's call fails as a whole (here: the identity was erased), every
    message of the batch is then ingested alone, so each gets the answer it alone gets: 550
    5.1.1, as one by one."""
    async with door(tmp_path) as d:
        await d.call(d.bob, MailboxErase())
        raws = [letter(f"late{i}") for i in range(3)]
        together = await d.together(d.bob, raws)
        assert together == await d.one_by_one(d.bob, raws)
        assert together == ["550 5.1.1 No such recipient here"] * 3
        assert d.rt.node.metrics.get("rpc_requests_total", (
            ("namespace", NS), ("op", "ingest_batch"), ("code", "identity_not_found"))) == 1


@pytest.mark.anyio
async def test_a_message_refused_part_way_through_its_writes_leaves_nothing_behind(
        tmp_path: Path) -> None:
    """IN-5, IN-1, RT-7: a message of a batch that meets a storage limit after some of its writes
    (here: its text over the actor's per-value limit) leaves nothing of itself behind: the
    others are stored and answered 250, it is refused as it is alone, and a client's retry of it
    is refused again, never answered 250 as a duplicate of a message that was not stored."""
    async with door(tmp_path, max_message_bytes=1 << 20,
                    limits=Limits(max_value_bytes=150_000)) as d:
        small, big = letter("small"), letter("big", size=200_000)
        refused = await d.one_by_one(d.carol, [big])
        assert not refused[0].startswith("250")
        assert await d.together(d.bob, [small, big]) == [OK, refused[0]]
        assert await d.one_by_one(d.bob, [big]) == refused
        status = await d.call(d.bob, MailboxStatus())
        assert status["messages"] == 1  # type: ignore[index]


async def past_rcpt(d: Door, rcpt: str = "bob@example.com") -> aiosmtplib.SMTP:
    """A session with its recipient accepted and its DATA not yet sent: a message on its way."""
    client = aiosmtplib.SMTP(hostname="127.0.0.1", port=d.port, timeout=30)
    await client.connect()
    await client.ehlo()
    await client.mail("alice@example.com")
    await client.rcpt(rcpt)
    return client


async def held(d: Door, count: int = 1) -> None:
    """Until bob's open batch holds ``count`` messages (a condition waited for, turn by turn)."""
    with anyio.fail_after(30):
        while d.smtp._batches.waiting(d.bob.mailbox_id) != count:  # noqa: ASYNC110 - a turn each
            await asyncio.sleep(0)


async def send(d: Door, raw: bytes, rcpt: str = "bob@example.com") -> str:
    client = aiosmtplib.SMTP(hostname="127.0.0.1", port=d.port, timeout=30)
    await client.connect()
    try:
        errors, message = await client.sendmail("alice@example.com", [rcpt], raw)
        assert not errors
        return message
    finally:
        await client.quit()


@pytest.mark.anyio
async def test_a_message_waits_for_one_on_its_way_to_its_mailbox_and_shares_its_commit(
        tmp_path: Path) -> None:
    """IN-5: a session's message whose DATA ends while another session has a recipient of the
    same mailbox accepted waits for that message (here past a minute's linger would fail the
    test: it never comes to that) and both are ingested in one call, each answered 250 after
    the shared commit; a message to another mailbox is not held by it."""
    async with door(tmp_path) as d:
        other = await past_rcpt(d)
        first = asyncio.create_task(send(d, letter("first")))
        await held(d)  # its DATA ended; it waits for the message on its way
        assert await send(d, letter("to-carol"), "carol@example.com") == DELIVERED
        assert not first.done() and d.smtp._batches.waiting(d.bob.mailbox_id) == 1
        await other.data(letter("second"))
        await other.quit()
        assert await first == DELIVERED
        assert d.ops("ingest_batch") == 1 and d.ops("ingest") == 1  # bob's pair; carol's alone
        assert (await d.call(d.bob, MailboxStatus()))["messages"] == 2  # type: ignore[index]


@pytest.mark.anyio
@pytest.mark.parametrize("ends", ["rset", "refused", "gone"])
async def test_a_message_on_its_way_that_does_not_come_holds_nothing_up(
        tmp_path: Path, ends: str) -> None:
    """IN-5: a message on its way that ends otherwise (the session resets, its DATA is refused
    over the size cap, its connection goes) releases the message waiting for it at once (the
    linger is a minute): it goes alone, answered 250."""
    async with door(tmp_path) as d:
        other = await past_rcpt(d)
        waiting = asyncio.create_task(send(d, letter("waiting")))
        await held(d)
        if ends == "rset":
            await other.rset()
            await other.quit()
        elif ends == "refused":
            with pytest.raises(aiosmtplib.SMTPResponseException) as info:
                await other.data(letter("big", size=9 * 1024))
            assert info.value.code == 552
            await other.quit()
        else:
            other.close()
        assert await waiting == DELIVERED
        assert d.ops("ingest") == 1 and d.ops("ingest_batch") == 0
        assert (await d.call(d.bob, MailboxStatus()))["messages"] == 1  # type: ignore[index]


@pytest.mark.anyio
async def test_a_message_waits_for_company_at_most_the_linger(tmp_path: Path) -> None:
    """IN-5: a message on its way that neither comes nor ends (its client idles after RCPT)
    holds a message for the same mailbox only up to the door's linger (here 10 ms); a message
    with no company coming never waits."""
    async with door(tmp_path, linger_s=0.01) as d:
        idle = await past_rcpt(d)
        assert await send(d, letter("held")) == DELIVERED
        await idle.quit()
        assert await send(d, letter("alone")) == DELIVERED
        assert d.ops("ingest") == 2 and d.ops("ingest_batch") == 0
