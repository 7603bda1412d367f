"""Fixtures of the multi-machine fault test (CL-16): the namespaced network and PostgreSQL on its
bridge, both made and removed by the test (namespaces deleted, processes killed by pid)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import netns
from _pg import PgServer, find_binaries


@pytest.fixture
def network() -> Iterator[netns.Network]:
    """Three machines m1..m3 in their own namespaces on one bridge; skipped only where the kernel
    or the user refuses namespaces, with that reason."""
    reason = netns.refused()
    if reason is not None:
        pytest.skip(reason)
    net = netns.Network(["m1", "m2", "m3"])
    try:
        net.create()
        yield net
    finally:
        net.remove()


@pytest.fixture
def bridge_pg(network: netns.Network) -> Iterator[PgServer]:
    """A real PostgreSQL server listening on loopback and on the bridge's second address (its own,
    so a machine can be cut off from it alone), trusted from the subnet."""
    bindir, why = find_binaries()
    if bindir is None:
        pytest.fail(why)  # the fault test needs the server; a machine without it is not set up
    server = PgServer(bindir, listen=("127.0.0.1", network.pg_host),
                      trust_nets=(f"{network.subnet}.0/24",))
    try:
        server.start()
        yield server
    finally:
        server.remove()
