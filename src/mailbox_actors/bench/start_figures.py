"""The start figure: a node's start to its first answer, beside a bare interpreter's start.

Each side is a fresh process, timed from spawn to the line it prints: the node side imports the
package, starts a ``Node`` on a data directory holding one TenantQuota and prints once a ``usage``
call through ``Node.call_bytes`` has answered; the bare side is ``python -c`` printing a line; the
floor side imports the libraries every node stands on (asyncio, sqlite3, msgspec, anyio) and prints
from inside ``anyio.run``, which no node start can go below. They alternate, each reports its median.

The three run in the environment an installation of the package has (``start_install``: this
package and its runtime dependencies, no development tools, no ``.pth`` file), because that is what
an operator starts; the node side also runs in this benchmark's own environment, reported beside
(``node_start_in_this_venv_ms``, with that environment's bare start as its limit), so what the
development environment adds is seen rather than hidden.

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
from mailbox_actors.bench.start_install import installed_python

__all__ = ["START_FIGURES", "start_figures"]

START_FIGURES = ("node_start_to_first_answer_ms", "bare_interpreter_start_ms",
                 "runtime_libraries_start_ms", "node_start_in_this_venv_ms")
_BARE = ["-c", "print('ready', flush=True)"]
_FLOOR = ["-c", "import asyncio, sqlite3, msgspec, anyio\n"
          "async def main():\n    print('ready', flush=True)\nanyio.run(main)"]
_NODE = ["-m", "mailbox_actors.bench.start_child"]


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
    data = str(work / "node")
    python = await anyio.to_thread.run_sync(installed_python, work / "installed")
    progress.say(f"start: {sizes.rounds} node starts to a first answer, {sizes.rounds} bare "
                 f"interpreter starts and {sizes.rounds} of its libraries alone, as installed "
                 f"({python}), and {sizes.rounds} node and bare starts in {sys.executable}, "
                 "alternating")
    env = _env(work)
    sides = ([python, *_NODE, data], [python, *_BARE], [python, *_FLOOR],
             [sys.executable, *_NODE, data], [sys.executable, *_BARE])
    # The actor, compiled bytecode (each environment's own paths) and warm OS caches, every side.
    await anyio.to_thread.run_sync(_timed, [*sides[0], "init"], env)
    for argv in sides:
        await anyio.to_thread.run_sync(_timed, argv, env)
    ms: list[list[float]] = [[] for _ in sides]
    for r in range(sizes.rounds):
        for i in range(len(sides)):
            side = (i + r) % len(sides)  # each side takes every place in the order in turn
            ms[side].append(await anyio.to_thread.run_sync(_timed, sides[side], env))
    node_ms, bare_ms, floor_ms, here_node_ms, here_bare_ms = (median(m) for m in ms)
    note = (f"median of {sizes.rounds} fresh processes per side, alternating; spawn to first "
            "line; bytecode compiled beforehand, as installed")
    installed = "; in an installation's environment: this package and its runtime dependencies only"
    node_note = ("; the node side starts a Node on a directory holding one TenantQuota and "
                 "answers its usage call")
    return [
        figure("node_start_to_first_answer_ms", node_ms, "ms",
               goal=Goal("ratio_at_most", 3.0), limit=bare_ms, note=note + installed + node_note),
        figure("bare_interpreter_start_ms", bare_ms, "ms",
               note=note + installed + f"; {python} -c print"),
        figure("runtime_libraries_start_ms", floor_ms, "ms",
               note=note + installed + "; imports asyncio, sqlite3, msgspec and anyio and prints "
                                       "inside anyio.run: the floor under any node start"),
        figure("node_start_in_this_venv_ms", here_node_ms, "ms", limit=here_bare_ms,
               note=note + f"; in {sys.executable}'s environment (its .pth files and whatever "
                           f"else it holds, such as rich); the limit is its bare start "
                           f"({here_bare_ms:.1f} ms)" + node_note),
    ]
