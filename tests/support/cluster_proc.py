"""``mailbox-actors cluster`` as a child process of a test, its output read line by line (the
supervisor and its nodes are stopped by pid)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from mailbox_actors.testing.ports import free_port_block as _free_port_block


class Cluster:
    """``mailbox-actors cluster`` as a child process, with its output read line by line."""

    def __init__(self, data: Path, nodes: int, extra: tuple[str, ...] = (),
                 env: dict[str, str] | None = None, port: int | None = None) -> None:
        self.data = data
        self._n, self._extra, self._env, self._picked = nodes, extra, env, port is None
        self._launch(port if port is not None else _free_port_block(nodes))

    def _launch(self, port: int) -> None:
        self.port = port
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mailbox_actors", "cluster", "--nodes", str(self._n), "--data",
             str(self.data), "--port", str(self.port), "--log-level", "warning", *self._extra],
            env=None if self._env is None else {**os.environ, **self._env},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def wait_running(self, timeout_s: float = 90) -> None:
        """Block until the supervisor runs with every node ready (its own pid on /healthz), not
        merely until it says running: it says so after a node that is NOT ready too. A port of a
        picked block that another process bound before the node did is a new pick (twice)."""
        for attempt in range(3):
            self.wait_for("cluster: running", timeout_s)
            ready = sum(f"cluster: node-{i} ready at" in line for line in self.log
                        for i in range(self._n))
            if ready == self._n:
                return
            taken = any("cannot listen on" in line for line in self.log)
            if not (taken and self._picked) or attempt == 2:
                raise AssertionError(f"{ready} of {self._n} nodes ready; log:\n"
                                     + "\n".join(self.log[-40:]))
            self.stop()
            self._launch(_free_port_block(self._n))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, text: str, timeout_s: float = 60) -> str:
        """Block until the supervisor prints a line containing ``text`` (bounded)."""
        while True:
            try:
                line = self.lines.get(timeout=timeout_s)
            except queue.Empty:
                raise AssertionError(f"no {text!r} within {timeout_s}s; log:\n"
                                     + "\n".join(self.log[-40:])) from None
            self.log.append(line)
            if text in line:
                return line

    def exit_output(self, timeout_s: float = 60) -> tuple[int, str]:
        """Wait for the supervisor to exit; its status and everything it printed."""
        status = self.proc.wait(timeout=timeout_s)
        self._reader.join(timeout=10)
        while not self.lines.empty():
            self.log.append(self.lines.get())
        return status, "\n".join(self.log)

    def nodes(self) -> list[dict[str, Any]]:
        return list(json.loads((self.data / "cluster.json").read_text())["nodes"])

    def stop(self) -> None:
        pids = []
        try:
            pids = [n["pid"] for n in self.nodes() if n["pid"]]
        except (OSError, ValueError):
            pass
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in pids:  # the supervisor stops its nodes; make sure, by pid
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._reader.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
