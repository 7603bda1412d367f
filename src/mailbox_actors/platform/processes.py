"""Whether another process of this machine still runs, asked of the operating system by pid (the
node file's owner, a machine name's holder, a benchmark's servers)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["pid_alive"]


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process: another user's counts as live, a zombie as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: trust kill(0)
    return stat.rpartition(")")[2].split()[0] != "Z"
