"""Actors for the Post tests: a producer (namespace ``post_producer``) and a receiver
(``post_receiver``) whose answers a test scripts per key and attempt.

``SCRIPT[key]`` is a list of what the receiver does at each attempt of that key, in turn:
``"ok"`` (apply and admit), ``"fail"`` (raise ``unavailable`` before applying), ``"lose"`` (apply
and commit, then answer ``unavailable``: a lost answer), ``"garbage"`` (answer something that is
not a Post answer), ``"refuse"`` (a definite refusal), ``"refuse_receipt"`` and ``"fail_receipt"``
(a refusal, or a failure to retry, each with a receipt). Past the list's end it is ``"ok"``.
``ON_DELIVER`` callables see each invocation's key before anything else happens.
Module state is per process; tests clear it with ``reset()``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar

import msgspec

from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.platform.storage.readonly import read_only
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.post.actor_post import Post
from mailbox_actors.post.receiver import receive
from mailbox_actors.post.routes import Prepare, Route, Routes
from mailbox_actors.post.sql import POST_RECEIVER_SCHEMA, POST_RUNS, POST_SCHEMA
from mailbox_actors.runtime.actor import Actor, Call
from mailbox_actors.runtime.migrations import Migration
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError
from mailbox_actors.wire.post import PostDeliver, PostEnvelope

TENANT = "t_post"
SCRIPT: dict[str, list[str]] = {}
ATTEMPTS: dict[str, int] = {}
PREPARED: list[str] = []            # intents prepare() was run for, in order
PREPARE_CLOCK: list[FakeClock] = []  # set by a test: prepare() jumps it past the deadline once
DELIVERED_HOOK: list[str] = []       # keys on_delivered saw
HOOK_FAILS: set[str] = set()         # keys whose on_delivered raises (once each)
PREPARE_FAILS: list[int] = []        # [n]: the next n preparations raise
ON_DELIVER: list[Callable[[str], None]] = []  # called with the key at each receiver invocation


def reset() -> None:
    SCRIPT.clear()
    ATTEMPTS.clear()
    PREPARED.clear()
    PREPARE_CLOCK.clear()
    DELIVERED_HOOK.clear()
    HOOK_FAILS.clear()
    PREPARE_FAILS.clear()
    ON_DELIVER.clear()


class Inbox(msgspec.Struct, frozen=True):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=50)]


class Note(msgspec.Struct, frozen=True):
    text: Annotated[str, msgspec.Meta(max_length=100)]


class Intent(msgspec.Struct, frozen=True):
    what: str


class Fact(msgspec.Struct, frozen=True):
    what: str
    grant: str


async def _prepare(address: Inbox, intent: Intent, deadline_ms: int) -> Fact:
    if PREPARE_FAILS and PREPARE_FAILS[0] > 0:
        PREPARE_FAILS[0] -= 1
        raise RuntimeError("the grant service is down")
    PREPARED.append(intent.what)
    if PREPARE_CLOCK:
        clock = PREPARE_CLOCK.pop()
        clock.set_ms(deadline_ms + 1)  # this preparation finishes after its attempt expired
    return Fact(what=intent.what, grant=f"sealed-{len(PREPARED)}")


NOTE = Route("note", Inbox, Note, namespace="post_receiver", object_name=lambda a: a.name,
             address_kind="inbox")
PREPARED_NOTE = Route("prepared_note", Inbox, Intent, namespace="post_receiver",
                      object_name=lambda a: a.name, address_kind="inbox",
                      prepare=Prepare(event=Fact, run=_prepare))


# ---- the producer ---------------------------------------------------------------------------


class PInit(msgspec.Struct, tag="init", tag_field="op", forbid_unknown_fields=True):
    pass


class Send(msgspec.Struct, tag="send", tag_field="op", forbid_unknown_fields=True):
    to: str
    key: str
    text: str = ""
    route: str = "note"
    bad: bool = False      # send an event that does not match the route's schema
    also_write: str = ""   # a producer row written in the same transaction
    fail_after: bool = False  # the producer's transaction fails after the send


class SendMany(msgspec.Struct, tag="send_many", tag_field="op", forbid_unknown_fields=True):
    to: list[str]
    n: int
    prefix: str


class RetryKey(msgspec.Struct, tag="retry", tag_field="op", forbid_unknown_fields=True):
    key: str


class Latest(msgspec.Struct, tag="latest", tag_field="op", forbid_unknown_fields=True):
    to: str


class Dead(msgspec.Struct, tag="dead", tag_field="op", forbid_unknown_fields=True):
    after: str | None = None
    limit: int = 32


class GetJob(msgspec.Struct, tag="get", tag_field="op", forbid_unknown_fields=True):
    key: str


class Rows(msgspec.Struct, tag="rows", tag_field="op", forbid_unknown_fields=True):
    pass


class Ledger(msgspec.Struct, tag="ledger", tag_field="op", forbid_unknown_fields=True):
    pass


ProducerRequest = PInit | Send | SendMany | RetryKey | Latest | Dead | GetJob | Rows | Ledger


class Producer(Actor):
    namespace = "post_producer"
    requests = ProducerRequest
    init_request = PInit
    migrations = (
        Migration(1, ("CREATE TABLE facts (k TEXT PRIMARY KEY)",
                      "CREATE TABLE ledger (key TEXT PRIMARY KEY)")),
        Migration(2, POST_SCHEMA),
        Migration(3, POST_RUNS),
    )
    alarm_purposes: ClassVar[Mapping[str, str]] = {"post": "post_tick"}

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.post = Post(self, ROUTES, on_delivered=self._on_delivered)

    def _on_delivered(self, tx: SqlStorage, key: str, route: str,
                      receipt: dict[str, Any] | None) -> None:
        if key in HOOK_FAILS:
            HOOK_FAILS.discard(key)
            raise RuntimeError("the ledger is not writable now")
        tx.exec("INSERT INTO ledger (key) VALUES (?)", key)
        DELIVERED_HOOK.append(key)

    async def post_tick(self) -> None:
        await self.post.run()

    async def handle(self, call: Call, req: Any) -> Any:
        match req:
            case PInit():
                return self.sql.transaction_sync(lambda tx: self.ctx.claim_owner(call))
            case Send():
                return self.sql.transaction_sync(lambda tx: self._send(tx, req))
            case SendMany():
                def many(tx: SqlStorage) -> int:
                    for i in range(req.n):
                        for to in req.to:
                            self.post.send(tx, NOTE, Inbox(to), Note(f"{i}"),
                                           f"{req.prefix}-{to}-{i:06d}")
                    return req.n * len(req.to)
                return self.sql.transaction_sync(many)
            case RetryKey():
                return self.sql.transaction_sync(lambda tx: self.post.retry(tx, req.key).value)
            case Latest():
                return self.post.latest("inbox", Inbox(req.to))
            case Dead():
                return self.post.dead_letters(req.after, req.limit)
            case GetJob():
                return self.post.get(req.key)
            case Rows():
                return [r[0] for r in self.sql.exec("SELECT k FROM facts ORDER BY k")]
            case Ledger():
                return [r[0] for r in self.sql.exec("SELECT key FROM ledger ORDER BY key")]
        raise InvalidRequest("unknown op")

    def _send(self, tx: SqlStorage, req: Send) -> Any:
        if req.also_write:
            tx.exec("INSERT INTO facts (k) VALUES (?)", req.also_write)
        if req.route == "prepared_note":
            return self.post.send(tx, PREPARED_NOTE, Inbox(req.to), Intent(req.text), req.key)
        event: Any = Intent(req.text) if req.bad else Note(req.text)
        record = self.post.send(tx, NOTE, Inbox(req.to), event, req.key)
        if req.fail_after:
            raise MailboxActorsError(ErrorCode.CONFLICT, "the producer's own change failed")
        return record


# ---- the receiver ---------------------------------------------------------------------------


class RInit(msgspec.Struct, tag="init", tag_field="op", forbid_unknown_fields=True):
    pass


class Log(msgspec.Struct, tag="log", tag_field="op", forbid_unknown_fields=True):
    pass


ReceiverRequest = RInit | PostDeliver | Log


class Receiver(Actor):
    namespace = "post_receiver"
    requests = ReceiverRequest
    init_request = RInit
    migrations = (
        Migration(1, ("CREATE TABLE log (n INTEGER PRIMARY KEY, key TEXT NOT NULL, "
                      "what TEXT NOT NULL)", *POST_RECEIVER_SCHEMA)),
    )

    async def handle(self, call: Call, req: Any) -> Any:
        match req:
            case RInit():
                return self.sql.transaction_sync(lambda tx: self.ctx.claim_owner(call))
            case PostDeliver():
                key = req.envelope.key
                for hook in ON_DELIVER:
                    hook(key)
                n = ATTEMPTS[key] = ATTEMPTS.get(key, 0) + 1
                steps = SCRIPT.get(key, [])
                step = steps[n - 1] if n <= len(steps) else "ok"
                if step == "fail":
                    raise MailboxActorsError(ErrorCode.UNAVAILABLE, "not now")
                if step == "garbage":
                    return {"status": "maybe", "receipt": 7}
                if step == "refuse":
                    return {"status": "refused", "reason": "no_such_inbox"}
                if step == "refuse_receipt":
                    return {"status": "refused", "reason": "no_such_inbox",
                            "receipt": {"checked": "directory", "attempt": n}}
                if step == "fail_receipt":
                    return {"status": "failed", "reason": "busy", "receipt": {"queue": n}}
                answer = receive(self.sql, req, ROUTES, self._apply)
                if step == "lose":
                    raise MailboxActorsError(ErrorCode.UNAVAILABLE, "the answer was lost")
                return answer
            case Log():
                return [[r[0], r[1]] for r in self.sql.exec("SELECT key, what FROM log ORDER BY n")]
        raise InvalidRequest("unknown op")

    @staticmethod
    def _apply(tx: SqlStorage, route: Route[Any, Any], address: Any, event: Any,
               env: PostEnvelope) -> dict[str, Any]:
        what = event.text if isinstance(event, Note) else f"{event.what}/{event.grant}"
        cur = tx.exec("INSERT INTO log (key, what) VALUES (?, ?)", env.key, what)
        return {"n": cur.rows_written, "seq": env.seq}


ROUTES = Routes(NOTE, PREPARED_NOTE)
POST_OBJECTS = (Producer, Receiver)


class Env:
    """A test's view of the producer ``post_producer/p1`` and its receivers on one runtime."""

    def __init__(self, rt: TestRuntime) -> None:
        self.rt = rt
        self.producer = rt.id_from_name("post_producer", "p1")

    async def p(self, req: Any) -> Any:
        return await self.rt.call("post_producer", self.producer, req, tenant_id=TENANT)

    async def receiver(self, name: str) -> str:
        oid = self.rt.id_from_name("post_receiver", name)
        await self.rt.call("post_receiver", oid, RInit(), tenant_id=TENANT)
        return oid

    async def log(self, name: str) -> list[list[str]]:
        oid = self.rt.id_from_name("post_receiver", name)
        return await self.rt.call("post_receiver", oid, Log(), tenant_id=TENANT)  # type: ignore[no-any-return]

    async def job(self, key: str) -> dict[str, Any]:
        return await self.p(GetJob(key=key))  # type: ignore[no-any-return]

    def rows(self) -> dict[str, tuple[str, int, int]]:
        """The producer's jobs as an operator's read-only scan sees them: state, attempts, runs."""
        with read_only(self.rt.node.host.path_for("post_producer", self.producer)) as conn:
            assert isinstance(conn, sqlite3.Connection)
            return {k: (s, a, r) for k, s, a, r in conn.execute(
                "SELECT key, state, attempts, runs FROM post_jobs")}
