"""Server processes the bench starts and stops: free ports, ``serve`` and ``cluster`` as children,
waiting until healthy, CPU seconds, and stopping by pid (a cluster's nodes too, as listed last).
Shared by the HTTP and event figures; the test fixtures (the loopback DNS server, the SMTP sink)
as children that print their port (``spawn_fixture``)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import anyio
import anyio.abc

from mailbox_actors.http.client import HttpPool, HttpTransportError
from mailbox_actors.node.cluster_file import read_cluster_file
from mailbox_actors.platform.ports import free_port_block
from mailbox_actors.platform.processes import pid_alive

__all__ = ["HOST", "Spawned", "cpu_seconds", "free_port_block", "pid_alive", "spawn_fixture",
           "start_cluster", "start_node", "stop_fixture", "stop_spawned"]

HOST = "127.0.0.1"


def cpu_seconds(pids: Sequence[int]) -> float | None:
    """User + system CPU seconds of ``pids`` so far, from /proc (None where there is no /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            return None
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return " | ".join(text.strip().splitlines()[-lines:]) or "(empty log)"


@dataclass
class Spawned:
    """A server process the bench started: a node (``serve``) or a supervisor (``cluster``)."""

    what: str
    proc: anyio.abc.Process
    data: Path
    urls: list[str]
    log: Path
    token: str = ""
    node_pids: list[int] = field(default_factory=list)  # a cluster's node processes

    @property
    def pid(self) -> int:
        return self.proc.pid

    def server_pids(self) -> list[int]:
        return self.node_pids or [self.proc.pid]


async def _open(cmd: list[str], log: Path, env: Mapping[str, str] | None = None
                ) -> tuple[anyio.abc.Process, IO[bytes]]:
    out = log.open("ab")  # the child's stdout must not mix with the bench's results
    try:
        proc = await anyio.open_process(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=subprocess.STDOUT,
                                        env=None if env is None else {**os.environ, **env})
    except BaseException:
        out.close()
        raise
    return proc, out


async def _wait_healthy(pool: HttpPool, sp: Spawned, timeout_s: float) -> None:
    with anyio.move_on_after(timeout_s):
        pending = list(sp.urls)
        while pending:
            if sp.proc.returncode is not None:
                raise RuntimeError(f"{sp.what} exited with status {sp.proc.returncode}: "
                                   f"{_tail(sp.log)}")
            try:
                status, _ = await pool.request(pending[0], "GET", "/healthz", None, b"",
                                               timeout_s=1.0)
                if status == 200:
                    pending.pop(0)
                    continue
            except (HttpTransportError, OSError):
                pass
            await anyio.sleep(0.05)
        return
    raise RuntimeError(f"{sp.what} did not answer /healthz within {timeout_s:g} s: {_tail(sp.log)}")


async def start_node(data: Path, *, timeout_s: float = 30.0) -> Spawned:
    """``python -m mailbox_actors serve --data DATA --port P --log-level warning``, healthy, with
    its cluster token (generated into DATA/cluster.token)."""
    data.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - once, before the process starts
    log = data.parent / f"{data.name}.log"
    for attempt in range(3):  # a free port can be taken between the probe and the bind
        port = free_port_block(1)
        cmd = [sys.executable, "-m", "mailbox_actors", "serve", "--data", str(data),
               "--port", str(port), "--log-level", "warning"]
        proc, out = await _open(cmd, log)
        out.close()
        sp = Spawned("node", proc, data, [f"http://{HOST}:{port}"], log)
        try:
            async with HttpPool() as pool:
                await _wait_healthy(pool, sp, timeout_s)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await stop_spawned(sp)
            if attempt == 2 or "in use" not in _tail(sp.log):
                raise
            continue
        sp.token = (data / "cluster.token").read_text().strip()
        return sp
    raise AssertionError("unreachable")


async def start_cluster(data: Path, nodes: int = 3, *, timeout_s: float = 60.0,
                        env: Mapping[str, str] | None = None) -> Spawned:
    """``python -m mailbox_actors cluster --nodes N --data DIR --port P``, every node healthy, with
    the nodes' pids from DIR/cluster.json; ``env`` added to its environment (such as
    ``MAILBOX_ACTORS_POSTGRES``, CL-7)."""
    data.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - once, before the process starts
    log = data.parent / f"{data.name}.log"
    port = free_port_block(nodes)
    cmd = [sys.executable, "-m", "mailbox_actors", "cluster", "--nodes", str(nodes),
           "--data", str(data), "--port", str(port), "--log-level", "warning"]
    proc, out = await _open(cmd, log, env)
    out.close()
    sp = Spawned("cluster", proc, data, [f"http://{HOST}:{port + i}" for i in range(nodes)], log)
    try:
        async with HttpPool() as pool:
            await _wait_healthy(pool, sp, timeout_s)
        with anyio.fail_after(10):
            while True:
                try:
                    doc = json.loads((data / "cluster.json").read_text())
                    pids = [n["pid"] for n in doc["nodes"]]
                    if all(isinstance(p, int) for p in pids):
                        break
                except (OSError, ValueError, KeyError):
                    pass
                await anyio.sleep(0.05)
        sp.node_pids = pids
        sp.token = (data / "cluster.token").read_text().strip()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await stop_spawned(sp)
        raise
    return sp


async def stop_spawned(sp: Spawned, *, grace_s: float = 20.0) -> list[str]:
    """SIGTERM by pid, SIGKILL after ``grace_s``; for a cluster, then check that its nodes are gone
    (killing any that are not). Returns what went wrong, for the run's errors."""
    problems: list[str] = []
    if sp.node_pids:
        # The supervisor may have restarted a node since the start (a new pid): take the pids it
        # wrote last, before it stops and removes the file.
        try:
            listed = [int(n["pid"]) for n in read_cluster_file(sp.data)["nodes"] if n.get("pid")]
        except (OSError, ValueError, KeyError, TypeError):
            listed = []
        sp.node_pids = sorted(set(sp.node_pids) | set(listed))
    if sp.proc.returncode is None:
        try:
            os.kill(sp.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        with anyio.move_on_after(grace_s):
            await sp.proc.wait()
        if sp.proc.returncode is None:
            problems.append(f"{sp.what} (pid {sp.pid}) did not stop within {grace_s:g} s of "
                            "SIGTERM; killed")
            try:
                os.kill(sp.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await sp.proc.wait()
    # The supervisor waits for its nodes before it exits, so any still here were left behind,
    # unless it died first (SIGKILL): then its nodes were told by their death signal (SIGTERM)
    # and are stopping as gracefully as it would have stopped them, which takes its grace too
    # (2 s was too short on a loaded machine: a node still stopping was reported as left).
    with anyio.move_on_after(grace_s):
        while any(pid_alive(p) for p in sp.node_pids):  # noqa: ASYNC110 - other processes' pids
            await anyio.sleep(0.05)
    left = [p for p in sp.node_pids if pid_alive(p)]
    for pid in left:
        problems.append(f"cluster node pid {pid} outlived its supervisor; killed")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    with anyio.move_on_after(5):
        while any(pid_alive(p) for p in left):  # noqa: ASYNC110 - other processes' pids
            await anyio.sleep(0.02)
    return problems


async def spawn_fixture(module: str, *args: str) -> tuple[asyncio.subprocess.Process, int]:
    """``python -m module args`` (a fixture's own entry point: bench and testing are sibling
    layers, neither imports the other), once it has printed ``port N`` (any case); it and N. Its
    standard input is a pipe it may watch for our end. Stop it with ``stop_fixture``."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, *args, stdout=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    words = line.split()
    if len(words) != 2 or words[0].lower() != b"port" or not words[1].isdigit():
        await stop_fixture(proc)
        raise RuntimeError(f"{module} did not start")
    return proc, int(words[1])


async def stop_fixture(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.kill()  # by its pid: the process we started
    await proc.wait()
