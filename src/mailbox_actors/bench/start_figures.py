"""The start figure: a node's start to its first answer, beside a bare interpreter's start.

Each side is a fresh process, timed from spawn to the line it prints: the node side imports the
package, starts a ``Node`` on a data directory holding one TenantQuota and prints once a ``usage``
call through ``Node.call_bytes`` has answered; the bare side is ``python -c`` printing a line. The
two alternate, and each reports its median.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import anyio

from mailbox_actors.bench.figures import Figure, Goal, Progress, Sizes, figure, median

__all__ = ["START_FIGURES", "start_figures"]

START_FIGURES = ("node_start_to_first_answer_ms", "bare_interpreter_start_ms")
_BARE = [sys.executable, "-c", "print('ready', flush=True)"]


def _timed(argv: list[str]) -> float:
    """Milliseconds from spawn to the child's first line (it must say ``ready``)."""
    t = time.perf_counter()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        ms = (time.perf_counter() - t) * 1000
        _, err = proc.communicate(timeout=60)
    if not line.startswith("ready") or proc.returncode != 0:
        raise RuntimeError(f"start process failed ({proc.returncode}): {line!r} {err[-1000:]}")
    return ms


async def start_figures(work: Path, sizes: Sizes, progress: Progress) -> list[Figure]:
    data = work / "node"
    node_argv = [sys.executable, "-m", "mailbox_actors.bench.start_child", str(data)]
    progress.say(f"start: {sizes.rounds} node starts to a first answer, and {sizes.rounds} bare "
                 "interpreter starts, alternating")
    await anyio.to_thread.run_sync(_timed, [*node_argv, "init"])  # the actor, and warm caches
    node_ms: list[float] = []
    bare_ms: list[float] = []
    for r in range(sizes.rounds):
        for side in ((0, 1) if r % 2 == 0 else (1, 0)):
            if side == 0:
                node_ms.append(await anyio.to_thread.run_sync(_timed, node_argv))
            else:
                bare_ms.append(await anyio.to_thread.run_sync(_timed, _BARE))
    note = f"median of {sizes.rounds} fresh processes per side, alternating; spawn to first line"
    return [
        figure("node_start_to_first_answer_ms", median(node_ms), "ms",
               goal=Goal("ratio_at_most", 3.0), limit=median(bare_ms),
               note=note + "; the node side starts a Node on a directory holding one "
                           "TenantQuota and answers its usage call"),
        figure("bare_interpreter_start_ms", median(bare_ms), "ms",
               note=note + f"; {sys.executable} -c print"),
    ]
