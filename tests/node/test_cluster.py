"""A real local cluster of node processes: SIGKILL under load, restart by the supervisor, forwarding,
owner checks across nodes (CL-1, CL-2, CL-3, REL-1)."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from cluster_proc import Cluster
from mailbox_actors.cli.cluster import ClusterSupervisor
from mailbox_actors.core.actor_ids import id_from_name, namespace_key
from mailbox_actors.http.client import HttpPool
from mailbox_actors.node.config import load_config
from mailbox_actors.rpc import Client, RpcError
from mailbox_actors.wire.quota import QuotaInit, QuotaReserve, QuotaUsage

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One 3-node cluster for the tests that only add actors of their own names (starting one
    takes 5-25 s on a loaded machine); a test that kills or restarts a node takes ``own_cluster``."""
    c = Cluster(tmp_path_factory.mktemp("shared") / "cluster", 3)
    try:
        c.wait_running()
        yield c
    finally:
        c.stop()


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster", 3)
    try:
        c.wait_running()
        yield c
    finally:
        c.stop()


async def _metric(pool: HttpPool, url: str, name: str) -> float:
    _, body = await pool.request(url, "GET", "/metrics", {}, b"", timeout_s=5)
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _wait_dead(pid: int) -> None:
    """Until process ``pid`` is gone or a zombie (SIGKILL is delivered, not yet reaped)."""
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return
        except (FileNotFoundError, ProcessLookupError):  # reaped (between the open and the read)
            return
        time.sleep(0.001)


@pytest.mark.anyio
async def test_sigkill_under_load_loses_no_acknowledged_write_and_applies_none_twice(
        own_cluster: Cluster) -> None:
    """A node killed with SIGKILL under load is restarted by the supervisor; its actors answer
    unavailable meanwhile; afterwards every acknowledged write is there and none was applied
    twice, and its alarms are still pending (CL-2, REL-1)."""
    cluster = own_cluster  # it kills a node
    tenants = [f"t{i}" for i in range(24)]
    async with Client.from_data_dir(cluster.data, max_attempts=3) as client:
        ids = {t: await client.id_from_name("tenant_quota", t) for t in tenants}
        for t in tenants:
            await client.call("tenant_quota", ids[t], QuotaInit(per_minute=10**6, per_day=10**7),
                              tenant_id=t)
        owners = {t: client.owner_url("tenant_quota", ids[t]) for t in tenants}
        victim = cluster.nodes()[1]
        assert victim["url"] in owners.values(), "the test needs actors on the killed node"

        acked: dict[str, dict[str, str]] = {t: {} for t in tenants}
        attempted: dict[str, set[str]] = {t: set() for t in tenants}
        killed = anyio.Event()
        back = anyio.Event()

        async def writer(w: int) -> None:
            n = 0
            while not back.is_set() or n < 40:
                t = tenants[(w * 7 + n) % len(tenants)]
                key = f"w{w}-{n}"
                n += 1
                attempted[t].add(key)
                try:
                    r = await client.call("tenant_quota", ids[t], QuotaReserve(key=key),
                                          tenant_id=t)
                    acked[t][key] = r["reservation_id"]
                except RpcError as e:
                    assert e.code.value in ("unavailable", "timeout"), e
                    await anyio.sleep(0.01)  # pace retries against a dead node; not a wait
                if n == 30 and w == 0:
                    # The supervisor is held (SIGSTOP) until the probe below has seen the outage:
                    # it restarts a dead node at once, within a new interpreter's start.
                    os.kill(cluster.proc.pid, signal.SIGSTOP)
                    held.set()
                    os.kill(victim["pid"], signal.SIGKILL)
                    killed.set()

        probed: list[str] = []

        async def watcher() -> None:
            await killed.wait()
            # While the victim is down its actors answer unavailable. The writers' retries may
            # outlast a restart that is quick (a quarter of a second), so one call without
            # retries is made once the process is gone, the supervisor held meanwhile.
            try:
                await anyio.to_thread.run_sync(_wait_dead, victim["pid"])
                t = next(t for t in tenants if owners[t] == victim["url"])
                async with Client.from_data_dir(cluster.data, max_attempts=1) as once:
                    try:
                        await once.call("tenant_quota", ids[t], QuotaUsage(), tenant_id=t)
                        probed.append("answered")
                    except RpcError as e:
                        probed.append(e.code.value)
            finally:
                os.kill(cluster.proc.pid, signal.SIGCONT)
            await anyio.to_thread.run_sync(cluster.wait_for, f"{victim['name']} back")
            back.set()

        held = anyio.Event()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(watcher)
                for w in range(8):
                    tg.start_soon(writer, w)
        finally:
            if held.is_set():  # whatever failed, the supervisor runs again
                os.kill(cluster.proc.pid, signal.SIGCONT)

        assert probed == ["unavailable"], "the killed node's actors should answer unavailable"
        new_pid = next(n for n in cluster.nodes() if n["name"] == victim["name"])["pid"]
        assert new_pid != victim["pid"]
        for t in tenants:
            usage = await client.call("tenant_quota", ids[t], QuotaUsage(), tenant_id=t)
            assert len(acked[t]) <= usage["day_used"] <= len(attempted[t]), t
            for key, rid in acked[t].items():  # replaying an acknowledged key finds its write
                again = await client.call("tenant_quota", ids[t], QuotaReserve(key=key),
                                          tenant_id=t)
                assert again["reservation_id"] == rid

    async with HttpPool() as pool:
        operator = (cluster.data / "operator.token").read_text().strip()
        _, body = await pool.request(victim["url"], "GET", "/admin/status",
                                     {"authorization": f"Bearer {operator}"}, b"", timeout_s=5)
        on_victim = sum(1 for t in tenants if owners[t] == victim["url"])
        assert json.loads(body)["alarms_pending"] == on_victim  # maintenance alarms survived


@pytest.mark.anyio
async def test_any_node_forwards_to_the_owner_and_owner_checks_hold(cluster: Cluster) -> None:
    """A request sent to a node that does not own the id is forwarded in one hop; an owner
    mismatch shows in the owner's /metrics (CL-2, RPC-3, RPC-7)."""
    token = (cluster.data / "cluster.token").read_text().strip()
    nodes = cluster.nodes()
    async with Client.from_data_dir(cluster.data) as client, HttpPool() as pool:
        qid = await client.id_from_name("tenant_quota", "acme")
        owner = client.owner_url("tenant_quota", qid)
        other = next(n["url"] for n in nodes if n["url"] != owner)
        before = await _metric(pool, other, "mailbox_actors_rpc_forwarded_total")
        mismatches = await _metric(pool, owner, "mailbox_actors_rpc_owner_mismatch_total")
        env = {"v": 1, "tenant_id": "acme", "request_id": "req_01FWD", "deadline_ms": 2**52,
               "req": {"op": "init", "per_minute": 5, "per_day": 50}}
        status, body = await pool.request(
            other, "POST", f"/rpc/tenant_quota/{qid}", {"authorization": f"Bearer {token}"},
            json.dumps(env).encode(), timeout_s=10)
        assert status == 200 and json.loads(body) == {"ok": {"created": True}}
        assert await _metric(pool, other, "mailbox_actors_rpc_forwarded_total") == before + 1
        env |= {"tenant_id": "mallory", "req": {"op": "usage"}}
        status, body = await pool.request(
            other, "POST", f"/rpc/tenant_quota/{qid}", {"authorization": f"Bearer {token}"},
            json.dumps(env).encode(), timeout_s=10)
        assert json.loads(body)["err"]["code"] == "internal_error"
        assert await _metric(pool, owner, "mailbox_actors_rpc_owner_mismatch_total") == (
            mismatches + 1)


@pytest.mark.anyio
async def test_settings_from_a_config_file_reach_every_node(tmp_path: Path) -> None:
    """CL-4: what the supervisor was configured with (a TOML file here) is every node's setting:
    ids are minted with the configured secret, and the configured body limit holds on each node."""
    config = tmp_path / "cluster.toml"
    config.write_text('id_secret = "a-custom-id-secret"\nmax_body_bytes = 2048\n')
    c = Cluster(tmp_path / "cluster", 2, extra=("--config", str(config)))
    try:
        c.wait_running()
        token = (c.data / "cluster.token").read_text().strip()
        async with Client.from_data_dir(c.data) as client, HttpPool() as pool:
            qid = await client.id_from_name("tenant_quota", "acme")
            assert qid == id_from_name(namespace_key("tenant_quota", b"a-custom-id-secret"), "acme")
            for node in c.nodes():
                status, _ = await pool.request(
                    node["url"], "POST", f"/rpc/tenant_quota/{qid}",
                    {"authorization": f"Bearer {token}"}, b"x" * 4096, timeout_s=10)
                assert status == 413
    finally:
        c.stop()


@pytest.mark.parametrize("toml", ['id_secret = "s3cr3t"\n', "idle_ms = 0\n",
                                  'durability = "fsync"\n', 'id_secret = "abcdefgh\\u0000ijk"\n'],
                         ids=["short-id-secret", "idle-ms-0", "bad-durability", "nul"])
def test_a_setting_the_nodes_would_refuse_stops_the_cluster_at_start(tmp_path: Path,
                                                                     toml: str) -> None:
    """CL-4: a bad setting is refused by `cluster` itself, exit status 2, before any node starts
    (not a node restarted forever), and the message never quotes the id secret."""
    config = tmp_path / "cluster.toml"
    config.write_text(toml)
    c = Cluster(tmp_path / "cluster", 1, extra=("--config", str(config)))
    try:
        status, text = c.exit_output()
        assert status == 2
        assert "mailbox-actors cluster: setting" in text and "Traceback" not in text
        assert "s3cr3t" not in text and "starting" not in text
    finally:
        c.stop()


def test_a_port_another_process_holds_is_never_taken_for_a_ready_node(tmp_path: Path) -> None:
    """CL-2, CL-3: when a node's port is taken by another listener, the node refuses it, the
    supervisor never reports it ready (it checks that /healthz answers with its child's pid),
    and the cluster stops (exit 2)."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    c = Cluster(tmp_path / "cluster", 1, port=holder.getsockname()[1])
    try:
        status, text = c.exit_output()
        assert status == 2
        assert "cannot listen on" in text and "not restarting it" in text
        assert "node-0 ready" not in text
    finally:
        holder.close()
        c.stop()


def test_a_node_that_refuses_its_settings_is_not_restarted(tmp_path: Path) -> None:
    """CL-2, CL-4: a node that exits with status 2 (it refused its settings) is not restarted
    forever: the supervisor stops the cluster and exits 2."""
    cfg = load_config({"data": str(tmp_path / "cluster"), "nodes": 1}, env={})
    out = io.StringIO()
    sup = ClusterSupervisor(cfg, out=out)
    refused = subprocess.Popen([sys.executable, "-c", "raise SystemExit(2)"])
    refused.wait(timeout=60)
    sup.procs[0] = refused
    sup.supervise_once()
    assert sup.failed and sup.restarts == [0] and sup.procs[0] is refused
    assert "not restarting it" in out.getvalue()


def test_the_users_own_per_node_variables_do_not_reach_the_nodes(tmp_path: Path) -> None:
    """CL-4: MAILBOX_ACTORS_NODES (or _PORT, _DATA...) in the user's environment does not override
    what the supervisor gives each node: `cluster --nodes 1` still starts its node."""
    c = Cluster(tmp_path / "cluster", 1, env={"MAILBOX_ACTORS_NODES": "100"})
    try:
        c.wait_running()
        assert any("node-0 ready" in line for line in c.log)
    finally:
        c.stop()


def test_status_command_lists_every_node(cluster: Cluster) -> None:
    """``mailbox-actors status --json`` shows each node with its pid and counts (CL-3)."""
    out = subprocess.run([sys.executable, "-m", "mailbox_actors", "status", "--data",
                          str(cluster.data), "--json"], capture_output=True, text=True,
                         timeout=60, check=True)
    doc = json.loads(out.stdout)
    assert [n["name"] for n in doc["nodes"]] == ["node-0", "node-1", "node-2"]
    assert all(n["status"] == "ok" and n["pid"] > 0 for n in doc["nodes"])
    assert all("actors_active" in n and "alarms_pending" in n for n in doc["nodes"])


def _cli(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "mailbox_actors", *args], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


@pytest.mark.anyio
async def test_identity_created_from_the_command_line_reaches_the_tenant_webhook(
        cluster: Cluster) -> None:
    """``tenant create`` and ``identity create`` on a running cluster: the identity's mailbox is
    minted, stored and initialised, and identity.created reaches the tenant's webhook signed
    (Q-3, Q-4, EV-2)."""
    from mailbox_actors.http.server import RpcHttpServer
    from mailbox_actors.webhooks.delivery import SIGNATURE_HEADER, verify

    secret = "whsec-" + "x" * 26
    got: list[dict[str, Any]] = []
    arrived = anyio.Event()

    async def receiver(method: str, path: str, headers: Any, body: bytes
                       ) -> tuple[int, bytes, str]:
        now_s = int(__import__("time").time())
        if not verify(secret, headers.get(SIGNATURE_HEADER, ""), body, now_s=now_s):
            return 401, b"{}", "application/json"
        got.append(json.loads(body))
        if got[-1]["type"] == "identity.created":  # the tenant's quota.created may come first
            arrived.set()
        return 200, b"{}", "application/json"

    server = RpcHttpServer(receiver)
    port = await server.start("127.0.0.1", 0)
    try:
        tenant = await anyio.to_thread.run_sync(lambda: _cli(
            "tenant", "create", "acme", "--webhook-url", f"http://127.0.0.1:{port}/hooks",
            "--webhook-secret", secret, "--data", str(cluster.data)))
        assert tenant["id"].startswith("ten_") and tenant["webhook_secret"] is None
        ident = await anyio.to_thread.run_sync(lambda: _cli(
            "identity", "create", "--tenant", tenant["id"], "--name", "support", "--data",
            str(cluster.data)))
        assert ident["status"] == "active" and len(ident["mailbox_id"]) == 64
        with anyio.fail_after(30):  # bounded wait for the real webhook delivery
            await arrived.wait()
    finally:
        await server.stop()
    [event] = [e for e in got if e["type"] == "identity.created"]
    assert (event["tenant_id"], event["identity_id"], event["sequence"]) == (
        tenant["id"], ident["id"], 1)
    async with Client.from_data_dir(cluster.data) as client:
        page = await client.call("identity_mailbox", ident["mailbox_id"], {"op": "get_events"},
                                 tenant_id=tenant["id"], identity_id=ident["id"])
    assert [e["id"] for e in page["events"]] == [event["id"]]
    status = await anyio.run_process([sys.executable, "-m", "mailbox_actors", "status", "--data",
                                      str(cluster.data)])
    assert b"webhooks" in status.stdout  # queue depths are shown


@pytest.mark.anyio
async def test_a_non_owner_never_opens_its_own_copy_of_an_actor(cluster: Cluster) -> None:
    """A request marked as already forwarded that reaches a node not owning the id is refused
    (unavailable), never served from a second copy of the actor (RT-3, CL-2)."""
    from mailbox_actors.node.app import FORWARDED_HEADER

    token = (cluster.data / "cluster.token").read_text().strip()
    async with Client.from_data_dir(cluster.data) as client, HttpPool() as pool:
        qid = await client.id_from_name("tenant_quota", "solo")
        owner = client.owner_url("tenant_quota", qid)
        other = next(n for n in cluster.nodes() if n["url"] != owner)
        env = {"v": 1, "tenant_id": "solo", "request_id": "req_01FWD", "deadline_ms": 2**52,
               "req": {"op": "init", "per_minute": 5, "per_day": 50}}
        status, body = await pool.request(
            other["url"], "POST", f"/rpc/tenant_quota/{qid}",
            {"authorization": f"Bearer {token}", FORWARDED_HEADER: "1"},
            json.dumps(env).encode(), timeout_s=10)
    assert status == 200 and json.loads(body)["err"]["code"] == "unavailable"
    assert not list(Path(other["data"]).rglob(f"{qid}.sqlite"))  # noqa: ASYNC240


@pytest.mark.anyio
async def test_call_and_id_commands_exit_with_0_1_2(cluster: Cluster) -> None:
    """``mailbox-actors call`` prints the result and exits 0 for ok, 1 for an err, 2 for a usage
    error; ``id`` prints the id for a name (CL-3)."""
    base = [sys.executable, "-m", "mailbox_actors"]
    data = ["--data", str(cluster.data)]
    ident = await anyio.run_process([*base, "id", "tenant_quota", "--name", "acme-cli", *data])
    qid = ident.stdout.decode().strip()
    assert len(qid) == 64
    ok = await anyio.run_process([*base, "call", "tenant_quota", "acme-cli",
                                  '{"op":"init","per_minute":1,"per_day":5}', "--tenant", "acme",
                                  *data])
    assert json.loads(ok.stdout) == {"ok": {"created": True}}
    by_id = await anyio.run_process([*base, "call", "tenant_quota", qid, '{"op":"usage"}',
                                     "--tenant", "acme", *data])
    assert json.loads(by_id.stdout)["ok"]["day_limit"] == 5
    err = await anyio.run_process([*base, "call", "tenant_quota", qid, '{"op":"usage"}',
                                   "--tenant", "mallory", *data], check=False)
    assert err.returncode == 1 and json.loads(err.stdout)["err"]["code"] == "internal_error"
    usage = await anyio.run_process([*base, "call", "tenant_quota", qid, "{not json", *data],
                                    check=False)
    assert usage.returncode == 2 and b"not valid JSON" in usage.stderr
