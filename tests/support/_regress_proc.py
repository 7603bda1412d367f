"""Node processes for the crash regression tests: ``python tests/support/_regress_proc.py MODE DATA_DIR``.

Each mode stops the node at a chosen point, says so on stdout (one flushed line), and waits there to
be killed with SIGKILL by the test:

- ``purpose DATA``: schedule the ``check`` purpose of a Purposes actor, fire its alarm, and hang
  inside ``run_check`` after printing ``RUNNING <object id> <now_ms>``.
- ``scan DATA``: start a node whose alarm index is missing, and hang while the start-up scan reads
  its second actor file, after printing ``SCANNING``.

Logs go to stderr so stdout carries only these lines.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import anyio
import structlog

import actors_for_tests as afs
from mailbox_actors.runtime import scan as scan_module
from mailbox_actors.testing import TestRuntime

TESTS_DIR = Path(__file__).resolve().parent


def spawn(mode: str, data_dir: Path, *, log: IO[str]) -> subprocess.Popen[str]:
    """Start ``_regress_proc.py MODE DATA_DIR`` with this Python; stderr goes to ``log``."""
    return subprocess.Popen(
        [sys.executable, str(TESTS_DIR / "_regress_proc.py"), mode, str(data_dir)],
        stdout=subprocess.PIPE, stderr=log, text=True, cwd=TESTS_DIR.parents[1])


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def purpose(data_dir: str) -> None:
    async def hang_in_check(self: afs.Purposes) -> None:
        say(f"RUNNING {self.ctx.id} {self.ctx.now_ms()}")
        await anyio.Event().wait()  # the kill lands while the purpose's method runs

    afs.Purposes.run_check = hang_in_check  # type: ignore[method-assign]
    async with TestRuntime(data_dir, objects=afs.ALL_OBJECTS) as rt:
        oid = rt.id_from_name("purposes", "p")
        await rt.call("purposes", oid, afs.PInit(), tenant_id=afs.TENANT)
        await rt.call("purposes", oid, afs.Schedule(purpose="check", at_ms=rt.now_ms() + 1_000),
                      tenant_id=afs.TENANT)
        await rt.advance(1_000)


async def scan(data_dir: str) -> None:
    real_open = scan_module.open_storage
    opened = 0

    def open_then_hang(*args: Any, **kw: Any) -> Any:
        nonlocal opened
        opened += 1
        if opened == 2:  # part-way: one file read, more to go
            say("SCANNING")
            time.sleep(3_600)  # the scan is synchronous; the kill lands here
        return real_open(*args, **kw)

    scan_module.open_storage = open_then_hang  # type: ignore[assignment]
    async with TestRuntime(data_dir, objects=afs.ALL_OBJECTS):
        say("STARTED")  # never reached when the kill lands during the scan


def main(argv: list[str]) -> None:
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    mode, data_dir = argv
    if mode == "purpose":
        anyio.run(purpose, data_dir)
    elif mode == "scan":
        anyio.run(scan, data_dir)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
