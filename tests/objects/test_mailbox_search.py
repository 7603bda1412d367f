"""Search of received mail (IN-9, IN-10): SQLite FTS5 in the actor's own file under the runtime's
statement screening, kept in step with ingest, attachment text, deletion and erase."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.inbound import DeleteMessage, Ingest
from mailbox_actors.wire.mailbox import MailboxErase, MailboxInit
from mailbox_actors.wire.search import AttachmentTextReady, Reparse, SearchFilters, SearchMessages

pytestmark = pytest.mark.anyio

NS = "identity_mailbox"
IDS = {"tenant_id": "ten_1", "identity_id": "idn_1"}


def mail(n: int, *, subject: str, body: str, sender: str = "alice@example.com",
         to: str = "bob@example.com", attachment: bool = False) -> bytes:
    head = (f"From: <{sender}>\r\nTo: {to}\r\nSubject: {subject}\r\n"
            f"Message-ID: <m{n}@example.com>\r\n")
    if not attachment:
        return (head + "\r\n" + body + "\r\n").encode()
    return (head + 'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n'
            f"--b\r\nContent-Type: text/plain\r\n\r\n{body}\r\n--b\r\n"
            "Content-Type: application/pdf\r\nContent-Disposition: attachment; "
            'filename="q.pdf"\r\nContent-Transfer-Encoding: base64\r\n\r\nJVBERi0=\r\n'
            "--b--\r\n").encode()


async def mailbox(rt: TestRuntime) -> str:
    m = rt.id_from_name(NS, "bob")
    await rt.call(NS, m, MailboxInit(), **IDS)
    return m


async def ingest(rt: TestRuntime, m: str, n: int, **kw: Any) -> str:
    out = await rt.call(NS, m, Ingest(source_id=f"s{n}", raw=mail(n, **kw)), **IDS)
    return str(out["message_id"])


async def find(rt: TestRuntime, m: str, query: str, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = await rt.call(NS, m, SearchMessages(query=query, **kw), **IDS)
    return out


def ids(page: dict[str, Any]) -> list[str]:
    return [h["message_id"] for h in page["messages"]]


def terms(path: Path) -> set[str]:
    """Every term the file's FTS5 index still holds (read beside the actor, through fts5vocab
    in a temporary schema: the file is not changed)."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, message_search, 'row')")
        return {r[0] for r in conn.execute("SELECT term FROM temp.v")}


async def test_search_finds_subject_body_newest_first_and_pages() -> None:
    """IN-10: words of the subject or body find a message; results are newest first and paged
    with the cursor; a phrase, OR, NOT, a prefix and a column filter work as FTS5 has them."""
    async with TestRuntime() as rt:
        m = await mailbox(rt)
        a = await ingest(rt, m, 1, subject="Quarterly invoice", body="please pay the invoice")
        b = await ingest(rt, m, 2, subject="Lunch", body="the invoice is attached")
        c = await ingest(rt, m, 3, subject="Invoice reminder", body="second notice")
        await ingest(rt, m, 4, subject="Holiday", body="nothing to see")
        assert ids(await find(rt, m, "invoice")) == [c, b, a]
        first = await find(rt, m, "invoice", limit=2)
        assert ids(first) == [c, b] and first["next_cursor"] is not None
        rest = await find(rt, m, "invoice", limit=2, cursor=first["next_cursor"])
        assert ids(rest) == [a] and rest["next_cursor"] is None
        assert ids(await find(rt, m, '"pay the invoice"')) == [a]
        assert ids(await find(rt, m, "lunch OR holiday")) == [ids(await find(rt, m, "holiday"))[0], b]
        assert ids(await find(rt, m, "invoice NOT notice")) == [b, a]
        assert ids(await find(rt, m, "quart*")) == [a]
        assert ids(await find(rt, m, "subject:invoice")) == [c, a]
        hit = (await find(rt, m, "reminder"))["messages"][0]
        assert hit["subject"] == "Invoice reminder" and hit["from"] == "alice@example.com"
        assert hit["thread_id"].startswith("thr_") and hit["has_attachment"] is False


async def test_filters_narrow_the_search() -> None:
    """IN-10: from, to, thread, has attachment and the received range each narrow the results."""
    async with TestRuntime() as rt:
        m = await mailbox(rt)
        a = await ingest(rt, m, 1, subject="report", body="x", sender="carol@example.com")
        t0 = rt.now_ms()
        await rt.advance(1000)
        b = await ingest(rt, m, 2, subject="report", body="y", to="dave@example.com",
                         attachment=True)

        async def only(**f: Any) -> list[str]:
            return ids(await find(rt, m, "report", filters=SearchFilters(**f)))

        assert await only(from_="CAROL@example.com") == [a]
        assert await only(to="dave@example.com") == [b]
        assert await only(has_attachment=True) == [b]
        assert await only(has_attachment=False) == [a]
        assert await only(received_before_ms=t0 + 1) == [a]
        assert await only(received_after_ms=t0 + 1) == [b]
        thread = (await find(rt, m, "report"))["messages"][1]["thread_id"]
        assert await only(thread_id=thread) == [a]


async def test_a_query_fts5_cannot_parse_is_invalid_request_with_the_position() -> None:
    """IN-10: an unparsable query is invalid_request naming the position, never internal_error;
    an unknown column too; the query is not echoed in the message."""
    async with TestRuntime() as rt:
        m = await mailbox(rt)
        await ingest(rt, m, 1, subject="hello", body="world")
        for query, position in (('hello "world', 6), ("hello AND", 9), ("(hello", 6),
                                ("nosuch:hello", 0), ("hello ^ + )", 10)):
            with pytest.raises(MailboxActorsError) as e:
                await find(rt, m, query)
            assert e.value.code == ErrorCode.INVALID_REQUEST, query
            assert e.value.details is not None
            assert e.value.details["field"] == "query"
            assert isinstance(e.value.details["position"], int)
            assert 0 <= e.value.details["position"] <= len(query)
            if query in ("hello AND", "(hello", "nosuch:hello"):
                assert e.value.details["position"] == position, query
            assert query not in e.value.message


async def test_attachment_text_becomes_searchable_once_per_part() -> None:
    """IN-9: an extractor's text for a part is searchable; the same text again changes nothing,
    another is conflict unless replace (then the old words are gone), over its cap is
    limit_exceeded, an unknown message or part is email_not_found."""
    async with TestRuntime() as rt:
        m = await mailbox(rt)
        a = await ingest(rt, m, 1, subject="scan", body="see attached", attachment=True)
        ready = AttachmentTextReady(message_id=a, part=0, text="overdue balance of 300 dollars")
        assert (await rt.call(NS, m, ready, **IDS))["stored"] is True
        assert ids(await find(rt, m, "overdue")) == [a]
        assert ids(await find(rt, m, "attachments:dollars")) == [a]
        assert (await rt.call(NS, m, ready, **IDS))["stored"] is False
        other = AttachmentTextReady(message_id=a, part=0, text="a different text")
        with pytest.raises(MailboxActorsError) as e:
            await rt.call(NS, m, other, **IDS)
        assert e.value.code == ErrorCode.CONFLICT
        other = AttachmentTextReady(message_id=a, part=0, text="paid in full", replace=True)
        assert (await rt.call(NS, m, other, **IDS))["stored"] is True
        assert ids(await find(rt, m, "overdue")) == [] and ids(await find(rt, m, "paid")) == [a]
        assert ids(await find(rt, m, "scan")) == [a]  # subject and body still indexed
        with pytest.raises(MailboxActorsError) as e:
            await rt.call(NS, m, AttachmentTextReady(message_id=a, part=0, text="x" * (1 << 20)
                                                     + "y", replace=True), **IDS)
        assert e.value.code == ErrorCode.LIMIT_EXCEEDED
        for bad in (AttachmentTextReady(message_id="imsg_nope", part=0, text="t"),
                    AttachmentTextReady(message_id=a, part=1, text="t")):
            with pytest.raises(MailboxActorsError) as e:
                await rt.call(NS, m, bad, **IDS)
            assert e.value.code == ErrorCode.EMAIL_NOT_FOUND


async def test_a_deleted_message_and_an_erased_mailbox_leave_no_trace_in_the_index() -> None:
    """IN-10, IN-6: delete_message removes the message's terms from the index in its own
    transaction; erase empties the index whole (no term of any message is left)."""
    async with TestRuntime() as rt:
        m = await mailbox(rt)
        a = await ingest(rt, m, 1, subject="zebra", body="okapi", attachment=True)
        await ingest(rt, m, 2, subject="giraffe", body="lion")
        await rt.call(NS, m, AttachmentTextReady(message_id=a, part=0, text="pangolin"), **IDS)
        path = rt.node.host.path_for(NS, m)
        assert {"zebra", "okapi", "pangolin", "giraffe", "lion"} <= terms(path)
        assert (await rt.call(NS, m, DeleteMessage(message_id=a), **IDS))["deleted"] is True
        left = terms(path)
        assert {"zebra", "okapi", "pangolin"}.isdisjoint(left) and "giraffe" in left
        assert ids(await find(rt, m, "zebra")) == []
        await rt.call(NS, m, MailboxErase(), **IDS)
        assert terms(path) == set()
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT count(*) FROM attachment_texts").fetchone()[0] == 0
            blobs = b"".join(r[0] or b"" for r in conn.execute(
                "SELECT block FROM message_search_data"))
        assert b"giraffe" not in blobs and b"lion" not in blobs


async def test_a_deleted_message_and_an_erased_mailbox_leave_no_copy_in_the_files() -> None:
    """RPC-4, IN-6: what delete_message and erase remove is not in the raw bytes of the actor's
    database file or its WAL afterwards (zeroed free pages, the WAL truncated), while what a
    delete keeps is."""
    async with TestRuntime() as rt:
        m = await mailbox(rt)
        a = await ingest(rt, m, 1, subject="qqwombat", body="qqnarwhal " * 40, attachment=True)
        await ingest(rt, m, 2, subject="qqbison", body="qqmarmot " * 40)
        await rt.call(NS, m, AttachmentTextReady(message_id=a, part=0, text="qqtapir"), **IDS)
        path = rt.node.host.path_for(NS, m)

        def copies(word: str) -> int:
            return sum(p.read_bytes().count(word.encode())
                       for p in (Path(path), Path(f"{path}-wal")) if p.exists())

        assert all(copies(w) for w in ("qqwombat", "qqnarwhal", "qqtapir", "qqbison"))
        await rt.call(NS, m, DeleteMessage(message_id=a), **IDS)
        assert [copies(w) for w in ("qqwombat", "qqnarwhal", "qqtapir")] == [0, 0, 0]
        assert copies("qqbison") and copies("qqmarmot")
        await rt.call(NS, m, MailboxErase(), **IDS)
        assert [copies(w) for w in ("qqbison", "qqmarmot")] == [0, 0]


def segments(path: Path, setting: str = "automerge") -> tuple[int, str | None]:
    """(how many segments the index has, its ``setting``), read beside the actor."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        count = conn.execute("SELECT count(DISTINCT segid) FROM message_search_idx").fetchone()
        auto = conn.execute("SELECT v FROM message_search_config WHERE k = ?", (setting,)
                            ).fetchall()
    return int(count[0]), (str(auto[0][0]) if auto else None)


async def test_merges_are_bounded_and_the_index_stays_right_after_many_ingests(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """IN-10: automatic merges are off (a whole level is never merged inside one ingest); each
    ingest does a bounded merge instead. With the bound at one page (merges spread over many
    ingests), after 400 ingests, attachment texts, reparses and deletions every word finds
    exactly the messages holding it, newest first, the segments stay few, and a deleted
    message's words leave the index."""
    from mailbox_actors.objects.identity_mailbox import search

    monkeypatch.setattr(search, "MERGE_PAGES", 1)
    words = [f"w{k:03d}" for k in range(60)]
    async with TestRuntime() as rt:
        m = await mailbox(rt)
        path = rt.node.host.path_for(NS, m)
        assert segments(path)[1] == "0"
        holds: dict[str, list[str]] = {w: [] for w in words}
        given: list[str] = []
        for n in range(400):
            mine = sorted({words[(n * k) % 60] for k in (1, 7, 13)})
            mid = await ingest(rt, m, n, subject=f"note {mine[0]}",
                               body=" ".join([*mine[1:], f"only{n}"]), attachment=n % 50 == 0)
            given.append(mid)
            for w in mine:
                holds[w].insert(0, mid)
            if n % 50 == 0:
                await rt.call(NS, m, AttachmentTextReady(message_id=mid, part=0,
                                                         text=f"scanned{n}"), **IDS)
        count, auto = segments(path)  # merging kept up, a page at a time
        assert auto == "0" and count <= 8, count
        # A level is merged at search.FTS_USERMERGE segments (fewer pages an ingest writes).
        assert segments(path, "usermerge")[1] == str(search.FTS_USERMERGE) == "8"
        gone = given[7]
        assert (await rt.call(NS, m, DeleteMessage(message_id=gone), **IDS))["deleted"]
        for w in words:
            holds[w] = [x for x in holds[w] if x != gone]
        await rt.call(NS, m, Reparse(message_id=given[3]), **IDS)
        for w in words:
            found, cursor = [], None
            while True:
                page = await find(rt, m, w, limit=100, cursor=cursor)
                found += ids(page)
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            assert found == holds[w], w
        assert ids(await find(rt, m, "scanned100")) == [given[100]]
        assert "w007" in terms(path) and "scanned0" in terms(path)
        assert "m7" not in str(terms(path))
