"""The node process's own resources as metrics (OPS-10): resident memory, open descriptors and the
descriptor limit, CPU seconds, start time. Read at scrape time from the operating system (Linux's
/proc where it has one, portable calls otherwise); nothing is sampled in between.
"""

from __future__ import annotations

import os
import resource
import sys
import time

from mailbox_actors.platform.metrics import Metrics

__all__ = ["register_process_metrics"]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss_bytes() -> float:
    try:
        with open("/proc/self/statm") as f:
            return float(int(f.read().split()[1]) * _PAGE)
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # the peak, where no /proc
        return float(peak if sys.platform == "darwin" else peak * 1024)


def _open_fds() -> float:
    for where in ("/proc/self/fd", "/dev/fd"):
        try:
            return float(len(os.listdir(where)) - 1)  # less the descriptor listdir itself holds
        except OSError:
            continue
    return float("nan")


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def register_process_metrics(m: Metrics) -> None:
    started = time.time()
    m.register_gauge_fn("process_resident_memory_bytes", _rss_bytes,
                        "Resident memory of the node process, in bytes")
    m.register_gauge_fn("process_open_fds", _open_fds, "Open file descriptors of the node process")
    m.register_gauge_fn("process_max_fds", lambda: float(
        resource.getrlimit(resource.RLIMIT_NOFILE)[0]), "The descriptor limit (soft) in force")
    m.register_gauge_fn("process_cpu_seconds_total", _cpu_seconds,
                        "User and system CPU time of the node process, in seconds", "counter")
    m.register_gauge_fn("process_start_time_seconds", lambda: started,
                        "When the node process started serving, in seconds since the epoch")
