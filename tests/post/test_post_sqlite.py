"""Post on actor SQLite (PO-1..PO-7): two actors on one in-process node with a FakeClock; the
receiver's answers are scripted per key and attempt (``tests/support/_post_actors.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import msgspec
import pytest
import structlog
import structlog.testing

import _post_actors as pa
from _post_actors import Env
from mailbox_actors.platform.storage.readonly import read_only
from mailbox_actors.post.inspection import inspection_records
from mailbox_actors.post.routes import Route, Routes
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    pa.reset()
    yield
    pa.reset()


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    async with TestRuntime(objects=pa.POST_OBJECTS) as rt:
        e = Env(rt)
        await e.p(pa.PInit())
        await e.receiver("a")
        await e.receiver("b")
        yield e


# ---- PO-1 routes ---------------------------------------------------------------------------


def test_routes_to_one_namespace_share_one_label_and_unknown_namespaces_are_refused() -> None:
    """PO-1: every route to one namespace shares its address-kind label, checked when the routes
    are declared, and a route to a namespace no actor class declares is refused then."""
    other = Route("other", pa.Inbox, pa.Note, namespace="post_receiver",
                  object_name=lambda a: a.name, address_kind="mailbox")
    with pytest.raises(ValueError, match="one address kind"):
        Routes(pa.NOTE, other)
    lost = Route("lost", pa.Inbox, pa.Note, namespace="no_such_namespace",
                 object_name=lambda a: a.name, address_kind="inbox")
    with pytest.raises(ValueError, match="unknown namespace"):
        Routes(lost)
    with pytest.raises(TypeError, match="msgspec Struct"):
        Route("x", dict, pa.Note, namespace="post_receiver",  # type: ignore[arg-type]
              object_name=lambda a: "x", address_kind="inbox")


# ---- PO-2 send in the producer's transaction ------------------------------------------------


async def test_send_commits_with_the_producers_change_and_a_bad_event_rolls_it_back(env: Env) -> None:
    """PO-2: the envelope, its job and the wake commit with the producer's row; an event that
    does not match its route's schema is invalid_request and the producer's transaction rolls
    back (neither the row nor an envelope remain)."""
    rec = await env.p(pa.Send(to="a", key="k1", text="hello", also_write="row-1"))
    assert rec["state"] == "queued" and rec["seq"] == 1
    with pytest.raises(MailboxActorsError) as bad:
        await env.p(pa.Send(to="a", key="k2", text="x", bad=True, also_write="row-2"))
    assert bad.value.code.value == "invalid_request"
    assert await env.p(pa.Rows()) == ["row-1"]
    assert await env.job("k2") is None
    await env.rt.run_until_idle()
    assert await env.log("a") == [["k1", "hello"]]
    assert (await env.job("k1"))["state"] == "delivered"


async def test_a_replayed_key_keeps_its_job_and_other_content_is_a_conflict(env: Env) -> None:
    """PO-2: sending a key again with the same event keeps the existing job, and after delivery
    its receipt (nothing is sent twice); the same key with another event is conflict."""
    await env.p(pa.Send(to="a", key="k1", text="one"))
    await env.rt.run_until_idle()
    again = await env.p(pa.Send(to="a", key="k1", text="one"))
    assert again["state"] == "delivered" and again["receipt"] == {"n": 1, "seq": 1}
    with pytest.raises(MailboxActorsError) as conflict:
        await env.p(pa.Send(to="a", key="k1", text="two"))
    assert conflict.value.code.value == "conflict"
    await env.rt.run_until_idle()
    assert await env.log("a") == [["k1", "one"]]


# ---- PO-3 order ------------------------------------------------------------------------------


async def test_a_receiver_failing_the_first_of_five_holds_the_other_four(env: Env) -> None:
    """PO-3, PO-5: the first of five events to one address fails twice; the other four wait
    behind it (never delivered first), then all five arrive in send order; another address is
    not held meanwhile."""
    pa.SCRIPT["e0"] = ["fail", "fail"]
    for i in range(5):
        await env.p(pa.Send(to="a", key=f"e{i}", text=f"t{i}"))
    await env.p(pa.Send(to="b", key="other", text="free"))
    await env.rt.run_until_idle()
    assert await env.log("a") == []
    assert await env.log("b") == [["other", "free"]]
    first = await env.job("e0")
    assert first["state"] == "failed" and first["attempts"] == 1
    assert first["reason"] == "unavailable"
    for i in range(1, 5):
        assert (await env.job(f"e{i}"))["state"] == "queued"
        assert pa.ATTEMPTS.get(f"e{i}") is None
    await env.rt.advance(60_000)
    assert await env.log("a") == [[f"e{i}", f"t{i}"] for i in range(5)]
    assert (await env.job("e0"))["attempts"] == 3


# ---- PO-4 receiving --------------------------------------------------------------------------


async def test_a_lost_answer_is_retried_with_the_same_envelope_and_answered_duplicate(
        env: Env) -> None:
    """PO-4, PO-5: the receiver applied the event but its answer was lost; the retry carries
    the same key, the receiver answers duplicate, the effect happened once, and the receipt
    is the original one."""
    pa.SCRIPT["k"] = ["lose"]
    await env.p(pa.Send(to="a", key="k", text="once"))
    await env.rt.run_until_idle()
    assert (await env.job("k"))["state"] == "failed"
    await env.rt.advance(10_000)
    job = await env.job("k")
    assert job["state"] == "delivered" and job["attempts"] == 2
    assert job["receipt"] == {"n": 1, "seq": 1}
    assert await env.log("a") == [["k", "once"]]
    assert pa.ATTEMPTS["k"] == 2


async def test_a_receiver_answering_garbage_is_a_failed_attempt(env: Env) -> None:
    """PO-5 (bad input): an answer that is not a Post answer is a failed attempt, retried,
    never counted as a delivery."""
    pa.SCRIPT["g"] = ["garbage"]
    await env.p(pa.Send(to="a", key="g", text="x"))
    await env.rt.run_until_idle()
    job = await env.job("g")
    assert job["state"] == "failed" and job["reason"] == "bad_answer"
    await env.rt.advance(10_000)
    assert (await env.job("g"))["state"] == "delivered"


# ---- PO-5 attempts, dead letters ---------------------------------------------------------------


async def test_refusal_and_spent_budget_become_dead_letters_with_reason_and_attempts(
        env: Env) -> None:
    """PO-5: a definite refusal is a dead letter at once; failures until the budget (8
    attempts) is spent are a dead letter with the last reason; each is logged (route, reason,
    attempts; not its key or address); a dead letter no longer holds its address."""
    pa.SCRIPT["r"] = ["refuse"]
    pa.SCRIPT["f"] = ["fail"] * 20
    await env.p(pa.Send(to="a", key="r", text="refused"))
    await env.p(pa.Send(to="b", key="f", text="failing"))
    await env.p(pa.Send(to="a", key="after", text="next"))
    with structlog.testing.capture_logs() as logs:
        await env.rt.advance(3_600_000)
    dead = [e for e in logs if e["event"] == "post_dead_letter"]
    assert sorted((e["route"], e["reason"], e["attempts"]) for e in dead) == [
        ("note", "no_such_inbox", 1), ("note", "retry_budget_spent:unavailable", 8)]
    assert all("key" not in e and "address" not in e for e in dead)
    r = await env.job("r")
    assert (r["state"], r["reason"], r["attempts"]) == ("dead", "no_such_inbox", 1)
    f = await env.job("f")
    assert (f["state"], f["attempts"]) == ("dead", 8)
    assert f["reason"] == "retry_budget_spent:unavailable"
    assert await env.log("a") == [["after", "next"]]


async def test_a_crash_during_an_attempt_is_recovered_by_the_armed_wake(tmp_path: Any) -> None:
    """PO-5: the attempt is recorded and its recovery wake armed before the receiver is called:
    a producer stopped while the attempt is out finds it running after reopening, and the wake
    at its deadline retries it; the lost attempt counts."""
    async with TestRuntime(tmp_path, objects=pa.POST_OBJECTS) as rt:
        e = Env(rt)
        await e.p(pa.PInit())
        await e.receiver("a")
        await e.p(pa.Send(to="a", key="k", text="x"))
        # Run the claim only: the attempt is recorded before anything is sent.
        ctx = rt.node.host.activate(pa.Producer, e.producer, create=False)
        assert ctx is not None
        post = ctx.actor.post  # type: ignore[attr-defined]
        chains = await post.claim(rt.now_ms(), rt.now_ms() + 10_000)
        assert [j.key for c in chains for j in c] == ["k"]
        assert (await e.job("k"))["state"] == "running"
        assert ctx.scheduled()["post"] == rt.now_ms() + 10_001  # recovery armed
    async with TestRuntime(tmp_path, objects=pa.POST_OBJECTS) as rt:
        e = Env(rt)
        assert (await e.job("k"))["attempts"] == 1
        await rt.advance(10_001)
        job = await e.job("k")
        assert job["state"] == "delivered" and job["attempts"] == 2
        assert await e.log("a") == [["k", "x"]]


# ---- PO-6 operations ---------------------------------------------------------------------------


async def test_retry_puts_a_dead_letter_behind_the_work_queued_now(env: Env) -> None:
    """PO-6: retry(key) of a dead letter puts it back in line after the jobs queued now (it
    arrives after them), keeping its key; a delivered receipt is never reopened."""
    pa.SCRIPT["d"] = ["refuse"]
    await env.p(pa.Send(to="a", key="d", text="dead-first"))
    await env.rt.run_until_idle()
    assert (await env.job("d"))["state"] == "dead"
    pa.SCRIPT["q1"] = ["fail"]  # keep q1 and q2 queued while the retry is asked for
    await env.p(pa.Send(to="a", key="q1", text="one"))
    await env.p(pa.Send(to="a", key="q2", text="two"))
    await env.rt.run_until_idle()
    assert await env.p(pa.RetryKey(key="d")) == "requeue"
    await env.rt.advance(60_000)
    assert await env.log("a") == [["q1", "one"], ["q2", "two"], ["d", "dead-first"]]
    assert await env.p(pa.RetryKey(key="d")) == "delivered"
    await env.rt.advance(60_000)
    assert pa.ATTEMPTS["d"] == 2


async def test_retry_expedites_a_failed_attempt_and_leaves_queued_work_alone(env: Env) -> None:
    """PO-6: retry(key) of a settled failed attempt tries it now instead of after its backoff;
    an unknown key is the producer's own not-found code (the test actor's tenant_not_found)."""
    pa.SCRIPT["k"] = ["fail"]
    await env.p(pa.Send(to="a", key="k", text="x"))
    await env.rt.run_until_idle()
    assert (await env.job("k"))["next_attempt_at_ms"] > env.rt.now_ms()
    assert await env.p(pa.RetryKey(key="k")) == "expedite"
    await env.rt.run_until_idle()
    assert (await env.job("k"))["state"] == "delivered"
    with pytest.raises(MailboxActorsError) as missing:
        await env.p(pa.RetryKey(key="nope"))
    assert missing.value.code.value == "tenant_not_found"
    assert missing.value.details == {"field": "key"}


async def test_latest_reads_the_newest_envelope_of_one_address(env: Env) -> None:
    """PO-6: latest(kind, address) answers the newest staged event for that recipient (then its
    receipt), not another recipient's."""
    assert await env.p(pa.Latest(to="a")) is None
    await env.p(pa.Send(to="a", key="a1", text="first"))
    await env.p(pa.Send(to="b", key="b1", text="other"))
    await env.p(pa.Send(to="a", key="a2", text="second"))
    latest = await env.p(pa.Latest(to="a"))
    assert (latest["key"], latest["state"], latest["event"]) == ("a2", "queued", {"text": "second"})
    await env.rt.run_until_idle()
    latest = await env.p(pa.Latest(to="a"))
    assert (latest["key"], latest["state"]) == ("a2", "delivered")
    assert latest["receipt"] == {"n": 1, "seq": 3}


async def test_dead_letters_page_with_a_cursor_through_pages_without_letters(env: Env) -> None:
    """PO-6: dead_letters scans a bounded page in key order; a page holding only receipts is
    empty and still continues; following the cursor finds every dead letter once."""
    for i in range(5):
        await env.p(pa.Send(to="a", key=f"a{i}", text="ok"))
    pa.SCRIPT["z1"] = ["refuse"]
    pa.SCRIPT["z2"] = ["refuse"]
    await env.p(pa.Send(to="b", key="z1", text="no"))
    await env.p(pa.Send(to="b", key="z2", text="no"))
    await env.rt.run_until_idle()
    first = await env.p(pa.Dead(limit=3))
    assert first["letters"] == [] and first["next_cursor"] == "a2"
    found, cursor, pages = [], None, 0
    while True:
        page = await env.p(pa.Dead(after=cursor, limit=3))
        found += [(d["key"], d["reason"], d["attempts"]) for d in page["letters"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert found == [("z1", "no_such_inbox", 1), ("z2", "no_such_inbox", 1)]
    assert pages == 3


async def test_prepare_runs_once_is_persisted_and_reused_after_a_lost_answer(env: Env) -> None:
    """PO-6: a route's preparation runs once at the first attempt; the prepared fact is stored
    before it is sent and the retry after a lost answer sends the same fact (no second
    preparation); the receiver sees the prepared fact, not the intent."""
    pa.SCRIPT["p"] = ["lose"]
    await env.p(pa.Send(to="a", key="p", text="invite", route="prepared_note"))
    await env.rt.run_until_idle()
    job = await env.job("p")
    assert job["prepared"] == {"what": "invite", "grant": "sealed-1"}
    await env.rt.advance(10_000)
    assert pa.PREPARED == ["invite"]
    assert await env.log("a") == [["p", "invite/sealed-1"]]
    assert (await env.job("p"))["state"] == "delivered"


async def test_a_late_preparation_cannot_send(env: Env) -> None:
    """PO-6: a preparation that finishes after its attempt's ten-second deadline sends nothing
    and is not kept; the next attempt prepares again and sends."""
    pa.PREPARE_CLOCK.append(env.rt.clock)
    await env.p(pa.Send(to="a", key="p", text="late", route="prepared_note"))
    await env.rt.run_until_idle()
    job = await env.job("p")
    assert job["state"] == "failed" and job["reason"] == "preparation_expired"
    assert job["prepared"] is None
    assert pa.ATTEMPTS.get("p") is None
    await env.rt.advance(10_000)
    assert pa.PREPARED == ["late", "late"]
    assert await env.log("a") == [["p", "late/sealed-2"]]


async def test_on_delivered_runs_in_the_producers_transaction_and_a_failure_leaves_both_pending(
        env: Env) -> None:
    """PO-6: on_delivered writes the producer's ledger with the receipt; when it fails, the job
    and the ledger both stay pending, the retry hears duplicate, and the hook runs again."""
    pa.HOOK_FAILS.add("h")
    await env.p(pa.Send(to="a", key="h", text="x"))
    await env.rt.run_until_idle()
    job = await env.job("h")
    assert job["state"] == "failed" and job["reason"] == "on_delivered_failed"
    assert await env.p(pa.Ledger()) == []
    await env.rt.advance(10_000)
    assert (await env.job("h"))["state"] == "delivered"
    assert await env.p(pa.Ledger()) == ["h"]
    assert await env.log("a") == [["h", "x"]]


# ---- PO-7 inspection ---------------------------------------------------------------------------


async def test_inspection_records_show_state_and_never_addresses_or_events(env: Env) -> None:
    """PO-7: Post's inspection records carry key, state, attempts, retry time and reason; a
    delivered row only its key and state; never the address or the event."""
    pa.SCRIPT["f"] = ["fail"]
    await env.p(pa.Send(to="a", key="d", text="secret-text"))
    await env.p(pa.Send(to="b", key="f", text="secret-text"))
    await env.rt.run_until_idle()
    path = env.rt.node.host.path_for("post_producer", env.producer)
    with read_only(path) as conn:  # as the operator's scan opens a file: nothing is created
        assert conn is not None
        records, cursor = inspection_records(conn, None, 32)
        first, more = inspection_records(conn, None, 1)
        rest, end = inspection_records(conn, more, 1)
    assert cursor is None and (first[0].key, more) == ("d", "d") and rest[0].key == "f"
    assert end is None
    encoded = msgspec.json.encode(records)
    assert b"secret" not in encoded and b'"a"' not in encoded
    by_key = {r.key: r for r in records}
    assert msgspec.to_builtins(by_key["d"]) == {"kind": "post", "key": "d", "state": "delivered"}
    f = by_key["f"]
    assert (f.state, f.attempts, f.reason) == ("failed", 1, "unavailable")
    assert f.retry_at_ms is not None and f.retry_at_ms > env.rt.now_ms()


async def test_a_rolled_back_send_leaves_no_wake_and_no_envelope(env: Env) -> None:
    """PO-2: the envelope, its job and the wake commit with the producer's change or not at all:
    a producer whose change failed after its send has no envelope, no Post purpose and no
    alarm, and nothing is ever delivered."""
    with pytest.raises(MailboxActorsError) as failed:
        await env.p(pa.Send(to="a", key="k", text="x", also_write="row", fail_after=True))
    assert failed.value.code.value == "conflict"
    assert await env.job("k") is None and await env.p(pa.Rows()) == []
    ctx = env.rt.node.host.activate(pa.Producer, env.producer, create=False)
    assert ctx is not None
    assert "post" not in ctx.scheduled() and ctx.storage.get_alarm() is None
    await env.rt.advance(60_000)
    assert await env.log("a") == [] and pa.ATTEMPTS == {}
