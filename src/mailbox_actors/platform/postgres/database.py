"""One process's way to the cluster's PostgreSQL database (CL-7): a connection pool
(psycopg-pool), the components' migrations, and transactions retried when their connection died.

``open()`` connects once first, so a DSN that does not connect stops the process at start with
``PgUnreachable`` naming the setting (never the password); then it opens the pool and applies
every registered ``Schema``. ``run(fn)`` runs ``fn(conn)`` in one transaction; when the connection
dies under it (``pg_terminate_backend``, a server restart, a lost network) the transaction is
rolled back by the server and ``fn`` runs again on another connection from the start, until
``retry_for_s`` has passed (then ``unavailable``, retryable). A transaction is never half-applied;
when the connection dies during COMMIT it may have been applied, so ``fn`` must be safe to run
twice (the stores' statements are: inserts ignore a row they already hold, ids are chosen before).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg_pool import AsyncConnectionPool, PoolTimeout
except ImportError as e:  # pragma: no cover - the extra is installed wherever this is imported
    raise ImportError("mailbox-actors on PostgreSQL needs: "
                      "pip install 'mailbox-actors[postgres]'") from e

from mailbox_actors.platform.logging import get_logger
from mailbox_actors.platform.postgres.dsn import redact, strip_secret
from mailbox_actors.platform.postgres.listener import PgListener
from mailbox_actors.platform.postgres.migrations import Schema, apply_schema
from mailbox_actors.wire.errors import PlatformError, PlatformErrorKind

__all__ = ["PgDatabase", "PgUnreachable", "is_transient"]

T = TypeVar("T")
_log = get_logger("mailbox_actors.postgres")
_BACKOFF_S = (0.01, 0.05, 0.1, 0.2, 0.5)  # then 0.5 s until retry_for_s


class PgUnreachable(PlatformError):
    """The setting's DSN does not connect (at start): the process should exit 2."""

    def __init__(self, setting: str, dsn: str, why: str) -> None:
        super().__init__(
            PlatformErrorKind.INTERNAL, "postgres", "unreachable",
            f"setting '{setting}': cannot connect to PostgreSQL at {redact(dsn)}: "
            f"{strip_secret(why, dsn)}",
            details={"setting": setting, "where": redact(dsn)},
            fix=f"Check the '{setting}' setting (--postgres, MAILBOX_ACTORS_POSTGRES or the "
                "TOML key) and that the server accepts connections.")
        self.setting = setting


def is_transient(e: BaseException) -> bool:
    """Whether ``e`` says the connection or the server went away, or the transaction lost a
    race it may win when run again (a deadlock, a serialization failure)."""
    if isinstance(e, PoolTimeout | pg_errors.SerializationFailure | pg_errors.DeadlockDetected):
        return True
    if isinstance(e, pg_errors.IntegrityError | pg_errors.ProgrammingError | pg_errors.DataError):
        return False
    # OperationalError: AdminShutdown (terminated, restarting), CannotConnectNow (starting up),
    # ConnectionFailure, and psycopg's own "the connection is closed" / "consuming input failed".
    return isinstance(e, psycopg.OperationalError | psycopg.InterfaceError)


async def _apply(schema: Schema, conn: psycopg.AsyncConnection[Any]) -> tuple[int, int]:
    return await apply_schema(conn, schema)


class PgDatabase:
    """``async with PgDatabase(dsn, schemas=(...)) as db:`` then ``await db.run(fn)``.
    Opened once per user (``open`` counts): the control data and the queues share one pool."""

    def __init__(self, dsn: str, *, schemas: Sequence[Schema] = (), setting: str = "postgres",
                 min_size: int = 2, max_size: int = 10, connect_timeout_s: float = 5.0,
                 retry_for_s: float = 30.0) -> None:
        self.dsn = dsn
        self.setting = setting
        self.where = redact(dsn)
        self.retry_for_s = retry_for_s
        self._schemas: list[Schema] = list(schemas)
        self._connect_timeout_s = connect_timeout_s
        self._min, self._max = min_size, max_size
        self._pool: AsyncConnectionPool[Any] | None = None
        self._users = 0
        self._opening = anyio.Lock()
        # LISTEN/NOTIFY for every user of this database (started at open if subscribed to).
        self.listener = PgListener(dsn, self.where)

    def add_schema(self, schema: Schema) -> None:
        """Register a component's migrations (before ``open``, or applied at the next one)."""
        if all(s.component != schema.component for s in self._schemas):
            self._schemas.append(schema)

    @property
    def pool(self) -> AsyncConnectionPool[Any]:
        if self._pool is None:
            raise PlatformError(PlatformErrorKind.UNAVAILABLE, "postgres", "not_open",
                                "the PostgreSQL database is not open")
        return self._pool

    async def open(self) -> None:
        async with self._opening:
            self._users += 1
            if self._pool is not None:
                await self._migrate()
                return
            try:
                await self._first_connect()
                pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                    self.dsn, min_size=self._min, max_size=self._max, open=False,
                    timeout=min(5.0, self.retry_for_s), name="mailbox-actors",
                    kwargs={"autocommit": True,
                            "connect_timeout": max(1, round(self._connect_timeout_s))})
                await pool.open(wait=True, timeout=self._connect_timeout_s)
                self._pool = pool
                await self._migrate()
                await self.listener.start()
            except BaseException:
                self._users -= 1
                if self._pool is not None:
                    with anyio.CancelScope(shield=True):
                        await self.listener.stop()
                        await self._pool.close()
                    self._pool = None
                raise

    async def _first_connect(self) -> None:
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.dsn, connect_timeout=max(1, round(self._connect_timeout_s)), autocommit=True)
        except Exception as e:
            raise PgUnreachable(self.setting, self.dsn, str(e).strip().splitlines()[0]
                                if str(e).strip() else type(e).__name__) from None
        await conn.close()

    async def _migrate(self) -> None:
        for schema in self._schemas:
            found, now = await self.with_connection(functools.partial(_apply, schema))
            if found != now:
                _log.info("postgres_migrated", component=schema.component, from_version=found,
                          to_version=now)

    async def close(self) -> None:
        async with self._opening:
            self._users = max(0, self._users - 1)
            if self._users or self._pool is None:
                return
            pool, self._pool = self._pool, None
            with anyio.CancelScope(shield=True):
                await self.listener.stop()
                await pool.close()

    async def __aenter__(self) -> PgDatabase:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- running statements ----------------------------------------------------------------------

    async def with_connection(self, fn: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]
                              ) -> T:
        """``fn(conn)`` on a pooled connection in autocommit (``fn`` opens its own transactions),
        run again on a connection that died under it."""
        return await self._retrying(fn, transaction=False)

    async def run(self, fn: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]) -> T:
        """``fn(conn)`` in one transaction, run again from the start on a dead connection."""
        return await self._retrying(fn, transaction=True)

    async def _retrying(self, fn: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]], *,
                        transaction: bool) -> T:
        deadline: float | None = None
        tries = 0
        while True:
            try:
                async with self.pool.connection() as conn:
                    if not transaction:
                        return await fn(conn)
                    async with conn.transaction():
                        return await fn(conn)
            except Exception as e:
                if not is_transient(e):
                    raise
                now = anyio.current_time()
                deadline = now + self.retry_for_s if deadline is None else deadline
                if now >= deadline:
                    raise PlatformError(
                        PlatformErrorKind.UNAVAILABLE, "postgres", type(e).__name__,
                        f"PostgreSQL at {self.where} did not answer for {self.retry_for_s:g} s",
                        details={"error": type(e).__name__}) from e
                if tries == 0:
                    _log.warning("postgres_retry", error=type(e).__name__, where=self.where)
            await anyio.sleep(_BACKOFF_S[min(tries, len(_BACKOFF_S) - 1)])
            tries += 1

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection in autocommit, not retried (for what manages its own failures)."""
        async with self.pool.connection() as conn:
            yield conn
