"""``mailbox-actors migrate-to-postgres --data DIR --postgres DSN`` (CL-7): a single-machine
cluster's control data (``DIR/control.sqlite``) and queues (``DIR/queues.sqlite``) copied into a
PostgreSQL database, which the cluster then runs on with ``--postgres DSN``.

The cluster must be stopped (the command takes DIR's lock). Every row goes over in ONE PostgreSQL
transaction, in each table's own order (the event index keeps its paging order, the queues their
delivery order), so the target holds all of it or none of it. Idempotent: a row the target holds
already is left, and running it again copies nothing. A target holding any row the source does
not (another cluster's data) is refused before anything is written. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import sys
from pathlib import Path
from typing import Any

import anyio

__all__ = ["TABLES", "add_arguments", "run"]

# (file, table, key column, columns, order): in the order foreign keys need.
TABLES: tuple[tuple[str, str, str, tuple[str, ...], str], ...] = (
    ("control.sqlite", "tenants", "id", ("id", "name", "events_days", "webhook_url",
                                         "webhook_secret", "created_at_ms", "status"), "id"),
    ("control.sqlite", "identities", "id", ("id", "tenant_id", "name", "mailbox_id", "status",
                                            "created_at_ms"), "id"),
    ("control.sqlite", "domains", "id", ("id", "tenant_id", "name", "monitor_id", "created_at_ms",
                                         "state", "state_seq", "state_at_ms"), "id"),
    ("control.sqlite", "addresses", "address", ("address", "identity_id", "created_at_ms"),
     "address"),
    ("control.sqlite", "event_index", "event_id", ("event_id", "tenant_id", "identity_id",
                                                   "namespace", "object_id", "sequence", "type",
                                                   "occurred_at_ms"), "seq"),
    ("queues.sqlite", "messages", "id", ("id", "queue", "kind", "body", "enqueued_at_ms",
                                         "visible_at_ms", "attempts", "lease", "origin_queue",
                                         "reason", "failed_attempts"), "seq"),
    ("queues.sqlite", "dead_letters", "message_id", ("queue", "dead_letter_queue", "message_id",
                                                     "kind", "body", "reason", "attempts",
                                                     "enqueued_at_ms", "recorded_at_ms"), "seq"),
)
_CHUNK = 500


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="the stopped cluster's data directory")
    from mailbox_actors.node.postgres_flag import add_postgres_arguments

    add_postgres_arguments(p, where="refused: it is the target")


def run(args: argparse.Namespace) -> int:
    from mailbox_actors.node.shared_state import postgres_from
    from mailbox_actors.platform.locks import DataDirLock, DataDirLocked

    dsn = postgres_from(args.postgres)
    data = Path(args.data).resolve()
    if not dsn:
        return _fail("setting 'postgres' is required: --postgres DSN or MAILBOX_ACTORS_POSTGRES", 2)
    missing = [f for f in ("control.sqlite", "queues.sqlite") if not (data / f).is_file()]
    if missing:
        return _fail(f"no {' or '.join(missing)} in {data}: not a cluster's data directory", 2)
    lock = DataDirLock(data)
    try:
        lock.acquire()
    except DataDirLocked:
        return _fail(f"a cluster or node is running on {data}: stop it first", 1)
    try:
        return anyio.run(_migrate, data, dsn)
    finally:
        lock.release()


def _fail(text: str, status: int) -> int:
    print(f"mailbox-actors migrate-to-postgres: {text}", file=sys.stderr)
    return status


def _say(text: str) -> None:
    print(f"migrate-to-postgres: {text}", file=sys.stderr, flush=True)


async def _migrate(data: Path, dsn: str) -> int:
    from mailbox_actors.platform.clock import SystemClock
    from mailbox_actors.platform.control.database import ControlDb
    from mailbox_actors.platform.control.postgres_schema import CONTROL
    from mailbox_actors.platform.ids import Ids
    from mailbox_actors.platform.postgres.database import PgDatabase
    from mailbox_actors.platform.queues import QueueService
    from mailbox_actors.platform.queues.postgres import QUEUES
    from mailbox_actors.platform.rng import SystemRng
    from mailbox_actors.wire.errors import MailboxActorsError

    clock = SystemClock()
    ids = Ids(clock, SystemRng())
    try:
        # Opening brings older files to the current schema, the columns copied here.
        async with ControlDb(data / "control.sqlite", clock=clock, ids=ids), \
                QueueService(data / "queues.sqlite", clock=clock, ids=ids):
            pass
        source = _read(data)
        db = PgDatabase(dsn, schemas=[CONTROL, QUEUES], setting="postgres", min_size=1,
                        max_size=1)
        async with db:
            _say(f"target PostgreSQL at {db.where}")
            other = await db.run(lambda conn: _foreign(conn, source))
            if other:
                return _fail("the target already holds other data (" + ", ".join(
                    f"{n} row(s) of {t} not in {data}" for t, n in other) + "); give an "
                    "empty database, or the one this directory was migrated to", 1)
            copied = await db.run(lambda conn: _copy(conn, source))
    except MailboxActorsError as e:
        return _fail(e.message, 2 if getattr(e, "setting", None) else 1)
    total = sum(len(rows) for rows in source.values())
    _say(f"done: {copied} row(s) copied, {total - copied} already there; run the cluster with "
         "--postgres DSN (the SQLite files are left as they were)")
    return 0


def _read(data: Path) -> dict[str, list[tuple[Any, ...]]]:
    out: dict[str, list[tuple[Any, ...]]] = {}
    for file, table, _key, cols, order in TABLES:
        uri = (data / file).as_uri() + "?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
            out[table] = conn.execute(
                f"SELECT {', '.join(cols)} FROM {table} ORDER BY {order}").fetchall()
        _say(f"source {file}: {table} {len(out[table])} row(s)")
    return out


async def _foreign(conn: Any, source: dict[str, list[tuple[Any, ...]]]) -> list[tuple[str, int]]:
    """Per table, how many of the target's rows the source does not have."""
    other = []
    for _file, table, key, cols, _order in TABLES:
        mine = {r[cols.index(key)] for r in source[table]}
        cur = await conn.execute(f"SELECT {key} FROM {table}")
        extra = sum(1 for (k,) in await cur.fetchall() if k not in mine)
        if extra:
            other.append((table, extra))
    return other


async def _copy(conn: Any, source: dict[str, list[tuple[Any, ...]]]) -> int:
    copied = 0
    for _file, table, _key, cols, _order in TABLES:
        rows = source[table]
        done = 0
        for i in range(0, len(rows), _CHUNK):
            chunk = rows[i:i + _CHUNK]
            marks = ", ".join(["(" + ", ".join(["%s"] * len(cols)) + ")"] * len(chunk))
            cur = await conn.execute(
                f"INSERT INTO {table} ({', '.join(cols)}) VALUES {marks} ON CONFLICT DO NOTHING",
                [v for r in chunk for v in r])
            done += max(0, cur.rowcount)
            _say(f"{table}: {min(i + _CHUNK, len(rows))}/{len(rows)}")
        copied += done
    return copied
