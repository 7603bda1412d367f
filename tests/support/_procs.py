"""Real node processes for the lock and crash tests: ``python tests/support/_procs.py MODE DATA_DIR [ARGS]``.

Each mode runs a ``Node`` on the system clock and talks to the test on stdout, one line per fact, each
line written and flushed only after the fact is durable (the call returned ``ok``):

- ``hold DATA``: start a node, print ``READY <pid>``, then run until killed.
- ``writer DATA ACTORS ALARM_BASE_MS [DURABILITY MAX_ACTIVE]``: on a node with that durability and
  bound on open actors (a bound below ACTORS evicts and reopens files all the time), init ACTORS
  Scratch actors; give actor i the alarm
  ``ALARM_BASE_MS + i * 1000`` and print ``ALARM <id> <at_ms>`` for each; print ``READY``; then write
  ``k000000, k000001, ...`` to every actor concurrently forever, printing ``ACK <id> <key>`` after
  each write is answered.
- ``dump DATA ID...``: print ``DUMP <id> <json of Dump>`` and ``ALARMAT <id> <at_ms|null>`` for
  each actor, then stop the node gracefully.

Logs go to stderr so stdout carries only these lines.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import anyio
import anyio.lowlevel
import structlog

import actors_for_tests as afs
from mailbox_actors.node import Node
from mailbox_actors.runtime.settings import RuntimeSettings

TESTS_DIR = Path(__file__).resolve().parent


# ---- used by the tests ---------------------------------------------------------------------------


def spawn(mode: str, data_dir: Path, *args: object, log: IO[str]) -> subprocess.Popen[str]:
    """Start ``_procs.py MODE DATA_DIR ARGS`` with the venv's Python; stderr goes to ``log``."""
    return subprocess.Popen(
        [sys.executable, str(TESTS_DIR / "_procs.py"), mode, str(data_dir), *map(str, args)],
        stdout=subprocess.PIPE, stderr=log, text=True, cwd=TESTS_DIR.parents[1])


@contextlib.contextmanager
def running(mode: str, data_dir: Path, *args: object, log_path: Path
            ) -> Iterator[subprocess.Popen[str]]:
    """``spawn`` with stderr to ``log_path``; the process is SIGKILLed (by pid) on the way out."""
    with open(log_path, "w") as log:
        proc = spawn(mode, data_dir, *args, log=log)
        try:
            yield proc
        finally:
            kill(proc)


def read_line(proc: subprocess.Popen[str]) -> str:
    """The next complete stdout line (without its newline); AssertionError if the process ended."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.endswith("\n"), f"process {proc.pid} ended (rc={proc.poll()}) before a full line"
    return line[:-1]


def kill(proc: subprocess.Popen[str]) -> str:
    """SIGKILL the process by its pid (if still running), reap it, and return what was left
    unread on its stdout (complete lines and possibly one partial last line)."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    rest = ""
    if proc.stdout is not None and not proc.stdout.closed:
        rest = proc.stdout.read()
        proc.stdout.close()
    return rest


# ---- the child's side ----------------------------------------------------------------------------


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def node_for(data_dir: str, durability: str = "normal", max_active: int = 10_000) -> Node:
    return Node(RuntimeSettings(data_dir=data_dir, durability=durability,
                                max_active_actors=max_active), objects=afs.ALL_OBJECTS)


async def hold(data_dir: str) -> None:
    async with node_for(data_dir):
        say(f"READY {os.getpid()}")
        await anyio.sleep_forever()


async def writer(data_dir: str, actors: int, alarm_base_ms: int, durability: str = "normal",
                 max_active: int = 10_000) -> None:
    async with node_for(data_dir, durability, max_active) as node:
        ids = []
        for i in range(actors):
            oid = await afs.new_scratch(node, f"writer-{i}")
            at = alarm_base_ms + i * 1000
            await afs.scratch(node, oid, afs.SetAlarm(at_ms=at))
            say(f"ALARM {oid} {at}")
            ids.append(oid)
        say("READY")

        async def stream(oid: str) -> None:
            n = 0
            while True:
                key = f"k{n:06d}"
                # Alternate explicit transactions and implicit (output-gated) writes.
                await afs.scratch(node, oid, afs.Put(k=key, v=f"value-{n}", tx=n % 2 == 0))
                say(f"ACK {oid} {key}")
                n += 1
                # The in-process call path does not yield when nothing blocks; let the other
                # writers (and the node's loops) in between calls.
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            for oid in ids:
                tg.start_soon(stream, oid)


async def dump(data_dir: str, ids: list[str]) -> None:
    async with node_for(data_dir) as node:
        for oid in ids:
            state = await afs.scratch(node, oid, afs.Dump())
            say(f"DUMP {oid} {json.dumps(state)}")
            at = await afs.scratch(node, oid, afs.GetAlarm())
            say(f"ALARMAT {oid} {json.dumps(at)}")


def main(argv: list[str]) -> None:
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    mode, data_dir, *rest = argv
    if mode == "hold":
        anyio.run(hold, data_dir)
    elif mode == "writer":
        anyio.run(writer, data_dir, int(rest[0]), int(rest[1]), *rest[2:3],
                  *map(int, rest[3:4]))
    elif mode == "dump":
        anyio.run(dump, data_dir, rest)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
