"""Shared pytest configuration: async tests run on asyncio only (aiosqlite needs it), and no test
leaks its logging configuration, or the hooks and logs of the test actors, into the next."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import actors_for_tests
from mailbox_actors.platform.logging import reset_logging


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _fresh_logging() -> Iterator[None]:
    yield
    reset_logging()


@pytest.fixture(autouse=True)
def _fresh_test_actors() -> Iterator[None]:
    """The test actors' hooks and logs are module state: every test starts and ends with them empty."""
    actors_for_tests.reset_state()
    yield
    actors_for_tests.reset_state()
