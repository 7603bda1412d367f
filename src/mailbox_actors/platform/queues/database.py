"""The queue database file (Q-1): the shared SQLite file (``platform.sqlite.shared_file``) holding
every queue, its schema brought up to date through ``PRAGMA user_version``.

Statements and transactions run shielded from cancellation; past the busy timeout a lock is
retryable ``unavailable``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from mailbox_actors.platform.queues.schema import MIGRATIONS
from mailbox_actors.platform.sqlite.shared_file import SharedSqliteFile
from mailbox_actors.wire.errors import PlatformError, PlatformErrorKind

__all__ = ["queue_file"]


def queue_file(path: Path, *, busy_timeout_ms: int = 10_000) -> SharedSqliteFile:
    path = Path(path)

    def mapped(e: sqlite3.Error) -> Exception:
        text = str(e)
        if isinstance(e, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
            return PlatformError(PlatformErrorKind.UNAVAILABLE, "queue_db", "locked",
                                 f"queue database {path} stayed locked past the busy timeout")
        return e

    return SharedSqliteFile(path, what="queue database", busy_timeout_ms=busy_timeout_ms,
                            migrate=_migrate, map_error=mapped, shielded=True,
                            not_open=lambda: RuntimeError(
                                "QueueService is not open: call open() or use 'async with'"))


async def _migrate(f: SharedSqliteFile) -> None:
    async with f.transaction() as conn:
        rows = await conn.execute_fetchall("PRAGMA user_version")
        version = int(next(iter(rows))[0])
        if version > len(MIGRATIONS):
            raise PlatformError(
                PlatformErrorKind.INTERNAL, "queue_db", "schema_too_new",
                f"queue database {f.path} has schema version {version}, newer than this "
                f"code's {len(MIGRATIONS)}; upgrade mailbox-actors")
        for statements in MIGRATIONS[version:]:
            for sql in statements:
                await conn.execute_fetchall(sql)
        if version < len(MIGRATIONS):
            await conn.execute_fetchall(f"PRAGMA user_version = {len(MIGRATIONS)}")
