"""A cluster on PostgreSQL (CL-7): ``--postgres`` / ``MAILBOX_ACTORS_POSTGRES`` puts the control
data and every queue in a real server this module starts and stops by pid; a DSN that does not
connect stops a node with exit 2 naming the setting; a node SIGKILLed, the server restarted and the
server SIGKILLed, each during webhook traffic, lose no event (every acknowledged one is delivered at
least once) and the nodes reconnect without a restart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from _pg import PgServer, new_database, serving
from cluster_proc import Cluster
from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.platform.clock import SystemClock
from mailbox_actors.platform.control.postgres import control_on
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.postgres.database import PgDatabase
from mailbox_actors.platform.rng import SystemRng
from mailbox_actors.rpc import Client, RpcError
from mailbox_actors.testing.ports import free_port

pytestmark = pytest.mark.slow

SECRET = "whsec-" + "p" * 26


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    with serving() as server:
        yield server


def _cli(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "mailbox_actors", *args], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def test_a_dsn_that_does_not_connect_stops_serve_with_2_naming_the_setting(tmp_path: Path) -> None:
    """CL-7: exit 2, the setting named, the password never printed."""
    dsn = f"host=127.0.0.1 port={free_port()} user=postgres password=pw-not-shown dbname=x"
    out = subprocess.run([sys.executable, "-m", "mailbox_actors", "serve", "--data",
                          str(tmp_path / "n"), "--port", "0", "--postgres", dsn],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "setting 'postgres'" in out.stderr and "127.0.0.1" in out.stderr
    assert "pw-not-shown" not in out.stderr + out.stdout


def _kill_and_start(pg: PgServer) -> None:
    """SIGKILL the postmaster by its pid, then start it again on the same data (crash recovery).
    Its backends leave when they see it gone; until they have, a new postmaster refuses the
    shared memory they hold, so starting is tried again for a bounded time."""
    assert pg.proc is not None
    os.kill(pg.proc.pid, signal.SIGKILL)
    pg.proc.wait()
    pg.proc = None
    deadline = time.monotonic() + 60
    while True:
        try:
            pg.start()
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            pg.proc = None
            time.sleep(0.2)  # the old backends' exit, another process's: nothing to wait on


def test_a_cluster_given_a_dsn_that_does_not_connect_stops_with_2(tmp_path: Path) -> None:
    """CL-7: the nodes refuse to start, and the supervisor stops instead of restarting them."""
    dsn = f"host=127.0.0.1 port={free_port()} user=postgres password=pw-not-shown dbname=x"
    cluster = Cluster(tmp_path / "cluster", 2, env={"MAILBOX_ACTORS_POSTGRES": dsn})
    try:
        status, out = cluster.exit_output(120)
    finally:
        cluster.stop()
    assert status == 2, out
    assert "setting 'postgres'" in out and "pw-not-shown" not in out


class Receiver:
    """The tenant's webhook endpoint: the event ids it was sent (duplicates allowed)."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.changed = anyio.Event()

    async def __call__(self, method: str, path: str, headers: Any, body: bytes
                       ) -> tuple[int, bytes, str]:
        self.ids.append(json.loads(body)["id"])
        self.changed.set()
        self.changed = anyio.Event()
        return 200, b"{}", "application/json"

    async def wait_for(self, wanted: set[str], timeout_s: float) -> None:
        with anyio.fail_after(timeout_s):  # a bound, not a speed check
            while not wanted <= set(self.ids):
                await self.changed.wait()


async def _emit(client: Client, who: dict[str, str], n: int) -> str | None:
    """One identity.* event through the mailbox; its id once acknowledged (None: refused, such
    as ``unavailable`` while its node restarts)."""
    try:
        reply = await client.call("identity_mailbox", who["mailbox_id"],
                                  {"op": "emit_event", "type": "identity.noted", "data": {"n": n}},
                                  tenant_id=who["tenant_id"], identity_id=who["id"])
    except (RpcError, OSError):
        return None
    return str(reply["id"])


@pytest.mark.anyio
async def test_webhook_traffic_survives_a_node_sigkill_and_a_postgres_restart(
        pg: PgServer, tmp_path: Path) -> None:
    """CL-7: a two-node cluster on PostgreSQL under webhook traffic; first the node holding the
    mailbox is SIGKILLed (the supervisor restarts it), then the server is restarted, then it is
    SIGKILLed and started again (crash recovery). Every event
    the mailbox acknowledged reaches the receiver at least once, and the nodes serve on without
    being restarted for the server's restart or crash."""
    dsn = new_database(pg)
    receiver = Receiver()
    server = RpcHttpServer(receiver)
    port = await server.start("127.0.0.1", 0)
    cluster = Cluster(tmp_path / "cluster", 2, env={"MAILBOX_ACTORS_POSTGRES": dsn})
    try:
        await anyio.to_thread.run_sync(cluster.wait_running)
        assert not (tmp_path / "cluster" / "control.sqlite").exists()
        data = str(cluster.data)
        tenant = await anyio.to_thread.run_sync(lambda: _cli(
            "tenant", "create", "acme", "--webhook-url", f"http://127.0.0.1:{port}/h",
            "--webhook-secret", SECRET, "--data", data, "--postgres", dsn))
        who = await anyio.to_thread.run_sync(lambda: _cli(
            "identity", "create", "--tenant", "acme", "--name", "ops", "--data", data,
            "--postgres", dsn))
        who["tenant_id"] = tenant["id"]
        acked: set[str] = set()
        async with Client.from_data_dir(cluster.data) as client:
            urls = [n["url"] for n in cluster.nodes()]
            owner = urls.index(client.owner_url("identity_mailbox", who["mailbox_id"]))

            async def traffic(first: int, count: int, midway: anyio.Event | None = None) -> None:
                for n in range(first, first + count):
                    got = await _emit(client, who, n)
                    if got is not None:
                        acked.add(got)
                    if midway is not None and n - first == count // 4:
                        midway.set()  # the fault comes now, with traffic before and after it

            await traffic(0, 50)
            await receiver.wait_for(set(acked), 60)
            # 1. SIGKILL the mailbox's node while events are emitted and delivered.
            async with anyio.create_task_group() as tg:
                midway = anyio.Event()
                tg.start_soon(traffic, 1_000, 200, midway)
                await midway.wait()
                os.kill(cluster.nodes()[owner]["pid"], signal.SIGKILL)
                await anyio.to_thread.run_sync(cluster.wait_for, f"node-{owner} back at", 90)
            await traffic(2_000, 50)
            # A killed node's handed-off messages go to the others after the 30 s lease.
            await receiver.wait_for(set(acked), 120)
            pids = [n["pid"] for n in cluster.nodes()]
            before = len(acked)
            # 2. Restart PostgreSQL while events are emitted and delivered.
            async with anyio.create_task_group() as tg:
                midway = anyio.Event()
                tg.start_soon(traffic, 3_000, 200, midway)
                await midway.wait()
                await anyio.to_thread.run_sync(pg.restart)
            await traffic(4_000, 50)
            await receiver.wait_for(set(acked), 120)
            assert len(acked) > before + 200
            # 3. SIGKILL PostgreSQL itself (crash recovery at the next start) the same way.
            before = len(acked)
            async with anyio.create_task_group() as tg:
                midway = anyio.Event()
                tg.start_soon(traffic, 5_000, 200, midway)
                await midway.wait()
                await anyio.to_thread.run_sync(_kill_and_start, pg)
            await traffic(6_000, 50)
            await receiver.wait_for(set(acked), 120)
            assert len(acked) > before + 200
            # No node was restarted for the server's restart or crash: they reconnected.
            assert [n["pid"] for n in cluster.nodes()] == pids
        # And every acknowledged event is in the event index (CL-14: indexed with its message).
        indexed: set[str] = set()
        db = control_on(PgDatabase(dsn), clock=SystemClock(), ids=Ids(SystemClock(), SystemRng()))
        async with db:
            after = None
            while page := await db.events(tenant["id"], after_event_id=after, limit=1000):
                indexed |= {e.event_id for e in page}
                after = page[-1].event_id
        assert acked <= indexed
    finally:
        await server.stop()
        await anyio.to_thread.run_sync(cluster.stop)
