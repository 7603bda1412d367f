"""The fault harness on today's static cluster (CL-2 nodes with a fixed peer list) across namespaced
machines (CL-16's harness, before machine mode): every fault of a seeded schedule, and the checker
holds, since an id's owner never changes and a down owner answers ``unavailable``."""

from __future__ import annotations

from pathlib import Path

import pytest

import netns
from fault_run import fault_run, keep_artifacts
from list_workload import AnyMachine
from live_node import OPERATOR, TOKEN
from machine_cluster import MachineCluster, static_peers
from mailbox_actors.cli.data_dir import open_control_db
from nemesis import schedule

ID_SECRET = "faults-id-secret-0123456789"


@pytest.mark.slow
@pytest.mark.anyio
async def test_static_nodes_keep_every_acknowledged_append_under_faults(
        network: netns.Network, tmp_path: Path) -> None:
    """CL-16 harness: SIGKILL, SIGSTOP, a cut machine and a partition (no PostgreSQL here: its
    restart is a no-op) on three static nodes; every acknowledged append is present once, reads
    are prefixes, real-time order holds, every acknowledged write's event reaches the receiver."""
    cluster = MachineCluster(network, tmp_path, static_peers, token=TOKEN,
                             operator_token=OPERATOR, id_secret=ID_SECRET)

    async def make_tenant(url: str) -> str:
        async with open_control_db(tmp_path) as db:
            return (await db.create_tenant("faults", webhook_url=url,
                                           webhook_secret="whsec-faults-0123456789")).id

    try:
        run = await fault_run(cluster, schedule(11, network.machines, ttl_s=1.5),
                              make_tenant=make_tenant,
                              routes=lambda c, _pool: AnyMachine(c.urls()), seed=11, rate=100)
    finally:
        cluster.stop_all()
        keep_artifacts(tmp_path, "static-11")
    assert run.counts["ok"] > 200, run.summary()
    assert run.violations == [], run.summary()
    assert run.definite_errors() == {}, run.summary()
