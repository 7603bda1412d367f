"""Carrier's dispatch in IdentityMailbox, with the recording transport and a FakeClock: evidence,
rejections and their budget, interrupted dispatch, expiry, can_send, the tenant's quota, an
outside dispatcher, resolve and delivery events (CA-4, CA-5, CA-7, CA-9, CA-11, CA-12, CA-13)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from _carrier import NS, OWNER, call, email, mailbox, receipt
from mailbox_actors.core.carrier.rejections import RETRY_BUDGET
from mailbox_actors.platform.mail.can_send import CAN_SEND, SendCheck
from mailbox_actors.platform.mail.recording import RecordingTransport
from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.carrier import (
    ApplyDeliveryEvent,
    BeginTransport,
    CancelEmail,
    RecordTransportOutcome,
    ResolveEmail,
)
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.mailbox import MailboxErase
from mailbox_actors.wire.quota import QuotaInit, QuotaUsage
from mailbox_actors.wire.transport import (
    OutcomeUnknown,
    ProviderAccepted,
    ProviderRejected,
    RecipientRefusal,
)

pytestmark = pytest.mark.anyio
HOUR = 3_600_000


def runtime(transport: Any = None, path: Path | None = None, **kw: Any) -> TestRuntime:
    services = {} if transport is None else {MAIL_TRANSPORT: transport}
    return TestRuntime(path, services=services | kw.pop("services", {}), **kw)


def content_rows(rt: TestRuntime, mid: str) -> int:
    """Stored content: chunks of large Emails plus Emails holding theirs inline."""
    with sqlite3.connect(rt.node.host.path_for(NS, mid)) as conn:
        chunks = conn.execute("SELECT count(*) FROM email_content").fetchone()[0]
        inline = conn.execute("SELECT count(*) FROM emails WHERE content IS NOT NULL").fetchone()
        return int(chunks + inline[0])


async def test_accepted_records_the_provider_id_and_drops_content() -> None:
    """CA-4, CA-12: the transport gets the Email with the Message-ID stamped at submit; its
    acceptance records provider_accepted and the provider's id; the Messages stay unconfirmed
    (an aggregate acknowledgment); the stored content is dropped."""
    transport = RecordingTransport([ProviderAccepted(provider_message_id="prov-1")])
    async with runtime(transport) as rt:
        mid = await mailbox(rt)
        queued = await call(rt, mid, email(to=["a@x.example"], cc=["b@x.example"]))
        await rt.run_until_idle()
        done = await receipt(rt, mid)
        assert done["status"] == "provider_accepted" and done["provider_message_id"] == "prov-1"
        assert [m["status"] for m in done["messages"]] == ["unconfirmed", "unconfirmed"]
        assert done["attempts"] == 0 and done["next_attempt_at_ms"] is None
        sent = transport.sent[0]
        assert sent.message_id_header == queued["message_id_header"]
        assert sent.email_id == queued["email_id"]
        assert sent.to == ["a@x.example"] and sent.cc == ["b@x.example"] and sent.text == "Hi Bob"
        assert content_rows(rt, mid) == 0
        await rt.advance(24 * HOUR)
        assert transport.calls == 1


async def test_temporary_rejection_retries_with_backoff_and_the_same_message_id() -> None:
    """CA-5, CA-12: a temporary rejection returns the Email to queued with its code and class,
    attempts 1 and a later retry time; the retry sends the same Message-ID and its acceptance
    keeps attempts 1."""
    transport = RecordingTransport([ProviderRejected(code="451 4.7.1", klass="temporary")])
    async with runtime(transport) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email())
        await rt.run_until_idle()
        waiting = await receipt(rt, mid)
        assert waiting["status"] == "queued" and waiting["attempts"] == 1
        assert waiting["provider_rejection"] == {"code": "451 4.7.1", "class": "temporary"}
        assert waiting["next_attempt_at_ms"] > rt.now_ms()
        await rt.advance(waiting["next_attempt_at_ms"] - rt.now_ms() - 1)
        assert transport.calls == 1  # not before its time
        await rt.advance(1)
        done = await receipt(rt, mid)
        assert done["status"] == "provider_accepted" and done["attempts"] == 1
        assert done["provider_rejection"] == {"code": "451 4.7.1", "class": "temporary"}
        assert transport.sent[0].message_id_header == transport.sent[1].message_id_header


async def test_temporary_rejections_end_rejected_when_the_budget_is_spent() -> None:
    """CA-5: every attempt refused temporarily: after the budget's definite rejections the Email
    ends rejected with the last code and class, and is not tried again."""
    transport = RecordingTransport(default=ProviderRejected(code="E_RATE_LIMIT_EXCEEDED",
                                                            klass="temporary"))
    async with runtime(transport) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email())
        await rt.run_until_idle()
        await rt.advance(48 * HOUR)
        done = await receipt(rt, mid)
        assert done["status"] == "rejected" and done["attempts"] == RETRY_BUDGET
        assert done["provider_rejection"] == {"code": "E_RATE_LIMIT_EXCEEDED",
                                              "class": "temporary"}
        assert [m["status"] for m in done["messages"]] == ["not_sent"]
        assert transport.calls == RETRY_BUDGET
        await rt.advance(48 * HOUR)
        assert transport.calls == RETRY_BUDGET


async def test_permanent_rejection_ends_rejected_at_once() -> None:
    """CA-5, CA-11: a permanent refusal (550 at MAIL, a permanent Cloudflare code) ends the Email
    rejected after one attempt; content is dropped."""
    transport = RecordingTransport([ProviderRejected(code="550 5.7.1", klass="permanent")])
    async with runtime(transport) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email())
        await rt.run_until_idle()
        done = await receipt(rt, mid)
        assert done["status"] == "rejected" and done["attempts"] == 1
        assert done["provider_rejection"] == {"code": "550 5.7.1", "class": "permanent"}
        assert content_rows(rt, mid) == 0
        await rt.advance(48 * HOUR)
        assert transport.calls == 1


async def test_one_refused_recipient_of_three() -> None:
    """CA-11: a recipient refused at RCPT TO has its own Message refused with its code, while the
    others go on (accepted, unconfirmed)."""
    transport = RecordingTransport([ProviderAccepted(
        provider_message_id="prov-2",
        refused=[RecipientRefusal(index=1, code="550 5.1.1", klass="permanent")])])
    async with runtime(transport) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email(to=["a@x.example", "b@x.example"], bcc=["c@x.example"]))
        await rt.run_until_idle()
        done = await receipt(rt, mid)
        assert done["status"] == "provider_accepted"
        assert [(m["role"], m["status"], m["code"]) for m in done["messages"]] == [
            ("to", "unconfirmed", None), ("to", "refused", "550 5.1.1"),
            ("bcc", "unconfirmed", None)]


@pytest.mark.parametrize("answer", [OutcomeUnknown(reason="no_final_reply"),
                                    RuntimeError("connection reset")])
async def test_outcome_unknown_is_never_sent_again(answer: Any) -> None:
    """CA-4: a lost response (or a transport that raised) is outcome_unknown; neither time nor an
    unchanged replay sends it again."""
    transport = RecordingTransport([answer])
    async with runtime(transport) as rt:
        mid = await mailbox(rt)
        first = await call(rt, mid, email())
        await rt.run_until_idle()
        unknown = await receipt(rt, mid)
        assert unknown["status"] == "outcome_unknown"
        assert [m["status"] for m in unknown["messages"]] == ["unknown"]
        assert content_rows(rt, mid) == 0
        assert await call(rt, mid, email()) == unknown
        await rt.advance(7 * 24 * HOUR)
        assert transport.calls == 1
        assert unknown["email_id"] == first["email_id"]


async def test_every_submit_is_woken_for_before_during_and_after_dispatch_runs(
        tmp_path: Path) -> None:
    """CA-1, CA-4: an Email submitted while a dispatch run holds a send, one submitted after the
    run ended, and one submitted to a restarted node are each sent once; the committed wake is
    there for each (submit does not read it again while it knows it)."""
    transport = RecordingTransport()
    transport.hold()
    async with runtime(transport, tmp_path) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email("w-1"))
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(rt.run_until_idle)
                await transport.wait_entered()
                await call(rt, mid, email("w-2"))  # during the run
                transport.release()
        for n in (3, 4):  # after it: the second submit behind the first
            await call(rt, mid, email(f"w-{n}"))
        await rt.run_until_idle()
        assert len(transport.sent) == 4
        await call(rt, mid, email("w-5"))
        await rt.run_until_idle()
        assert len(transport.sent) == 5
        statuses = [(await receipt(rt, mid, f"w-{n}"))["status"] for n in range(1, 6)]
        assert statuses == ["provider_accepted"] * 5
    after = RecordingTransport()
    async with runtime(after, tmp_path) as rt:
        await call(rt, mid, email("w-6"))
        await rt.run_until_idle()
        assert len(after.sent) == 1


async def test_an_email_cancelled_while_others_send_stays_cancelled_when_its_expiry_passes(
        ) -> None:
    """CA-4, CA-7: an Email read ahead by a dispatch run, cancelled while the run's sends are
    held, and past its send_before when the run comes to it, stays superseded (cancelled): it is
    neither expired over its cancellation nor sent."""
    transport = RecordingTransport()
    transport.hold()
    async with runtime(transport) as rt:
        mid = await mailbox(rt)
        for n in range(1, 5):
            await call(rt, mid, email(f"k-{n}"))
        await call(rt, mid, email("late", send_before=rt.now_ms() + 1_000))
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(rt.run_until_idle)
                await transport.wait_entered()  # k-1..k-4 in flight, "late" read ahead
                await call(rt, mid, CancelEmail(source_id="late"))
                rt.clock.set_ms(rt.now_ms() + 2_000)
                transport.release()
        late = await receipt(rt, mid, "late")
        assert late["status"] == "superseded"
        assert [m["status"] for m in late["messages"]] == ["not_sent"]
        assert len(transport.sent) == 4
        assert "email.expired" not in [e.type for e in rt.events.events("email.")]


async def test_an_erase_while_a_send_is_in_flight_records_nothing() -> None:
    """CA-4, RPC-4: the mailbox erased while the transport holds a send: the outcome that comes
    back afterwards finds no Email and writes nothing (no row comes back, no event), and the
    dispatch run ends cleanly; a second Email queued before the erase is never sent."""
    transport = RecordingTransport()
    transport.hold()
    async with runtime(transport) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email("h-1"))
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(rt.run_until_idle)
                await transport.wait_entered()
                await call(rt, mid, email("h-2"))
                await call(rt, mid, MailboxErase())
                transport.release()
        assert len(transport.sent) == 1  # h-1 only
        assert [e.type for e in rt.events.events("email.")] == [
            "email.queued", "email.dispatching", "email.queued"]  # h-1's outcome: none
        with sqlite3.connect(rt.node.host.path_for(NS, mid)) as conn:
            assert conn.execute("SELECT count(*) FROM emails").fetchone() == (0,)
            assert conn.execute("SELECT count(*) FROM email_messages").fetchone() == (0,)


async def test_interrupted_after_intent_is_outcome_unknown_after_restart(tmp_path: Path) -> None:
    """CA-4: a node that dies after dispatch intent committed and before the transport answered
    (its files as they were at that instant) comes back with the Email outcome_unknown, and never
    sends it again, not on restart and not on an unchanged replay."""
    held = RecordingTransport()
    held.hold()
    snapshot = tmp_path / "snapshot"
    async with runtime(held, tmp_path / "live") as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email())
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.run_until_idle)
            await held.wait_entered()  # the body is with the provider; no answer yet
            assert (await receipt(rt, mid))["status"] == "dispatching"
            shutil.copytree(rt.data_dir, snapshot)  # what a SIGKILL now would leave
            held.release()
    after = RecordingTransport()
    async with runtime(after, snapshot) as rt:
        await rt.run_until_idle()
        r = await receipt(rt, mid)
        assert r["status"] == "outcome_unknown"
        assert await call(rt, mid, email()) == r
        await rt.advance(7 * 24 * HOUR)
        assert after.calls == 0
    async with runtime(after, snapshot) as rt:  # and across another restart
        await rt.run_until_idle()
        assert (await receipt(rt, mid))["status"] == "outcome_unknown"
        assert after.calls == 0


async def test_work_accepted_before_intent_is_sent_after_restart(tmp_path: Path) -> None:
    """CA-4, CA-14: an Email queued by a node that stopped before dispatching it (no transport
    then) is sent exactly once by the node started on the same files with a transport."""
    async with runtime(None, tmp_path) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email())
        await rt.run_until_idle()
        assert (await receipt(rt, mid))["status"] == "queued"
    transport = RecordingTransport()
    async with runtime(transport, tmp_path) as rt:
        await rt.advance(5 * 60_000)
        assert (await receipt(rt, mid))["status"] == "provider_accepted"
        await rt.advance(24 * HOUR)
        assert transport.calls == 1


async def test_expired_without_a_provider_call(tmp_path: Path) -> None:
    """CA-7: an Email whose send_before has passed by dispatch ends expired, never offered to
    the transport; one still in time is sent."""
    transport = RecordingTransport()
    async with runtime(None, tmp_path) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email("late", send_before=rt.now_ms() + 1000))
        await call(rt, mid, email("fine", send_before=rt.now_ms() + 10 * 60_000))
    async with runtime(transport, tmp_path, start_ms=rt.now_ms() + 2000) as rt2:
        await rt2.advance(5 * 60_000)  # queued without a transport: looked at again then
        late = await receipt(rt2, mid, "late")
        assert late["status"] == "expired"
        assert [m["status"] for m in late["messages"]] == ["not_sent"]
        assert (await receipt(rt2, mid, "fine"))["status"] == "provider_accepted"
        assert [e.email_id for e in transport.sent] == [
            (await receipt(rt2, mid, "fine"))["email_id"]]


async def test_can_send_false_supersedes_and_raising_leaves_it_for_later() -> None:
    """CA-7: can_send False records superseded without a provider call; can_send raising (its
    truth unavailable) leaves the Email queued, checked again later, and sent once it says
    yes."""
    asked: list[SendCheck] = []
    flaky = {"n": 0}

    async def can_send(check: SendCheck) -> bool:
        asked.append(check)
        if check.source_id == "flaky":
            flaky["n"] += 1
            if flaky["n"] == 1:
                raise ConnectionError("source of truth down")
        return check.source_id != "obsolete"

    transport = RecordingTransport()
    async with runtime(transport, services={CAN_SEND: can_send}) as rt:
        mid = await mailbox(rt)
        obsolete = await call(rt, mid, email("obsolete"))
        await call(rt, mid, email("flaky"))
        await rt.run_until_idle()
        r = await receipt(rt, mid, "obsolete")
        assert r["status"] == "superseded"
        assert (await receipt(rt, mid, "flaky"))["status"] == "queued"
        assert transport.calls == 0
        await rt.advance(60_000)
        assert (await receipt(rt, mid, "flaky"))["status"] == "provider_accepted"
        assert transport.calls == 1
        assert asked[0].email_id == obsolete["email_id"]
        assert (asked[0].tenant_id, asked[0].identity_id) == (OWNER["tenant_id"],
                                                              OWNER["identity_id"])


async def test_a_full_quota_window_delays_and_never_drops() -> None:
    """CA-7, RPC-9: with the tenant's TenantQuota full, dispatch waits until its window opens,
    then sends; nothing is dropped. A roomy window counts each send once (reserved in blocks);
    an uninitialised quota means no limit."""
    transport = RecordingTransport()
    async with runtime(transport) as rt:
        mid = await mailbox(rt)
        qid = rt.id_from_name("tenant_quota", OWNER["tenant_id"])
        await rt.call("tenant_quota", qid, QuotaInit(per_minute=2, per_day=100),
                      tenant_id=OWNER["tenant_id"])
        for i in range(5):
            await call(rt, mid, email(f"q-{i}"))
        await rt.run_until_idle()
        assert transport.calls == 2
        waiting = await receipt(rt, mid, "q-2")
        assert waiting["status"] == "queued" and waiting["attempts"] == 0
        assert waiting["next_attempt_at_ms"] > rt.now_ms()
        await rt.advance(61_000)
        assert transport.calls == 4
        await rt.advance(61_000)
        assert transport.calls == 5
        statuses = {(await receipt(rt, mid, f"q-{i}"))["status"] for i in range(5)}
        assert statuses == {"provider_accepted"}
    async with runtime(RecordingTransport()) as rt:  # a roomy window counts every send once
        mid = await mailbox(rt)
        qid = rt.id_from_name("tenant_quota", OWNER["tenant_id"])
        await rt.call("tenant_quota", qid, QuotaInit(per_minute=100, per_day=100),
                      tenant_id=OWNER["tenant_id"])
        for i in range(5):
            await call(rt, mid, email(f"r-{i}"))
        await rt.run_until_idle()
        usage = await rt.call("tenant_quota", qid, QuotaUsage(), tenant_id=OWNER["tenant_id"])
        assert usage["minute_used"] == usage["day_used"] == 5
    async with runtime(RecordingTransport()) as rt:  # no quota initialised: no limit
        mid = await mailbox(rt)
        for i in range(5):
            await call(rt, mid, email(f"n-{i}"))
        await rt.run_until_idle()
        assert {(await receipt(rt, mid, f"n-{i}"))["status"] for i in range(5)} == {
            "provider_accepted"}


async def test_quota_reserved_ahead_for_emails_that_ended_is_given_back() -> None:
    """CA-7, RPC-9: a run reserves quota in a block sized by the Emails due; what Emails that
    ended before sending (can_send false: superseded) did not use is released at the end of the
    run, so the tenant's window counts only the two sends."""
    async def can_send(check: SendCheck) -> bool:
        return not check.source_id.startswith("obsolete")

    transport = RecordingTransport()
    async with runtime(transport, services={CAN_SEND: can_send}) as rt:
        mid = await mailbox(rt)
        qid = rt.id_from_name("tenant_quota", OWNER["tenant_id"])
        await rt.call("tenant_quota", qid, QuotaInit(per_minute=100, per_day=100),
                      tenant_id=OWNER["tenant_id"])
        for source in ("first", "obsolete-1", "obsolete-2", "obsolete-3", "last"):
            await call(rt, mid, email(source))
        await rt.run_until_idle()
        assert transport.calls == 2
        usage = await rt.call("tenant_quota", qid, QuotaUsage(), tenant_id=OWNER["tenant_id"])
        assert usage["minute_used"] == usage["day_used"] == 2


async def test_an_outside_dispatcher_leases_reports_and_loses_its_lease() -> None:
    """CA-4: begin_transport commits intent and hands out the Email with a lease;
    record_transport_outcome commits the outcome; a lease that ends unreported becomes
    outcome_unknown, after which a late report is conflict."""
    async with runtime(None) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email("x-1"))
        await call(rt, mid, email("x-2"))
        lease = await call(rt, mid, BeginTransport(lease_ms=60_000))
        assert lease["email"]["email_id"] == lease["receipt"]["email_id"]
        assert lease["receipt"]["status"] == "dispatching"
        assert lease["lease_until_ms"] == rt.now_ms() + 60_000
        done = await call(rt, mid, RecordTransportOutcome(
            email_id=lease["email"]["email_id"],
            outcome=ProviderAccepted(provider_message_id="ext-1")))
        assert done["status"] == "provider_accepted" and done["provider_message_id"] == "ext-1"
        second = await call(rt, mid, BeginTransport(source_id="x-2", lease_ms=60_000))
        assert second["email"]["message_id_header"] == second["receipt"]["message_id_header"]
        assert (await call(rt, mid, BeginTransport()))["email"] is None  # nothing else due
        await rt.advance(60_000)
        assert (await receipt(rt, mid, "x-2"))["status"] == "outcome_unknown"
        with pytest.raises(MailboxActorsError) as e:
            await call(rt, mid, RecordTransportOutcome(
                email_id=second["email"]["email_id"],
                outcome=ProviderAccepted(provider_message_id="late")))
        assert e.value.code == "conflict"


async def test_resolve_settles_outcome_unknown_with_evidence() -> None:
    """CA-12: an operator settles outcome_unknown as provider_accepted (with the provider's id)
    or rejected (with a code), recorded as such; repeating the same settlement answers the same;
    resolve of any other status is conflict."""
    transport = RecordingTransport([OutcomeUnknown(), OutcomeUnknown()])
    async with runtime(transport) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email("u-1"))
        await call(rt, mid, email("u-2"))
        await call(rt, mid, email("ok"))
        await rt.run_until_idle()
        accepted = await call(rt, mid, ResolveEmail(
            source_id="u-1", outcome="provider_accepted", provider_message_id="seen-in-log",
            evidence="ticket-42"))
        assert accepted["status"] == "provider_accepted"
        assert accepted["provider_message_id"] == "seen-in-log"
        assert [m["status"] for m in accepted["messages"]] == ["unconfirmed"]
        assert await call(rt, mid, ResolveEmail(
            source_id="u-1", outcome="provider_accepted", provider_message_id="seen-in-log",
            evidence="ticket-42")) == accepted
        rejected = await call(rt, mid, ResolveEmail(source_id="u-2", outcome="rejected",
                                                    code="bounced-at-provider",
                                                    evidence="ticket-43"))
        assert rejected["status"] == "rejected"
        assert rejected["provider_rejection"] == {"code": "bounced-at-provider",
                                                  "class": "permanent"}
        for source in ("ok", "u-2"):
            with pytest.raises(MailboxActorsError) as e:
                await call(rt, mid, ResolveEmail(source_id=source, outcome="provider_accepted",
                                                 provider_message_id="p", evidence="t"))
            assert e.value.code == "conflict"
        with pytest.raises(MailboxActorsError) as e:
            await call(rt, mid, ResolveEmail(source_id="u-1", outcome="provider_accepted",
                                             evidence="t"))
        assert e.value.code == "invalid_request"
        await rt.run_until_idle()  # the outbox publishes
        types = [e.type for e in rt.events.events("email.")]
        assert types.count("email.provider_accepted") == 2 and "email.rejected" in types


async def test_resolve_names_the_email_by_its_id_as_well() -> None:
    """CA-12: resolve takes the ``email_id`` the delivery records show instead of the source id
    (the operator's console knows only that one); naming both or neither is invalid_request, an
    unknown id email_not_found."""
    transport = RecordingTransport([OutcomeUnknown()])
    async with runtime(transport) as rt:
        mid = await mailbox(rt)
        email_id = (await call(rt, mid, email("u-1")))["email_id"]
        await rt.run_until_idle()
        settled = await call(rt, mid, ResolveEmail(
            email_id=email_id, outcome="rejected", code="5.1.1", evidence="ticket-44"))
        assert (settled["status"], settled["source_id"]) == ("rejected", "u-1")
        assert await call(rt, mid, ResolveEmail(
            source_id="u-1", outcome="rejected", code="5.1.1", evidence="ticket-44")) == settled
        for named in ({}, {"source_id": "u-1", "email_id": email_id}):
            with pytest.raises(MailboxActorsError) as e:
                await call(rt, mid, ResolveEmail(outcome="rejected", code="5.1.1",
                                                 evidence="t", **named))
            assert (e.value.code, e.value.details) == ("invalid_request", {"field": "source_id"})
        with pytest.raises(MailboxActorsError) as e:
            await call(rt, mid, ResolveEmail(email_id="eml_unknown", outcome="rejected",
                                             code="5.1.1", evidence="t"))
        assert e.value.code == "email_not_found"


async def test_delivery_events_are_per_message_deduplicated_and_forward_only() -> None:
    """CA-9, CA-13: delivery events apply to one Message (by msg_ id, or by Message-ID header and
    recipient), are deduplicated on the provider's event id (or message, type and provider
    timestamp), only move forward (deferred after delivered changes nothing), and each new one
    emits an event; a Message that never reached the provider is conflict."""
    transport = RecordingTransport()
    async with runtime(transport) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email(to=["a@x.example", "b@x.example"]))
        await call(rt, mid, email("queued-only", to=["c@x.example"], send_before=rt.now_ms()))
        await rt.run_until_idle()
        r = await receipt(rt, mid)
        first, second = (m["message_id"] for m in r["messages"])

        async def apply(**kw: Any) -> Any:
            return await call(rt, mid, ApplyDeliveryEvent(**kw))

        d = await apply(type="delivered", message_id=first, provider_event_id="ev-1")
        assert d == {"message_id": first, "status": "delivered", "changed": True,
                     "duplicate": False}
        again = await apply(type="delivered", message_id=first, provider_event_id="ev-1")
        assert again["duplicate"] is True and again["changed"] is False
        late = await apply(type="deferred", message_id=first, provider_event_id="ev-0")
        assert late == {"message_id": first, "status": "delivered", "changed": False,
                        "duplicate": False}
        soft = await apply(type="bounced", bounce="soft", message_id_header=r["message_id_header"],
                           recipient="B@x.example", provider_timestamp_ms=5, code="4.2.2")
        assert soft["message_id"] == second and soft["status"] == "bounced_soft"
        dup = await apply(type="bounced", bounce="soft", message_id=second,
                          provider_timestamp_ms=5)
        assert dup["duplicate"] is True
        hard = await apply(type="bounced", bounce="hard", message_id=second,
                           provider_timestamp_ms=6, code="5.1.1")
        assert hard["status"] == "bounced_hard"
        after = await apply(type="delivered", message_id=second, provider_event_id="ev-9")
        assert after["status"] == "bounced_hard" and after["changed"] is False
        statuses = [(m["status"], m["code"]) for m in (await receipt(rt, mid))["messages"]]
        assert statuses == [("delivered", None), ("bounced_hard", "5.1.1")]
        await rt.run_until_idle()  # the outbox publishes
        news = [(e.type, e.data["changed"]) for e in rt.events.events("email.message_")]
        assert news == [("email.message_delivered", True), ("email.message_deferred", False),
                        ("email.message_bounced_soft", True),
                        ("email.message_bounced_hard", True),
                        ("email.message_delivered", False)]
        expired = (await receipt(rt, mid, "queued-only"))["messages"][0]["message_id"]
        with pytest.raises(MailboxActorsError) as e:
            await apply(type="delivered", message_id=expired, provider_event_id="ev-x")
        assert e.value.code == "conflict"
        for bad in ({"type": "bounced", "message_id": first, "provider_event_id": "b"},
                    {"type": "delivered", "provider_event_id": "c"},
                    {"type": "delivered", "message_id": first}):
            with pytest.raises(MailboxActorsError) as e:
                await apply(**bad)
            assert e.value.code == "invalid_request"
        with pytest.raises(MailboxActorsError) as e:
            await apply(type="delivered", message_id="msg_nope", provider_event_id="z")
        assert e.value.code == "email_not_found"


async def test_large_content_is_sent_whole_and_dropped_after() -> None:
    """CA-1, CA-3: content over the storage's value size (kept in chunks) reaches the transport
    whole, and is deleted once the Email is final."""
    transport = RecordingTransport()
    async with runtime(transport) as rt:
        mid = await mailbox(rt)
        body = "0123456789" * 450_000  # 4.5 MB
        await call(rt, mid, email("big", text=body))
        assert content_rows(rt, mid) == 5
        await rt.run_until_idle()
        assert (await receipt(rt, mid, "big"))["status"] == "provider_accepted"
        assert transport.sent[0].text == body
        assert content_rows(rt, mid) == 0


async def test_a_long_backlog_lets_the_outbox_in_between_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """CA-4, EV-1: one alarm run starts a bounded number of Emails, then re-arms for now: the
    events of what it sent are published before the next run sends the rest, and every Email
    is sent once."""
    from mailbox_actors.carrier import dispatch

    monkeypatch.setattr(dispatch, "DISPATCH_RUN_MAX", 3)
    transport = RecordingTransport()
    async with runtime(transport) as rt:
        mid = await mailbox(rt)
        for i in range(7):
            await call(rt, mid, email(f"b-{i}"))
        await rt.run_until_idle()
        assert transport.calls == 3
        assert len(rt.events.events("email.provider_accepted")) == 3
        await rt.advance(1)
        assert transport.calls == 6
        await rt.advance(1)
        assert transport.calls == 7
        assert len({e.email_id for e in transport.sent}) == 7
        await rt.advance(86_400_000)
        assert transport.calls == 7
