"""Post's counts and receipts on actor SQLite (PO-12): ``attempts`` counts receiver invocations
only (a letter held behind an undelivered predecessor never shows ``running``, never counts an
attempt and spends none of its budget; a count never goes down), a preparation that failed is
recorded but is not an attempt, and a receiver's receipt is kept on the dead letter too."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

import _post_actors as pa
from _post_actors import Env
from mailbox_actors.testing import TestRuntime

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    pa.reset()
    yield
    pa.reset()


async def _env(rt: TestRuntime) -> Env:
    e = Env(rt)
    await e.p(pa.PInit())
    for r in ("a", "b"):
        await rt.call("post_receiver", rt.id_from_name("post_receiver", r), pa.RInit(),
                      tenant_id=pa.TENANT)
    return e


async def test_a_held_letter_never_shows_running_nor_an_attempt(tmp_path: Path) -> None:
    """PO-12: the head of an address is claimed and lost (as in a crash), then fails six times;
    at each of its invocations, seen from an
    operator's read-only scan, the three letters behind it are queued with no attempt and no
    run; a count never goes down between rounds; once the head is delivered each of them is
    invoked once and shows one attempt, and every key's attempts equal its receiver's
    invocations but the head's (its lost claim counted one that never reached the receiver).
    The held letters spent none of their budget though the head spent all eight runs of its."""
    async with TestRuntime(tmp_path, objects=pa.POST_OBJECTS) as rt:
        e = await _env(rt)
        pa.SCRIPT["e0"] = ["fail"] * 6
        seen: list[dict[str, tuple[str, int, int]]] = []
        pa.ON_DELIVER.append(lambda key: seen.append(e.rows()) if key == "e0" else None)
        for i in range(4):
            await e.p(pa.Send(to="a", key=f"e{i}", text=f"t{i}"))
        # The claim alone: the head starts, the letters behind it are read, not written.
        ctx = rt.node.host.activate(pa.Producer, e.producer, create=False)
        assert ctx is not None
        chains = await ctx.actor.post.claim(rt.now_ms(), rt.now_ms() + 10_000)  # type: ignore[attr-defined]
        assert [[j.key for j in c] for c in chains] == [["e0", "e1", "e2", "e3"]]
        rows = e.rows()
        assert rows["e0"] == ("running", 1, 1)
        assert {rows[f"e{i}"] for i in (1, 2, 3)} == {("queued", 0, 0)}
        await rt.advance(10_001)  # the claimed round is recovered at its lease, as after a crash
        before: dict[str, tuple[str, int, int]] = {}
        for _ in range(20):
            now = e.rows()
            for k, (_, attempts, _) in now.items():
                assert attempts >= before.get(k, ("", 0, 0))[1], "a count never goes down"
            before = now
            if all(s == "delivered" for s, _, _ in now.values()):
                break
            await rt.advance(300_000)
        assert len(seen) == 7  # six failures and the delivery
        for snapshot in seen:
            assert {snapshot[f"e{i}"] for i in (1, 2, 3)} == {("queued", 0, 0)}
        final = e.rows()
        assert final["e0"] == ("delivered", 8, 8)  # the lost claim counted, never called
        assert {final[f"e{i}"] for i in (1, 2, 3)} == {("delivered", 1, 1)}
        assert {k: pa.ATTEMPTS[k] for k in ("e1", "e2", "e3")} == {"e1": 1, "e2": 1, "e3": 1}
        assert pa.ATTEMPTS["e0"] == 7


async def test_attempts_equal_invocations_under_random_failures(tmp_path: Path) -> None:
    """PO-12: over three addresses with scripted failures, lost answers and garbage at random
    (seeded), every job's attempts equal the receiver's invocations of its key, whatever it
    ended as."""
    rnd = random.Random(26)
    async with TestRuntime(tmp_path, objects=pa.POST_OBJECTS) as rt:
        e = await _env(rt)
        keys = []
        for i in range(24):
            key = f"k{i:02d}"
            keys.append(key)
            pa.SCRIPT[key] = rnd.choices(["ok", "fail", "lose", "garbage"], k=rnd.randint(0, 4))
            await e.p(pa.Send(to="ab"[i % 2], key=key, text=key))
        for _ in range(30):
            await rt.advance(300_000)
        rows = e.rows()
        assert {s for s, _, _ in rows.values()} == {"delivered"}
        assert {k: rows[k][1] for k in keys} == {k: pa.ATTEMPTS.get(k, 0) for k in keys}


async def test_a_failed_preparation_is_recorded_but_not_an_attempt(tmp_path: Path) -> None:
    """PO-12: a preparation that raises is recorded (failed, its reason, a retry time) but is
    not an attempt; preparations failing until the budget is spent end a dead letter with zero
    attempts; a dead letter put back in line gets a fresh budget and keeps its count."""
    async with TestRuntime(tmp_path, objects=pa.POST_OBJECTS) as rt:
        e = await _env(rt)
        pa.PREPARE_FAILS.append(8)
        await e.p(pa.Send(to="a", key="p", text="grant", route="prepared_note"))
        await rt.run_until_idle()
        job = await e.job("p")
        assert (job["state"], job["attempts"], job["reason"]) == (
            "failed", 0, "error:RuntimeError")
        assert job["next_attempt_at_ms"] > rt.now_ms()
        for _ in range(12):
            await rt.advance(300_000)
        job = await e.job("p")
        assert (job["state"], job["attempts"], job["reason"]) == (
            "dead", 0, "retry_budget_spent:error:RuntimeError")
        assert e.rows()["p"] == ("dead", 0, 8)
        assert "p" not in pa.ATTEMPTS
        assert await e.p(pa.RetryKey(key="p")) == "requeue"
        await rt.run_until_idle()
        job = await e.job("p")
        assert (job["state"], job["attempts"]) == ("delivered", 1)
        assert e.rows()["p"] == ("delivered", 1, 1)


async def test_a_receipt_is_kept_on_the_dead_letter(tmp_path: Path) -> None:
    """PO-12: a receiver's receipt rides the terminal settlement in both outcomes: a refusal with
    a receipt is a dead letter carrying it; a failure with a receipt, retried until the budget
    is spent, is a dead letter carrying the last one; a delivery keeps its own."""
    async with TestRuntime(tmp_path, objects=pa.POST_OBJECTS) as rt:
        e = await _env(rt)
        pa.SCRIPT["r"] = ["refuse_receipt"]
        pa.SCRIPT["f"] = ["fail_receipt"] * 8
        await e.p(pa.Send(to="a", key="r", text="x"))
        await e.p(pa.Send(to="b", key="f", text="y"))
        await e.p(pa.Send(to="a", key="ok", text="z"))
        for _ in range(12):
            await rt.advance(300_000)
        page = await e.p(pa.Dead())
        dead = {d["key"]: d for d in page["letters"]}
        assert (dead["r"]["reason"], dead["r"]["receipt"], dead["r"]["attempts"]) == (
            "no_such_inbox", {"checked": "directory", "attempt": 1}, 1)
        assert (dead["f"]["reason"], dead["f"]["receipt"], dead["f"]["attempts"]) == (
            "retry_budget_spent:busy", {"queue": 8}, 8)
        assert (await e.job("ok"))["receipt"] == {"n": 1, "seq": 3}


async def test_run_counts_every_delivery_of_a_chain(tmp_path: Path) -> None:
    """PO-3: a round delivering three letters to one address (two of them settled as their
    follower started) answers three."""
    async with TestRuntime(tmp_path, objects=pa.POST_OBJECTS) as rt:
        e = await _env(rt)
        for i in range(3):
            await e.p(pa.Send(to="a", key=f"c{i}", text=f"t{i}"))
        ctx = rt.node.host.activate(pa.Producer, e.producer, create=False)
        assert ctx is not None
        assert await ctx.actor.post.run() == 3  # type: ignore[attr-defined]
        assert {s for s, _, _ in e.rows().values()} == {"delivered"}
