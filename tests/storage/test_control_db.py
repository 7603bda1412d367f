"""The control database (Q-3): records, batches, the event index, validation, migrations, many writers."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from mailbox_actors.node.control_ops import create_identity
from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.platform.control.database import MIGRATIONS, ControlDb, ControlDbTooNew
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.rng import SeededRng
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.control import EventIndexRow
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

MAILBOX_A = "a" * 64
MAILBOX_B = "b" * 64
MONITOR_C = "c" * 64
SECRET = "s3cret-s3cret-s3cret"
EXTRA_MIGRATION = ("CREATE TABLE later_feature (k TEXT PRIMARY KEY)",)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ids(clock: FakeClock) -> Ids:
    return Ids(clock, SeededRng(7))


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "control.sqlite3"


@pytest.fixture
async def db(db_path: Path, clock: FakeClock, ids: Ids, pg_dsn: str | None
             ) -> AsyncIterator[ControlDb]:
    """The control database on each backend (``backend``: the SQLite file, PostgreSQL): the
    tests taking it are the contract both meet (CL-7)."""
    if pg_dsn is None:
        control = ControlDb(db_path, clock=clock, ids=ids)
    else:
        from mailbox_actors.platform.control.postgres import control_on
        from mailbox_actors.platform.postgres.database import PgDatabase
        control = control_on(PgDatabase(pg_dsn, retry_for_s=10), clock=clock, ids=ids)
    async with control:
        yield control


def event(n: int, tenant_id: str = "ten_1", identity_id: str | None = "idn_1") -> EventIndexRow:
    return EventIndexRow(event_id=f"evt_{n:06d}", tenant_id=tenant_id, identity_id=identity_id,
                         namespace="identity_mailbox", object_id=MAILBOX_A, sequence=n,
                         type="identity.created", occurred_at_ms=1_000 + n)


def raw_schema(path: Path) -> list[tuple[str, str, str, str | None]]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                            "ORDER BY type, name").fetchall()


def raw_scalar(path: Path, sql: str) -> object:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql).fetchone()[0]


async def code_of(awaitable: object) -> ErrorCode:
    with pytest.raises(MailboxActorsError) as info:
        await awaitable  # type: ignore[misc]
    return info.value.code


# ---- records ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_tenants_are_created_read_and_listed(db: ControlDb, clock: FakeClock) -> None:
    """Q-3: a tenant is stored with its defaults, webhook and the clock's time, and read back whole."""
    plain = await db.create_tenant("Acme")
    await clock.advance(5)
    hooked = await db.create_tenant("Globex", webhook_url="https://hooks.example/in",
                                    webhook_secret=SECRET, events_days=7)
    assert plain.id.startswith("ten_") and plain.events_days == 30 and plain.status == "active"
    assert plain.webhook_url is None and plain.webhook_secret is None
    assert plain.created_at_ms == hooked.created_at_ms - 5
    assert await db.get_tenant(hooked.id) == hooked
    assert await db.get_tenant("ten_missing") is None
    assert await db.list_tenants() == [plain, hooked]


@pytest.mark.anyio
async def test_tenant_repr_never_shows_the_webhook_secret(db: ControlDb) -> None:
    """Q-4/Q-3: a tenant record can be logged without leaking its webhook secret."""
    t = await db.create_tenant("Acme", webhook_url="http://hooks.example", webhook_secret=SECRET)
    assert SECRET not in repr(t) and SECRET not in str(t) and "<redacted>" in repr(t)


@pytest.mark.anyio
async def test_set_webhook_replaces_and_clears_the_endpoint(db: ControlDb) -> None:
    """Q-3: set_webhook replaces a tenant's endpoint and secret, clears both with None, and answers
    tenant_not_found for an unknown tenant."""
    t = await db.create_tenant("Acme")
    await db.set_webhook(t.id, "https://hooks.example/a", SECRET)
    got = await db.get_tenant(t.id)
    assert got is not None and (got.webhook_url, got.webhook_secret) == ("https://hooks.example/a", SECRET)
    await db.set_webhook(t.id, None, None)
    got = await db.get_tenant(t.id)
    assert got is not None and (got.webhook_url, got.webhook_secret) == (None, None)
    assert await code_of(db.set_webhook("ten_missing", None, None)) is ErrorCode.TENANT_NOT_FOUND
    assert await code_of(db.set_webhook(t.id, "ftp://x", SECRET)) is ErrorCode.INVALID_REQUEST


@pytest.mark.anyio
async def test_identities_are_created_read_listed_and_moved_forward(db: ControlDb) -> None:
    """Q-3: an identity starts 'creating' with its stored mailbox id, moves to active then erased,
    never backwards, and is listed only under its own tenant."""
    t1, t2 = await db.create_tenant("One"), await db.create_tenant("Two")
    a = await db.create_identity(t1.id, "sales", MAILBOX_A)
    b = await db.create_identity(t2.id, "sales", MAILBOX_B)  # same name, other tenant: fine
    assert a.id.startswith("idn_") and a.status == "creating" and a.mailbox_id == MAILBOX_A
    assert await db.get_identity(a.id) == a
    assert await db.get_identity_by_name(t1.id, "sales") == a
    assert await db.get_identity("idn_missing") is None
    assert await db.list_identities(t1.id) == [a] and await db.list_identities(t2.id) == [b]

    await db.set_identity_status(a.id, "active")
    await db.set_identity_status(a.id, "active")  # repeating is harmless
    got = await db.get_identity(a.id)
    assert got is not None and got.status == "active"
    assert await code_of(db.set_identity_status(a.id, "creating")) is ErrorCode.CONFLICT
    await db.set_identity_status(a.id, "erased")
    assert await code_of(db.set_identity_status(a.id, "active")) is ErrorCode.CONFLICT
    assert await code_of(db.set_identity_status(a.id, "paused")) is ErrorCode.INVALID_REQUEST
    assert await code_of(db.set_identity_status("idn_x", "active")) is ErrorCode.IDENTITY_NOT_FOUND


@pytest.mark.anyio
async def test_identity_refusals_write_nothing(db: ControlDb) -> None:
    """Q-3: an unknown tenant is tenant_not_found, a repeated name or mailbox id is conflict, a bad
    mailbox id is invalid_request, and none of them writes a row."""
    t = await db.create_tenant("One")
    await db.create_identity(t.id, "sales", MAILBOX_A)
    assert await code_of(db.create_identity("ten_missing", "x", MAILBOX_B)) is ErrorCode.TENANT_NOT_FOUND
    assert await code_of(db.create_identity(t.id, "sales", MAILBOX_B)) is ErrorCode.CONFLICT
    assert await code_of(db.create_identity(t.id, "other", MAILBOX_A)) is ErrorCode.CONFLICT
    for bad in ("A" * 64, "a" * 63, "g" * 64, ""):
        assert await code_of(db.create_identity(t.id, "x", bad)) is ErrorCode.INVALID_REQUEST
    for bad_name in ("", " ", "x" * 201, "a\nb"):
        assert await code_of(db.create_identity(t.id, bad_name, MAILBOX_B)) is ErrorCode.INVALID_REQUEST
    assert (await db.counts())["identities"] == 1


@pytest.mark.anyio
async def test_domains_are_created_read_listed_and_unique(db: ControlDb, clock: FakeClock) -> None:
    """Q-3: a domain is stored lower-cased with its monitor id, unique across the cluster, and only
    under an existing tenant."""
    t = await db.create_tenant("One")
    d = await db.create_domain(t.id, "Mail.Example.COM", MONITOR_C)
    assert d.id.startswith("dom_") and d.name == "mail.example.com" and d.created_at_ms == clock.now_ms()
    assert await db.get_domain(d.id) == d and await db.list_domains(t.id) == [d]
    assert await db.get_domain("dom_missing") is None
    assert await code_of(db.create_domain(t.id, "MAIL.example.com", "d" * 64)) is ErrorCode.CONFLICT
    assert await code_of(db.create_domain("ten_missing", "b.example", "d" * 64)) is ErrorCode.TENANT_NOT_FOUND
    for bad in ("", "localhost", "-a.example", "a..example", "a b.example", "x" * 64 + ".com"):
        assert await code_of(db.create_domain(t.id, bad, "d" * 64)) is ErrorCode.INVALID_REQUEST
    assert await code_of(db.create_domain(t.id, "b.example", "D" * 64)) is ErrorCode.INVALID_REQUEST
    assert await db.counts() == {"tenants": 1, "identities": 0, "domains": 1, "events": 0}


# ---- validation ---------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(("kwargs", "field"), [
    ({"name": ""}, "name"),
    ({"name": "   "}, "name"),
    ({"name": "x" * 101}, "name"),
    ({"name": "a\x00b"}, "name"),
    ({"events_days": 0}, "events_days"),
    ({"events_days": 3651}, "events_days"),
    ({"events_days": True}, "events_days"),
    ({"webhook_url": "ftp://hooks.example", "webhook_secret": SECRET}, "webhook_url"),
    ({"webhook_url": "https://", "webhook_secret": SECRET}, "webhook_url"),
    ({"webhook_url": "hooks.example/in", "webhook_secret": SECRET}, "webhook_url"),
    ({"webhook_url": "https://hooks.example:99999/", "webhook_secret": SECRET}, "webhook_url"),
    ({"webhook_url": "https://user:pw@hooks.example/", "webhook_secret": SECRET}, "webhook_url"),
    ({"webhook_url": "https://hooks.example/a b", "webhook_secret": SECRET}, "webhook_url"),
    ({"webhook_url": "https://hooks.example/"}, "webhook_secret"),
    ({"webhook_url": "https://hooks.example/", "webhook_secret": "short-secret"}, "webhook_secret"),
    ({"webhook_secret": SECRET}, "webhook_secret"),
])
async def test_tenant_validation_names_the_field(db: ControlDb, kwargs: dict[str, object],
                                                 field: str) -> None:
    """Q-3: a bad tenant name, events_days, webhook URL or secret is invalid_request naming the field,
    never echoing the secret, and nothing is written."""
    args: dict[str, object] = {"name": "Acme", **kwargs}
    with pytest.raises(MailboxActorsError) as info:
        await db.create_tenant(**args)  # type: ignore[arg-type]
    assert info.value.code is ErrorCode.INVALID_REQUEST
    assert info.value.details is not None and info.value.details["field"] == field
    assert SECRET not in str(info.value) and SECRET not in repr(info.value.details)
    assert (await db.counts())["tenants"] == 0


@pytest.mark.anyio
async def test_boundary_values_are_accepted(db: ControlDb) -> None:
    """Q-3: the limits themselves (100-character name, 1 and 3650 days, a 16-character secret) pass."""
    await db.create_tenant("x" * 100, events_days=1)
    await db.create_tenant("y", events_days=3650, webhook_url="http://127.0.0.1:8080/hook",
                           webhook_secret="0123456789abcdef")
    assert (await db.counts())["tenants"] == 2


# ---- batch ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_batch_commits_all_or_nothing(db: ControlDb) -> None:
    """Q-3: a batch is one transaction: when its last statement fails, its earlier ones are undone,
    and the failure is a MailboxActorsError (conflict for a constraint, internal_error otherwise)."""
    ins = "INSERT INTO tenants (id, name, events_days, created_at_ms) VALUES (?, ?, 30, 0)"
    await db.batch([(ins, ("ten_a", "A")), (ins, ("ten_b", "B"))])
    assert (await db.counts())["tenants"] == 2

    failing = [(ins, ("ten_c", "C")), (ins, ("ten_d", "D")), (ins, ("ten_a", "again"))]
    assert await code_of(db.batch(failing)) is ErrorCode.CONFLICT
    assert await code_of(db.batch([(ins, ("ten_e", "E")), ("INSERT INTO nowhere VALUES (1)", ())])) \
        is ErrorCode.INTERNAL_ERROR
    assert [r[0] for r in await db.fetch_all("SELECT id FROM tenants ORDER BY id")] == ["ten_a", "ten_b"]
    assert await db.fetch_one("SELECT name FROM tenants WHERE id = ?", ("ten_b",)) == ("B",)
    assert await db.fetch_one("SELECT name FROM tenants WHERE id = ?", ("ten_z",)) is None


@pytest.mark.anyio
async def test_a_cancelled_write_leaves_no_open_transaction(db_path: Path, clock: FakeClock,
                                                            ids: Ids) -> None:
    """Q-3: a write cancelled while it waits for the lock commits nothing and the next write works."""
    async with ControlDb(db_path, clock=clock, ids=ids, busy_timeout_ms=300) as db:
        holder = sqlite3.connect(db_path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            with anyio.move_on_after(0.05):
                await db.create_tenant("Cancelled")
            holder.execute("ROLLBACK")
        finally:
            holder.close()
        await db.create_tenant("After")
        assert [t.name for t in await db.list_tenants()] == ["After"]


@pytest.mark.anyio
async def test_a_lock_held_past_the_busy_timeout_is_unavailable(db_path: Path, clock: FakeClock,
                                                                ids: Ids) -> None:
    """Q-3: a writer that cannot get the lock within busy_timeout_ms gets retryable unavailable."""
    async with ControlDb(db_path, clock=clock, ids=ids, busy_timeout_ms=50) as db:
        holder = sqlite3.connect(db_path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            with pytest.raises(MailboxActorsError) as info:
                await db.index_events([event(1)])
            assert info.value.code is ErrorCode.UNAVAILABLE and info.value.retryable
        finally:
            holder.close()
        assert await db.index_events([event(1)]) == 1


@pytest.mark.anyio
async def test_a_closed_database_is_unavailable(db_path: Path, clock: FakeClock, ids: Ids) -> None:
    """Q-3: calls after close answer unavailable; closing twice is harmless."""
    db = ControlDb(db_path, clock=clock, ids=ids)
    await db.open()
    await db.close()
    await db.close()
    assert await code_of(db.list_tenants()) is ErrorCode.UNAVAILABLE


# ---- event index ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_index_events_is_idempotent(db: ControlDb) -> None:
    """Q-3, EV-2, EV-3: indexing the same event twice stores it once; the return counts only new rows."""
    assert await db.index_events([event(1), event(2), event(3)]) == 3
    assert await db.index_events([event(2), event(3), event(4), event(4)]) == 1
    assert await db.index_events([]) == 0
    assert (await db.counts())["events"] == 4
    assert await db.events("ten_1", limit=1) == [event(1)]


@pytest.mark.anyio
async def test_index_events_beyond_one_statement_is_one_transaction(db: ControlDb) -> None:
    """Q-3, EV-2: more rows than one INSERT takes are indexed together; the count is of new rows."""
    rows = [event(n) for n in range(1, 1_201)]
    assert await db.index_events(rows[:700]) == 700
    assert await db.index_events(rows) == 500
    assert (await db.counts())["events"] == 1_200


@pytest.mark.anyio
async def test_events_page_in_index_order_per_tenant(db: ControlDb) -> None:
    """Q-3: events() returns one tenant's rows in the order they were indexed, paged with
    after_event_id (an event indexed late, with an older id, still comes after the cursor)."""
    rows = [event(n, tenant_id="ten_1" if n % 3 else "ten_2") for n in range(1, 31)]
    assert await db.index_events(list(reversed(rows))) == 30
    mine = [r for r in reversed(rows) if r.tenant_id == "ten_1"]

    pages: list[list[EventIndexRow]] = []
    after: str | None = None
    while page := await db.events("ten_1", after_event_id=after, limit=7):
        pages.append(page)
        after = page[-1].event_id
    assert [len(p) for p in pages] == [7, 7, 6]
    assert [r for p in pages for r in p] == mine
    assert len(await db.events("ten_2")) == 10 and await db.events("ten_none") == []
    assert await code_of(db.events("ten_1", after_event_id="evt_unknown")) \
        is ErrorCode.INVALID_REQUEST
    for bad in (0, 1001, True):
        assert await code_of(db.events("ten_1", limit=bad)) is ErrorCode.INVALID_REQUEST
    bad_row = EventIndexRow("evt_x", "ten_1", None, "identity_mailbox", "nothex", 1, "t.x", 0)
    assert await code_of(db.index_events([event(99), bad_row])) is ErrorCode.INVALID_REQUEST
    assert (await db.counts())["events"] == 30


# ---- migrations -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_migrating_from_zero_step_by_step_gives_the_fresh_schema(tmp_path: Path, clock: FakeClock,
                                                                      ids: Ids) -> None:
    """Q-3: a file brought up one migration at a time from version 0 has exactly the schema of a file
    created fresh at the newest version, and the same schema_version."""
    fresh, stepped = tmp_path / "fresh.sqlite3", tmp_path / "stepped.sqlite3"
    async with ControlDb(fresh, clock=clock, ids=ids) as db:
        assert await db.schema_version() == len(MIGRATIONS)
    for k in range(len(MIGRATIONS) + 1):
        async with ControlDb(stepped, clock=clock, ids=ids, migrations=MIGRATIONS[:k]) as db:
            assert await db.schema_version() == k
    assert raw_schema(stepped) == raw_schema(fresh)
    names = {name for _, name, _, _ in raw_schema(fresh)}
    assert {"meta", "tenants", "identities", "domains", "event_index", "event_index_by_tenant"} <= names
    assert "event_index_v2" not in names
    assert raw_scalar(fresh, "PRAGMA journal_mode") == "wal"


@pytest.mark.anyio
async def test_reopening_a_current_file_changes_nothing(db_path: Path, clock: FakeClock, ids: Ids) -> None:
    """Q-3: opening a file already at the newest version writes nothing (SQLite's schema cookie and the
    rows are unchanged)."""
    async with ControlDb(db_path, clock=clock, ids=ids) as db:
        t = await db.create_tenant("Acme")
    cookie, schema = raw_scalar(db_path, "PRAGMA schema_version"), raw_schema(db_path)
    async with ControlDb(db_path, clock=clock, ids=ids) as db:
        assert await db.list_tenants() == [t]
    assert raw_scalar(db_path, "PRAGMA schema_version") == cookie and raw_schema(db_path) == schema


@pytest.mark.anyio
async def test_upgrade_applies_only_pending_migrations_and_keeps_rows(db_path: Path, clock: FakeClock,
                                                                      ids: Ids) -> None:
    """Q-3: newer code applies only the migrations the file lacks, in one step, keeping every row."""
    async with ControlDb(db_path, clock=clock, ids=ids) as db:
        t = await db.create_tenant("Acme")
    async with ControlDb(db_path, clock=clock, ids=ids, migrations=(*MIGRATIONS, EXTRA_MIGRATION)) as db:
        assert await db.schema_version() == len(MIGRATIONS) + 1
        assert await db.list_tenants() == [t]
        assert await db.fetch_all("SELECT * FROM later_feature") == []


@pytest.mark.anyio
async def test_a_newer_file_is_refused_not_downgraded(db_path: Path, clock: FakeClock, ids: Ids) -> None:
    """Q-3: code older than the file refuses it with internal_error naming both versions, and leaves the
    file as it was."""
    async with ControlDb(db_path, clock=clock, ids=ids, migrations=(*MIGRATIONS, EXTRA_MIGRATION)):
        pass
    schema = raw_schema(db_path)
    newer, known = len(MIGRATIONS) + 1, len(MIGRATIONS)
    db = ControlDb(db_path, clock=clock, ids=ids)
    with pytest.raises(ControlDbTooNew) as info:
        await db.open()
    assert info.value.code is ErrorCode.INTERNAL_ERROR
    assert f"schema_version {newer}" in info.value.message and f"up to {known}" in info.value.message
    assert raw_schema(db_path) == schema
    assert raw_scalar(db_path, "SELECT v FROM meta WHERE k = 'schema_version'") == str(newer)
    await db.close()  # never opened: harmless


@pytest.mark.anyio
async def test_an_unreadable_file_is_a_clear_internal_error(tmp_path: Path, clock: FakeClock,
                                                            ids: Ids) -> None:
    """Q-3: a file that is not a database is refused with internal_error naming its path."""
    path = tmp_path / "junk.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(MailboxActorsError) as info:
        await ControlDb(path, clock=clock, ids=ids).open()
    assert info.value.code is ErrorCode.INTERNAL_ERROR and str(path) in info.value.message


# ---- many writers -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_two_instances_writing_concurrently_both_succeed(db_path: Path, clock: FakeClock,
                                                               ids: Ids) -> None:
    """Q-3: 200 concurrent index_events calls through two instances on one file wait for the lock,
    all succeed, and every event is present once (overlapping calls insert it once in total)."""
    inserted = [0, 0]
    async with (ControlDb(db_path, clock=clock, ids=ids) as first,
                ControlDb(db_path, clock=clock, ids=ids) as second):

        async def write(which: int, db: ControlDb, i: int) -> None:
            # Call i of each instance writes events 2i and 2i+1; the two instances overlap on 2i+1.
            n = await db.index_events([event(2 * i + which), event(2 * i + 1)])
            inserted[which] += n  # not `+= await ...`: that reads the total before awaiting

        async with anyio.create_task_group() as tg:
            for i in range(100):
                tg.start_soon(write, 0, first, i)
                tg.start_soon(write, 1, second, i)
        assert sum(inserted) == 200
        assert (await first.counts())["events"] == 200
        assert sorted(r.event_id for r in await second.events("ten_1", limit=1000)) == \
            [f"evt_{n:06d}" for n in range(200)]


_WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    import anyio
    from mailbox_actors.platform.clock import SystemClock
    from mailbox_actors.platform.control.database import ControlDb
    from mailbox_actors.platform.ids import Ids
    from mailbox_actors.platform.rng import SystemRng
    from mailbox_actors.wire.control import EventIndexRow

    async def main(path: str, first: int, count: int) -> None:
        print("READY", flush=True)
        sys.stdin.readline()
        clock = SystemClock()
        inserted = 0
        async with ControlDb(Path(path), clock=clock, ids=Ids(clock, SystemRng())) as db:
            async def one(n: int) -> None:
                nonlocal inserted
                new = await db.index_events([EventIndexRow(
                    f"evt_{n:06d}", "ten_1", None, "identity_mailbox", "a" * 64, n, "t.x", n)])
                inserted += new
            async with anyio.create_task_group() as tg:
                for n in range(first, first + count):
                    tg.start_soon(one, n)
        print("INSERTED", inserted, flush=True)

    anyio.run(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), backend="asyncio")
""")


@contextlib.contextmanager
def writer_processes(path: Path, *ranges: tuple[int, int]) -> Iterator[list[subprocess.Popen[str]]]:
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(first), str(count)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for first, count in ranges]
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            p.wait()
            for stream in (p.stdin, p.stdout):
                if stream is not None:
                    stream.close()


@pytest.mark.anyio
async def test_two_processes_migrate_a_fresh_file_once_and_write_concurrently(
        db_path: Path, clock: FakeClock, ids: Ids) -> None:
    """Q-3: two node processes opening one fresh file at the same moment migrate it once (BEGIN
    IMMEDIATE), then write 150 events each concurrently (100 overlapping) and every event lands once."""
    with writer_processes(db_path, (0, 150), (50, 150)) as procs:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == "READY\n"
        for p in procs:  # release both together: they open, migrate and write at once
            assert p.stdin is not None
            p.stdin.write("GO\n")
            p.stdin.flush()
        outputs = [p.communicate(timeout=30)[0] for p in procs]
        assert [p.returncode for p in procs] == [0, 0]
    inserted = [int(out.split()[-1]) for out in outputs]
    assert sum(inserted) == 200
    async with ControlDb(db_path, clock=clock, ids=ids) as db:
        assert await db.schema_version() == len(MIGRATIONS)
        assert (await db.counts())["events"] == 200
        assert sorted(r.event_id for r in await db.events("ten_1", limit=1000)) == \
            [f"evt_{n:06d}" for n in range(200)]


def index_row(event_id: str) -> EventIndexRow:
    return EventIndexRow(event_id, "ten_1", None, "identity_mailbox", "a" * 64, 1, "t.x", 0)


@pytest.mark.anyio
async def test_creating_an_identity_with_an_erased_ones_name_is_a_conflict(tmp_path: Path) -> None:
    """Q-3, OBJ-1: an erased identity's name is not handed back as if created: conflict."""
    async with TestRuntime(tmp_path, control=True) as rt:
        db = rt.node.control_db
        assert db is not None
        tenant = await db.create_tenant("acme")
        ident = await create_identity(db, rt.node, tenant.id, "alice")
        await db.set_identity_status(ident.id, "erased")
        with pytest.raises(MailboxActorsError) as info:
            await create_identity(db, rt.node, tenant.id, "alice")
        assert info.value.code is ErrorCode.CONFLICT


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["10.0.0.1", "a.b", "example.123", "example.com"])
async def test_the_control_database_stores_exactly_the_domains_a_monitor_accepts(
        tmp_path: Path, name: str) -> None:
    """Q-3, OBJ-3: a domain the control database stores is one DomainMonitor's init accepts, and
    the other way round: no domain recorded that no monitor can watch."""
    from mailbox_actors.wire.domain import DomainInit

    async with TestRuntime(tmp_path, control=True) as rt:
        db = rt.node.control_db
        assert db is not None
        tenant = await db.create_tenant("acme")
        try:
            await db.create_domain(tenant.id, name, "c" * 64)
            stored = True
        except MailboxActorsError:
            stored = False
        try:
            await rt.call("domain_monitor", rt.id_from_name("domain_monitor", name),
                          DomainInit(domain=name), tenant_id=tenant.id)
            watched = True
        except MailboxActorsError:
            watched = False
        assert stored == watched == (name == "example.com")


@pytest.mark.anyio
async def test_paging_the_event_index_never_misses_an_event_indexed_late(tmp_path: Path) -> None:
    """Q-3, EV-2: an event whose dispatch was retried is indexed after newer ones; a consumer
    paging with after_event_id still gets it on its next page."""
    clock = FakeClock()
    async with ControlDb(tmp_path / "c.sqlite", clock=clock, ids=Ids(clock, SeededRng(1))) as db:
        await db.index_events([index_row("evt_2"), index_row("evt_3")])
        page = await db.events("ten_1")
        await db.index_events([index_row("evt_1")])  # older id, indexed late
        later = await db.events("ten_1", after_event_id=page[-1].event_id)
    assert [r.event_id for r in page + later] == ["evt_2", "evt_3", "evt_1"]


@pytest.mark.anyio
async def test_an_older_control_database_keeps_its_events_when_upgraded(tmp_path: Path) -> None:
    """Q-3: a file at schema version 1 (events paged by id) is upgraded with every event kept,
    in id order, and new events come after them."""
    clock = FakeClock()
    path = tmp_path / "c.sqlite"
    async with ControlDb(path, clock=clock, ids=Ids(clock, SeededRng(1)),
                         migrations=MIGRATIONS[:1]) as db:
        await db.index_events([index_row("evt_3"), index_row("evt_1"), index_row("evt_2")])
    async with ControlDb(path, clock=clock, ids=Ids(clock, SeededRng(1))) as db:
        assert await db.schema_version() == len(MIGRATIONS)
        await db.index_events([index_row("evt_0")])
        assert [r.event_id for r in await db.events("ten_1")] == ["evt_1", "evt_2", "evt_3",
                                                                  "evt_0"]
