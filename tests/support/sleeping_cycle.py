"""What an alarm on a sleeping actor does to its file, for the storage tests and the programs they
run in processes of their own (which get this folder on their ``PYTHONPATH``: ``CHILD_ENV``)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from mailbox_actors.platform.storage.limits import Durability, Limits
from mailbox_actors.platform.storage.opening import open_storage
from mailbox_actors.platform.storage.readonly import read_only
from mailbox_actors.platform.storage.runtime_access import RuntimeStorage

__all__ = ["CHILD_ENV", "cycle", "dms_lock_of_this_process", "index_size", "stop", "values"]

# The environment of a child program that imports this module.
CHILD_ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}


def cycle(path: Path, value: int, durability: str = Durability.NORMAL) -> None:
    """Open, one write, close."""
    sql = open_storage(path, create=True, durability=durability, limits=Limits(),
                       now_ms=lambda: 0)
    assert sql is not None
    sql.exec("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
    sql.exec("INSERT INTO t (v) VALUES (?)", value)
    RuntimeStorage(sql).close()


def index_size(path: Path) -> int:
    """The size of the file's ``-shm``."""
    return os.path.getsize(f"{path}-shm")


def values(path: Path) -> list[int]:
    """What ``cycle`` wrote, in order, read as an inspector reads (``read_only``)."""
    with read_only(path) as conn:
        assert conn is not None
        return [v for (v,) in conn.execute("SELECT v FROM t ORDER BY k")]


def dms_lock_of_this_process(path: Path) -> str | None:
    """The POSIX lock this process holds on the index's DMS byte, as /proc/locks lists it."""
    st = os.stat(f"{path}-shm")
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in Path("/proc/locks").read_text().splitlines():
        f = line.split()
        if f[1] == "POSIX" and f[4] == str(os.getpid()) and f[5] == inode and f[6] == "128":
            return f[3]
    return None


def stop(pid: int) -> None:
    """SIGSTOP ``pid`` and return once it is stopped (``T`` in /proc). The signal takes effect
    only when the process next runs: until then a helper blocked in ``read`` on its pipe still
    takes what is written there (at load, a whole pipe's worth)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "T":
        assert time.monotonic() < deadline, f"process {pid} did not stop"
        time.sleep(0.001)
