"""Carrier's fresh Emails (carrier/fresh.py): a just-submitted Email is
not written into the queued index; dispatch finds it by the Emails' key from a bound kept in the
mailbox's file. Every Email is still sent once (CA-1, CA-4), a restart finds what the last
instance left unsent, and a file of the layout before (its queued Emails in the index) keeps and
sends its Emails (RT-8). A full quota window delaying fresh Emails: test_carrier_dispatch.py."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from _carrier import NS, call, email, mailbox, receipt
from mailbox_actors.carrier import store
from mailbox_actors.carrier.schema import CARRIER_FRESH
from mailbox_actors.objects import DEFAULT_OBJECTS
from mailbox_actors.objects.identity_mailbox import IdentityMailbox
from mailbox_actors.platform.mail.recording import RecordingTransport
from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.runtime.actor import Call
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.carrier import Submit
from mailbox_actors.wire.transport import OutboundEmail

FRESH = next(m.version for m in IdentityMailbox.migrations if m.statements == CARRIER_FRESH)


def _indexed_and_bound(path: Path) -> tuple[int, int | None]:
    """How many Emails the queued index holds, and the bound stored in the file."""
    conn = sqlite3.connect(path)
    try:
        indexed = conn.execute("SELECT count(*) FROM emails INDEXED BY emails_queued "
                               "WHERE status = 'queued' AND fresh IS NULL").fetchone()[0]
        row = conn.execute("SELECT seq FROM email_fresh_from").fetchone()
        return int(indexed), None if row is None else int(row[0])
    finally:
        conn.close()


@pytest.mark.anyio
async def test_submitted_emails_are_not_indexed_and_each_is_sent_once(tmp_path: Path) -> None:
    """CA-1, CA-4: Emails submitted with no transport stay queued outside the queued index; a
    node restarted with a transport sends each once (the bound read back from the file), and
    Emails submitted after a dispatch run, in the next instance too, are sent once."""
    async with TestRuntime(tmp_path) as rt:
        mid = await mailbox(rt)
        for i in range(3):
            await call(rt, mid, email(f"s-{i}"))
        path = rt.node.host.path_for(NS, mid)
    assert _indexed_and_bound(path) == (0, 1)
    transport = RecordingTransport()
    async with TestRuntime(tmp_path, services={MAIL_TRANSPORT: transport}) as rt:
        await call(rt, mid, email("s-3"))
        await rt.run_until_idle()
        assert len(transport.sent) == 4
        await call(rt, mid, email("s-4"))
        await rt.run_until_idle()
    assert _indexed_and_bound(path) == (0, 6)  # five Emails (seq 1-5) sent: none fresh below 6
    async with TestRuntime(tmp_path, services={MAIL_TRANSPORT: transport}) as rt:
        await call(rt, mid, email("s-5"))
        await rt.run_until_idle()
        statuses = {(await receipt(rt, mid, f"s-{i}"))["status"] for i in range(6)}
    assert len(transport.sent) == 6 and statuses == {"provider_accepted"}
    assert len({e.message_id_header for e in transport.sent}) == 6


class _BeforeFresh(IdentityMailbox):
    """The mailbox as the layout before fresh Emails wrote a submit (the Email indexed while
    queued), dispatch left to the node that opens the file next."""

    migrations = IdentityMailbox.migrations[:FRESH - 1]

    async def handle(self, call: Call, req: Any) -> Any:
        if isinstance(req, Submit):
            return self.sql.transaction_sync(lambda tx: self._submit(tx, req))
        return await super().handle(call, req)

    def _submit(self, tx: SqlStorage, req: Submit) -> str:
        now = tx.now_ms()
        email_id = self.ctx.new_id("eml")
        message_ids = [self.ctx.new_id("msg") for _ in req.to]
        inline, _ = store.encode_content(OutboundEmail(
            email_id=email_id, message_id_header=f"<{email_id.lower()}@acme.example>",
            from_=req.from_, to=req.to, subject=req.subject, text=req.text))
        tx.exec("INSERT INTO emails (email_id, source_id, digest, status, message_id_header, "
                "next_attempt_at_ms, send_before, created_at_ms, updated_at_ms, content, "
                "content_parts) VALUES (?, ?, 'd', 'queued', ?, ?, NULL, ?, ?, ?, 0)", email_id,
                req.source_id, f"<{email_id.lower()}@acme.example>", now, now, now, inline)
        store.insert_messages(tx, email_id, message_ids, [("to", a) for a in req.to],
                              [store.recipient_key(a) for a in req.to], (), now)
        return email_id


@pytest.mark.anyio
async def test_a_file_of_the_layout_before_keeps_and_sends_its_queued_emails(
        tmp_path: Path) -> None:
    """RT-8, CA-4: Emails queued in a file of the layout before (in the queued index) are sent
    once after the file is migrated, beside a new Email submitted fresh; the bound starts past
    the old Emails."""
    before = [_BeforeFresh if c is IdentityMailbox else c for c in DEFAULT_OBJECTS]
    async with TestRuntime(tmp_path, objects=before) as rt:
        mid = await mailbox(rt)
        for i in range(2):
            await call(rt, mid, email(f"old-{i}"))
        path = rt.node.host.path_for(NS, mid)
    transport = RecordingTransport()
    async with TestRuntime(tmp_path, services={MAIL_TRANSPORT: transport}) as rt:
        assert (await receipt(rt, mid, "old-0"))["status"] == "queued"
        assert _indexed_and_bound(path) == (2, 3)
        await call(rt, mid, email("new"))
        await rt.run_until_idle()
        assert sorted(e.email_id for e in transport.sent) == sorted(
            [(await receipt(rt, mid, s))["email_id"] for s in ("old-0", "old-1", "new")])
    assert _indexed_and_bound(path) == (0, 4)
