"""The shared-state backends the control database and the queues are tested on (Q-3, CL-7): the
``backend`` fixture runs a test on the SQLite file and on PostgreSQL, a real server started once
for the session and stopped by pid (``_pg``), a new database per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from _pg import PgServer, new_database, serving


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    with serving() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def pg_dsn(backend: str, request: pytest.FixtureRequest) -> str | None:
    """A new database's DSN when ``backend`` is postgres, else None."""
    if backend != "postgres":
        return None
    return new_database(request.getfixturevalue("pg_server"))
