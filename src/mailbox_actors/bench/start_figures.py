"""The start figure: a node's start to its first answer, beside a bare interpreter's start.

Each side is a fresh process, timed from spawn to the line it prints: the node side imports the
package, starts a ``Node`` on a data directory holding one TenantQuota and prints once a ``usage``
call through ``Node.call_bytes`` has answered; the bare side is ``python -c`` printing a line; the
floor side imports the libraries every node stands on (asyncio, sqlite3, msgspec, anyio) and prints
from inside ``anyio.run``, which no node start can go below. They alternate, each reports its median.

Every side reads compiled bytecode, as an installed package does (pip compiles it at install): the
children write and read it under the scratch directory (``PYTHONPYCACHEPREFIX``), the warm-up run
compiling it, whatever ``PYTHONDONTWRITEBYTECODE`` says here (without it, each start would compile
every module of the package from source again).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import anyio

from mailbox_actors.bench.figures import Figure, Goal, Progress, Sizes, figure, median

__all__ = ["START_FIGURES", "start_figures"]

START_FIGURES = ("node_start_to_first_answer_ms", "bare_interpreter_start_ms",
                 "runtime_libraries_start_ms")
_BARE = [sys.executable, "-c", "print('ready', flush=True)"]
_FLOOR = [sys.executable, "-c", "import asyncio, sqlite3, msgspec, anyio\n"
          "async def main():\n    print('ready', flush=True)\nanyio.run(main)"]


def _env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    return env


def _timed(argv: list[str], env: dict[str, str]) -> float:
    """Milliseconds from spawn to the child's first line (it must say ``ready``)."""
    t = time.perf_counter()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, env=env) as proc:
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
    progress.say(f"start: {sizes.rounds} node starts to a first answer, {sizes.rounds} bare "
                 f"interpreter starts and {sizes.rounds} of its libraries alone, alternating")
    env = _env(work)
    # The actor, compiled bytecode and warm OS caches, for every side.
    await anyio.to_thread.run_sync(_timed, [*node_argv, "init"], env)
    await anyio.to_thread.run_sync(_timed, _FLOOR, env)
    sides = (node_argv, _BARE, _FLOOR)
    ms: list[list[float]] = [[], [], []]
    for r in range(sizes.rounds):
        for i in range(3):
            side = (i + r) % 3  # each side goes first, second and third in turn
            ms[side].append(await anyio.to_thread.run_sync(_timed, sides[side], env))
    node_ms, bare_ms, floor_ms = ms
    note = (f"median of {sizes.rounds} fresh processes per side, alternating; spawn to first "
            "line; bytecode compiled beforehand, as installed")
    return [
        figure("node_start_to_first_answer_ms", median(node_ms), "ms",
               goal=Goal("ratio_at_most", 3.0), limit=median(bare_ms),
               note=note + "; the node side starts a Node on a directory holding one "
                           "TenantQuota and answers its usage call"),
        figure("bare_interpreter_start_ms", median(bare_ms), "ms",
               note=note + f"; {sys.executable} -c print"),
        figure("runtime_libraries_start_ms", median(floor_ms), "ms",
               note=note + "; imports asyncio, sqlite3, msgspec and anyio and prints inside "
                           "anyio.run: the floor under any node start"),
    ]
