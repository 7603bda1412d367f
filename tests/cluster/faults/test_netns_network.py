"""The fault test's network (CL-16) on its own: machines as namespaces on a bridge reach PostgreSQL
and each other; a cut machine reaches nothing, a partition parts only its two machines, a
PostgreSQL restart is seen from every machine, and nothing is left behind."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

import netns
from _pg import PgServer

PROBE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
    print("ok")
except OSError as e:
    print(type(e).__name__, e)
"""

LISTEN = """
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(64)
print("listening", flush=True)
while True:
    s.accept()[0].close()
"""

PG_QUERY = """
import sys, psycopg
with psycopg.connect(sys.argv[1], connect_timeout=5) as c:
    print(c.execute("SELECT inet_client_addr()").fetchone()[0])
"""

PORT = 47_001


def reach(net: netns.Network, machine: str, host: str, port: int, timeout_s: float = 1.0) -> str:
    out = net.run(machine, [sys.executable, "-c", PROBE, host, str(port), str(timeout_s)])
    return out.stdout.strip() or out.stderr.strip()


@pytest.mark.slow
def test_machines_reach_postgresql_and_each_other_until_a_fault(network: netns.Network,
                                                                bridge_pg: PgServer) -> None:
    """CL-16: each machine reaches PostgreSQL on the bridge from its own address; a cut machine
    (CL-17's outage as it sees it) reaches nothing until mended; a partition (blackhole routes)
    parts two machines while both still reach PostgreSQL and the third machine; a machine cut off
    from PostgreSQL alone still reaches the other machines."""
    net = network
    listeners = {}
    for m in net.machines:
        p = net.popen(m, [sys.executable, "-c", LISTEN, net.address(m), str(PORT)],
                      stdout=subprocess.PIPE)
        assert p.stdout is not None and p.stdout.readline() == b"listening\n"
        listeners[m] = p
        got = net.run(m, [sys.executable, "-c", PG_QUERY, bridge_pg.dsn_at(net.pg_host, "postgres")])
        assert got.stdout.strip() == net.address(m), got.stderr
    assert reach(net, "m1", net.address("m2"), PORT) == "ok"

    net.cut("m1")
    assert reach(net, "m1", net.pg_host, bridge_pg.port) != "ok"
    assert reach(net, "m2", net.address("m1"), PORT) != "ok"
    assert reach(net, "m2", net.address("m3"), PORT) == "ok"
    net.mend("m1")
    assert reach(net, "m1", net.pg_host, bridge_pg.port, timeout_s=10) == "ok"

    net.partition("m1", "m2")
    assert reach(net, "m1", net.address("m2"), PORT) != "ok"
    assert reach(net, "m2", net.address("m1"), PORT) != "ok"
    assert reach(net, "m1", net.address("m3"), PORT) == "ok"
    for m in ("m1", "m2"):
        assert reach(net, m, net.pg_host, bridge_pg.port) == "ok"
    net.heal()
    assert reach(net, "m1", net.address("m2"), PORT, timeout_s=10) == "ok"

    net.cut_from_pg("m2")  # PostgreSQL alone: the machines and the clients' address still reached
    assert reach(net, "m2", net.pg_host, bridge_pg.port) != "ok"
    assert reach(net, "m2", net.address("m3"), PORT) == "ok"
    with socket.create_server((net.host, 0)) as clients:  # where the test's clients are
        assert reach(net, "m2", net.host, clients.getsockname()[1]) == "ok"
    assert reach(net, "m3", net.pg_host, bridge_pg.port) == "ok"
    net.heal()
    assert reach(net, "m2", net.pg_host, bridge_pg.port, timeout_s=10) == "ok"

    bridge_pg.restart()  # by pid: the same data, the same port, the bridge address again
    got = net.run("m3", [sys.executable, "-c", PG_QUERY, bridge_pg.dsn_at(net.pg_host, "postgres")])
    assert got.stdout.strip() == net.address("m3"), got.stderr


@pytest.mark.slow
def test_a_process_in_a_namespace_is_stopped_and_killed_by_its_own_pid(
        network: netns.Network) -> None:
    """CL-16: ``ip netns exec`` runs the program in place, so SIGSTOP, SIGCONT and SIGKILL reach
    the machine's own process; ``remove`` kills what is left (a stopped one too) and deletes every
    namespace and link."""
    net = network
    p = net.popen("m2", [sys.executable, "-c", "import os; print(os.getpid(), flush=True); "
                         "import time; time.sleep(600)"], stdout=subprocess.PIPE)
    assert p.stdout is not None and int(p.stdout.readline()) == p.pid
    q = net.popen("m3", [sys.executable, "-c", "import time; time.sleep(600)"])
    q.send_signal(19)  # SIGSTOP: remove must still end it
    net.remove()
    assert p.poll() is not None and q.poll() is not None
    assert net.leftovers() == []


def test_a_network_left_by_a_dead_test_process_is_swept() -> None:
    """CL-16: namespaces and links named for a test process that is gone are removed by the next
    one, and what still ran inside them is killed, so a test killed mid-run leaves nothing for
    long."""
    if (reason := netns.refused()) is not None:
        pytest.skip(reason)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    pid = int(dead.stdout)
    ns, link = f"{netns.PREFIX}{pid}-m1", f"{netns.PREFIX}{pid}br"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    subprocess.run(["ip", "link", "add", link, "type", "bridge"], check=True)
    orphan = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c",
                               "import time; print('in', flush=True); time.sleep(600)"],
                              stdout=subprocess.PIPE)
    assert orphan.stdout is not None and orphan.stdout.readline() == b"in\n"
    netns.sweep_leftovers()
    assert orphan.wait(timeout=30) == -9  # what ran inside was killed by its pid
    orphan.stdout.close()
    assert ns not in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                    text=True).stdout
    assert subprocess.run(["ip", "link", "show", link], capture_output=True).returncode != 0
