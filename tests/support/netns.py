"""Machines as network namespaces for the multi-machine fault test (CL-16), made by the test itself.

``Network`` puts a bridge in the root namespace (the test process and the webhook receiver
listen on its first address, PostgreSQL on its second) and gives each machine a namespace joined
to it by a veth pair, with its own address. Faults are network changes made with ``ip``: a machine
cut off (its cable pulled: the bridge side of its veth down), two machines partitioned from each
other with everything else reachable (blackhole routes in both), and a machine cut off from
PostgreSQL alone (a blackhole route to the server's address). Processes started in a namespace are the
test's children, killed by pid on ``remove``; nothing here kills by name. ``remove`` undoes every
step it can even after a failure, and a new ``Network`` first removes what a test process that died
(its pid in the names) left behind.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from mailbox_actors.platform.processes import pid_alive

__all__ = ["Network", "refused"]

PREFIX = "maf"
_OURS = re.compile(rf"^{PREFIX}(\d+)(?:br|h\d+|p\d+|-m\w+)$")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True, timeout=30)


def refused() -> str | None:
    """Why this machine cannot make network namespaces, or None when it can (the only reason the
    fault test may skip)."""
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (the fault test makes them with `ip netns`)"
    name = f"{PREFIX}{os.getpid()}-mprobe"
    made = _ip("netns", "add", name, check=False)
    if made.returncode != 0:
        return f"`ip netns add` was refused: {made.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


def sweep_leftovers() -> None:
    """Remove namespaces and links of fault-test processes that are gone (a SIGKILLed pytest),
    killing by pid what still runs inside such a namespace (a machine the dead test started)."""
    names = _ip("netns", "list", check=False).stdout.split()
    links = re.findall(r"^\d+: ([^:@]+)", _ip("-o", "link", "show", check=False).stdout, re.M)
    for name in [*names, *links]:
        m = _OURS.match(name)
        if m and not pid_alive(int(m.group(1))):
            if name in names:
                for pid in _ip("netns", "pids", name, check=False).stdout.split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                _ip("netns", "del", name, check=False)
            else:
                _ip("link", "del", name, check=False)


class Network:
    """A bridge and one namespace per machine; ``address(m)`` is where machine ``m`` is reached."""

    def __init__(self, machines: Sequence[str]) -> None:
        self.machines = list(machines)
        self.tag = f"{PREFIX}{os.getpid()}"
        self.bridge = f"{self.tag}br"
        self.subnet = self._free_subnet()
        self.host = f"{self.subnet}.1"  # the bridge's address: clients, webhook receiver
        self.pg_host = f"{self.subnet}.2"  # the bridge's second address: PostgreSQL alone
        self._procs: list[subprocess.Popen[Any]] = []
        self._made: list[str] = []
        self._cut: set[str] = set()
        self._parted: set[tuple[str, str]] = set()
        self._pg_cut: set[str] = set()

    @staticmethod
    def _free_subnet() -> str:
        routes = _ip("route", "show", check=False).stdout
        for n in range(256):
            third = (zlib.crc32(f"{os.getpid()}:{n}".encode()) % 200) + 20
            if f"10.213.{third}." not in routes:
                return f"10.213.{third}"
        raise RuntimeError("no free 10.213.x.0/24 subnet for the fault test's bridge")

    def namespace(self, machine: str) -> str:
        return f"{self.tag}-{machine}"

    def address(self, machine: str) -> str:
        return f"{self.subnet}.{10 + self.machines.index(machine)}"

    def _veth(self, machine: str) -> str:
        return f"{self.tag}h{self.machines.index(machine)}"

    def create(self) -> None:
        sweep_leftovers()
        _ip("link", "add", self.bridge, "type", "bridge")
        self._made.append(self.bridge)
        _ip("addr", "add", f"{self.host}/24", "dev", self.bridge)
        _ip("addr", "add", f"{self.pg_host}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, m in enumerate(self.machines):
            ns, host_end, ns_end = self.namespace(m), self._veth(m), f"{self.tag}p{i}"
            _ip("netns", "add", ns)
            self._made.append(ns)
            _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            self._made.append(host_end)
            _ip("link", "set", ns_end, "netns", ns)
            _ip("link", "set", host_end, "master", self.bridge)
            _ip("link", "set", host_end, "up")
            _ip("-n", ns, "link", "set", ns_end, "name", "eth0")
            _ip("-n", ns, "addr", "add", f"{self.address(m)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def popen(self, machine: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              stdin: IO[Any] | int | None = None, stdout: IO[Any] | int | None = None,
              stderr: IO[Any] | int | None = None, cwd: Path | None = None
              ) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside the machine's namespace. ``ip netns exec`` execs it in place,
        so the child's pid is the program's own (what SIGKILL and SIGSTOP are sent to)."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.namespace(machine), *argv],
                                env=None if env is None else dict(env), stdin=stdin, stdout=stdout,
                                stderr=stderr, cwd=cwd)
        self._procs.append(proc)
        return proc

    def run(self, machine: str, argv: Sequence[str], timeout_s: float = 60
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", self.namespace(machine), *argv],
                              capture_output=True, text=True, timeout=timeout_s)

    # ---- faults --------------------------------------------------------------------------------

    def cut(self, machine: str) -> None:
        """Pull the machine's cable: nothing reaches it or leaves it (PostgreSQL included)."""
        _ip("link", "set", self._veth(machine), "down")
        self._cut.add(machine)

    def mend(self, machine: str) -> None:
        """Plug the cable back. The neighbour entries that failed while it was out are flushed on
        both sides, so the first connection finds the peer rather than a cached "no route"."""
        _ip("link", "set", self._veth(machine), "up")
        _ip("-n", self.namespace(machine), "neigh", "flush", "all", check=False)
        _ip("neigh", "flush", "dev", self.bridge, check=False)
        for other in self.machines:
            _ip("-n", self.namespace(other), "neigh", "flush", "to", self.address(machine),
                check=False)
        self._cut.discard(machine)

    def partition(self, a: str, b: str) -> None:
        """``a`` and ``b`` no longer reach each other; both still reach PostgreSQL and clients."""
        _ip("-n", self.namespace(a), "route", "add", "blackhole", f"{self.address(b)}/32")
        _ip("-n", self.namespace(b), "route", "add", "blackhole", f"{self.address(a)}/32")
        self._parted.add((a, b))

    def join(self, a: str, b: str) -> None:
        _ip("-n", self.namespace(a), "route", "del", "blackhole", f"{self.address(b)}/32")
        _ip("-n", self.namespace(b), "route", "del", "blackhole", f"{self.address(a)}/32")
        self._parted.discard((a, b))

    def cut_from_pg(self, machine: str) -> None:
        """The machine no longer reaches PostgreSQL (a blackhole route to its address); clients
        and the other machines still reach it, and it them."""
        _ip("-n", self.namespace(machine), "route", "add", "blackhole", f"{self.pg_host}/32")
        self._pg_cut.add(machine)

    def mend_pg(self, machine: str) -> None:
        _ip("-n", self.namespace(machine), "route", "del", "blackhole", f"{self.pg_host}/32")
        self._pg_cut.discard(machine)

    def heal(self) -> None:
        for m in list(self._cut):
            self.mend(m)
        for a, b in list(self._parted):
            self.join(a, b)
        for m in list(self._pg_cut):
            self.mend_pg(m)

    # ---- clean-up ------------------------------------------------------------------------------

    def kill_all(self) -> None:
        """SIGKILL every process this network started (a stopped one too), by pid."""
        for proc in self._procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()

    def remove(self) -> None:
        """Undo everything, each step on its own so one failure leaves no other debris."""
        self.kill_all()
        for name in reversed(self._made):  # links by hand: a namespace's own go only later
            if name.startswith(f"{self.tag}-"):
                _ip("netns", "del", name, check=False)
            else:
                _ip("link", "del", name, check=False)
        self._made.clear()

    def leftovers(self) -> list[str]:
        """Namespaces and links of this network still present (empty after ``remove``)."""
        names = _ip("netns", "list", check=False).stdout.split()
        links = re.findall(r"^\d+: ([^:@]+)", _ip("-o", "link", "show", check=False).stdout, re.M)
        return [n for n in [*names, *links] if n.startswith(self.tag)]
