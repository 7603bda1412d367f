"""Actors that exist only for the runtime tests, and helpers to drive them through the public API.

``Scratch`` (namespace ``scratch``) stores key/value rows, sets its alarm, records every alarm run,
and runs test-supplied hooks (``run(rt, oid, fn)``) inside its handler, so a test can exercise the
actor API (SQL, transactions, gate, calls) exactly as an object's own code would. ``Purposes``
(namespace ``purposes``) multiplexes alarm purposes with the runtime's default alarm handler. The
``Mig*`` classes are versions of one namespace's code with different migration lists.

Module state (hooks and logs) is per process; tests clear it with ``reset_state()``.
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol

import msgspec

from mailbox_actors.objects import DEFAULT_OBJECTS
from mailbox_actors.platform.logging import bound_request_id
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.runtime.actor import Actor, AlarmInfo, Call
from mailbox_actors.runtime.migrations import Migration
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError

TENANT = "t_test"


# ---- Scratch -------------------------------------------------------------------------------------


class Init(msgspec.Struct, tag="init", tag_field="op", forbid_unknown_fields=True):
    alarm_at: int | None = None


class Put(msgspec.Struct, tag="put", tag_field="op", forbid_unknown_fields=True):
    k: str
    v: str
    tx: bool = True  # False: plain exec, committed by the runtime (implicit transaction)


class Get(msgspec.Struct, tag="get", tag_field="op", forbid_unknown_fields=True):
    k: str


class Dump(msgspec.Struct, tag="dump", tag_field="op", forbid_unknown_fields=True):
    pass


class SetAlarm(msgspec.Struct, tag="set_alarm", tag_field="op", forbid_unknown_fields=True):
    at_ms: int | None


class GetAlarm(msgspec.Struct, tag="get_alarm", tag_field="op", forbid_unknown_fields=True):
    pass


class Fired(msgspec.Struct, tag="fired", tag_field="op", forbid_unknown_fields=True):
    pass


class Run(msgspec.Struct, tag="run", tag_field="op", forbid_unknown_fields=True):
    hook: str
    arg: Any = None


ScratchRequest = Init | Put | Get | Dump | SetAlarm | GetAlarm | Fired | Run


class AlarmSeen(msgspec.Struct, frozen=True):
    """What one run of Scratch's alarm handler saw."""

    object_id: str
    retry_count: int
    is_retry: bool
    scheduled_ms: int
    now_ms: int
    get_alarm_during: int | None
    request_id: str | None


class Hook(Protocol):
    def __call__(self, actor: Scratch, call: Call, arg: Any) -> Awaitable[Any]: ...


AlarmHook = Callable[["Scratch", AlarmInfo], Awaitable[None]]

HOOKS: dict[str, Hook] = {}
ALARM_HOOKS: dict[str, AlarmHook] = {}  # object id -> extra work for its alarm handler
ALARM_LOG: list[AlarmSeen] = []
PURPOSE_LOG: list[tuple[str, str, int]] = []  # (object id, purpose, now_ms)
FAIL_PURPOSE_ONCE: set[str] = set()
_names = itertools.count()


def reset_state() -> None:
    HOOKS.clear()
    ALARM_HOOKS.clear()
    ALARM_LOG.clear()
    PURPOSE_LOG.clear()
    FAIL_PURPOSE_ONCE.clear()


class Scratch(Actor):
    namespace = "scratch"
    requests = ScratchRequest
    init_request = Init
    owner_kind = "tenant"
    not_found = ErrorCode.TENANT_NOT_FOUND
    migrations = (
        Migration(1, (
            "CREATE TABLE items (k TEXT PRIMARY KEY, v TEXT NOT NULL)",
            "CREATE TABLE totals (id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL)",
            "CREATE TABLE fired (n INTEGER PRIMARY KEY, at_ms INTEGER NOT NULL, "
            "scheduled_ms INTEGER NOT NULL, retry_count INTEGER NOT NULL)",
        )),
    )

    async def handle(self, call: Call, req: Any) -> Any:
        match req:
            case Init():
                return self.sql.transaction_sync(lambda tx: self._init(tx, call, req))
            case Put(tx=True):
                return self.sql.transaction_sync(lambda tx: self._put(tx, req))
            case Put():
                return self._put(self.sql, req)
            case Get():
                rows = self.sql.exec("SELECT v FROM items WHERE k = ?", req.k).all()
                return rows[0][0] if rows else None
            case Dump():
                keys = [r[0] for r in self.sql.exec("SELECT k FROM items ORDER BY k")]
                total = self.sql.exec("SELECT n FROM totals WHERE id = 1").one()[0]
                return {"keys": keys, "total": total}
            case SetAlarm():
                return self.sql.transaction_sync(lambda tx: self._set_alarm(tx, req.at_ms))
            case GetAlarm():
                return self.sql.get_alarm()
            case Fired():
                return [list(r) for r in self.sql.exec(
                    "SELECT at_ms, scheduled_ms, retry_count FROM fired ORDER BY n")]
            case Run():
                return await HOOKS[req.hook](self, call, req.arg)
        raise InvalidRequest("unknown op")

    def _init(self, tx: SqlStorage, call: Call, req: Init) -> dict[str, bool]:
        created = self.ctx.claim_owner(call)
        tx.exec("INSERT OR IGNORE INTO totals (id, n) VALUES (1, 0)")
        if req.alarm_at is not None:
            tx.set_alarm(req.alarm_at)
        return {"created": created}

    @staticmethod
    def _put(sql: SqlStorage, req: Put) -> dict[str, str]:
        sql.exec("INSERT OR REPLACE INTO items (k, v) VALUES (?, ?)", req.k, req.v)
        sql.exec("UPDATE totals SET n = (SELECT count(*) FROM items) WHERE id = 1")
        return {"k": req.k}

    @staticmethod
    def _set_alarm(tx: SqlStorage, at_ms: int | None) -> int | None:
        if at_ms is None:
            tx.delete_alarm()
        else:
            tx.set_alarm(at_ms)
        return tx.get_alarm()

    async def alarm(self, info: AlarmInfo) -> None:
        now = self.ctx.now_ms()
        request_id = bound_request_id()
        ALARM_LOG.append(AlarmSeen(self.ctx.id, info.retry_count, info.is_retry, info.scheduled_ms,
                                   now, self.sql.get_alarm(), request_id))
        self.sql.transaction_sync(lambda tx: tx.exec(
            "INSERT INTO fired (at_ms, scheduled_ms, retry_count) VALUES (?, ?, ?)",
            now, info.scheduled_ms, info.retry_count))
        hook = ALARM_HOOKS.get(self.ctx.id)
        if hook is not None:
            await hook(self, info)


# ---- Purposes ------------------------------------------------------------------------------------


class PInit(msgspec.Struct, tag="init", tag_field="op", forbid_unknown_fields=True):
    pass


class Schedule(msgspec.Struct, tag="schedule", tag_field="op", forbid_unknown_fields=True):
    purpose: str
    at_ms: int


class PState(msgspec.Struct, tag="state", tag_field="op", forbid_unknown_fields=True):
    pass


PurposesRequest = PInit | Schedule | PState

DAY_MS = 86_400_000


class Purposes(Actor):
    namespace = "purposes"
    requests = PurposesRequest
    init_request = PInit
    migrations = (Migration(1, ("CREATE TABLE runs (purpose TEXT NOT NULL, at_ms INTEGER NOT NULL)",)),)
    alarm_purposes: ClassVar[Mapping[str, str]] = {
        "outbox": "run_outbox", "check": "run_check", "maintenance": "run_maintenance"}

    async def handle(self, call: Call, req: Any) -> Any:
        match req:
            case PInit():
                return self.sql.transaction_sync(lambda _tx: self.ctx.claim_owner(call))
            case Schedule():
                self.sql.transaction_sync(lambda _tx: self.ctx.schedule(req.purpose, req.at_ms))
                return self._state()
            case PState():
                return self._state()
        raise InvalidRequest("unknown op")

    def _state(self) -> dict[str, Any]:
        return {"alarm": self.sql.get_alarm(), "scheduled": self.ctx.scheduled()}

    def _ran(self, purpose: str) -> None:
        if purpose in FAIL_PURPOSE_ONCE:
            FAIL_PURPOSE_ONCE.discard(purpose)
            raise RuntimeError(f"purpose {purpose} fails once")
        now = self.ctx.now_ms()
        PURPOSE_LOG.append((self.ctx.id, purpose, now))
        self.sql.transaction_sync(lambda tx: tx.exec(
            "INSERT INTO runs (purpose, at_ms) VALUES (?, ?)", purpose, now))

    async def run_outbox(self) -> None:
        self._ran("outbox")

    async def run_check(self) -> None:
        self._ran("check")

    async def run_maintenance(self) -> None:
        self._ran("maintenance")  # recurs daily, as AL-6's maintenance does
        self.sql.transaction_sync(
            lambda tx: self.ctx.schedule("maintenance", tx.now_ms() + DAY_MS))


# ---- Migrations: versions of one namespace's code ------------------------------------------------


class MInit(msgspec.Struct, tag="init", tag_field="op", forbid_unknown_fields=True):
    pass


class MAdd(msgspec.Struct, tag="add", tag_field="op", forbid_unknown_fields=True):
    a: str


class MInfo(msgspec.Struct, tag="info", tag_field="op", forbid_unknown_fields=True):
    pass


MigRequest = MInit | MAdd | MInfo

MIG_1 = Migration(1, ("CREATE TABLE t (a TEXT NOT NULL)",))
MIG_2 = Migration(2, (
    "ALTER TABLE t ADD COLUMN b TEXT NOT NULL DEFAULT 'from-v2'",
    "CREATE TABLE t2 (x INTEGER)",
    "INSERT INTO t2 (x) SELECT count(*) FROM t",
))
MIG_2_BROKEN = Migration(2, (
    "ALTER TABLE t ADD COLUMN b TEXT NOT NULL DEFAULT 'from-v2'",
    "INSERT INTO no_such_table (x) VALUES (1)",
))


class MigBase(Actor):
    namespace = "migr"
    requests = MigRequest
    init_request = MInit

    async def handle(self, call: Call, req: Any) -> Any:
        match req:
            case MInit():
                return self.sql.transaction_sync(lambda _tx: self.ctx.claim_owner(call))
            case MAdd():
                self.sql.transaction_sync(lambda tx: tx.exec("INSERT INTO t (a) VALUES (?)", req.a))
                return None
            case MInfo():
                cur = self.sql.exec("SELECT * FROM t ORDER BY a")
                rows = [list(r) for r in cur]
                tables = sorted(r[0] for r in self.sql.exec(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"))
                return {"schema_version": self.ctx.schema_version, "columns": cur.column_names,
                        "rows": rows, "tables": tables}
        raise InvalidRequest("unknown op")


class MigV1(MigBase):
    migrations = (MIG_1,)


class MigV2(MigBase):
    migrations = (MIG_1, MIG_2)


class MigV2Broken(MigBase):
    migrations = (MIG_1, MIG_2_BROKEN)


# ---- helpers -------------------------------------------------------------------------------------

ALL_OBJECTS = (*DEFAULT_OBJECTS, Scratch, Purposes)


class Caller(Protocol):
    async def call(self, namespace: str, object_id: str, req: Any, **kw: Any) -> Any: ...

    def id_from_name(self, namespace: str, name: str) -> str: ...


async def new_scratch(rt: Caller, name: str, alarm_at: int | None = None) -> str:
    """Create (init) a Scratch actor owned by TENANT; returns its id."""
    oid = rt.id_from_name("scratch", name)
    await rt.call("scratch", oid, Init(alarm_at=alarm_at), tenant_id=TENANT)
    return oid


async def scratch(rt: Caller, oid: str, req: Any, **kw: Any) -> Any:
    return await rt.call("scratch", oid, req, tenant_id=TENANT, **kw)


def hook(fn: Hook) -> str:
    """Register ``fn(actor, call, arg)`` to run inside Scratch's handler; returns its name."""
    name = f"hook{next(_names)}"
    HOOKS[name] = fn
    return name


async def run(rt: Caller, oid: str, fn: Hook, arg: Any = None, **kw: Any) -> Any:
    """Run ``fn`` inside the Scratch actor ``oid``'s handler, through the full RPC path."""
    return await scratch(rt, oid, Run(hook=hook(fn), arg=arg), **kw)


def exec_outcomes(actor: Scratch, queries: tuple[str, ...]) -> list[str]:
    """Each statement run in ``actor``: "ran", or the error code it was refused with."""
    out = []
    for sql in queries:
        try:
            actor.sql.exec(sql).all()
            out.append("ran")
        except MailboxActorsError as e:
            out.append(e.code.value)
    return out


# Alarm hooks of the acknowledgement tests (an alarm is acknowledged only after its own commit),
# for an actor open at its alarm and for one opened for its alarm alone.


def items_in_file(path: Path) -> list[tuple[str, str]]:
    """A Scratch actor's ``items`` as its file holds them (read-only, beside the runtime)."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return conn.execute("SELECT k, v FROM items ORDER BY k").fetchall()


async def writes_implicitly(actor: Scratch, _info: object) -> None:
    """An alarm hook writing one row with no transaction of its own (an implicit one)."""
    actor.sql.exec("INSERT INTO items (k, v) VALUES ('x', '1')")


async def writes_then_loses_them(actor: Scratch, _info: object) -> None:
    """An alarm hook whose writes SQLite rolls back while the handler returns as if all went
    well: the conflict of OR ROLLBACK rolls back the whole implicit transaction, the first insert
    with it, and the handler swallows the error."""
    actor.sql.exec("INSERT INTO items (k, v) VALUES ('x', '1')")
    with contextlib.suppress(sqlite3.IntegrityError):
        actor.sql.exec("INSERT OR ROLLBACK INTO items (k, v) VALUES ('x', '2')")


async def doomed_transaction(actor: Any, write: Callable[[Any], Any], inside: Any,
                             go: Any) -> str:
    """``write`` in the actor's ctx.transaction (RT-16), which then waits for the event ``go``
    (``inside`` set meanwhile) and raises: "rolled back" (or "committed")."""
    async def work(tx: Any) -> None:
        write(tx)
        inside.set()
        await go.wait()
        raise LookupError("undo")
    try:
        await actor.ctx.transaction(work)
    except LookupError:
        return "rolled back"
    return "committed"
