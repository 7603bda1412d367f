"""Carrier's submit side in IdentityMailbox: acceptance, replay, bad input, the per-recipient cap,
cancel and erase (CA-1, CA-2, CA-3, CA-6, CA-14, RPC-4, EV-5). Real actor files, FakeClock."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest

from _carrier import NS, OWNER, call, email, mailbox, receipt
from mailbox_actors.platform.mail.recording import RecordingTransport
from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.carrier import CancelEmail, GetEmail
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.mailbox import MailboxErase
from mailbox_actors.wire.transport import ProviderRejected

pytestmark = pytest.mark.anyio


def rows(rt: TestRuntime, mid: str, query: str) -> list[Any]:
    """Read the actor's file as it is on disk (the node keeps it open; WAL lets us read)."""
    with sqlite3.connect(rt.node.host.path_for(NS, mid)) as conn:
        return conn.execute(query).fetchall()


async def test_submit_answers_queued_once_everything_is_committed(tmp_path: Path) -> None:
    """CA-1, CA-14: submit answers the receipt (eml_ id, stable Message-ID header, one msg_
    Message per recipient in to, cc, bcc order with its role) once the Email, its Messages, its
    content and the dispatch wake are committed; with no transport it stays queued, and a
    restarted node still has all of it."""
    async with TestRuntime(tmp_path) as rt:
        mid = await mailbox(rt)
        r = await call(rt, mid, email(to=["a@x.example", "b@x.example"], cc=["c@x.example"],
                                      bcc=["d@x.example"]))
        assert r["status"] == "queued" and r["email_id"].startswith("eml_")
        assert [m["role"] for m in r["messages"]] == ["to", "to", "cc", "bcc"]
        assert all(m["message_id"].startswith("msg_") and m["status"] == "queued"
                   for m in r["messages"])
        assert len({m["message_id"] for m in r["messages"]}) == 4
        assert r["message_id_header"].startswith("<") and r["message_id_header"].endswith(
            "@acme.example>")
        assert r["attempts"] == 0 and r["provider_message_id"] is None
        assert r["next_attempt_at_ms"] == r["created_at_ms"] == rt.now_ms()
        # The wake, committed with the Email: without a transport, the periodic look.
        assert rows(rt, mid, "SELECT v FROM _ma_meta WHERE k = 'alarm:dispatch'") == [
            (str(rt.now_ms() + rt.settings.mail_recheck_ms),)]
        assert set(r) == {"email_id", "source_id", "status", "message_id_header", "messages",
                          "attempts", "provider_message_id", "provider_rejection",
                          "next_attempt_at_ms", "created_at_ms", "updated_at_ms"}
    async with TestRuntime(tmp_path) as rt:
        again = await receipt(rt, mid)
        assert again == r  # transport none: submitted mail stays queued
        await rt.advance(3_600_000)
        assert (await receipt(rt, mid))["status"] == "queued"


async def test_fifty_recipients_keep_their_order_roles_and_ids(tmp_path: Path) -> None:
    """CA-1, CA-6: an Email of 50 recipients (the most submit takes) has 50 Messages in to, cc,
    bcc order, each with its own msg_ id, as answered and as stored; over the cap, every one is
    not_sent and only the addresses at the cap are coded recipient_cap."""
    to = [f"t{i}@x.example" for i in range(30)]
    cc = [f"c{i}@x.example" for i in range(15)]
    bcc = [f"b{i}@x.example" for i in range(5)]
    async with TestRuntime(tmp_path, recipient_cap=1) as rt:
        mid = await mailbox(rt)
        r = await call(rt, mid, email(to=to, cc=cc, bcc=bcc))
        assert r["status"] == "queued"
        assert [m["role"] for m in r["messages"]] == ["to"] * 30 + ["cc"] * 15 + ["bcc"] * 5
        assert len({m["message_id"] for m in r["messages"]}) == 50
        stored = rows(rt, mid, "SELECT message_id, role, position, status FROM email_messages "
                               "ORDER BY position")
        assert stored == [(m["message_id"], m["role"], i, "queued")
                          for i, m in enumerate(r["messages"])]
        assert await receipt(rt, mid) == r
        # t7 and b4 were counted once already: with a cap of 1, this Email is refused for them.
        refused = await call(rt, mid, email("s-2", to=[f"n{i}@x.example" for i in range(40)]
                                            + ["T7@x.example"], bcc=["b4@x.example"]))
        assert refused["status"] == "refused" and len(refused["messages"]) == 42
        assert all(m["status"] == "not_sent" for m in refused["messages"])
        assert [i for i, m in enumerate(refused["messages"])
                if m["code"] == "recipient_cap"] == [40, 41]
        assert await receipt(rt, mid, "s-2") == refused
        assert rows(rt, mid, "SELECT content, content_parts, next_attempt_at_ms FROM emails "
                             "WHERE source_id = 's-2'") == [(None, 0, None)]


async def test_replay_returns_the_same_receipt_and_changes_are_conflicts() -> None:
    """CA-2: the same source id with identical content answers the existing receipt (one Email);
    changed content, envelope, headers or expiry is conflict; get_email of an absent id is null."""
    async with TestRuntime() as rt:
        mid = await mailbox(rt)
        first = await call(rt, mid, email(headers={"X-Ref": "1"}))
        await rt.advance(1000)
        assert await call(rt, mid, email(headers={"x-ref": "1"})) == first
        for change in ({"text": "Hi Robert"}, {"subject": "Hi"}, {"to": ["rob@example.com"]},
                       {"cc": ["bob@example.com"]}, {"headers": {"X-Ref": "2"}},
                       {"send_before": rt.now_ms() + 10}, {"html": "<p>Hi</p>"}):
            with pytest.raises(MailboxActorsError) as e:
                await call(rt, mid, email(**({"headers": {"X-Ref": "1"}} | change)))
            assert e.value.code == "conflict", change
            assert e.value.details == {"email_id": first["email_id"]}
        assert await call(rt, mid, GetEmail(source_id="never")) is None
        assert rows(rt, mid, "SELECT count(*) FROM emails") == [(1,)]


async def test_replay_after_content_was_dropped_still_compares_content() -> None:
    """CA-2, CA-3: a terminal receipt drops its stored content and keeps its digest, so a replay
    with changed content is still conflict and an identical replay returns the receipt without
    sending again."""
    transport = RecordingTransport()
    async with TestRuntime(services={MAIL_TRANSPORT: transport}) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email())
        await rt.run_until_idle()
        done = await receipt(rt, mid)
        assert done["status"] == "provider_accepted"
        assert rows(rt, mid, "SELECT count(*) FROM email_content") == [(0,)]
        assert rows(rt, mid, "SELECT count(*) FROM emails WHERE content IS NOT NULL") == [(0,)]
        with pytest.raises(MailboxActorsError) as e:
            await call(rt, mid, email(text="changed"))
        assert e.value.code == "conflict"
        assert await call(rt, mid, email()) == done
        await rt.advance(86_400_000)
        assert len(transport.sent) == 1


BAD_INPUT = [
    ({"from_": "Support <support@acme.example>"}, "invalid_request", "from"),
    ({"to": ["bob@example.com", "not an address"]}, "invalid_request", "to[1]"),
    ({"cc": ["a@b.example\r\nBcc: x@y.example"]}, "invalid_request", "cc[0]"),
    ({"bcc": ["@example.com"]}, "invalid_request", "bcc[0]"),
    ({"to": []}, "invalid_request", "to"),
    ({"to": [f"u{i}@example.com" for i in range(30)],
      "cc": [f"c{i}@example.com" for i in range(21)]}, "limit_exceeded", "to"),
    ({"subject": "Hi\r\nBcc: eve@example.com"}, "invalid_request", "subject"),
    ({"subject": "Hi\nthere"}, "invalid_request", "subject"),
    ({"text": None, "html": None}, "invalid_request", "text"),
    ({"headers": {"X-Note": "a\r\nBcc: eve@example.com"}}, "invalid_request", "headers.X-Note"),
    ({"headers": {"Message-ID": "<a@b>"}}, "invalid_request", "headers.Message-ID"),
    ({"headers": {"Bcc": "eve@example.com"}}, "invalid_request", "headers.Bcc"),
    ({"headers": {"Sender": "x"}}, "invalid_request", "headers.Sender"),
    ({"headers": {"X-Long": "v" * 1000}}, "invalid_request", "headers.X-Long"),
    ({"headers": {f"X-{i}": "v" for i in range(21)}}, "limit_exceeded", "headers"),
    ({"text": "x" * (5 * 1024 * 1024 + 1)}, "limit_exceeded", "content"),
    ({"text": "x" * (3 * 1024 * 1024), "html": "y" * (2 * 1024 * 1024 + 1)}, "limit_exceeded",
     "content"),
]


@pytest.mark.parametrize(("change", "code", "field"), BAD_INPUT)
async def test_bad_input_is_refused_naming_the_field_and_nothing_is_stored(
        change: dict[str, Any], code: str, field: str) -> None:
    """CA-1, CA-5, CA-14: non-addr-spec addresses, CR/LF in a subject or header, headers the
    Cloudflare-style send refuses, more than 50 recipients and content over 5 MiB are
    invalid_request or limit_exceeded naming the field (never quoting it); nothing is stored."""
    async with TestRuntime() as rt:
        mid = await mailbox(rt)
        with pytest.raises(MailboxActorsError) as e:
            await call(rt, mid, email(**change))
        assert e.value.code == code
        assert e.value.details is not None and e.value.details["field"] == field
        assert "eve@example.com" not in e.value.message and "@" not in e.value.message
        assert await receipt(rt, mid) is None
        assert rows(rt, mid, "SELECT count(*) FROM emails") == [(0,)]
        assert rows(rt, mid, "SELECT count(*) FROM outbox WHERE type LIKE 'email.%'") == [(0,)]


@pytest.mark.parametrize(("send_before", "path"), [
    ("1.5", "$.req.send_before"), ('"tomorrow"', "$.req.send_before"),
    ("-1", "$.req.send_before"), ("true", "$.req.send_before"),
    ('["bob@example.com"]', None)])
async def test_send_before_must_be_integer_unix_ms(send_before: str, path: str | None) -> None:
    """CA-14: a send_before that is not an integer of Unix ms is invalid_request naming the
    field; nothing is stored."""
    async with TestRuntime() as rt:
        mid = await mailbox(rt)
        req = {"op": "submit", "source_id": "s-1", "from": "a@acme.example",
               "to": ["bob@example.com"], "text": "hi"}
        body = json.dumps({"v": 1, **OWNER, "request_id": "req_1", "deadline_ms": 2**50,
                           "req": req}).encode()
        body = body.replace(b'"text": "hi"', b'"text": "hi", "send_before": ' +
                            send_before.encode()) if path else body.replace(
            b'"to": ["bob@example.com"]', b'"to": "bob@example.com"')
        out = msgspec.json.decode(await rt.call_bytes(NS, mid, body))
        assert out["err"]["code"] == "invalid_request"
        assert out["err"]["details"]["path"] == (path or "$.req.to")
        assert await receipt(rt, mid) is None


async def test_per_recipient_cap_refuses_durably_and_replays_the_refusal() -> None:
    """CA-6: at most N Emails per normalized address (trimmed, lower-cased) in the rolling
    window; over it submit durably records refused (never dispatched) and a replay answers the
    same refused receipt; Emails that never reached the provider do not count; once the window
    rolls past, the address is accepted again."""
    transport = RecordingTransport([ProviderRejected(code="550 5.7.1", klass="permanent")])
    async with TestRuntime(recipient_cap=2, recipient_cap_window_ms=3_600_000,
                           services={MAIL_TRANSPORT: transport}) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email("r-1"))
        await rt.run_until_idle()  # rejected: does not count
        assert (await receipt(rt, mid, "r-1"))["status"] == "rejected"
        await call(rt, mid, email("a-1", to=["Bob@Example.com"]))
        await call(rt, mid, email("a-2", to=["other@example.com"], cc=["BOB@example.COM"]))
        refused = await call(rt, mid, email("a-3", to=["other@example.com", "bob@example.com"]))
        assert refused["status"] == "refused"
        assert [m["status"] for m in refused["messages"]] == ["not_sent", "not_sent"]
        assert [m["code"] for m in refused["messages"]] == [None, "recipient_cap"]
        assert refused["next_attempt_at_ms"] is None
        assert await call(rt, mid, email("a-3", to=["other@example.com", "bob@example.com"])
                          ) == refused
        await rt.advance(3_600_000 + 1)
        again = await call(rt, mid, email("a-4"))
        assert again["status"] in ("queued", "provider_accepted")
        await rt.run_until_idle()
        assert [e.subject for e in transport.sent].count("Hello") == 4  # r-1, a-1, a-2, a-4
        assert (await receipt(rt, mid, "a-3"))["status"] == "refused"


async def test_cancel_only_before_dispatch_intent() -> None:
    """CA-4, CA-7: a queued Email can be cancelled (superseded, content dropped, never sent;
    cancelling again answers the same); after dispatch intent it is conflict; an absent source
    id is email_not_found."""
    transport = RecordingTransport()
    async with TestRuntime(services={MAIL_TRANSPORT: transport}) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email("c-1"))
        r = await call(rt, mid, CancelEmail(source_id="c-1"))
        assert r["status"] == "superseded"
        assert [m["status"] for m in r["messages"]] == ["not_sent"]
        assert await call(rt, mid, CancelEmail(source_id="c-1")) == r
        await rt.run_until_idle()
        assert transport.sent == []
        await call(rt, mid, email("c-2"))
        await rt.run_until_idle()
        with pytest.raises(MailboxActorsError) as e:
            await call(rt, mid, CancelEmail(source_id="c-2"))
        assert e.value.code == "conflict"
        with pytest.raises(MailboxActorsError) as e:
            await call(rt, mid, CancelEmail(source_id="nope"))
        assert e.value.code == "email_not_found"


async def test_erase_removes_all_carrier_content() -> None:
    """RPC-4: erase deletes every Email, Message, stored content and delivery record in one
    transaction; afterwards the identity answers identity_not_found."""
    async with TestRuntime() as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email("e-1"))
        await call(rt, mid, email("e-2", text="x" * 2_500_000))
        assert rows(rt, mid, "SELECT count(*) FROM email_content") == [(3,)]  # e-2 in chunks
        assert rows(rt, mid, "SELECT count(*) FROM emails WHERE content IS NOT NULL") == [(1,)]
        await call(rt, mid, MailboxErase())
        for table in ("emails", "email_messages", "email_content", "delivery_events"):
            assert rows(rt, mid, f"SELECT count(*) FROM {table}") == [(0,)], table
        with pytest.raises(MailboxActorsError) as e:
            await receipt(rt, mid)
        assert e.value.code == "identity_not_found"


async def test_events_carry_ids_statuses_and_codes_only() -> None:
    """EV-5: every carrier event's data is ids, statuses, counts and codes: no address, subject
    or body, and no Message-ID header (it carries the sender's domain)."""
    transport = RecordingTransport([ProviderRejected(code="451 4.3.0", klass="temporary")])
    async with TestRuntime(services={MAIL_TRANSPORT: transport}) as rt:
        mid = await mailbox(rt)
        r = await call(rt, mid, email(subject="Secret subject", text="Secret body"))
        await rt.run_until_idle()
        await rt.advance(86_400_000)
        events = rt.events.events("email.")
        assert [e.type for e in events] == ["email.queued", "email.dispatching", "email.requeued",
                                            "email.dispatching", "email.provider_accepted"]
        assert all(e.data["email_id"] == r["email_id"] for e in events)
        text = msgspec.json.encode([e.data for e in events]).decode()
        for leak in ("@", "Secret", "bob", "support"):
            assert leak not in text
