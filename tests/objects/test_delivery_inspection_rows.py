"""Operator inspection reads at most the seed's 64 rows per call in all (CA-10, PO-7): Post's rows,
each Email's row and the Message rows its counts are made from; ``limit`` rows by default (32),
a page's first record always whole. Every record is still seen once, in key order, with the right
counts, at every page size. Regression: a page read up to 65 Email rows, 65 Post rows and every
Message of each Email on top."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest

from _carrier import call, email, mailbox, receipt
from mailbox_actors.objects import delivery_inspection as inspection
from mailbox_actors.platform.mail.recording import RecordingTransport
from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT
from mailbox_actors.platform.storage.readonly import read_only
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.transport import ProviderAccepted, RecipientRefusal

pytestmark = pytest.mark.anyio
NS = "identity_mailbox"


class CountingCursor:
    """A cursor whose rows are counted as they are stepped (the schema's are not)."""

    def __init__(self, owner: CountingConnection, cur: sqlite3.Cursor, counted: bool) -> None:
        self.owner, self.cur, self.counted = owner, cur, counted

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        row = next(self.cur)
        self.owner.rows += self.counted
        return row

    def fetchone(self) -> Any:
        return next(self, None)

    def fetchall(self) -> list[Any]:
        return list(self)


class CountingConnection:
    """A read-only connection whose statements' rows are counted as they are stepped."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.rows = 0

    def execute(self, sql: str, params: Any = ()) -> CountingCursor:
        return CountingCursor(self, self.conn.execute(sql, params), "sqlite_master" not in sql)


@contextmanager
def counted(reads: list[int], path: Path) -> Iterator[Any]:
    with read_only(path) as conn:
        if conn is None:
            yield None
            return
        wrapped = CountingConnection(conn)
        try:
            yield wrapped
        finally:
            reads.append(wrapped.rows)


async def test_a_call_reads_at_most_64_rows_and_every_record_is_seen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CA-10, PO-7: a mailbox with Emails of 50 and of 1 recipients (one refused at RCPT) and 120
    Post jobs is paged at limits 1, 7, 32 and 64: no call reads more than 64 rows (nor more than
    its limit, but for a page's first record), every record appears once in one key order, and
    each Email's message counts are right."""
    one_refused = ProviderAccepted(provider_message_id="pm-1", refused=[
        RecipientRefusal(index=1, code="550 5.1.1", klass="permanent")])
    transport = RecordingTransport([one_refused])
    async with TestRuntime(tmp_path, services={MAIL_TRANSPORT: transport}) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email("small-0", to=["a0@x.example", "b0@x.example"]))
        for i in range(3):
            await call(rt, mid, email(f"big-{i}", to=[f"r{n}@x{i}.example" for n in range(50)]))
        for i in range(5):
            await call(rt, mid, email(f"small-{i + 1}"))
        await rt.run_until_idle()
        ids = {(await receipt(rt, mid, s))["email_id"]: s for s in
               ["small-0", *(f"big-{i}" for i in range(3)), *(f"small-{i + 1}" for i in range(5))]}
        path = rt.node.host.path_for(NS, mid)
    conn = sqlite3.connect(path)
    try:
        with conn:
            for n in range(120):  # Post jobs as its producer stages them (the scan reads rows)
                conn.execute("INSERT INTO post_jobs (seq, key, address_key, state, attempts, "
                             "next_attempt_at_ms, updated_at_ms) VALUES (?, ?, 'a', 'failed', "
                             "1, 5, 5)", (1000 + n, f"job-{n:03d}"))
    finally:
        conn.close()
    reads: list[int] = []
    monkeypatch.setattr(inspection, "read_only", lambda p: counted(reads, p))
    whole: list[dict[str, Any]] | None = None
    for limit in (1, 7, 32, 64):
        seen: list[dict[str, Any]] = []
        after = None
        while True:
            reads.clear()
            page = msgspec.to_builtins(inspection.inspect_deliveries(path, after, limit))
            [rows] = reads
            assert rows <= 64, (limit, rows)
            if len(page["records"]) > 1:
                assert rows <= limit, (limit, rows)  # past the limit only for a first record
            seen += page["records"]
            after = page["next_cursor"]
            if after is None:
                break
        keys = [r.get("email_id") or r["key"] for r in seen]
        assert keys == sorted(keys) and len(keys) == len(set(keys)) == 9 + 120 + 1, limit
        if whole is None:
            whole = seen
        assert seen == whole, limit
    assert whole is not None
    counts = {ids[r["email_id"]]: (r["messages"], r["refused_messages"])
              for r in whole if r["kind"] == "email"}
    assert counts == {"small-0": (2, 1), **{f"big-{i}": (50, 0) for i in range(3)},
                      **{f"small-{i + 1}": (1, 0) for i in range(5)}}
