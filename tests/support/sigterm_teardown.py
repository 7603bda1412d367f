"""A test run ended with SIGTERM (a CI job's timeout, ``kill`` of a run left going) ends as one
stopped with Ctrl-C: pytest finishes the session, so every fixture's teardown runs and the
processes the tests started (PostgreSQL servers, nodes) are stopped by pid, not left orphaned.
Python's default SIGTERM ends the process at once, with no teardown. The suite's conftest takes
this hook; so does the test that proves it (``tests/ops/test_interrupted_run.py``)."""

from __future__ import annotations

import signal
from types import FrameType

import pytest


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def pytest_configure(config: pytest.Config) -> None:
    signal.signal(signal.SIGTERM, _interrupt)
