"""Shared pytest configuration: async tests run on asyncio only (aiosqlite needs it), and no test
leaks its logging configuration, or the hooks and logs of the test actors, into the next."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import actors_for_tests
from mailbox_actors.platform.logging import reset_logging
from sigterm_teardown import pytest_configure  # noqa: F401  (a hook: SIGTERM tears down)


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


# The slowest folders, run last in this order (namespaced machines, real browsers). The console
# folder is last: its stack (a cluster, two consoles, Chromium asking a page every 500 ms) is
# "package"-scoped, which in a folder without __init__.py lasts until the session ends, so run
# earlier it went on beside the fault tests' real-time runs and was stopped only after them.
_LAST = ("tests/cluster/", "tests/cluster/faults/", "tests/console/")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Cheap tests first: a failure shows in the first minutes, not after the fault tests. A
    module is moved whole (its module-scoped fixtures set up once): modules with no slow test
    first, then those with one, then the browser and the namespaced-machines folders."""
    def rank(item: pytest.Item) -> tuple[int, int]:
        path = item.nodeid.split("::", 1)[0]
        last = max((i + 1 for i, folder in enumerate(_LAST) if path.startswith(folder)), default=0)
        return (last, 1 if path in slow_modules else 0)

    slow_modules = {item.nodeid.split("::", 1)[0] for item in items
                    if item.get_closest_marker("slow") is not None}
    items.sort(key=rank)  # stable: the order inside a module, and among equals, is kept
