"""The string-backed outbox (PO-10, the seed's makePostOutbox): string payloads to named receiver
callables with Post's order, attempts, receipts, retry and dead letters, on an actor's own file;
a node killed with SIGKILL during a receiver invocation retries the same key after restart."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import _outbox_actors as oa
from mailbox_actors.post.outbox import MAX_PAYLOAD_CHARS
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError

pytestmark = pytest.mark.anyio
HERE = Path(__file__).resolve().parents[1] / "support"


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    oa.reset()
    yield
    oa.reset()


class Env:
    def __init__(self, rt: TestRuntime) -> None:
        self.rt = rt
        self.oid = rt.id_from_name("outbox_producer", "p")

    async def o(self, req: Any) -> Any:
        return await self.rt.call("outbox_producer", self.oid, req, tenant_id=oa.TENANT)

    async def send(self, key: str, payload: str = "text", address: str = "conv-1",
                   receiver: str = "hook") -> Any:
        return await self.o(oa.OSend(receiver=receiver, address=address, payload=payload,
                                     key=key))

    async def job(self, key: str) -> dict[str, Any]:
        return await self.o(oa.OGet(key=key))  # type: ignore[no-any-return]

    def keys(self, receiver: str = "hook", address: str = "conv-1") -> list[str]:
        return [k for r, k, _, a, _ in oa.CALLS if (r, a) == (receiver, address)]


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with TestRuntime(tmp_path, objects=(oa.OutboxProducer,)) as rt:
        e = Env(rt)
        await e.o(oa.OInit())
        yield e


async def test_letters_reach_their_callable_in_order_and_a_failure_holds_the_rest(
        env: Env) -> None:
    """PO-10, PO-3, PO-12: four letters to one receiver and address, the first failing twice: the
    rest wait (never invoked before it), then all arrive in send order with their payloads;
    another address of the same receiver, and another receiver, are not held; every letter's
    attempts equal its invocations; a delivered letter keeps the callable's receipt."""
    oa.SCRIPT["a0"] = ["fail", "fail"]
    for i in range(4):
        await env.send(f"a{i}", payload=f"reply {i}")
    await env.send("b0", address="conv-2")
    await env.send("c0", receiver="agent")
    await env.rt.run_until_idle()
    assert env.keys() == ["a0"]
    assert env.keys(address="conv-2") == ["b0"] and env.keys("agent") == ["c0"]
    first = await env.job("a0")
    assert (first["state"], first["attempts"], first["reason"]) == ("failed", 1, "unavailable")
    assert {(await env.job(f"a{i}"))["state"] for i in (1, 2, 3)} == {"queued"}
    await env.rt.advance(60_000)
    assert env.keys() == ["a0", "a0", "a0", "a1", "a2", "a3"]
    assert [p for r, k, _, a, p in oa.CALLS if k.startswith("a") and k != "a0"] == [
        "reply 1", "reply 2", "reply 3"]
    for i in range(4):
        job = await env.job(f"a{i}")
        assert job["state"] == "delivered"
        assert job["attempts"] == sum(1 for _, k, _, _, _ in oa.CALLS if k == f"a{i}")
    assert (await env.job("a3"))["receipt"] == {"seen": "conv-1/4"}


async def test_send_is_in_the_producers_transaction_and_checks_its_input(env: Env) -> None:
    """PO-10, PO-2: a replay of a key with the same payload keeps its letter, another payload is
    conflict; a send whose producer transaction fails leaves no letter; an unknown receiver and
    a payload over the cap are invalid_request."""
    first = await env.send("k", payload="same")
    assert (await env.send("k", payload="same"))["seq"] == first["seq"]
    with pytest.raises(MailboxActorsError) as conflict:
        await env.send("k", payload="other")
    assert conflict.value.code.value == "conflict"
    with pytest.raises(MailboxActorsError):
        await env.o(oa.OSend(receiver="hook", address="x", payload="p", key="rolled",
                             also_fail=True))
    assert await env.job("rolled") is None
    with pytest.raises(MailboxActorsError) as unknown:
        await env.send("u", receiver="nobody")
    assert unknown.value.code.value == "invalid_request"
    assert unknown.value.details is not None
    assert unknown.value.details["receivers"] == ["agent", "hook"]
    with pytest.raises(MailboxActorsError) as big:
        await env.send("big", payload="x" * (MAX_PAYLOAD_CHARS + 1))
    assert big.value.code.value == "invalid_request"
    await env.rt.run_until_idle()
    assert [k for _, k, _, _, _ in oa.CALLS] == ["k"]


async def test_refusals_exceptions_and_spent_budgets_are_dead_letters_with_receipts(
        env: Env) -> None:
    """PO-10, PO-12, PO-5: a refusal with a receipt is a dead letter carrying it; a permanent
    error code is a dead letter with that code; a callable that raises something else is a failed
    attempt, retried until the budget (8) is spent; a dead letter no longer holds its address,
    and retry puts it back in line, delivered then."""
    oa.SCRIPT["r"] = ["refuse_receipt"]
    oa.SCRIPT["d"] = ["deny"]
    oa.SCRIPT["x"] = ["boom"] * 8
    await env.send("r", address="r-conv")
    await env.send("d", address="d-conv")
    await env.send("x", address="x-conv")
    await env.send("after-r", address="r-conv")
    for _ in range(12):
        await env.rt.advance(300_000)
    dead = {d["key"]: d for d in (await env.o(oa.ODead()))["letters"]}
    assert (dead["r"]["reason"], dead["r"]["receipt"], dead["r"]["attempts"]) == (
        "unknown_conversation", {"looked_up": "r-conv"}, 1)
    assert (dead["d"]["reason"], dead["d"]["attempts"]) == ("permission_denied", 1)
    assert (dead["x"]["reason"], dead["x"]["attempts"]) == (
        "retry_budget_spent:error:RuntimeError", 8)
    assert (await env.job("after-r"))["state"] == "delivered"
    assert await env.o(oa.ORetry(key="d")) == "requeue"
    await env.rt.run_until_idle()
    job = await env.job("d")
    assert (job["state"], job["attempts"]) == ("delivered", 2)
    latest = await env.o(oa.OLatest(receiver="hook", address="d-conv"))
    assert latest["key"] == "d" and latest["state"] == "delivered"


async def test_a_callable_answering_none_is_delivered(env: Env) -> None:
    """PO-10: None from the callable is a delivery without a receipt."""
    oa.SCRIPT["n"] = ["none"]
    await env.send("n")
    await env.rt.run_until_idle()
    job = await env.job("n")
    assert (job["state"], job["receipt"], job["attempts"]) == ("delivered", None, 1)


def _line(proc: subprocess.Popen[bytes], prefix: str, buf: list[bytes]) -> str:
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    while True:
        data = b"".join(buf)
        if b"\n" in data:
            line, rest = data.split(b"\n", 1)
            buf[:] = [rest]
            if line.startswith(prefix.encode()):
                return line.decode()
            continue
        ready, _, _ = select.select([fd], [], [], 60)
        assert ready, f"no {prefix!r} line within 60 s"
        chunk = os.read(fd, 65536)
        assert chunk, f"the child ended before {prefix!r}"
        buf.append(chunk)


def _killed_during_a_call(data: Path, hang: Path) -> str:
    """The child node sends two letters and is killed with SIGKILL while the receiver callable
    answers the first; the producer's id."""
    proc = subprocess.Popen([sys.executable, str(HERE / "_outbox_actors.py"), str(data),
                             str(hang)], stdout=subprocess.PIPE)
    buf: list[bytes] = []
    try:
        oid = _line(proc, "sent", buf).split()[1]
        assert _line(proc, "invoked", buf) == "invoked k1 1"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    return oid


async def test_a_sigkill_during_a_receiver_call_retries_the_same_key_after_restart(
        tmp_path: Path) -> None:
    """PO-10, PO-5: a node killed with SIGKILL while the receiver callable is answering the first
    of two letters (the invocation recorded before the call) retries that letter with the same
    key after restart, once its attempt's deadline passed: the receiver sees the key twice
    (attempts 1 and 2, so it can deduplicate), then the second letter, in order; attempts count
    both invocations."""
    data, hang = tmp_path / "node", tmp_path / "invocations.txt"
    oid = _killed_during_a_call(data, hang)
    assert hang.read_text() == "k1 1\n"
    async with TestRuntime(data, objects=(oa.OutboxProducer,)) as rt:
        e = Env(rt)
        assert e.oid == oid
        job = await e.job("k1")
        assert (job["state"], job["attempts"]) == ("running", 1)
        await rt.advance(10_001)
        assert [(k, n, p) for _, k, n, _, p in oa.CALLS] == [("k1", 2, "reply one"),
                                                              ("k2", 1, "reply two")]
        assert [(await e.job(k))["attempts"] for k in ("k1", "k2")] == [2, 1]
        assert {(await e.job(k))["state"] for k in ("k1", "k2")} == {"delivered"}
