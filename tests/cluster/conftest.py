"""A real PostgreSQL server for the cluster tests, started and stopped by pid (``_pg``); each test
gets its own database in it."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import psycopg
import pytest

from _pg import PgServer, find_binaries

_dbs = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    bindir, why = find_binaries()
    if bindir is None:
        pytest.skip(why)
    server = PgServer(bindir)
    server.start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def pg_dsn(pg_server: PgServer) -> str:
    """A fresh database of the session's server."""
    name = f"cl_{next(_dbs)}"
    with psycopg.connect(pg_server.conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return pg_server.dsn(name)
