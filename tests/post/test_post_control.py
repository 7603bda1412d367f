"""Post on the control database (PO-8): statements for the producer's own batch, rows from a
trusted SELECT inside that batch, purge statements, and the shared executor delivering to the
Post test actors on an in-process node."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import _post_actors as pa
from mailbox_actors.platform.control.database import MIGRATIONS, ControlDb
from mailbox_actors.platform.ids import Ids
from mailbox_actors.post.control import ControlPost
from mailbox_actors.post.executor import Claimed
from mailbox_actors.post.sql import POST_RUNS, POST_SCHEMA
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.post import PostDeliver, PostEnvelope

pytestmark = pytest.mark.anyio

FACTS = ("CREATE TABLE facts (k TEXT PRIMARY KEY)",)


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    pa.reset()
    yield
    pa.reset()


class Env:
    def __init__(self, rt: TestRuntime, db: ControlDb, db_path: Path) -> None:
        self.rt, self.db, self.db_path = rt, db, db_path
        self.post = ControlPost(db, pa.ROUTES, self.deliver, clock=rt.clock, rng=rt.rng)

    async def deliver(self, job: Claimed, env: PostEnvelope, deadline_ms: int) -> Any:
        oid = self.rt.id_from_name(job.namespace, job.object_name)
        return await self.rt.call(job.namespace, oid, PostDeliver(envelope=env, attempt=job.attempts),
                                  tenant_id=pa.TENANT, deadline_ms=deadline_ms)

    def fact(self, k: str) -> tuple[str, tuple[Any, ...]]:
        return ("INSERT INTO facts (k) VALUES (?)", (k,))

    async def drain(self) -> None:
        while True:
            await self.post.run()
            wake = await self.post.next_wake()
            if wake is None:
                return
            if wake > self.rt.now_ms():
                await self.rt.advance(wake - self.rt.now_ms())

    async def log(self) -> list[list[str]]:
        oid = self.rt.id_from_name("post_receiver", "a")
        return await self.rt.call("post_receiver", oid, pa.Log(), tenant_id=pa.TENANT)  # type: ignore[no-any-return]

    async def facts(self) -> list[str]:
        return [r[0] for r in await self.db.fetch_all("SELECT k FROM facts ORDER BY k")]


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with TestRuntime(tmp_path / "node", objects=pa.POST_OBJECTS) as rt:
        await rt.call("post_receiver", rt.id_from_name("post_receiver", "a"), pa.RInit(),
                      tenant_id=pa.TENANT)
        db = ControlDb(tmp_path / "control.sqlite", clock=rt.clock, ids=Ids(rt.clock, rt.rng),
                       migrations=(*MIGRATIONS, POST_SCHEMA, POST_RUNS, FACTS))
        async with db:
            yield Env(rt, db, tmp_path / "control.sqlite")


async def test_send_statements_commit_with_the_producers_batch(env: Env) -> None:
    """PO-8: send returns statements and writes nothing; in the producer's batch they commit
    with its fact and are delivered; a replay with the same content keeps the job; a bad event
    is refused before any batch (invalid_request)."""
    stmts = env.post.send(pa.NOTE, pa.Inbox("a"), pa.Note("one"), "k1")
    assert await env.post.get("k1") is None
    await env.db.batch([env.fact("f1"), *stmts])
    await env.db.batch(env.post.send(pa.NOTE, pa.Inbox("a"), pa.Note("one"), "k1"))
    with pytest.raises(MailboxActorsError) as bad:
        env.post.send(pa.NOTE, pa.Inbox("a"), pa.Intent("x"), "k2")
    assert bad.value.code.value == "invalid_request"
    await env.drain()
    assert await env.log() == [["k1", "one"]]
    rec = await env.post.get("k1")
    assert rec is not None and rec.state == "delivered" and rec.receipt == {"n": 1, "seq": 1}


async def test_a_conflicting_replay_rolls_the_whole_batch_back(env: Env) -> None:
    """PO-8: the same key with other content fails the batch (conflict) and none of it stays,
    not even the producer's own fact."""
    await env.db.batch([env.fact("f1"), *env.post.send(pa.NOTE, pa.Inbox("a"), pa.Note("one"),
                                                       "k1")])
    with pytest.raises(MailboxActorsError) as conflict:
        await env.db.batch([env.fact("f2"), *env.post.send(pa.NOTE, pa.Inbox("a"),
                                                           pa.Note("two"), "k1")])
    assert conflict.value.code.value == "conflict"
    assert await env.facts() == ["f1"]
    rec = await env.post.get("k1")
    assert rec is not None and rec.event == {"text": "one"}


async def test_send_from_select_sends_the_rows_the_batch_creates_in_order(env: Env) -> None:
    """PO-8, PO-11, PO-3: rows a trusted ?NNN-bound SELECT yields inside the batch (the seed's
    columns post_key, envelope_json, queue_name, next_attempt_at, job_id) are sent in its order,
    behind an envelope sent earlier to the same address; the first failing holds the rest; the
    caller's ?1 and ?2 bind the caller's values, never Post's own; the job keeps its job_id."""
    await env.db.batch(env.post.send(pa.NOTE, pa.Inbox("a"), pa.Note("first"), "k0"))
    akey = ControlPost.address_key(pa.NOTE, pa.Inbox("a"))
    select = ("SELECT 'sel-' || k AS post_key, json_object('address', json_object('name', 'a'), "
              "'event', json_object('text', k)) AS envelope_json, ?1 AS queue_name, "
              "NULL AS next_attempt_at, 'job-' || k AS job_id "
              "FROM facts WHERE k LIKE ?2 ORDER BY k")
    pa.SCRIPT["sel-s1"] = ["fail"]
    await env.db.batch([env.fact("s1"), env.fact("s2"), env.fact("s3"), env.fact("x9"),
                        *env.post.send_from_select(pa.NOTE, select, (akey, "s%"))])
    await env.post.run()
    assert await env.log() == [["k0", "first"]]
    await env.drain()
    assert await env.log() == [["k0", "first"], ["sel-s1", "s1"], ["sel-s2", "s2"],
                               ["sel-s3", "s3"]]
    rows = await env.db.fetch_all("SELECT key, job_id FROM post_jobs ORDER BY seq")
    assert rows == [("k0", None), ("sel-s1", "job-s1"), ("sel-s2", "job-s2"),
                    ("sel-s3", "job-s3")]
    rec = await env.post.get("sel-s2")
    assert rec is not None and (rec.address, rec.event) == ({"name": "a"}, {"text": "s2"})


async def test_send_from_select_numbering_is_the_callers_own(env: Env) -> None:
    """PO-11 (regression): a ?1-style SELECT used to fail "statement uses 5, 7 supplied", and with
    matching counts bound the caller's values to Post's parameters. Now a SELECT using ?1 once
    and ?2 twice binds exactly the caller's two values; next_attempt_at holds a row back until
    then; a replay of the same rows changes nothing. A bare ? and a ?N past the values given are
    invalid_request before anything runs."""
    akey = ControlPost.address_key(pa.NOTE, pa.Inbox("a"))
    later = env.rt.now_ms() + 60_000
    select = ("SELECT ?2 || '-' || k AS post_key, json_object('address', json_object('name', "
              "'a'), 'event', json_object('text', ?2 || k)) AS envelope_json, ?1 AS queue_name, "
              f"CASE WHEN k = 'late' THEN {later} END AS next_attempt_at, NULL AS job_id "
              "FROM facts WHERE k IN ('n1', 'late') ORDER BY k DESC")
    stmts = env.post.send_from_select(pa.NOTE, select, (akey, "p"))
    await env.db.batch([env.fact("n1"), env.fact("late"), *stmts])
    await env.db.batch(stmts)  # replayed: the same keys and content keep their jobs
    await env.post.run()
    assert await env.log() == [["p-n1", "pn1"]]  # the late row is not due yet
    await env.drain()
    assert await env.log() == [["p-n1", "pn1"], ["p-late", "plate"]]
    assert env.rt.now_ms() >= later
    for bad, params in (("SELECT ? AS post_key", ("x",)), ("SELECT ?3 AS post_key", ("x",))):
        with pytest.raises(MailboxActorsError) as info:
            env.post.send_from_select(pa.NOTE, bad, params)
        assert info.value.code.value == "invalid_request"
    # A ? inside quoted text is text, not a parameter.
    assert env.post.send_from_select(pa.NOTE, "SELECT 'why?' AS post_key WHERE ?1", (1,))


async def test_purge_removes_envelopes_and_every_job_and_retry_requeues_a_dead_letter(
        env: Env) -> None:
    """PO-8, PO-6: purge statements in a batch remove the selected envelopes and their jobs,
    settled ones too, leaving the rest; retry(key) puts a dead letter behind queued work."""
    pa.SCRIPT["d"] = ["refuse"]
    for key in ("p-1", "p-2", "d"):
        await env.db.batch(env.post.send(pa.NOTE, pa.Inbox("a"), pa.Note(key), key))
    await env.drain()
    assert [d.key for d in (await env.post.dead_letters()).letters] == ["d"]
    pa.SCRIPT["q"] = ["fail"]
    await env.db.batch(env.post.send(pa.NOTE, pa.Inbox("a"), pa.Note("q"), "q"))
    await env.post.run()
    assert (await env.post.retry("d")).value == "requeue"
    await env.drain()
    assert [k for k, _ in await env.log()] == ["p-1", "p-2", "q", "d"]
    await env.db.batch([env.fact("erased"), *ControlPost.purge_statements(
        "SELECT key FROM post_envelopes WHERE key LIKE ?", ("p-%",))])
    assert await env.post.get("p-1") is None and await env.post.get("p-2") is None
    rows = await env.db.fetch_all("SELECT key FROM post_jobs ORDER BY key")
    assert [r[0] for r in rows] == ["d", "q"]


async def test_held_letters_count_nothing_on_the_control_database(env: Env) -> None:
    """PO-12 on the control database: while the head of an address fails twice, the letters
    behind it stay queued with no attempt and no run at each of its invocations; every job's
    attempts then equal its receiver's invocations, and a refusal's receipt rides its dead
    letter."""
    pa.SCRIPT["e0"] = ["fail", "fail"]
    pa.SCRIPT["r"] = ["refuse_receipt"]
    seen: list[set[tuple[str, int, int]]] = []
    path = env.db_path

    def snapshot(key: str) -> None:
        if key == "e0":
            c = sqlite3.connect(path)
            try:
                seen.append(set(c.execute("SELECT state, attempts, runs FROM post_jobs "
                                          "WHERE key IN ('e1', 'e2')").fetchall()))
            finally:
                c.close()

    pa.ON_DELIVER.append(snapshot)
    for key in ("e0", "e1", "e2", "r"):
        await env.db.batch(env.post.send(pa.NOTE, pa.Inbox("a"), pa.Note(key), key))
    await env.drain()
    assert seen == [{("queued", 0, 0)}] * 3
    for key in ("e0", "e1", "e2", "r"):
        rec = await env.post.get(key)
        assert rec is not None and rec.attempts == pa.ATTEMPTS[key]
    [dead] = (await env.post.dead_letters()).letters
    assert (dead.key, dead.receipt) == ("r", {"checked": "directory", "attempt": 1})
