"""Deadlines everywhere (OPS-6): a request forwarded to an owner that stopped answering (SIGSTOP) is
answered ``timeout`` at its envelope's deadline, not after the forwarding maximum; the client's id
lookups fail over to another node and honour their timeout; the client retries exactly the ops
each actor class declares idempotent."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from cluster_proc import Cluster
from mailbox_actors.http.client import HttpPool
from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.node.app import FORWARD_MAX_S
from mailbox_actors.objects import DEFAULT_OBJECTS
from mailbox_actors.rpc import Client, RpcError
from mailbox_actors.testing.ports import free_port
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.idempotency import IDEMPOTENT_OPS


@pytest.mark.slow
@pytest.mark.anyio
async def test_forwarding_to_a_stopped_owner_ends_at_the_envelopes_deadline(
        tmp_path: Path) -> None:
    """OPS-6: with the owning node stopped (SIGSTOP), a request sent to the other node with a
    2-second deadline is answered ``timeout`` naming the deadline, well inside this test's own
    15-second wait (forwarding alone would wait FORWARD_MAX_S = 30 s)."""
    assert FORWARD_MAX_S > 15
    c = Cluster(tmp_path / "cluster", 2)
    try:
        await anyio.to_thread.run_sync(c.wait_running)
        token = (c.data / "cluster.token").read_text().strip()
        nodes = c.nodes()
        async with Client.from_data_dir(c.data) as client, HttpPool() as pool:
            name, qid = next((n, i) for n, i in [
                (f"t{k}", await client.id_from_name("tenant_quota", f"t{k}")) for k in range(20)]
                if client.owner_url("tenant_quota", i) == nodes[1]["url"])
            os.kill(nodes[1]["pid"], signal.SIGSTOP)
            try:
                env = {"v": 1, "tenant_id": name, "request_id": "req_01DEADLINE",
                       "deadline_ms": int(time.time() * 1000) + 2000,
                       "req": {"op": "status"}}
                status, body = await pool.request(
                    nodes[0]["url"], "POST", f"/rpc/tenant_quota/{qid}",
                    {"authorization": f"Bearer {token}"}, json.dumps(env).encode(),
                    timeout_s=15)
            finally:
                os.kill(nodes[1]["pid"], signal.SIGCONT)
        err = json.loads(body)["err"]
        assert status == 200 and err["code"] == "timeout" and "deadline" in err["message"], err
    finally:
        c.stop()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (a stopped process's listen queue)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield int(s.getsockname()[1])


def _closed_port() -> int:
    return free_port()  # below the ephemeral range: nothing listens there meanwhile


async def _id_server(answers: list[str]) -> tuple[RpcHttpServer, int]:
    async def app(method: str, path: str, headers: Mapping[str, str], body: bytes
                  ) -> tuple[int, bytes, str]:
        answers.append(path)
        return 200, json.dumps({"id": "a" * 64}).encode(), "application/json"

    server = RpcHttpServer(app)
    return server, await server.start("127.0.0.1", 0)


@pytest.mark.anyio
async def test_id_lookups_fail_over_and_honour_the_timeout(silent_port: int) -> None:
    """OPS-6: beside a live node, one node down (connection refused) or one that accepts and
    never answers (a stopped process): every id lookup is answered by the live node whatever
    node it tries first; with every node silent, the lookup fails ``timeout`` after the client's
    id timeout, well inside this test's bound."""
    answers: list[str] = []
    server, port = await _id_server(answers)
    try:
        for dead in (f"http://127.0.0.1:{_closed_port()}", f"http://127.0.0.1:{silent_port}"):
            nodes = [("node-0", dead), ("node-1", f"http://127.0.0.1:{port}")]
            async with Client(nodes, "t" * 20, id_timeout_s=1) as client:
                for k in range(12):
                    assert await client.id_from_name("tenant_quota", f"n{k}") == "a" * 64
        assert len(answers) == 24
    finally:
        await server.stop()
    silent = [("node-0", f"http://127.0.0.1:{silent_port}"),
              ("node-1", f"http://127.0.0.1:{silent_port}")]
    async with Client(silent, "t" * 20, id_timeout_s=0.5) as client:
        with anyio.fail_after(5), pytest.raises(RpcError) as e:
            await client.id_from_name("tenant_quota", "acme")
    assert e.value.code in (ErrorCode.TIMEOUT, ErrorCode.UNAVAILABLE)


def test_each_class_declares_its_idempotent_ops_and_the_table_matches() -> None:
    """OPS-6: every default object class declares its idempotent ops, each one of its own ops,
    and the table the client reads says the same."""
    for cls in DEFAULT_OBJECTS:
        assert cls.idempotent_ops == IDEMPOTENT_OPS[cls.namespace], cls.namespace
        assert cls.idempotent_ops <= set(cls.replies), cls.namespace
    assert set(IDEMPOTENT_OPS) == {cls.namespace for cls in DEFAULT_OBJECTS}


@pytest.mark.anyio
async def test_the_client_retries_only_the_ops_the_class_declares_idempotent() -> None:
    """OPS-6: against a node that answers ``unavailable`` (retryable), an idempotent op of the
    namespace is tried max_attempts times, an op of that namespace not declared idempotent once,
    and an op idempotent in another namespace only is not retried here."""
    seen: list[str] = []

    async def app(method: str, path: str, headers: Mapping[str, str], body: bytes
                  ) -> tuple[int, bytes, str]:
        seen.append(json.loads(body)["req"]["op"])
        err = MailboxActorsError(ErrorCode.UNAVAILABLE, "try again").to_body()
        return 200, json.dumps({"err": _plain(err)}).encode(), "application/json"

    server = RpcHttpServer(app)
    port = await server.start("127.0.0.1", 0)
    try:
        async with Client(f"http://127.0.0.1:{port}", "t" * 20, max_attempts=3) as client:
            for ns, op, tries in (("tenant_quota", "usage", 3), ("tenant_quota", "roster", 1),
                                  ("tenant_quota", "submit", 1), ("identity_mailbox", "submit", 3)):
                seen.clear()
                with pytest.raises(RpcError):
                    await client.call(ns, "b" * 64, {"op": op}, deadline_ms=2**52)
                assert seen == [op] * tries, (ns, op, seen)
    finally:
        await server.stop()


def _plain(body: Any) -> Any:
    import msgspec

    return msgspec.to_builtins(body)
