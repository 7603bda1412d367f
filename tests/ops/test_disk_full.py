"""A full disk (OPS-3) against a real node process: writes answer a retryable error, reads keep
working, the node stays up, its alarm loop retries the index writes the disk refused; once there
is room again, writes, new objects and alarms work and nothing acknowledged was lost.

Where the test may mount a file system (a tmpfs in a private user and mount namespace, via
``unshare``), the disk is really filled to its last byte; otherwise the node's own file-size limit
(RLIMIT_FSIZE, SIGXFSZ ignored) makes every file that would grow fail the same way."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parents[1] / "support"


def _can_mount_tmpfs(where: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    where.mkdir(parents=True, exist_ok=True)
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs "
                            f"'{where}'"], capture_output=True, timeout=30)
    return probe.returncode == 0


class Child:
    """The node process; one command line in, one answer line out."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, cwd=TESTS.parents[1])
        self.log: list[str] = []
        # Drained by a thread into memory: under a file-size limit a log file could not grow.
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()
        assert self.line() == "READY", self.log

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)

    def line(self) -> str:
        assert self.proc.stdout is not None
        out = self.proc.stdout.readline()
        assert out.endswith("\n"), f"the node ended (rc={self.proc.poll()}): {self.log[-20:]}"
        return out[:-1]

    def ask(self, command: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.line()

    def state(self) -> dict[str, Any]:
        answer = self.ask("state")
        assert answer.startswith("STATE "), answer
        return dict(json.loads(answer[len("STATE "):]))

    def until(self, what: str, ok: Any, timeout_s: float = 60) -> dict[str, Any]:
        """Poll the node's state (bounded) until ``ok(state)``: a real process, a real clock."""
        deadline = time.monotonic() + timeout_s
        while True:
            s = self.state()
            if ok(s):
                return s
            assert time.monotonic() < deadline, f"never {what}: {s}; {self.log[-20:]}"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # by its pid
        self.proc.wait()
        self._drain.join(timeout=10)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture(params=["tmpfs", "fsize"])
def node(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Child]:
    mnt = tmp_path / "mnt"
    script = [sys.executable, str(TESTS / "_disk_full_proc.py")]
    if request.param == "tmpfs":
        if not _can_mount_tmpfs(mnt):
            pytest.skip("no tmpfs can be mounted here (unshare -rm refused); the fsize case runs")
        argv = ["unshare", "-rm", "sh", "-c",
                f"mount -t tmpfs -o size=4m tmpfs '{mnt}' && exec \"$@\"", "sh",
                *script, "tmpfs", str(mnt / "node")]
    else:
        argv = [*script, "fsize", str(mnt / "node")]
    child = Child(argv)
    try:
        yield child
    finally:
        child.stop()


def test_a_full_disk_refuses_writes_retryably_keeps_reads_and_the_node_up(node: Child) -> None:
    """OPS-3: on a full disk a write answers ``unavailable`` (retryable), a new object too; reads
    answer; the alarm loop's index flush fails and is retried, the node never fails; with room
    again the same writes succeed, the index catches up and alarms fire."""
    ok = node.ask("init a")
    assert ok.startswith("OK "), ok
    a = json.loads(ok[3:])
    assert node.ask(f"put {a} k1 v1") == 'OK {"k": "k1"}'
    far = int(time.time() * 1000) + 3_600_000
    assert node.ask(f"alarm {a} {far}") == f"OK {far}"

    assert node.ask("fill") == "FILLED"
    assert node.ask(f"put {a} k2 v2") == "ERR unavailable"
    assert node.ask("init b") == "ERR unavailable"
    assert node.ask(f"get {a} k1") == 'OK "v1"'
    node.ask(f"lazy {a} {far + 60_000}")  # an alarm moved later: a lazy index write
    s = node.until("the index flush failed", lambda s: s["index_failing"])
    assert s["lazy"] == 1 and not s["failed"]
    assert s["index"][a] == far  # still early: never later than the truth
    assert node.ask(f"put {a} k3 v3") == "ERR unavailable"  # still full, still up

    assert node.ask("free") == "FREED"
    assert node.ask(f"put {a} k2 v2") == 'OK {"k": "k2"}'
    assert node.ask("init b").startswith("OK ")
    s = node.until("the index caught up", lambda s: not s["index_failing"] and not s["lazy"],
                   timeout_s=30)
    assert s["index"][a] == far + 60_000 and not s["failed"]
    soon = int(time.time() * 1000) + 50
    assert node.ask(f"alarm {a} {soon}") == f"OK {soon}"
    deadline = time.monotonic() + 30
    while node.ask(f"fired {a}") == "OK []":  # the alarm fires on the real clock
        assert time.monotonic() < deadline, node.log[-20:]
        time.sleep(0.05)
    assert node.ask(f"get {a} k1") == 'OK "v1"' and node.ask(f"get {a} k3") == "OK null"
    assert not any("node_loop_failed" in line for line in node.log), node.log
