"""Node processes on the fault test's namespaced machines (CL-16), and what the nemesis does to them.

Each machine runs one ``mailbox-actors machine`` process in its namespace (``machine_mode``: its
flags are a ``Launch``), listening on its bridge address, serving the fault test's actor beside
the platform's (``objects``, UI-7), with the cluster-wide settings (tokens, id secret, objects) in
its environment, never in argv. The processes are the test's children, killed by pid (a sweep of
a dead run's namespaces kills what it left); each machine's output goes to
``logs/<machine>.log`` beside the history, for a reader of a failed run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import anyio

from _pg import PgServer
from mailbox_actors.cluster.slots import slot_dir
from mailbox_actors.http.client import HttpPool, HttpTransportError
from netns import Network

__all__ = ["OBJECTS", "Launch", "MachineCluster", "machine_mode"]

SUPPORT = Path(__file__).resolve().parent
OBJECTS = "faults_actor:FaultList"  # importable: tests/support is on the machines' PYTHONPATH
# (cluster, machine) -> the command (``machine``; ``serve`` would do for static nodes) and its flags
Launch = Callable[["MachineCluster", str], tuple[str, list[str]]]


def machine_mode(dsn: str, policy: str, *, slots: int, ttl_s: float, renew_s: float) -> Launch:
    """``mailbox-actors machine`` on PostgreSQL (``dsn`` as the machines reach it), which holds
    the leases, the control data and every queue (CL-7). Under ``local`` each machine has its
    own volume directory; under ``shared`` one directory stands for the storage every machine
    attaches. Each slot's directory exists before any machine starts, as a mounted volume does."""

    def launch(cluster: MachineCluster, machine: str) -> tuple[str, list[str]]:
        volumes = cluster.work / ("volumes" if policy == "shared" else f"volumes-{machine}")
        for k in range(slots):
            slot_dir(volumes, k).mkdir(mode=0o700, parents=True, exist_ok=True)
        return "machine", ["--postgres", dsn, "--machine", machine, "--volumes", str(volumes),
                           "--lease-ttl-s", str(ttl_s), "--lease-renew-s", str(renew_s)]

    return launch


class MachineCluster:
    """``nemesis.Machines`` over a ``Network``: signals, start, cut, partition, PostgreSQL."""

    def __init__(self, net: Network, work: Path, launch: Launch, *, token: str,
                 operator_token: str, id_secret: str, pg: PgServer | None = None,
                 port: int = 8787, env: Mapping[str, str] | None = None,
                 one_by_one: bool = False) -> None:
        self.net, self.work, self.launch, self.pg, self.port = net, work, launch, pg, port
        self.token, self.operator_token = token, operator_token
        self.extra_env = dict(env or {})
        self.one_by_one = one_by_one
        self.id_secret = id_secret
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: dict[str, IO[bytes]] = {}
        (work / "logs").mkdir(parents=True, exist_ok=True)

    def url(self, machine: str) -> str:
        return f"http://{self.net.address(machine)}:{self.port}"

    def urls(self) -> list[str]:
        return [self.url(m) for m in self.net.machines]

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MAILBOX_ACTORS_")}
        env |= {"MAILBOX_ACTORS_TOKEN": self.token,
                "MAILBOX_ACTORS_OPERATOR_TOKEN": self.operator_token,
                "MAILBOX_ACTORS_ID_SECRET": self.id_secret,
                "MAILBOX_ACTORS_OBJECTS": OBJECTS,
                "MAILBOX_ACTORS_SUPERVISOR_PID": str(os.getpid()),  # dies with the test
                "PYTHONPATH": os.pathsep.join([str(SUPPORT), env.get("PYTHONPATH", "")])}
        return env | self.extra_env

    def spawn(self, machine: str) -> subprocess.Popen[bytes]:
        old = self._logs.pop(machine, None)
        if old is not None:
            old.close()
        log = self._logs[machine] = open(self.work / "logs" / f"{machine}.log", "ab")
        command, flags = self.launch(self, machine)
        argv = [sys.executable, "-m", "mailbox_actors", command, "--host", self.net.address(machine),
                "--port", str(self.port), "--log-format", "json", "--log-level", "warning",
                *flags]
        log.write(f"--- start: {json.dumps(argv)}\n".encode())
        log.flush()
        proc = self.net.popen(machine, argv, env=self._env(), stdin=subprocess.PIPE, stdout=log,
                              stderr=subprocess.STDOUT)
        self.procs[machine] = proc
        return proc

    async def wait_ready(self, machine: str, pool: HttpPool, within_s: float = 60) -> None:
        """Until the machine's own process is ready (``_ready``; bounded: it may take a while to
        load on a busy host)."""
        proc = self.procs[machine]
        with anyio.fail_after(within_s):
            while True:
                if proc.poll() is not None:
                    raise AssertionError(f"{machine} exited with {proc.returncode}; see "
                                         f"{self.work / 'logs' / (machine + '.log')}")
                try:
                    if await self._ready(machine, proc.pid, pool):
                        return
                except HttpTransportError:
                    pass
                await anyio.sleep(0.1)  # pacing the probe, bounded by fail_after

    async def _ready(self, machine: str, pid: int, pool: HttpPool) -> bool:
        """Its own process answers /healthz and, on many machines, knows the cluster's slots
        (``GET /cluster``: a machine listens before it has read them; a static node has no
        such endpoint)."""
        status, body = await pool.request(self.url(machine), "GET", "/healthz", {}, b"",
                                          timeout_s=2)
        if status != 200 or json.loads(body).get("pid") != pid:
            return False
        status, body = await pool.request(self.url(machine), "GET", "/cluster",
                                          {"authorization": f"Bearer {self.token}"}, b"",
                                          timeout_s=2)
        return status != 200 or int(json.loads(body).get("slots") or 0) > 0

    async def start_all(self, pool: HttpPool) -> None:
        """All machines at once (they race for their slots at start, which the volume locks
        decide), or one after another when ``one_by_one`` (with the test-only switch that turns
        the fence off, the volume locks are off too, and two machines would open one slot's
        volume at start: a rolling start keeps the run about what comes after)."""
        if self.one_by_one:
            for m in self.net.machines:
                self.spawn(m)
                await self.wait_ready(m, pool)
            return
        for m in self.net.machines:
            self.spawn(m)
        for m in self.net.machines:
            await self.wait_ready(m, pool)

    def stop_all(self) -> None:
        self.net.kill_all()
        for log in self._logs.values():
            log.close()
        self._logs.clear()

    # ---- nemesis.Machines ----------------------------------------------------------------------

    def signal(self, machine: str, signum: int) -> None:
        proc = self.procs[machine]
        if proc.poll() is None:
            os.kill(proc.pid, signum)
            if signum == 9:
                proc.wait(timeout=30)

    async def start(self, machine: str) -> None:
        self.spawn(machine)  # ready or not: the workload sees what clients would see

    def cut(self, machine: str) -> None:
        self.net.cut(machine)

    def mend(self, machine: str) -> None:
        self.net.mend(machine)

    def partition(self, a: str, b: str) -> None:
        self.net.partition(a, b)

    def join(self, a: str, b: str) -> None:
        self.net.join(a, b)

    def cut_from_pg(self, machine: str) -> None:
        self.net.cut_from_pg(machine)

    def mend_pg(self, machine: str) -> None:
        self.net.mend_pg(machine)

    def pg_stop(self) -> None:
        if self.pg is not None:
            self.pg.stop()

    def pg_start(self) -> None:
        if self.pg is not None:
            self.pg.start()

    def record_of(self) -> dict[str, Any]:
        return {m: {"pid": p.pid, "returncode": p.poll()} for m, p in self.procs.items()}
