"""How much of the machine other processes took while a figure group measured.

A figure measured beside someone else's test suite is not the figure of a quiet machine, and its
ratio does not always say so: the runtime and its limit may share the CPUs differently (session
12's end: the burst group read 0.38 of raw ``sqlite3`` while another engineer's 424 tests ran, 0.59
and 0.65 in quiet runs of the same commit). ``CpuShare`` reads the machine's busy CPU time
(``/proc/stat``: user, nice, system, interrupts and time stolen by the hypervisor) and the bench's
own (this process and the children it waited for: the group's process and what that waited for)
across a group; the difference, over the group's wall time, is how many CPUs other processes kept
busy on average. The bench writes it into each figure's note. Where ``/proc/stat`` is missing it
says nothing.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable

__all__ = ["CpuShare", "busy_cpu_s", "own_cpu_s"]


def busy_cpu_s() -> float | None:
    """CPU seconds the whole machine has spent busy since boot, or None where not reported."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 8 or fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal (guest time is inside user already)
    v = [int(x) for x in fields[1:9]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)) \
        / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    """CPU seconds of this process and of the children it has waited for."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class CpuShare:
    """Started when a group starts; ``others()`` when it has ended (its process waited for)."""

    def __init__(self, *, busy: Callable[[], float | None] = busy_cpu_s,
                 own: Callable[[], float] = own_cpu_s,
                 clock: Callable[[], float] = time.monotonic,
                 cpus: int | None = None) -> None:
        self._busy, self._own, self._clock = busy, own, clock
        self.cpus = cpus if cpus is not None else (os.cpu_count() or 1)
        self._busy0, self._own0, self._t0 = busy(), own(), clock()

    def others(self) -> float | None:
        """CPUs other processes kept busy on average since the start (None: not reported)."""
        busy1 = self._busy()
        wall = self._clock() - self._t0
        if busy1 is None or self._busy0 is None or wall <= 0:
            return None
        other = (busy1 - self._busy0) - (self._own() - self._own0)
        return min(float(self.cpus), max(0.0, other / wall))

    def text(self, others: float | None) -> str | None:
        if others is None:
            return None
        return f"other processes kept {others:.1f} of the machine's {self.cpus} CPUs busy meanwhile"
