"""Machines of a many-machine cluster (``mailbox-actors machine``) as child processes of a test,
on a real PostgreSQL (``_pg``); each machine's output read line by line, stopped or killed by pid.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from mailbox_actors.testing.ports import free_port

SECRET = "machines-test-id-secret-0123456789"
TOKEN = "machines-test-cluster-token-0123"
OPERATOR = "machines-test-operator-token-0123"


def env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "MAILBOX_ACTORS_ID_SECRET": SECRET, "MAILBOX_ACTORS_TOKEN": TOKEN,
            "MAILBOX_ACTORS_OPERATOR_TOKEN": OPERATOR, **(extra or {})}


def slots_cmd(dsn: str, *args: str, extra_env: dict[str, str] | None = None,
              ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mailbox_actors", "slots", *args,
                           "--postgres", dsn], env=env(extra_env), capture_output=True,
                          text=True, timeout=60)


class MachineProc:
    """One ``mailbox-actors machine`` process."""

    def __init__(self, dsn: str, name: str, volumes: Path, shared_dir: Path, *,
                 ttl_s: float = 2.0, renew_s: float = 0.5, extra: tuple[str, ...] = (),
                 extra_env: dict[str, str] | None = None) -> None:
        self.dsn, self.name, self.volumes, self.shared = dsn, name, volumes, shared_dir
        self.ttl_s, self.renew_s, self.extra, self.extra_env = ttl_s, renew_s, extra, extra_env
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[str] | None = None
        self.log: list[str] = []
        self.start()

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "mailbox_actors", "machine", "--postgres", self.dsn,
                "--machine", self.name, "--volumes", str(self.volumes), "--port", str(self.port),
                "--lease-ttl-s", str(self.ttl_s), "--lease-renew-s", str(self.renew_s),
                "--log-level", "warning", "--shutdown-grace-ms", "1000", *self.extra]

    def start(self) -> None:
        self.log = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.proc = subprocess.Popen(self.argv(), env=env(self.extra_env),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1)
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.log.append(line.rstrip("\n"))
            self._lines.put(line)
        self._lines.put(None)

    def wait_listening(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                raise AssertionError(f"{self.name} exited {self.wait()}:\n" + "\n".join(self.log))
            if "listening on" in line:
                return
        raise AssertionError(f"{self.name} did not start:\n" + "\n".join(self.log))

    def wait(self, timeout_s: float = 30) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout=timeout_s)
        self._close_pipe()
        return code

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._close_pipe()

    def _close_pipe(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._close_pipe()

    def get(self, path: str, token: str = TOKEN) -> Any:
        req = urllib.request.Request(self.url + path,
                                     headers={"authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())


def wait_for(cond: Any, what: str, timeout_s: float = 60) -> Any:
    """Poll ``cond()`` until it returns a true value (a real cluster's state, not a timing)."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except OSError as e:
            last = e
        else:
            if last:
                return last
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def holders(machine: MachineProc) -> list[str | None]:
    return [row["holder"] for row in machine.get("/cluster")["map"]]
