"""A test run ended with SIGTERM (a CI job's timeout, ``kill`` of a run left going) ends as one
stopped with Ctrl-C: pytest finishes the session, so every fixture's teardown runs and the
processes the tests started (PostgreSQL servers, nodes) are stopped by pid, not left orphaned.
Python's default SIGTERM ends the process at once, with no teardown. The suite's conftest takes
this hook; so does the test that proves it (``tests/ops/test_interrupted_run.py``).

A run in worker processes (pytest-xdist, ``make test``'s ``-n``): the tests and their fixtures
are in the workers, which a SIGTERM sent to the run's pid does not reach. The run passes the
signal on to each of its workers, which stop as above and tell the run they were interrupted;
the run then ends as after a Ctrl-C. (Left to itself, the run would end its workers through
pytest-xdist's shutdown, which waits 10 s for them and then kills them, teardowns unfinished.)"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import FrameType

import pytest


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _workers() -> list[int]:
    pids: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            pass
    return pids


def _pass_on(signum: int, frame: FrameType | None) -> None:
    workers = _workers()
    for pid in workers:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    if not workers:
        raise KeyboardInterrupt


def pytest_configure(config: pytest.Config) -> None:
    runs_workers = bool(getattr(config.option, "numprocesses", None)) and \
        not hasattr(config, "workerinput")  # a worker is given its input by the run
    signal.signal(signal.SIGTERM, _pass_on if runs_workers else _interrupt)
