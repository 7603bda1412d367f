"""IdentityMailbox's small raw sources in their message's row (migration ``RAW_INLINE``: a column
added, no row copied). A mailbox made by the previous code keeps every source byte for byte (a
multi-chunk one too), deleting a message and erasing the mailbox still take its source, and the
upgrade opens a mailbox filled to its ``max_database_bytes``, where every acknowledged message
is found by search at once (UI-2, IN-6, IN-10, RT-8)."""

from __future__ import annotations

import base64
import sqlite3
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from mailbox_actors.objects import DEFAULT_OBJECTS
from mailbox_actors.objects.identity_mailbox import IdentityMailbox, sources
from mailbox_actors.objects.identity_mailbox.sources import RAW_INLINE, RAW_INLINE_MAX
from mailbox_actors.platform.storage.limits import Limits
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.inbound import DeleteMessage, Ingest
from mailbox_actors.wire.mailbox import MailboxErase, MailboxInit, MailboxStatus
from mailbox_actors.wire.search import SearchMessages
from mailbox_actors.wire.sources import GetRawMessage

pytestmark = pytest.mark.anyio
NS = "identity_mailbox"
IDS = {"tenant_id": "ten_1", "identity_id": "idn_1"}
INLINE = next(m.version for m in IdentityMailbox.migrations if m.statements == RAW_INLINE)


class _PreviousMailbox(IdentityMailbox):  # the layout before sources in the row
    migrations = IdentityMailbox.migrations[:INLINE - 1]


PREVIOUS = [_PreviousMailbox if c is IdentityMailbox else c for c in DEFAULT_OBJECTS]


def _previous_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """Until ``monkeypatch.undo()``: ingest as the previous code did (every source in
    raw_chunks, the row without its raw column)."""
    monkeypatch.setattr(sources, "inline", lambda raw: None)


def _mail(n: int, attachment: bytes = b"", lines: int = 12) -> bytes:
    msg = EmailMessage()
    msg["From"] = "Alice <alice@example.com>"
    msg["To"] = "bob@example.com"
    msg["Subject"] = f"message {n} word{n}x"
    msg["Message-ID"] = f"<m-{n}@example.com>"
    msg.set_content(f"a line of text number {n} about w{n * 7919 % 100_003}\n" * lines)
    if attachment:
        msg.add_attachment(attachment, maintype="application", subtype="octet-stream",
                           filename="a.bin")
    return msg.as_bytes()


async def _raw(rt: TestRuntime, m: str, mid: str) -> bytes:
    data, chunk, chunks = b"", 0, 1
    while chunk < chunks:
        got: dict[str, Any] = await rt.call(NS, m, GetRawMessage(message_id=mid, chunk=chunk),
                                            **IDS)
        assert got["kept"]
        data += base64.b64decode(got["data"])
        chunk, chunks = chunk + 1, got["chunks"]
    return data


async def _where(rt: TestRuntime, m: str) -> tuple[list[Any], list[Any]]:
    """(message ids with their source in the row, message ids with rows in raw_chunks)."""
    def read(a: Any, _s: Any) -> tuple[list[Any], list[Any]]:
        inline = [r[0] for r in a.sql.exec(
            "SELECT id FROM messages WHERE raw IS NOT NULL ORDER BY seq").all()]
        chunked = [r[0] for r in a.sql.exec(
            "SELECT DISTINCT message_id FROM raw_chunks ORDER BY message_id").all()]
        return inline, chunked
    result: tuple[list[Any], list[Any]] = await rt.run_in_actor(NS, m, read)
    return result


async def test_the_previous_layouts_sources_read_back_and_new_small_ones_lie_in_the_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RT-8, UI-2, IN-6: sources kept by the previous code (a small one and a 2.5 MB one in
    three chunks) read back byte for byte after the upgrade; a new small source is kept in its
    message's row, a new large one in 1 MB chunks; deleting a message removes its source
    either way, and an erase every source."""
    small, large = _mail(1), _mail(2, bytes(range(256)) * 10_000)
    _previous_code(monkeypatch)
    async with TestRuntime(tmp_path, objects=PREVIOUS) as rt:
        m = rt.id_from_name(NS, "bob")
        await rt.call(NS, m, MailboxInit(), **IDS)
        one = (await rt.call(NS, m, Ingest(source_id="s1", raw=small), **IDS))["message_id"]
        two = (await rt.call(NS, m, Ingest(source_id="s2", raw=large), **IDS))["message_id"]
    monkeypatch.undo()

    async with TestRuntime(tmp_path) as rt:
        assert await _raw(rt, m, one) == small
        assert await _raw(rt, m, two) == large
        new_small = _mail(3)
        new_large = _mail(4, bytes(range(256)) * 300)  # just over RAW_INLINE_MAX
        assert len(new_small) <= RAW_INLINE_MAX < len(new_large)
        three = (await rt.call(NS, m, Ingest(source_id="s3", raw=new_small), **IDS))["message_id"]
        four = (await rt.call(NS, m, Ingest(source_id="s4", raw=new_large), **IDS))["message_id"]
        assert await _raw(rt, m, three) == new_small
        assert await _raw(rt, m, four) == new_large
        assert await _where(rt, m) == ([three], sorted([one, two, four]))
        with pytest.raises(MailboxActorsError) as e:  # an inline source has one chunk
            await rt.call(NS, m, GetRawMessage(message_id=three, chunk=1), **IDS)
        assert e.value.code == "invalid_request"
        for mid in (two, three):
            await rt.call(NS, m, DeleteMessage(message_id=mid), **IDS)
            assert await rt.call(NS, m, GetRawMessage(message_id=mid), **IDS) is None
        assert await _where(rt, m) == ([], sorted([one, four]))
        await rt.call(NS, m, MailboxErase(), **IDS)
        assert await rt.run_in_actor(NS, m, lambda a, _s: a.sql.exec(
            "SELECT count(*) FROM raw_chunks").one()[0]) == 0


async def _fill(rt: TestRuntime, m: str, start: int) -> list[int]:
    """Ingest until the file's limit refuses one; the numbers acknowledged."""
    acked: list[int] = []
    for n in range(start, start + 5_000):
        try:
            await rt.call(NS, m, Ingest(source_id=f"s{n}", raw=_mail(n)), **IDS)
        except MailboxActorsError as e:
            assert e.code == "limit_exceeded"
            return acked
        acked.append(n)
    raise AssertionError("the limit never refused an ingest")


async def _found(rt: TestRuntime, m: str, n: int) -> int:
    reply = await rt.call(NS, m, SearchMessages(query=f"word{n}x"), **IDS)
    return len(reply["messages"])


async def test_a_mailbox_full_by_its_limit_opens_after_the_upgrade_and_searches_everything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RT-8, IN-10, UI-2: a mailbox the previous code filled until max_database_bytes refused
    an ingest opens with the new code under the same limit (the migration copies nothing): its
    sources read back, every acknowledged message is found by search and the refused one is
    not; the file is sound and within its limit."""
    limits = Limits(max_database_bytes=600_000)
    _previous_code(monkeypatch)
    async with TestRuntime(tmp_path, objects=PREVIOUS, limits=limits) as rt:
        m = rt.id_from_name(NS, "bob")
        await rt.call(NS, m, MailboxInit(), **IDS)
        before = await _fill(rt, m, 0)
        path = rt.node.host.path_for(NS, m)
    monkeypatch.undo()
    assert len(before) > 20
    assert path.stat().st_size > 0.9 * limits.max_database_bytes

    async with TestRuntime(tmp_path, limits=limits) as rt:
        status = await rt.call(NS, m, MailboxStatus(), **IDS)
        assert status["messages"] == len(before)
        assert [await _found(rt, m, n) for n in before] == [1] * len(before)
        assert await _found(rt, m, before[-1] + 1) == 0  # the refused one
        first = (await rt.call(NS, m, SearchMessages(query=f"word{before[0]}x"), **IDS)
                 )["messages"][0]["message_id"]
        assert await _raw(rt, m, first) == _mail(before[0])
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert path.stat().st_size <= limits.max_database_bytes


async def test_up_to_the_limit_every_acknowledged_message_is_searchable_at_once(
        tmp_path: Path) -> None:
    """IN-10, IN-1: ingesting until max_database_bytes refuses, each acknowledged message (its
    source in its row) is found by search right after its acknowledgement, the refused one
    never; the file is sound and within its limit."""
    limits = Limits(max_database_bytes=600_000)
    async with TestRuntime(tmp_path, limits=limits) as rt:
        m = rt.id_from_name(NS, "bob")
        await rt.call(NS, m, MailboxInit(), **IDS)
        acked: list[int] = []
        for n in range(5_000):
            try:
                await rt.call(NS, m, Ingest(source_id=f"s{n}", raw=_mail(n)), **IDS)
            except MailboxActorsError as e:
                assert e.code == "limit_exceeded"
                break
            acked.append(n)
            assert await _found(rt, m, n) == 1  # at once, with no alarm run, no time passed
        assert len(acked) > 20
        assert await _found(rt, m, acked[-1] + 1) == 0
        assert [await _found(rt, m, n) for n in acked] == [1] * len(acked)
        inline, chunked = await _where(rt, m)
        assert len(inline) == len(acked) and chunked == []
        path = rt.node.host.path_for(NS, m)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert path.stat().st_size <= limits.max_database_bytes
