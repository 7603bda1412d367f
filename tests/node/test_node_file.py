"""The node file says which node runs on a data directory (``status`` and ``call`` find it there,
OPS-1): a record left by a process that died, or that is a zombie nobody reaped yet, names no node."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from mailbox_actors.platform.node_file import read_node_file, write_node_file
from mailbox_actors.platform.processes import pid_alive


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_a_running_process_is_alive_and_its_record_names_it(tmp_path: Path) -> None:
    child = _sleeper()
    try:
        assert pid_alive(child.pid)
        write_node_file(tmp_path, "node-1", "http://127.0.0.1:1", pid=child.pid)
        assert read_node_file(tmp_path) == ("node-1", "http://127.0.0.1:1")
    finally:
        child.kill()
        child.wait()


def test_a_dead_or_zombie_process_names_no_node(tmp_path: Path) -> None:
    child = _sleeper()
    write_node_file(tmp_path, "node-1", "http://127.0.0.1:1", pid=child.pid)
    os.kill(child.pid, signal.SIGKILL)
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped: a zombie
    assert not pid_alive(child.pid)
    assert read_node_file(tmp_path) is None
    child.wait()  # reaped: gone altogether
    assert not pid_alive(child.pid)
    assert read_node_file(tmp_path) is None
