"""Shared pytest configuration: async tests run on asyncio only (aiosqlite needs it), and no test
leaks its logging configuration into the next."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mailbox_actors.platform.logging import reset_logging


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _fresh_logging() -> Iterator[None]:
    yield
    reset_logging()
