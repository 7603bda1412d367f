"""Carrier's one-key layout (carrier/keys.py): Emails are found by their
id and Messages by theirs through the Messages' own key, with no index of either id. Every
Message stays findable by its id (minted next to its Email's, or across a millisecond, or stored
before this layout), every Email by its id, and a file of the previous layout keeps its Emails,
Messages, receipts and inspection records (CA-1, CA-9, CA-10, CA-13, RT-8)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from _carrier import NS, call, email, mailbox, receipt
from _carrier_previous import previous_mailbox
from mailbox_actors.carrier.schema import CARRIER_ONE_KEY
from mailbox_actors.objects import DEFAULT_OBJECTS
from mailbox_actors.objects.delivery_inspection import inspect_deliveries
from mailbox_actors.objects.identity_mailbox import IdentityMailbox
from mailbox_actors.platform.mail.recording import RecordingTransport
from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.carrier import ApplyDeliveryEvent, DeliveryRecord
from mailbox_actors.wire.errors import MailboxActorsError

ONE_KEY = next(m.version for m in IdentityMailbox.migrations if m.statements == CARRIER_ONE_KEY)


def _schema(path: Path) -> tuple[set[str], list[tuple[Any, ...]]]:
    """The Carrier indexes of the file, and each Message's (email id, email_seq, Email's seq,
    whether its id is listed)."""
    conn = sqlite3.connect(path)
    try:
        indexes = {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name IN "
            "('emails', 'email_messages', 'email_message_ids')")}
        if not indexes & {"email_messages_id"}:  # this layout
            links = conn.execute(
                "SELECT m.email_id, m.email_seq, e.seq, m.message_id IN (SELECT message_id FROM "
                "email_message_ids) FROM email_messages m LEFT JOIN emails e "
                "ON e.email_id = m.email_id ORDER BY m.email_id, m.position").fetchall()
        else:
            links = []
        return indexes, links
    finally:
        conn.close()


def _emails(*pages: Any) -> list[DeliveryRecord]:
    """The Email records of inspection pages (the mailbox's Post jobs share the scan)."""
    return [r for p in pages for r in p.records if isinstance(r, DeliveryRecord)]


async def _delivered(rt: TestRuntime, mid: str, message_id: str, event: str) -> Any:
    return await call(rt, mid, ApplyDeliveryEvent(message_id=message_id, type="delivered",
                                                  provider_event_id=event))


@pytest.mark.anyio
async def test_every_message_is_found_by_its_id_and_every_email_by_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CA-1, CA-9, CA-13: Messages of Emails of 1 and of 30 recipients (two INSERTs), with content
    in chunks, and Messages whose ids were minted far from their Email's (a millisecond passed
    between them: here other ids minted between) each take a delivery event by their msg_ id;
    a well-formed id that names no Message, and one of another mailbox, are email_not_found.
    The Emails keep the source id's index and those of the queued and the leased, the Messages
    only the cap's, and each Message names its Email's row."""
    transport = RecordingTransport()
    async with TestRuntime(tmp_path, services={MAIL_TRANSPORT: transport}) as rt:
        mid = await mailbox(rt)
        other = await mailbox(rt, "other")
        await call(rt, mid, email("one"))
        await call(rt, mid, email("thirty", to=[f"t{i}@x.example" for i in range(30)],
                                  text="x" * 2_500_000))
        ids = rt.node.ids
        mint = ids.new_id

        def far(prefix: str) -> str:  # as if the clock moved on before each Message id
            if prefix == "msg":
                for _ in range(100):
                    mint("gap")
            return mint(prefix)

        monkeypatch.setattr(ids, "new_id", far)
        await call(rt, mid, email("far", to=["a@x.example", "b@x.example"]))
        monkeypatch.setattr(ids, "new_id", mint)
        await call(rt, other, email("elsewhere"))
        await rt.run_until_idle()
        assert len(transport.sent) == 4
        receipts = {s: await receipt(rt, mid, s) for s in ("one", "thirty", "far")}
        assert {r["status"] for r in receipts.values()} == {"provider_accepted"}
        n = 0
        for r in receipts.values():
            for m in r["messages"]:
                n += 1
                got = await _delivered(rt, mid, m["message_id"], f"ev-{n}")
                assert got == {"message_id": m["message_id"], "status": "delivered",
                               "changed": True, "duplicate": False}
        assert n == 33
        for s in receipts:
            assert {m["status"] for m in (await receipt(rt, mid, s))["messages"]} == {"delivered"}
        known = receipts["one"]["messages"][0]["message_id"]
        elsewhere = (await receipt(rt, other, "elsewhere"))["messages"][0]["message_id"]
        for unknown in (known[:-1] + ("1" if known[-1] != "1" else "2"), elsewhere, "msg_nope"):
            with pytest.raises(MailboxActorsError) as e:
                await _delivered(rt, mid, unknown, "ev-x")
            assert e.value.code == "email_not_found", unknown

        path = rt.node.host.path_for(NS, mid)
    indexes, links = _schema(path)
    assert indexes == {"sqlite_autoindex_emails_1", "emails_queued", "emails_leased",
                       "email_messages_recipient"}
    assert len(links) == 33 and all(seq == own for _, seq, own, _ in links)
    # Only the far ones are listed (the third Email's two).
    assert [listed for *_, listed in links] == [0] * 31 + [1, 1]


@pytest.mark.anyio
async def test_a_file_of_the_previous_layout_keeps_its_emails_messages_and_records(
        tmp_path: Path) -> None:
    """RT-8, CA-1, CA-9, CA-10: a mailbox made by the code before this layout (Emails whose
    Message ids were minted next to theirs and far from them) is inspected while asleep as it
    is, then migrated on its first call: the receipts are the same, each Message takes a
    delivery event by its id once sent, dispatch sends each queued Email once, new Emails go on
    beside the old ones, and inspection pages through old and new in id order."""
    transport = RecordingTransport()
    before = IdentityMailbox.migrations[:ONE_KEY - 1]
    objects_near = [previous_mailbox(before) if c is IdentityMailbox else c
                    for c in DEFAULT_OBJECTS]
    objects_far = [previous_mailbox(before, far_message_ids=True) if c is IdentityMailbox else c
                   for c in DEFAULT_OBJECTS]
    async with TestRuntime(tmp_path, objects=objects_near) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email("s-1"))
        await call(rt, mid, email("s-2", to=["a@x.example", "b@x.example"], cc=["c@x.example"]))
        old = {s: await receipt(rt, mid, s) for s in ("s-1", "s-2")}
        path = rt.node.host.path_for(NS, mid)
    async with TestRuntime(tmp_path, objects=objects_far) as rt:
        await call(rt, mid, email("s-3", to=["d@x.example", "e@x.example"]))
        old["s-3"] = await receipt(rt, mid, "s-3")
    assert "email_messages_id" in _schema(path)[0]  # the previous layout indeed
    asleep = inspect_deliveries(path, limit=64)
    assert [r.email_id for r in _emails(asleep)] == sorted(r["email_id"] for r in old.values())

    async with TestRuntime(tmp_path, services={MAIL_TRANSPORT: transport}) as rt:
        assert {s: await receipt(rt, mid, s) for s in old} == old
        await call(rt, mid, email("s-4"))
        await rt.run_until_idle()
        assert sorted(e.message_id_header for e in transport.sent) == sorted(
            [r["message_id_header"] for r in old.values()]
            + [(await receipt(rt, mid, "s-4"))["message_id_header"]])
        n = 0
        for s in ("s-1", "s-2", "s-3", "s-4"):
            for m in (await receipt(rt, mid, s))["messages"]:
                n += 1
                assert (await _delivered(rt, mid, m["message_id"], f"ev-{n}"))["changed"]
        assert n == 7
        counts = {(r := await receipt(rt, mid, s))["email_id"]: len(r["messages"])
                  for s in ("s-1", "s-2", "s-3", "s-4")}
        after = inspect_deliveries(path, limit=64)
        page = inspect_deliveries(path, limit=2)
        rest = inspect_deliveries(path, after=page.next_cursor, limit=64)
    records = [(r.email_id, r.status, r.messages) for r in _emails(after)]
    assert [r[0] for r in records] == sorted(r[0] for r in records) and len(records) == 4
    assert {r[1] for r in records} == {"provider_accepted"}
    assert {r[0]: r[2] for r in records} == counts
    assert [r.email_id for r in _emails(page, rest)] == [r[0] for r in records]
    indexes, links = _schema(path)
    assert "email_messages_id" not in indexes and "sqlite_autoindex_emails_2" not in indexes
    assert len(links) == 7 and all(seq == own for _, seq, own, _ in links)
    new = next(e for e, n in counts.items() if e not in {r["email_id"] for r in old.values()})
    # Every Message stored before is listed; the new Email's, minted next to it, is not.
    assert sorted((e == new, listed) for e, *_, listed in links) == [(False, 1)] * 6 + [(True, 0)]
