"""An IdentityMailbox at its ``max_database_bytes`` still deletes and erases (the pages kept for
transactions that make room, ``page_limits``), the room a delete frees takes new mail again, and a
deleted message leaves nothing of itself in the search index: not found, not in the index's
vocabulary (fts5vocab), not in its stored pages (IN-6, IN-10, RT-7)."""

from __future__ import annotations

import sqlite3
from email.message import EmailMessage
from pathlib import Path

import pytest

from mailbox_actors.platform.storage.limits import Limits, page_limits
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.inbound import DeleteMessage, Ingest
from mailbox_actors.wire.mailbox import MailboxErase, MailboxInit, MailboxStatus
from mailbox_actors.wire.search import SearchMessages

pytestmark = pytest.mark.anyio
NS = "identity_mailbox"
IDS = {"tenant_id": "ten_1", "identity_id": "idn_1"}
LIMITS = Limits(max_database_bytes=600_000)
# A word of the first message alone, sharing no prefix with any other message's words (FTS5
# stores a term's prefix once per page, so the whole word is in the page's bytes while indexed).
SECRET = "qqzzsecretword"


def _mail(n: int, word: str = "") -> bytes:
    msg = EmailMessage()
    msg["From"] = "alice@example.com"
    msg["To"] = "bob@example.com"
    msg["Subject"] = f"message {n} word{n}x {word}"
    msg["Message-ID"] = f"<m-{n}@example.com>"
    msg.set_content(f"a line of text number {n} about w{n * 7919 % 100_003}\n" * 12)
    return msg.as_bytes()


async def _fill(rt: TestRuntime, m: str) -> list[str]:
    """Ingest until the mailbox refuses with limit_exceeded; the acknowledged messages' ids."""
    await rt.call(NS, m, MailboxInit(), **IDS)
    ids: list[str] = []
    for n in range(5_000):
        try:
            reply = await rt.call(NS, m, Ingest(source_id=f"s{n}",
                                                raw=_mail(n, SECRET if n == 0 else "")), **IDS)
        except MailboxActorsError as e:
            assert e.code == "limit_exceeded"
            assert e.details is not None and e.details["limit"] == "max_database_bytes"
            return ids
        ids.append(reply["message_id"])
    raise AssertionError("the mailbox never filled")


async def _found(rt: TestRuntime, m: str, query: str) -> int:
    return len((await rt.call(NS, m, SearchMessages(query=query, limit=50), **IDS))["messages"])


def _index_traces(path: Path, word: str) -> tuple[int, int]:
    """Rows of the index's vocabulary naming ``word``, and stored index pages holding it."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, message_search, row)")
        vocab = conn.execute("SELECT count(*) FROM temp.vocab WHERE term = ?", (word,)).fetchone()
        pages = conn.execute("SELECT count(*) FROM message_search_data WHERE instr(block, ?) > 0",
                             (word.encode(),)).fetchone()
        return int(vocab[0]), int(pages[0])


def _pages(path: Path) -> tuple[int, int]:
    """The file's pages and the pages in use (the write-ahead log's too)."""
    with sqlite3.connect(path) as conn:
        count = conn.execute("PRAGMA page_count").fetchone()[0]
        return int(count), int(count - conn.execute("PRAGMA freelist_count").fetchone()[0])


async def test_a_full_mailbox_deletes_a_small_message_and_takes_new_mail(tmp_path: Path) -> None:
    """RT-7, IN-10: filled until ingest answers limit_exceeded, the mailbox deletes its oldest
    (small) message; the message's word is then neither found nor in the index's vocabulary or
    pages; the room freed takes a new message; the file never grows past max_database_bytes."""
    async with TestRuntime(tmp_path, limits=LIMITS) as rt:
        m = rt.id_from_name(NS, "bob")
        ids = await _fill(rt, m)
        assert len(ids) > 20
        path = rt.node.host.path_for(NS, m)
        assert await _found(rt, m, SECRET) == 1
        assert _index_traces(path, SECRET) == (1, 1)  # the checks see the word while indexed
        full = _pages(path)
        assert full[0] <= page_limits(LIMITS)[0]  # ordinary writes stopped short of the limit

        assert await rt.call(NS, m, DeleteMessage(message_id=ids[0]), **IDS) == {"deleted": True}
        assert await _found(rt, m, SECRET) == 0
        assert _index_traces(path, SECRET) == (0, 0)
        after = _pages(path)
        assert after[1] < full[1]  # it made room
        assert after[0] <= page_limits(LIMITS)[1]

        reply = await rt.call(NS, m, Ingest(source_id="new", raw=_mail(10_000, "freshword")),
                              **IDS)
        assert reply["duplicate"] is False
        assert await _found(rt, m, "freshword") == 1
        status = await rt.call(NS, m, MailboxStatus(), **IDS)
        assert status["messages"] == len(ids)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert path.stat().st_size <= LIMITS.max_database_bytes


async def test_deleting_and_filling_again_never_eats_the_deletions_reserve(tmp_path: Path) -> None:
    """RT-7: round after round of deleting one message from a full mailbox and filling it
    again, each delete works: ordinary writes never take the pages kept for deletions, even the
    free ones a delete left past the ordinary limit; the file stays within max_database_bytes."""
    async with TestRuntime(tmp_path, limits=LIMITS) as rt:
        m = rt.id_from_name(NS, "bob")
        ids = await _fill(rt, m)
        path = rt.node.host.path_for(NS, m)
        cap, hard = page_limits(LIMITS)
        n = 20_000
        for round_ in range(6):
            assert await rt.call(NS, m, DeleteMessage(message_id=ids.pop(round_)),
                                 **IDS) == {"deleted": True}
            while True:  # full again
                n += 1
                try:
                    ids.append((await rt.call(NS, m, Ingest(source_id=f"r{n}", raw=_mail(n)),
                                              **IDS))["message_id"])
                except MailboxActorsError as e:
                    assert e.code == "limit_exceeded"
                    break
            count, used = _pages(path)
            assert used <= cap and count <= hard
    assert path.stat().st_size <= LIMITS.max_database_bytes


async def test_a_full_mailbox_erases(tmp_path: Path) -> None:
    """IN-6, IN-10, RT-7: erase works on a mailbox at its limit and leaves the index empty of
    every message's words; the file keeps no message."""
    async with TestRuntime(tmp_path, limits=LIMITS) as rt:
        m = rt.id_from_name(NS, "bob")
        ids = await _fill(rt, m)
        path = rt.node.host.path_for(NS, m)
        reply = await rt.call(NS, m, MailboxErase(), **IDS)
        assert reply["erased"] is True
        assert _index_traces(path, SECRET) == (0, 0)
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, message_search, row)")
            assert conn.execute("SELECT count(*) FROM temp.vocab").fetchone()[0] == 0
            assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 0
        assert len(ids) > 20
    assert path.stat().st_size <= LIMITS.max_database_bytes
