"""``TestCluster``: a real local cluster for a test (TK-1), node processes a test kills and gets back.

It runs ``mailbox-actors cluster`` as a child process (the supervisor and its node processes, on
free loopback ports, in the test's directory) and reads what the supervisor prints. ``kill(i)``
sends SIGKILL to node ``i`` (a crash, as in production); the supervisor restarts it, and
``wait_back(i)`` returns once it answers again; ``restart(i)`` is both. ``client()`` is an RPC
client for the whole cluster. ``stop()`` stops the supervisor, then kills by pid any node left.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from mailbox_actors.rpc.client import Client
from mailbox_actors.testing.ports import free_port_block

__all__ = ["TestCluster"]


class TestCluster:
    """``with TestCluster(tmp_path / "c", nodes=3) as cluster: ...``"""

    __test__ = False

    def __init__(self, data_dir: Path | str, nodes: int = 3, *,
                 settings: Mapping[str, Any] | None = None, timeout_s: float = 60) -> None:
        if nodes < 1:
            raise ValueError("a cluster has at least one node")
        self.data = Path(data_dir)
        self.count = nodes
        self.timeout_s = timeout_s
        self.port = free_port_block(nodes)
        flags: list[str] = []
        for name, value in (settings or {}).items():
            flags += [f"--{name.replace('_', '-')}", str(value)]
        self._cmd = [sys.executable, "-m", "mailbox_actors", "cluster", "--nodes", str(nodes),
                     "--data", str(self.data), "--port", str(self.port), "--log-level",
                     "warning", *flags]
        self.proc: subprocess.Popen[str] | None = None
        self.log: list[str] = []
        self._lines: queue.Queue[str] = queue.Queue()
        self._reader: threading.Thread | None = None
        self._pids: set[int] = set()

    # ---- lifetime --------------------------------------------------------------------------

    def start(self) -> TestCluster:
        self.proc = subprocess.Popen(self._cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1, stdin=subprocess.DEVNULL)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self.wait_for("cluster: running")
        except BaseException:
            self.stop()
            raise
        self._pids.update(n["pid"] for n in self.nodes() if n["pid"])
        return self

    def stop(self) -> None:
        """Stop the supervisor (it stops its nodes), then SIGKILL, by pid, any node still there."""
        try:
            self._pids.update(n["pid"] for n in self.nodes() if n["pid"])
        except (OSError, ValueError, KeyError):
            pass
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pid in self._pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self._reader is not None:
            self._reader.join(timeout=10)
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> TestCluster:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # ---- what the supervisor says ------------------------------------------------------------

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))

    def wait_for(self, text: str) -> str:
        """The next line the supervisor prints that contains ``text`` (bounded by timeout_s)."""
        while True:
            try:
                line = self._lines.get(timeout=self.timeout_s)
            except queue.Empty:
                raise AssertionError(f"the cluster did not print {text!r} within "
                                     f"{self.timeout_s} s; it printed:\n"
                                     + "\n".join(self.log[-40:])) from None
            self.log.append(line)
            if text in line:
                return line

    # ---- nodes -----------------------------------------------------------------------------

    def nodes(self) -> list[dict[str, Any]]:
        """cluster.json's nodes: name, url, pid, data directory, restarts."""
        return list(json.loads((self.data / "cluster.json").read_text())["nodes"])

    def pid(self, i: int) -> int:
        pid = self.nodes()[i]["pid"]
        if not pid:
            raise AssertionError(f"node-{i} has no process now")
        return int(pid)

    def kill(self, i: int) -> int:
        """SIGKILL node ``i`` (a crash); returns the pid killed. The supervisor restarts it."""
        pid = self.pid(i)
        self._pids.add(pid)
        os.kill(pid, signal.SIGKILL)
        return pid

    def wait_back(self, i: int) -> int:
        """Wait until the supervisor has node ``i`` back and answering; returns its new pid."""
        line = self.wait_for(f"node-{i} ")
        while " back at " not in line and " NOT back" not in line:
            line = self.wait_for(f"node-{i} ")
        if " NOT back" in line:
            raise AssertionError(f"node-{i} did not come back: {line}")
        pid = self.pid(i)
        self._pids.add(pid)
        return pid

    def restart(self, i: int) -> int:
        """Kill node ``i`` and wait for it to be back; returns its new pid."""
        self.kill(i)
        return self.wait_back(i)

    def client(self, **kw: Any) -> Client:
        """An RPC client that knows every node (``async with cluster.client() as c``)."""
        return Client.from_data_dir(self.data, **kw)

    @property
    def token(self) -> str:
        return (self.data / "cluster.token").read_text().strip()
