"""Received mail in IdentityMailbox (IN-1..IN-4, IN-6, IN-7): ingest, replay, caps, threads,
reading, deletion, waits under the FakeClock, erase and status, on real actor files."""

from __future__ import annotations

import base64
import json
import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hostile_mail import HAND_WRITTEN, OVER_CAP, SECRET_ADDRESSES, generated
from mailbox_actors.core.inbound.limits import InboundLimits
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.events import GetEvents
from mailbox_actors.wire.inbound import (
    DeleteMessage,
    GetMessage,
    GetThread,
    Ingest,
    ListMessages,
    RegisterWait,
    WaitFilter,
    WaitPoll,
)
from mailbox_actors.wire.mailbox import MailboxErase, MailboxInit, MailboxStatus

NS = "identity_mailbox"
IDS = {"tenant_id": "ten_1", "identity_id": "idn_1"}


def mail(mid: str, *, irt: str | None = None, refs: str | None = None, subject: str = "hi",
         sender: str = "alice@example.com", date: str = "Tue, 01 Dec 2026 10:00:00 +0000",
         extra: str = "") -> bytes:
    head = (f"From: Alice <{sender}>\r\nTo: bob@example.com\r\nSubject: {subject}\r\n"
            f"Message-ID: <{mid}>\r\nDate: {date}\r\n")
    if irt:
        head += f"In-Reply-To: <{irt}>\r\n"
    if refs:
        head += f"References: {refs}\r\n"
    return (head + extra + "\r\nbody of " + mid + "\r\n").encode()


async def mailbox(rt: TestRuntime, name: str = "bob") -> str:
    m = rt.id_from_name(NS, name)
    await rt.call(NS, m, MailboxInit(), **IDS)
    return m


async def ingest(rt: TestRuntime, m: str, source: str, raw: bytes) -> dict[str, Any]:
    out: dict[str, Any] = await rt.call(NS, m, Ingest(source_id=source, raw=raw), **IDS)
    return out


@pytest.mark.anyio
async def test_ingest_stores_the_message_and_get_message_reads_it(tmp_path: Path) -> None:
    """IN-1, IN-3, IN-7: ingest answers the message and thread ids; get_message gives the
    headers, addresses, subject, dates, text and defects exactly in the IN-7 shape."""
    async with TestRuntime(tmp_path) as rt:
        m = await mailbox(rt)
        got = await ingest(rt, m, "src-1", mail("a@x"))
        assert got["message_id"].startswith("imsg_") and got["thread_id"].startswith("thr_")
        assert got["duplicate"] is False and got["defects"] == []
        view = await rt.call(NS, m, GetMessage(message_id=got["message_id"]), **IDS)
        assert set(view) == {"message_id", "thread_id", "message_id_header", "from", "to", "cc",
                             "subject", "date_ms", "received_at_ms", "text", "html", "headers",
                             "attachments", "defects"}
        assert view["from"] == "alice@example.com" and view["to"] == ["bob@example.com"]
        assert view["message_id_header"] == "a@x" and view["subject"] == "hi"
        assert view["received_at_ms"] == rt.now_ms() and view["text"].strip() == "body of a@x"
        assert ["Subject", "hi"] in view["headers"]
        assert await rt.call(NS, m, GetMessage(message_id="imsg_nope"), **IDS) is None


@pytest.mark.anyio
async def test_raw_travels_as_base64_in_the_envelope(tmp_path: Path) -> None:
    """IN-7: the wire of ingest is {"op":"ingest","source_id","raw":<base64>} in the envelope."""
    async with TestRuntime(tmp_path) as rt:
        m = await mailbox(rt)
        env = {"v": 1, **IDS, "request_id": "req_1", "actor_key_id": None,
               "deadline_ms": rt.now_ms() + 10_000,
               "req": {"op": "ingest", "source_id": "s",
                       "raw": base64.b64encode(mail("b64@x")).decode()}}
        out = json.loads(await rt.call_bytes(NS, m, json.dumps(env).encode()))
        assert set(out["ok"]) == {"message_id", "thread_id", "duplicate", "defects"}


@pytest.mark.anyio
async def test_replay_is_idempotent_and_other_bytes_are_a_conflict(tmp_path: Path) -> None:
    """IN-1: the same source id with the same bytes answers the first result with
    duplicate=true and stores nothing more; with other bytes it is conflict."""
    async with TestRuntime(tmp_path) as rt:
        m = await mailbox(rt)
        first = await ingest(rt, m, "src", mail("a@x"))
        again = await ingest(rt, m, "src", mail("a@x"))
        assert again == first | {"duplicate": True}
        with pytest.raises(MailboxActorsError) as info:
            await ingest(rt, m, "src", mail("other@x"))
        assert info.value.code is ErrorCode.CONFLICT
        assert (await rt.call(NS, m, MailboxStatus(), **IDS))["messages"] == 1


@pytest.mark.anyio
async def test_a_message_over_the_cap_is_refused_limit_exceeded(tmp_path: Path) -> None:
    """IN-1: a message over max_message_bytes is refused with limit_exceeded; nothing stored."""
    lim = InboundLimits(max_message_bytes=1 << 20)
    async with TestRuntime(tmp_path, inbound=lim) as rt:
        m = await mailbox(rt)
        with pytest.raises(MailboxActorsError) as info:
            await ingest(rt, m, "big", OVER_CAP)
        assert info.value.code is ErrorCode.LIMIT_EXCEEDED
        assert "hostile" not in info.value.message
        assert (await rt.call(NS, m, MailboxStatus(), **IDS))["messages"] == 0


@pytest.mark.anyio
async def test_the_received_event_carries_ids_and_sizes_only(tmp_path: Path) -> None:
    """IN-1, EV-5: message.received commits with the message and carries ids and sizes, never
    addresses, subjects or bodies."""
    async with TestRuntime(tmp_path) as rt:
        m = await mailbox(rt)
        got = await ingest(rt, m, "s", mail("a@x", subject="Secret plans"))
        events = (await rt.call(NS, m, GetEvents(), **IDS))["events"]
        [ev] = [e for e in events if e["type"] == "message.received"]
        assert ev["data"] == {"message_id": got["message_id"], "thread_id": got["thread_id"],
                              "size_bytes": len(mail("a@x", subject="Secret plans")),
                              "attachment_count": 0, "defect_count": 0}
        assert "alice" not in json.dumps(ev) and "Secret" not in json.dumps(ev)


@pytest.mark.anyio
async def test_threads_are_right_when_parents_arrive_late(tmp_path: Path) -> None:
    """IN-2: a reply ingested before its parent and grandparent is joined by both when they
    arrive; get_thread lists the thread in order (by Date); unrelated mail with the same subject
    gets its own thread."""
    async with TestRuntime(tmp_path) as rt:
        m = await mailbox(rt)
        c = await ingest(rt, m, "c", mail("c@x", irt="b@x", refs="<a@x> <b@x>",
                                          date="Tue, 01 Dec 2026 12:00:00 +0000"))
        a = await ingest(rt, m, "a", mail("a@x", date="Tue, 01 Dec 2026 10:00:00 +0000"))
        b = await ingest(rt, m, "b", mail("b@x", irt="a@x", subject="Re: something else",
                                          date="Tue, 01 Dec 2026 11:00:00 +0000"))
        other = await ingest(rt, m, "o", mail("o@y", sender="mallory@example.net"))
        assert a["thread_id"] == b["thread_id"] == c["thread_id"] != other["thread_id"]
        thread = await rt.call(NS, m, GetThread(thread_id=a["thread_id"]), **IDS)
        assert thread["message_ids"] == [a["message_id"], b["message_id"], c["message_id"]]
        assert await rt.call(NS, m, GetThread(thread_id="thr_none"), **IDS) is None
        st = await rt.call(NS, m, MailboxStatus(), **IDS)
        assert (st["messages"], st["threads"]) == (4, 2)


@pytest.mark.anyio
async def test_list_messages_pages_newest_first_by_thread_or_all(tmp_path: Path) -> None:
    """IN-3: list_messages pages newest first with a cursor, for the whole mailbox or a thread;
    delete_message removes one message and says whether it was there."""
    async with TestRuntime(tmp_path) as rt:
        m = await mailbox(rt)
        got = [await ingest(rt, m, f"s{i}", mail(f"m{i}@x", irt=f"m{i - 1}@x" if i else None))
               for i in range(5)]
        solo = await ingest(rt, m, "solo", mail("solo@x"))
        page = await rt.call(NS, m, ListMessages(limit=4), **IDS)
        assert [x["message_id"] for x in page["messages"]] == [
            solo["message_id"], *[g["message_id"] for g in reversed(got[2:])]]
        rest = await rt.call(NS, m, ListMessages(limit=4, cursor=page["next_cursor"]), **IDS)
        assert [x["message_id"] for x in rest["messages"]] == [got[1]["message_id"],
                                                                got[0]["message_id"]]
        assert rest["next_cursor"] is None
        by_thread = await rt.call(NS, m, ListMessages(thread_id=solo["thread_id"]), **IDS)
        assert [x["message_id"] for x in by_thread["messages"]] == [solo["message_id"]]
        assert page["messages"][0]["from"] == "alice@example.com"
        gone = DeleteMessage(message_id=got[2]["message_id"])
        assert await rt.call(NS, m, gone, **IDS) == {"deleted": True}
        assert await rt.call(NS, m, gone, **IDS) == {"deleted": False}
        assert await rt.call(NS, m, GetMessage(message_id=got[2]["message_id"]), **IDS) is None
        with pytest.raises(MailboxActorsError) as info:
            await rt.call(NS, m, ListMessages(cursor="x"), **IDS)
        assert info.value.code is ErrorCode.INVALID_REQUEST


@pytest.mark.anyio
async def test_a_wait_registered_before_the_message_catches_it(tmp_path: Path) -> None:
    """IN-4: a wait registered before the message arrives is pending, then matched by the
    ingest (recorded in the same transaction), whatever arrives after; a non-matching message
    leaves it pending."""
    async with TestRuntime(tmp_path) as rt:
        m = await mailbox(rt)
        wait = await rt.call(NS, m, RegisterWait(
            filter=WaitFilter(subject_contains="WELCOME"), expires_at_ms=rt.now_ms() + 60_000),
            **IDS)
        poll = WaitPoll(wait_id=wait["wait_id"])
        assert await rt.call(NS, m, poll, **IDS) == {"status": "pending"}
        await ingest(rt, m, "noise", mail("n@x", subject="newsletter"))
        assert await rt.call(NS, m, poll, **IDS) == {"status": "pending"}
        got = await ingest(rt, m, "w", mail("w@x", subject="Your welcome mail"))
        await ingest(rt, m, "w2", mail("w2@x", subject="welcome again"))
        assert await rt.call(NS, m, poll, **IDS) == {
            "status": "matched", "message_id": got["message_id"], "thread_id": got["thread_id"]}


@pytest.mark.anyio
async def test_waits_expire_on_the_fake_clock_and_survive_a_restart(tmp_path: Path) -> None:
    """IN-4: a wait is durable (it survives the node's restart) and turns expired exactly when
    the FakeClock passes expires_at_ms; a message after that does not match it."""
    async with TestRuntime(tmp_path) as rt:
        m = await mailbox(rt)
        wait = await rt.call(NS, m, RegisterWait(filter=WaitFilter(to="BOB@example.com"),
                                                 expires_at_ms=rt.now_ms() + 5_000), **IDS)
        start = rt.now_ms()
    async with TestRuntime(tmp_path, start_ms=start) as rt:
        poll = WaitPoll(wait_id=wait["wait_id"])
        await rt.advance(5_000)
        assert await rt.call(NS, m, poll, **IDS) == {"status": "pending"}
        await rt.advance(1)
        assert await rt.call(NS, m, poll, **IDS) == {"status": "expired"}
        await ingest(rt, m, "late", mail("late@x"))
        assert await rt.call(NS, m, poll, **IDS) == {"status": "expired"}
        # A wait never registered (or pruned after expiry) can never match: expired.
        assert await rt.call(NS, m, WaitPoll(wait_id="wai_unknown"), **IDS) == {
            "status": "expired"}


@pytest.mark.anyio
async def test_received_after_finds_a_message_that_came_before_registration(
        tmp_path: Path) -> None:
    """IN-4: with received_after_ms, a message stored after that instant but before the wait was
    registered matches at once; without it only later messages count. Filters on from, header
    and to compare as documented."""
    async with TestRuntime(tmp_path) as rt:
        m = await mailbox(rt)
        t0 = rt.now_ms()
        await rt.advance(10)
        got = await ingest(rt, m, "s", mail("s@x", extra="X-Test-Run: 42\r\n"))
        later = RegisterWait(filter=WaitFilter(from_="ALICE@example.com"),
                             expires_at_ms=rt.now_ms() + 1_000)
        w1 = await rt.call(NS, m, later, **IDS)
        assert (await rt.call(NS, m, WaitPoll(wait_id=w1["wait_id"]), **IDS))["status"] == \
            "pending"
        from mailbox_actors.wire.inbound import HeaderMatch
        back = RegisterWait(filter=WaitFilter(
            from_="alice@example.com", header=HeaderMatch(name="x-test-run", value="42"),
            received_after_ms=t0), expires_at_ms=rt.now_ms() + 1_000)
        w2 = await rt.call(NS, m, back, **IDS)
        assert await rt.call(NS, m, WaitPoll(wait_id=w2["wait_id"]), **IDS) == {
            "status": "matched", "message_id": got["message_id"], "thread_id": got["thread_id"]}


@pytest.mark.anyio
async def test_the_testruntime_helper_waits_on_the_fake_clock(tmp_path: Path) -> None:
    """IN-4, TK-2: TestRuntime.wait_for_message returns a matched wait, and raises timeout after
    the fake time has passed without a match (no real time spent)."""
    async with TestRuntime(tmp_path) as rt:
        m = await mailbox(rt)
        got = await ingest(rt, m, "s", mail("s@x"))
        matched = await rt.wait_for_message(m, **IDS, subject_contains="hi",
                                            received_after_ms=rt.now_ms() - 1)
        assert matched["message_id"] == got["message_id"]
        start = rt.now_ms()
        with pytest.raises(MailboxActorsError) as info:
            await rt.wait_for_message(m, **IDS, subject_contains="never", timeout_ms=2_000)
        assert info.value.code is ErrorCode.TIMEOUT and rt.now_ms() - start >= 2_000


@pytest.mark.anyio
async def test_register_wait_validates_its_deadline(tmp_path: Path) -> None:
    """IN-4: a wait more than a day ahead is invalid_request."""
    async with TestRuntime(tmp_path) as rt:
        m = await mailbox(rt)
        with pytest.raises(MailboxActorsError) as info:
            await rt.call(NS, m, RegisterWait(filter=WaitFilter(),
                                              expires_at_ms=rt.now_ms() + 2 * 86_400_000), **IDS)
        assert info.value.code is ErrorCode.INVALID_REQUEST


@pytest.mark.anyio
async def test_erase_removes_inbound_content(tmp_path: Path) -> None:
    """IN-6: erase deletes every received message, body, header, attachment, thread and wait;
    the file no longer holds the content, and the mailbox answers identity_not_found after."""
    async with TestRuntime(tmp_path) as rt:
        m = await mailbox(rt)
        raw = mail("e@x", subject="UniqueSubjectMarker")
        await ingest(rt, m, "s", raw)
        await rt.call(NS, m, RegisterWait(filter=WaitFilter(), expires_at_ms=rt.now_ms() + 10),
                      **IDS)
        await rt.call(NS, m, MailboxErase(), **IDS)
        with pytest.raises(MailboxActorsError) as info:
            await rt.call(NS, m, GetMessage(message_id="imsg_x"), **IDS)
        assert info.value.code is ErrorCode.IDENTITY_NOT_FOUND

        path = rt.node.host.path_for(NS, m)
    from mailbox_actors.objects.identity_mailbox.inbound import INBOUND_TABLES
    with sqlite3.connect(path) as conn:  # the node has stopped: read the file as it is
        counts = {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                  for t in INBOUND_TABLES}
        erased = conn.execute("SELECT erased_at_ms FROM identity").fetchone()[0]
    conn.close()
    assert set(counts.values()) == {0} and erased is not None


@pytest.mark.anyio
async def test_the_hostile_corpus_is_stored_with_defects_and_logs_carry_no_address(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """IN-1, CL-5: every hand-written and generated hostile message is stored with its defects
    (or refused limit_exceeded when over the cap); none raises anything else, and no log line
    shows an address."""
    caplog.set_level(logging.INFO)  # what reaches a node's log: its own lines and libraries'
    for name in ("mailbox_actors", "mail.log"):  # ours and aiosmtpd's, down to DEBUG
        caplog.set_level(logging.DEBUG, logger=name)
    lim = InboundLimits(max_message_bytes=1 << 20)
    async with TestRuntime(tmp_path, inbound=lim) as rt:
        m = await mailbox(rt)
        cases = [*HAND_WRITTEN.items(), ("over_cap", OVER_CAP), *generated(7, 60)]
        for name, raw in cases:
            try:
                got = await ingest(rt, m, name, raw)
            except MailboxActorsError as e:
                assert e.code is ErrorCode.LIMIT_EXCEEDED, (name, e.code)
                continue
            view = await rt.call(NS, m, GetMessage(message_id=got["message_id"]), **IDS)
            assert view["defects"] == got["defects"]
        await rt.run_until_idle()
    text = caplog.text + "".join(str(r.__dict__) for r in caplog.records)
    for address in SECRET_ADDRESSES:
        assert address not in text
    assert "Traceback" not in text
