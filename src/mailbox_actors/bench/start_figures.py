"""The start figure: a node's start to its first answer, beside a bare interpreter's start.

Each side is a fresh process, timed from spawn to the line it prints: the node side imports the
package, starts a ``Node`` on a data directory holding one TenantQuota and prints once a ``usage``
call through ``Node.call_bytes`` has answered; the bare side is ``python -c`` printing a line; the
floor side imports the libraries every node stands on (asyncio, sqlite3, msgspec, anyio) and prints
from inside ``anyio.run``, which no node start can go below. They alternate, each reports its median.

The command line's figures (PERF, section 12) run beside them in the same alternation, each a
fresh process timed from spawn to its exit: ``--version``, ``--help``, and ``status``, ``id`` and
``call`` against a node that ``serve`` runs for them in the same environment. A command's limit is
the runtime libraries' floor program timed as the commands are, spawn to exit
(``runtime_libraries_run_ms``: the interpreter's exit is in both), its ratio to the start's first
line said in its note. ``serve`` itself (``serve_start_to_first_answer_ms``) is timed with the
restart figures (``restart_figures``), beside the same floor as they are, since session 19.

The sides run in the environment an installation of the package has (``start_install``: this
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

import http.client
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import anyio

from mailbox_actors.bench.figures import Figure, Goal, Progress, Sizes, figure, median
from mailbox_actors.bench.start_install import installed_python

__all__ = ["START_FIGURES", "start_figures"]

CLI_FIGURES = ("cli_version_ms", "cli_help_ms", "cli_status_ms", "cli_id_ms", "cli_call_ms")
START_FIGURES = ("node_start_to_first_answer_ms", "bare_interpreter_start_ms",
                 "runtime_libraries_start_ms", "runtime_libraries_run_ms",
                 "node_start_in_this_venv_ms", *CLI_FIGURES)
_BARE = ["-c", "print('ready', flush=True)"]
_FLOOR = ["-c", "import asyncio, sqlite3, msgspec, anyio\n"
          "async def main():\n    print('ready', flush=True)\nanyio.run(main)"]
_NODE = ["-m", "mailbox_actors.bench.start_child"]
_CLI = ["-m", "mailbox_actors"]
_LISTENING = re.compile(r"listening on http://([0-9.]+):([0-9]+)")
_BIG_LIMIT = 1_000_000_000  # the quota the `call` side reads: never the answer


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


def _timed_exit(argv: list[str], env: dict[str, str]) -> float:
    """Milliseconds from spawn to the exit of a command (it must succeed)."""
    t = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    ms = (time.perf_counter() - t) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{argv[3:]} failed ({done.returncode}): {done.stdout[-500:]} "
                           f"{done.stderr[-1000:]}")
    return ms


def _serve(python: str, data: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """``serve`` on ``data`` (any free port), once it says where it listens: (process, URL)."""
    proc = subprocess.Popen([python, *_CLI, "serve", "--data", str(data), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert proc.stdout is not None
    for line in proc.stdout:
        found = _LISTENING.search(line)
        if found:
            return proc, f"http://{found.group(1)}:{found.group(2)}"
    proc.wait()
    proc.stdout.close()
    raise RuntimeError(f"serve on {data} exited ({proc.returncode}) before it listened")


def _stop(proc: subprocess.Popen[str], sig: signal.Signals = signal.SIGTERM) -> None:
    """End ``serve`` with ``sig`` and reap it (SIGTERM: it must stop cleanly)."""
    proc.send_signal(sig)
    assert proc.stdout is not None
    with proc.stdout:
        proc.stdout.read()  # what it says while it stops
    if proc.wait(timeout=60) != 0 and sig == signal.SIGTERM:
        raise RuntimeError(f"serve stopped with status {proc.returncode}")


def first_answer(url: str) -> None:
    """One ``GET /healthz`` answered 200 (the node's first answer)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("GET", "/healthz")
        reply = conn.getresponse()
        reply.read()
        if reply.status != 200:
            raise RuntimeError(f"/healthz answered {reply.status}")
    finally:
        conn.close()


def timed_serve(python: str, data: Path, env: dict[str, str]) -> float:
    """Milliseconds from spawning ``serve`` to its first answer; the node is stopped after."""
    t = time.perf_counter()
    proc, url = _serve(python, data, env)
    try:
        first_answer(url)
        return (time.perf_counter() - t) * 1000
    finally:
        _stop(proc)


async def start_figures(work: Path, sizes: Sizes, progress: Progress) -> list[Figure]:
    data = str(work / "node")
    python = await anyio.to_thread.run_sync(installed_python, work / "installed")
    rounds = sizes.start_rounds
    progress.say(f"start: {rounds} node starts to a first answer, {rounds} bare "
                 f"interpreter starts and {rounds} of its libraries alone, as installed "
                 f"({python}), and {rounds} node and bare starts in {sys.executable}, "
                 "alternating")
    env = _env(work)
    # The node the command line's sides talk to, and the quota its `call` side reads.
    served, url = await anyio.to_thread.run_sync(_serve, python, work / "served", env)
    try:
        target = ["--data", str(work / "served"), "--url", url]
        call = [python, *_CLI, "call", "tenant_quota", "start", '{"op": "usage"}',
                "--tenant", "t_bench", *target]
        await anyio.to_thread.run_sync(_timed_exit, [
            *call[:6], f'{{"op": "init", "per_minute": {_BIG_LIMIT}, "per_day": {_BIG_LIMIT}}}',
            *call[7:]], env)
        cli = ([python, *_CLI, "--version"], [python, *_CLI, "--help"],
               [python, *_CLI, "status", *target],
               [python, *_CLI, "id", "tenant_quota", "--name", "start", *target], call)
        timed: list[tuple[Callable[..., float], tuple[object, ...]]] = [
            (_timed, ([python, *_NODE, data], env)), (_timed, ([python, *_BARE], env)),
            (_timed, ([python, *_FLOOR], env)), (_timed_exit, ([python, *_FLOOR], env)),
            (_timed, ([sys.executable, *_NODE, data], env)),
            (_timed, ([sys.executable, *_BARE], env)),
            *((_timed_exit, (argv, env)) for argv in cli)]
        # The actor, compiled bytecode (each environment's own paths) and warm OS caches, every
        # side.
        await anyio.to_thread.run_sync(_timed, [python, *_NODE, data, "init"], env)
        for fn, args in timed:
            await anyio.to_thread.run_sync(fn, *args)
        ms: list[list[float]] = [[] for _ in timed]
        for r in range(rounds):
            for i in range(len(timed)):
                side = (i + r) % len(timed)  # each side takes every place in the order in turn
                fn, args = timed[side]
                ms[side].append(await anyio.to_thread.run_sync(fn, *args))
    finally:
        await anyio.to_thread.run_sync(_stop, served)
    (node_ms, bare_ms, floor_ms, run_ms, here_node_ms, here_bare_ms, version_ms, help_ms,
     status_ms, id_ms, call_ms) = (median(m) for m in ms)
    note = (f"median of {rounds} fresh processes per side, alternating; spawn to first "
            "line; bytecode compiled beforehand, as installed")
    installed = "; in an installation's environment: this package and its runtime dependencies only"
    # A command is timed to its exit, so its limit is the libraries' floor timed the same way
    # (the interpreter's exit included); the ratio to the start's first line is said beside.
    cli_note = (note.replace("spawn to first line", "spawn to exit") + installed
                + "; the limit is the runtime libraries' run, spawn to exit; ")

    def command(name: str, ms: float, goal: Goal | None, what: str) -> Figure:
        said = f"{cli_note}{what} ({ms / floor_ms:.3f} of the libraries' start to its first line)"
        if goal is None:
            return Figure(figure=name, value=ms, unit="ms", limit=run_ms, ratio=ms / run_ms,
                          target="no target (limit: the runtime libraries' run, to exit)",
                          note=said)
        return figure(name, ms, "ms", goal=goal, limit=run_ms, note=said)

    node_note = ("; the node side starts a Node on a directory holding one TenantQuota and "
                 "answers its usage call")
    return [
        # Its target (3x a bare interpreter) was withdrawn (issue 28): the serve_* figures carry
        # the start's targets, beside the runtime libraries' start.
        Figure(figure="node_start_to_first_answer_ms", value=node_ms, unit="ms", limit=bare_ms,
               ratio=node_ms / bare_ms, target="no target (limit: a bare interpreter's start)",
               note=note + installed + node_note),
        figure("bare_interpreter_start_ms", bare_ms, "ms",
               note=note + installed + f"; {python} -c print"),
        figure("runtime_libraries_start_ms", floor_ms, "ms",
               note=note + installed + "; imports asyncio, sqlite3, msgspec and anyio and prints "
                                       "inside anyio.run: the floor under any node start"),
        figure("runtime_libraries_run_ms", run_ms, "ms",
               note=note.replace("spawn to first line", "spawn to exit") + installed
               + "; the same program as the runtime libraries' start, timed to its exit as the "
                 "commands are: the floor under any command"),
        figure("node_start_in_this_venv_ms", here_node_ms, "ms", limit=here_bare_ms,
               note=note + f"; in {sys.executable}'s environment (its .pth files and whatever "
                           f"else it holds, such as rich); the limit is its bare start "
                           f"({here_bare_ms:.1f} ms)" + node_note),
        command("cli_version_ms", version_ms, Goal("ratio_at_most", 0.3),
            "`python -m mailbox_actors --version`"),
        command("cli_help_ms", help_ms, None, "`--help`"),
        command("cli_status_ms", status_ms, Goal("ratio_at_most", 1.2),
            "`status` of a node serving in that environment"),
        command("cli_id_ms", id_ms, None, "`id` asked of that node"),
        command("cli_call_ms", call_ms, None, "`call` of a TenantQuota's usage on that node"),
    ]
