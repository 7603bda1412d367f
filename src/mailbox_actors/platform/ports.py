"""Free loopback ports for servers started in another process (or later): ``TestCluster``'s
nodes, the benchmark's clusters and servers.

Picked below the kernel's ephemeral range: a port in that range can be taken by any process's
outgoing connection or bind(0) in the seconds between the check and the server's bind (about one
3-port block in 100 was, within 10 s, on a loaded shared machine). Below it, only another test
picking the same way can take it, and the check binds every port of the block first.
"""

from __future__ import annotations

import random
import socket

__all__ = ["free_port", "free_port_block"]


def _ephemeral_low() -> int:
    """The first port the kernel hands out for bind(0) and outgoing connections."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port_block(n: int) -> int:
    """A base port with ``n`` consecutive free ports after it, below the ephemeral range."""
    high = _ephemeral_low() - n
    for _ in range(200):
        base = random.randrange(20000, high)
        socks: list[socket.socket] = []
        try:
            for i in range(n):
                t = socket.socket()
                socks.append(t)
                t.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for t in socks:
                t.close()
    raise RuntimeError("no free port block")


def free_port() -> int:
    """One free port (see the module docstring for why not bind(0))."""
    return free_port_block(1)
