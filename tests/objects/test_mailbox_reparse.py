"""Parsing received mail again (IN-8): after a parser fix, ``reparse`` replaces a message's parsed
fields, defects, attachments and search terms in place, ids and thread kept; ``all`` goes in pages
from the mailbox's alarm; a deleted message cannot be reparsed; threads a reparse reaches merge
(IN-11), on real LKML mail too (notmuch's test corpus from Debian's source package, fetched at
test time by tests/support/real_mail.py; nothing of it is stored in this repository)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

import real_mail
from mailbox_actors.core.inbound import parse as parse_module
from mailbox_actors.objects.identity_mailbox import inbound, reparse
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.inbound import DeleteMessage, GetMessage, GetThread, Ingest, ListMessages
from mailbox_actors.wire.mailbox import MailboxInit, MailboxStatus
from mailbox_actors.wire.search import Reparse, SearchMessages
from thread_corpus import raw, shuffled

pytestmark = pytest.mark.anyio

NS = "identity_mailbox"
IDS = {"tenant_id": "ten_1", "identity_id": "idn_1"}


def mail(n: int, irt: str | None = None) -> bytes:
    head = (f"From: <alice@example.com>\r\nTo: bob@example.com\r\nSubject: quarterly report {n}"
            f"\r\nMessage-ID: <m{n}@example.com>\r\n")
    if irt:
        head += f"In-Reply-To: <{irt}>\r\n"
    return (head + f"\r\nbody {n}\r\n").encode()


def buggy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A parser with a bug: it loses the subject and reports a defect that is not there."""
    real = parse_module.parse_message

    def parse(raw: bytes, lim: Any) -> Any:
        return msgspec.structs.replace(real(raw, lim), subject="", defects=["bogus_defect"])

    monkeypatch.setattr(inbound, "parse_message", parse)


def lossy(damaged: Callable[[str], bool]) -> Callable[[bytes, Any], Any]:
    """A parser with a threading bug: it loses the Message-ID, In-Reply-To and References of the
    messages whose subject ``damaged`` picks."""
    real = parse_module.parse_message

    def parse(raw_bytes: bytes, lim: Any) -> Any:
        p = real(raw_bytes, lim)
        if not damaged(p.subject):
            return p
        return msgspec.structs.replace(p, message_id=None, in_reply_to=None, references=None)

    return parse


async def mailbox(rt: TestRuntime) -> str:
    m = rt.id_from_name(NS, "bob")
    await rt.call(NS, m, MailboxInit(), **IDS)
    return m


async def ingest(rt: TestRuntime, m: str, n: int, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = await rt.call(NS, m, Ingest(source_id=f"s{n}", raw=mail(n, **kw)),
                                        **IDS)
    return out


async def test_reparse_one_message_fixes_it_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """IN-8: a message stored by a buggy parser is parsed again with the fixed one: its subject
    and defects change, its id and thread stay, search finds it by the new subject; a second
    reparse changes nothing more."""
    async with TestRuntime() as rt:
        m = await mailbox(rt)
        with monkeypatch.context() as patch:
            buggy(patch)
            got = await ingest(rt, m, 1)
        before = await rt.call(NS, m, GetMessage(message_id=got["message_id"]), **IDS)
        assert before["subject"] == "" and before["defects"] == ["bogus_defect"]
        assert (await rt.call(NS, m, SearchMessages(query="quarterly"), **IDS))["messages"] == []
        out = await rt.call(NS, m, Reparse(message_id=got["message_id"]), **IDS)
        assert out == {"reparsed": 1, "scheduled": False, "defects": []}
        after = await rt.call(NS, m, GetMessage(message_id=got["message_id"]), **IDS)
        assert after["subject"] == "quarterly report 1" and after["defects"] == []
        assert (after["message_id"], after["thread_id"]) == (got["message_id"], got["thread_id"])
        found = await rt.call(NS, m, SearchMessages(query="quarterly"), **IDS)
        assert [h["message_id"] for h in found["messages"]] == [got["message_id"]]
        again = await rt.call(NS, m, Reparse(message_id=got["message_id"]), **IDS)
        assert again["reparsed"] == 1
        assert await rt.call(NS, m, GetMessage(message_id=got["message_id"]), **IDS) == after


async def test_reparse_all_runs_in_pages_from_the_alarm(monkeypatch: pytest.MonkeyPatch) -> None:
    """IN-8: reparse all schedules alarm:reparse, which goes through every message in pages (each
    its own transaction, its position kept) and ends with messages.reparsed; threads stay whole."""
    monkeypatch.setattr(reparse, "PAGE", 4)
    async with TestRuntime() as rt:
        m = await mailbox(rt)
        with monkeypatch.context() as patch:
            buggy(patch)
            first = await ingest(rt, m, 0)
            for n in range(1, 10):
                await ingest(rt, m, n, irt="m0@example.com")
        out = await rt.call(NS, m, Reparse(all=True), **IDS)
        assert out == {"reparsed": 0, "scheduled": True, "defects": []}
        await rt.run_until_idle()  # the first page
        found = await rt.call(NS, m, SearchMessages(query="quarterly"), **IDS)
        assert len(found["messages"]) == 4  # one page done, its position kept
        for _ in range(3):  # each next page is due a millisecond after the last
            await rt.advance(1)
        for n in range(10):
            found = await rt.call(NS, m, SearchMessages(query=f'"report {n}"'), **IDS)
            assert len(found["messages"]) == 1, n
        thread = await rt.call(NS, m, GetThread(thread_id=first["thread_id"]), **IDS)
        assert len(thread["message_ids"]) == 10
        assert len(rt.events.events("messages.reparsed")) == 1


async def test_a_deleted_or_unknown_message_is_not_reparsed() -> None:
    """IN-8: a deleted message's source went with it: conflict; an unknown id is email_not_found;
    neither or both of message_id and all is invalid_request."""
    async with TestRuntime() as rt:
        m = await mailbox(rt)
        got = await ingest(rt, m, 1)
        await rt.call(NS, m, DeleteMessage(message_id=got["message_id"]), **IDS)
        for req, code in ((Reparse(message_id=got["message_id"]), ErrorCode.CONFLICT),
                          (Reparse(message_id="imsg_nope"), ErrorCode.EMAIL_NOT_FOUND)):
            with pytest.raises(MailboxActorsError) as e:
                await rt.call(NS, m, req, **IDS)
            assert e.value.code == code
        for bad in ({"op": "reparse"}, {"op": "reparse", "message_id": "x", "all": True}):
            with pytest.raises(MailboxActorsError) as e:
                await rt.call(NS, m, bad, **IDS)
            assert e.value.code == ErrorCode.INVALID_REQUEST


async def test_a_reparse_merges_the_threads_its_new_headers_reach(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """IN-8, IN-11: R; C replies to R; X replies to R but a parser bug lost its Message-ID and
    In-Reply-To; D replies to X. In each of the 24 arrival orders the mailbox holds three
    threads; reparsing X merges them into one as if X had arrived whole: every message keeps
    the thread id it was given, reads answer the oldest id, thread.merged events (ids only)
    tell it, status counts one thread, and a second reparse changes nothing."""
    parent = {"R": None, "C": "R", "X": "R", "D": "X"}
    async with TestRuntime() as rt:
        m = await mailbox(rt)
        for n, order in enumerate(itertools.permutations("RCXD")):
            given: dict[str, dict[str, Any]] = {}
            with monkeypatch.context() as patch:
                patch.setattr(inbound, "parse_message", lossy(lambda s: s.startswith("X")))
                for name in order:
                    p = parent[name]
                    irt = f"In-Reply-To: <{p}{n}@x>\r\n" if p else ""
                    raw = (f"From: a@example.com\r\nTo: bob@example.com\r\nSubject: {name}{n}"
                           f"\r\nMessage-ID: <{name}{n}@x>\r\n{irt}\r\nbody\r\n").encode()
                    given[name] = await rt.call(NS, m, Ingest(source_id=f"{name}{n}", raw=raw),
                                                **IDS)
            before = {(await rt.call(NS, m, GetMessage(message_id=g["message_id"]),
                                     **IDS))["thread_id"] for g in given.values()}
            assert len(before) == 3, order
            await rt.run_until_idle()  # the events so far published
            seen = len(rt.events.events("thread.merged"))
            out = await rt.call(NS, m, Reparse(message_id=given["X"]["message_id"]), **IDS)
            assert out["reparsed"] == 1
            await rt.run_until_idle()
            survivor = min(before)
            views = [await rt.call(NS, m, GetMessage(message_id=g["message_id"]), **IDS)
                     for g in given.values()]
            assert {v["thread_id"] for v in views} == {survivor}, order
            merged = rt.events.events("thread.merged")[seen:]
            assert {e.data["merged_thread_id"] for e in merged} == before - {survivor}
            assert all(set(e.data) == {"thread_id", "merged_thread_id"} for e in merged)
            for alias in before:
                thread = await rt.call(NS, m, GetThread(thread_id=alias), **IDS)
                assert thread["thread_id"] == survivor
                assert sorted(thread["message_ids"]) == sorted(
                    g["message_id"] for g in given.values())
            await rt.call(NS, m, Reparse(message_id=given["X"]["message_id"]), **IDS)
            await rt.run_until_idle()
            assert len(rt.events.events("thread.merged")) == seen + len(merged)
        st = await rt.call(NS, m, MailboxStatus(), **IDS)
        assert (st["threads"], st["messages"]) == (24, 96)


async def test_an_erased_mailbox_refuses_a_reparse_and_its_pending_run_ends() -> None:
    """IN-8, IN-6: once the mailbox is erased a reparse (of a message or all) is refused, and a
    reparse-all still pending from before the erasure ends without reading or emitting
    anything of the erased mail."""
    from mailbox_actors.wire.mailbox import MailboxErase

    async with TestRuntime(raise_errors=True) as rt:
        m = await mailbox(rt)
        got = await ingest(rt, m, 1)
        await ingest(rt, m, 2)
        await rt.call(NS, m, Reparse(all=True), **IDS)  # its page is due, not run yet
        await rt.call(NS, m, MailboxErase(), **IDS)
        await rt.run_until_idle()
        assert rt.events.events("messages.reparsed") == []
        for req in (Reparse(message_id=got["message_id"]), Reparse(all=True)):
            with pytest.raises(MailboxActorsError) as e:
                await rt.call(NS, m, req, **IDS)
            assert e.value.code == ErrorCode.IDENTITY_NOT_FOUND  # erased, as every other op


async def test_a_reparse_of_all_merges_threads_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """IN-8, IN-11: the paged reparse of every message (alarm:reparse) merges the threads the
    new headers reach, as a reparse of one message does: R and C, then X (a reply to R whose
    headers a parser bug lost) and D (a reply to X) end as one thread, the oldest id."""
    async with TestRuntime() as rt:
        m = await mailbox(rt)
        given = []
        with monkeypatch.context() as patch:
            patch.setattr(inbound, "parse_message", lossy(lambda s: s.startswith("X")))
            for name, parent in (("R", None), ("C", "R"), ("X", "R"), ("D", "X")):
                irt = f"In-Reply-To: <{parent}@x>\r\n" if parent else ""
                raw = (f"From: a@example.com\r\nTo: bob@example.com\r\nSubject: {name}\r\n"
                       f"Message-ID: <{name}@x>\r\n{irt}\r\nbody\r\n").encode()
                given.append(await rt.call(NS, m, Ingest(source_id=name, raw=raw), **IDS))
        assert (await rt.call(NS, m, MailboxStatus(), **IDS))["threads"] == 3
        await rt.call(NS, m, Reparse(all=True), **IDS)
        await rt.run_until_idle()
        assert (await rt.call(NS, m, MailboxStatus(), **IDS))["threads"] == 1
        survivor = min(g["thread_id"] for g in given)
        thread = await rt.call(NS, m, GetThread(thread_id=given[-1]["thread_id"]), **IDS)
        assert thread["thread_id"] == survivor and len(thread["message_ids"]) == 4
        assert len(rt.events.events("messages.reparsed")) == 1


async def _threads(rt: TestRuntime, m: str) -> set[frozenset[str]]:
    """The mailbox's threads as reads answer them: sets of subjects."""
    by: dict[str, set[str]] = {}
    cursor = None
    while True:
        page = await rt.call(NS, m, ListMessages(limit=200, cursor=cursor), **IDS)
        for row in page["messages"]:
            by.setdefault(row["thread_id"], set()).add(row["subject"])
        cursor = page["next_cursor"]
        if cursor is None:
            return {frozenset(g) for g in by.values()}


async def test_a_reparse_of_all_rethreads_a_shuffled_real_archive_as_jwz(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """IN-8, IN-11: real LKML mail (210 messages: a 100-message and an 80-message thread, cut
    References, 34 messages there twice), ingested in a shuffled order while a parser bug lost
    the Message-ID, In-Reply-To and References of a tenth of them, leaves the long threads
    split; the paged reparse of all with the fixed parser merges them into JWZ's threads of the
    archive, as if every message had arrived whole, and status counts as many threads."""
    archive = real_mail.messages("lkml")
    expected = real_mail.jwz_with_copies(archive)
    rnd = random.Random(8)
    damaged = {m.name for m in archive if rnd.random() < 0.1}
    async with TestRuntime(raise_errors=True) as rt:
        m = await mailbox(rt)
        with monkeypatch.context() as patch:
            patch.setattr(inbound, "parse_message", lossy(damaged.__contains__))
            for mail in shuffled(archive, 3):
                await rt.call(NS, m, Ingest(source_id=mail.name, raw=raw(mail, "bob@example.com")),
                              **IDS)
        before = await _threads(rt, m)
        assert len(before) > len(expected)
        await rt.call(NS, m, Reparse(all=True), **IDS)
        await rt.run_until_idle()
        for _ in range(len(archive) // reparse.PAGE + 1):  # each next page a millisecond later
            await rt.advance(1)
        assert len(rt.events.events("messages.reparsed")) == 1
        assert await _threads(rt, m) == expected
        assert (await rt.call(NS, m, MailboxStatus(), **IDS))["threads"] == len(expected)
