"""How long a thread has waited in the run queue for a CPU while it was runnable: Linux's
``/proc/thread-self/schedstat``, its second field (``run_delay``, nanoseconds).

It is complete whenever the running thread reads it, since the kernel adds a wait when the thread
gets its CPU. The file's first field, the thread's time on a CPU, is not: the running slice is
added only at a tick or a switch, so it misses up to a tick (4 ms) of work just done; a thread's
CPU is ``time.thread_time()``'s (session 17's review, R3). What a thread's wall time is past both
it waited for something else: the disk, the interpreter's lock, another lock. The host tells a
slow disk from a busy machine by it (``runtime.file_threads``), the loop's stall recorder splits
a stall by it (``node.loop_stalls``), and the alarm bench reports it beside its lateness.
"""

from __future__ import annotations

import os

__all__ = ["RunQueueClock", "run_queue_wait_s"]

_SCHEDSTAT = "/proc/thread-self/schedstat"


def run_queue_wait_s() -> float | None:
    """The calling thread's run-queue wait so far, in seconds, by one read of the file; None
    where the system does not report it."""
    try:
        with open(_SCHEDSTAT, "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class RunQueueClock:
    """``run_queue_wait_s`` of the thread that made it, read with one ``pread`` of a descriptor
    kept open (about a microsecond a call); always 0.0 where the system does not report it.
    After ``close`` it answers the value it read at the close (a caller timing across the close
    still subtracts two readings of one clock)."""

    __slots__ = ("_at_close", "fd")

    def __init__(self) -> None:
        self._at_close = 0.0
        self.fd = -1  # the descriptor while open; -1 when not reported, or closed
        try:
            fd = os.open(_SCHEDSTAT, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        try:
            int(os.pread(fd, 64, 0).split()[1])
        except (OSError, ValueError, IndexError):
            os.close(fd)
            return
        self.fd = fd

    def __call__(self) -> float:
        fd = self.fd
        if fd < 0:
            return self._at_close
        return int(os.pread(fd, 64, 0).split()[1]) / 1e9

    def close(self) -> None:
        fd = self.fd
        if fd >= 0:
            self._at_close = self()
            self.fd = -1
            os.close(fd)
