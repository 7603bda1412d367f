"""The client's ``wait_for_message`` (IN-4, RPC-8) over real HTTP on loopback, driven by the
FakeClock: it polls once per interval of the clock's time (no busy loop, no real sleeping) and
returns the message that arrived; it times out on the clock too."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.node.app import NodeApp
from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.rpc import Client, RpcError
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import ErrorCode
from mailbox_actors.wire.inbound import Ingest
from mailbox_actors.wire.mailbox import MailboxInit

TOKEN = "cluster-token-0123456789abcdef"
IDS = {"tenant_id": "ten_1", "identity_id": "idn_1"}
RAW = b"From: a@example.com\r\nSubject: the code is 1234\r\n\r\nhi\r\n"


@pytest.mark.anyio
async def test_sleeping_on_a_fake_clock_ends_when_time_is_advanced_past_it() -> None:
    """IN-4: a pause on a FakeClock (what wait_for_message polls with) ends exactly when advance
    passes the instant, not before."""
    clock = FakeClock(1_000)
    done: list[int] = []

    async def sleeper() -> None:
        await clock.sleep_until(1_500, anyio.Event())
        done.append(clock.now_ms())

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper)
        await anyio.wait_all_tasks_blocked()
        await clock.advance(499)
        await anyio.wait_all_tasks_blocked()
        assert done == []
        await clock.advance(1)
        await anyio.wait_all_tasks_blocked()
        assert done == [1_500]


async def asleep_on(clock: FakeClock, sleepers: int) -> None:
    """Until ``sleepers`` waits are parked on the FakeClock (the client's poll went out over the
    socket and came back first): bounded, and each turn lets the loop run its I/O."""
    with anyio.fail_after(10):
        while len(clock._sleepers) < sleepers:
            await anyio.wait_all_tasks_blocked()
            await anyio.lowlevel.checkpoint()


def _polls(rt: TestRuntime) -> float:
    text = rt.node.metrics.render_prometheus()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if "rpc_requests_total{" in line and 'op="wait_poll"' in line)


@pytest.mark.anyio
async def test_wait_for_message_polls_on_the_clock_and_gets_the_message(tmp_path: Path) -> None:
    """IN-4, RPC-8: wait_for_message registers, polls, sleeps an interval of the client's clock
    between polls (two polls for one interval of fake time, however long the test takes), and
    returns the message ingested meanwhile; without one it raises timeout at the deadline."""
    async with TestRuntime(tmp_path) as rt:
        app = NodeApp(rt.node, cluster_token=TOKEN, operator_token="operator-token-0123456789ab")
        server = RpcHttpServer(app)
        port = await server.start("127.0.0.1", 0)
        m = rt.id_from_name("identity_mailbox", "bob")
        await rt.call("identity_mailbox", m, MailboxInit(), **IDS)
        try:
            async with Client(f"http://127.0.0.1:{port}", TOKEN, clock=rt.clock) as client:
                got: list[dict[str, object]] = []

                async def waiter() -> None:
                    got.append(await client.wait_for_message(
                        m, **IDS, subject_contains="code", poll_interval_ms=1_000,
                        timeout_ms=10_000))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(waiter)
                    await asleep_on(rt.clock, 1)
                    assert _polls(rt) == 1 and not got  # asleep on the fake clock
                    reply = await rt.call("identity_mailbox", m,
                                          Ingest(source_id="s", raw=RAW), **IDS)
                    await rt.advance(1_000)
                assert got == [{"status": "matched", "message_id": reply["message_id"],
                                "thread_id": reply["thread_id"]}]
                assert _polls(rt) == 2

                async def timing_out() -> None:
                    with pytest.raises(RpcError) as info:
                        await client.wait_for_message(m, **IDS, subject_contains="never",
                                                      poll_interval_ms=1_000, timeout_ms=3_000)
                    assert info.value.code is ErrorCode.TIMEOUT

                async with anyio.create_task_group() as tg:
                    tg.start_soon(timing_out)
                    for _ in range(3):
                        await asleep_on(rt.clock, 1)
                        await rt.advance(1_000)
        finally:
            await server.stop()
