"""IdentityMailbox's leaner layout (migration 8): an outbox keyed by its sequence alone and Messages
keyed by their Email and position. A file of the previous layout keeps every Email, Message and
event, undispatched events still go out, and the outbox finds its undispatched events from the
first one it knows of, read again after a rollback (EV-1..EV-4, CA-1, CA-13, RT-8)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from _carrier import OWNER, call, email, mailbox, receipt
from _carrier_previous import previous_mailbox
from mailbox_actors.carrier import schema as carrier_schema
from mailbox_actors.objects import DEFAULT_OBJECTS
from mailbox_actors.objects.identity_mailbox import IdentityMailbox
from mailbox_actors.runtime import outbox
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.carrier import ApplyDeliveryEvent
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.events import GetEvents

NS = "identity_mailbox"
LEAN = next(m.version for m in IdentityMailbox.migrations
            if m.statements == carrier_schema.CARRIER_MESSAGES_LEAN)


# The code as it was before the lean layout (Carrier's rows as that code wrote them).
_PreviousMailbox = previous_mailbox(IdentityMailbox.migrations[:LEAN - 1])


def _indexes(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name IN "
            "('outbox', 'email_messages')")}
    finally:
        conn.close()


async def _events(rt: TestRuntime, mid: str) -> list[tuple[int, str]]:
    got = await rt.call(NS, mid, GetEvents(limit=1000), **OWNER)
    return [(e["sequence"], e["type"]) for e in got["events"]]


@pytest.mark.anyio
async def test_a_file_of_the_previous_layout_keeps_its_emails_messages_and_events(
        tmp_path: Path) -> None:
    """RT-8, CA-1, EV-3, EV-4: a mailbox made by the previous code (two Emails whose events went
    out, a third whose event has not) is migrated on its first call: the receipts are the same,
    Message ids still find their Messages, the undispatched event is published, the sequence goes
    on from the last one, and the outbox and Messages keep only the indexes they use."""
    previous = [_PreviousMailbox if c is IdentityMailbox else c for c in DEFAULT_OBJECTS]
    async with TestRuntime(tmp_path, objects=previous) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email("s-1"))
        await call(rt, mid, email("s-2", to=["a@example.com", "b@example.com"],
                                  cc=["c@example.com"]))
        await rt.run_until_idle()
        await call(rt, mid, email("s-3"))  # its event still in the outbox, undispatched
        before = {s: await receipt(rt, mid, s) for s in ("s-1", "s-2", "s-3")}
        events_before = await _events(rt, mid)
        path = rt.node.host.path_for(NS, mid)
    assert "email_messages_email" in _indexes(path)  # the previous layout indeed

    async with TestRuntime(tmp_path) as rt:
        after = {s: await receipt(rt, mid, s) for s in ("s-1", "s-2", "s-3")}
        assert after == before
        message = before["s-2"]["messages"][2]
        # A Message found by its id: a delivery event for a Message that was never sent is
        # refused as such (it exists), and an unknown id is not found.
        with pytest.raises(MailboxActorsError) as e:
            await call(rt, mid, ApplyDeliveryEvent(message_id=message["message_id"],
                                                   type="delivered", provider_event_id="p-1"))
        assert e.value.code == "conflict"
        with pytest.raises(MailboxActorsError) as e:
            await call(rt, mid, ApplyDeliveryEvent(message_id="msg_unknown", type="delivered",
                                                   provider_event_id="p-2"))
        assert e.value.code == "email_not_found"
        await rt.run_until_idle()
        published = rt.events.published
        assert [ev.type for _, _, ev in published] == ["email.queued"]  # s-3's, once
        await call(rt, mid, email("s-4"))
        events = await _events(rt, mid)
        assert events[:len(events_before)] == events_before
        assert [s for s, _ in events] == list(range(1, len(events) + 1))
        assert events[-1][1] == "email.queued"
        await rt.run_until_idle()
        assert [ev.type for _, _, ev in published] == ["email.queued", "email.queued"]
    # The outbox has none left; the Messages the cap's (their ids need none: carrier_keys).
    assert _indexes(path) == {"email_messages_recipient"}


def _marked_then_undone(last: int, tx: Any) -> None:
    outbox.mark_dispatched(last, tx)
    raise _Undo


class _Undo(Exception):
    pass


@pytest.mark.anyio
async def test_a_rolled_back_marking_leaves_its_events_to_be_published_again(
        tmp_path: Path) -> None:
    """EV-3: the transaction that marks published events dispatched rolls back (the alarm run's
    closing commit failing, say): the outbox still knows them undispatched and publishes them
    again, never skips them; once a marking commits, they are not published again."""
    async with TestRuntime(tmp_path) as rt:
        mid = await mailbox(rt)
        await rt.run_until_idle()
        for s in ("s-1", "s-2"):
            await call(rt, mid, email(s))
        sink = outbox.RecordingEventSink()

        async def run(actor: Any, storage: Any) -> list[int | None]:
            last = await outbox.dispatch(storage, sink, NS, mid, leave_last=True)
            assert last is not None
            with pytest.raises(_Undo):
                storage.transaction_sync(lambda tx: _marked_then_undone(last, tx))
            undispatched = outbox.has_undispatched(storage)
            again = await outbox.dispatch(storage, sink, NS, mid, leave_last=True)
            assert again is not None
            storage.transaction_sync(lambda tx: outbox.mark_dispatched(again, tx))
            return [int(undispatched), again - last, int(outbox.has_undispatched(storage)),
                    await outbox.dispatch(storage, sink, NS, mid)]

        assert await rt.run_in_actor(NS, mid, run) == [1, 0, 0, None]
        types = [e.type for e in sink.events()]
        assert types == ["email.queued", "email.queued"] * 2  # published twice, never lost
