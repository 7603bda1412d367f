"""The actor programming model (RT-4, RT-8, AL-2, RPC-3): ``Actor`` and the ``ActorContext`` it gets.

An ``Actor`` subclass declares its namespace, request union, migrations and owner kind, and
implements ``handle``. ``ActorContext`` is one activation: its storage, its input gate
(``block_concurrency_while``), owner checks, alarm purposes and calls to other actors. Scheduling,
eviction and routing belong to the host and router, never here.
"""

from __future__ import annotations

import contextvars
import functools
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import anyio
import msgspec

from mailbox_actors.core.alarm_purposes import (
    alarm_after_schedule,
    due_purposes,
    earliest,
    meta_key,
)
from mailbox_actors.platform.services import ServiceKey
from mailbox_actors.platform.storage.sql import SqlStorage, implicit_writes
from mailbox_actors.runtime import outbox
from mailbox_actors.runtime.migrations import Migration
from mailbox_actors.wire.envelope import Envelope
from mailbox_actors.wire.errors import (
    DeadlineExceeded,
    ErrorCode,
    MailboxActorsError,
    Overloaded,
)
from mailbox_actors.wire.events import Event

if TYPE_CHECKING:
    from mailbox_actors.runtime.host import ActorHost

__all__ = ["Actor", "ActorContext", "AlarmInfo", "Call", "OwnerMismatch", "current_deadline"]

T = TypeVar("T")
Call = Envelope[Any]

# The deadline of the request being served in this task, checked before every transaction (RPC-5).
current_deadline: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "mailbox_actors_deadline", default=None)
current_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "mailbox_actors_request_id", default=None)
# The actors whose block_concurrency_while the current task is inside (its own nested calls go in).
_gates_held: contextvars.ContextVar[tuple[int, ...]] = contextvars.ContextVar(
    "gates_held", default=())


class AlarmInfo(msgspec.Struct, frozen=True):
    """What an alarm handler is told (AL-3)."""

    retry_count: int
    is_retry: bool
    scheduled_ms: int


class OwnerMismatch(MailboxActorsError):
    """The caller's tenant/identity is not the stored owner: always a bug upstream (RPC-3)."""

    def __init__(self) -> None:
        super().__init__(ErrorCode.INTERNAL_ERROR, "the request's owner does not match the object")


class Actor:
    """Base class of every object. Subclasses set the class variables and implement ``handle``."""

    namespace: ClassVar[str]
    requests: ClassVar[Any]  # the tagged union of request Structs
    replies: ClassVar[Mapping[str, Any]] = {}  # op -> reply type, for the published contract
    init_request: ClassVar[type]  # the one op an object without owner accepts
    owner_kind: ClassVar[str] = "tenant"  # "tenant" or "identity"
    not_found: ClassVar[ErrorCode] = ErrorCode.TENANT_NOT_FOUND
    migrations: ClassVar[Sequence[Migration]] = ()
    # purpose -> name of an ``async def (self) -> None`` method, run by the default ``alarm``.
    alarm_purposes: ClassVar[Mapping[str, str]] = {}
    # Ops that may be sent twice with the effect of once: a client retries only these (OPS-6).
    idempotent_ops: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, ctx: ActorContext) -> None:
        self.ctx = ctx
        self.sql = ctx.storage

    async def handle(self, call: Call, req: Any) -> Any:
        raise NotImplementedError

    async def alarm(self, info: AlarmInfo) -> None:
        """Default handler: run every due purpose, then re-arm to the earliest pending (AL-2)."""
        await self.ctx.run_due_purposes(self)


class ActorContext:
    """One activation of one actor: storage, gate, owner, alarm purposes, outgoing calls."""

    def __init__(self, host: ActorHost, cls: type[Actor], object_id: str, storage: SqlStorage,
                 meta: Mapping[str, str]) -> None:
        self.host = host
        self.namespace = cls.namespace
        self.id = object_id
        self.key = (cls.namespace, object_id)
        self.storage = storage
        self.cls = cls
        self.schema_version = int(meta.get("schema_version", "0"))
        self.owner_tenant: str | None = meta.get("owner_tenant")
        self.owner_identity: str | None = meta.get("owner_identity")
        self.erased = meta.get("erased") == "1"
        self.pending = 0  # requests and alarm runs admitted and not finished (RT-10)
        self.alarm_running = False
        self.closed = False
        self.last_used_ms = 0
        self._gate_depth = 0
        self._gate_waiters: deque[anyio.Event] = deque()
        self.actor: Actor = None  # type: ignore[assignment]  # set by the host right after
        storage.before_transaction = self._check_deadline

    # ---- time, ids -------------------------------------------------------------------------

    def now_ms(self) -> int:
        return self.storage.now_ms()

    def new_id(self, prefix: str) -> str:
        return self.host.ids.new_id(prefix)

    def service(self, key: ServiceKey[T]) -> T | None:
        """The node's collaborator under ``key`` (a mail transport, a resolver), or None."""
        return self.host.services.get(key)

    # ---- execution model (RT-4, RT-5) ------------------------------------------------------

    def _check_deadline(self) -> None:
        deadline = current_deadline.get()
        if deadline is not None and self.host.clock.now_ms() > deadline:
            raise DeadlineExceeded()

    async def block_concurrency_while(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Deliver no other request or alarm to this actor until ``fn`` completes.

        If ``fn`` raises, the actor is reset: its in-memory state is dropped, its storage kept.
        A request already running that asks for its own critical section while another's runs
        waits for it (with its deadline); one nested inside its own goes straight in.
        """
        inside = _gates_held.get()
        if id(self) not in inside:
            await self.wait_gate(current_deadline.get())  # returns with the gate open: no await
        held = _gates_held.set((*inside, id(self)))      # between that and closing it here
        self._gate_depth += 1
        try:
            return await fn()
        except BaseException:
            self.host.reset(self)
            raise
        finally:
            _gates_held.reset(held)
            self._gate_depth -= 1
            if not self._gate_depth:
                self._open_gate()

    def _open_gate(self) -> None:
        waiters, self._gate_waiters = self._gate_waiters, deque()
        for ev in waiters:
            ev.set()

    async def wait_gate(self, deadline_ms: int | None) -> None:
        """Wait, in arrival order, until no ``block_concurrency_while`` is running. A request whose
        deadline passes while it waits is answered ``timeout`` without running (RPC-5)."""
        clock = self.host.clock
        while self._gate_depth:
            ev = anyio.Event()
            self._gate_waiters.append(ev)
            if deadline_ms is None:
                await ev.wait()
            elif clock.fake:
                self.host.wake_at_deadline(deadline_ms, ev)  # the FakeClock's advance wakes it
                await ev.wait()
            else:
                with anyio.move_on_after(max(0.0, (deadline_ms + 1 - clock.now_ms()) / 1000)):
                    await ev.wait()
            if self.closed:
                raise MailboxActorsError(ErrorCode.UNAVAILABLE,
                                         "the actor was reset while the request was queued")
            if deadline_ms is not None and clock.now_ms() > deadline_ms:
                if ev in self._gate_waiters:
                    self._gate_waiters.remove(ev)
                raise DeadlineExceeded("the deadline passed while the request was queued")

    def admit(self) -> None:
        if self.pending >= self.host.settings.max_queue:
            self.host.metrics.inc("actor_overloaded_total", (("namespace", self.namespace),))
            raise Overloaded(f"the actor has {self.pending} requests waiting or running; "
                             f"the limit is {self.host.settings.max_queue}",
                             details={"max_queue": self.host.settings.max_queue})
        self.pending += 1

    @property
    def gate_closed(self) -> bool:
        return self._gate_depth > 0

    # ---- owner (RPC-3, RPC-4) --------------------------------------------------------------

    def check_owner(self, call: Call, is_init: bool) -> None:
        """Refuse a call for an erased, un-initialised or foreign object (before the handler)."""
        if self.erased:
            raise MailboxActorsError(ErrorCode.IDENTITY_NOT_FOUND, "the identity was erased")
        if is_init:
            return
        if self.owner_tenant is None:
            raise MailboxActorsError(self.cls.not_found,
                                     f"no {self.namespace} object has been initialised here")
        if call.tenant_id != self.owner_tenant or (
                self.cls.owner_kind == "identity" and call.identity_id != self.owner_identity):
            self.owner_mismatch(call)

    def owner_mismatch(self, call: Call) -> None:
        self.host.metrics.inc("rpc_owner_mismatch_total", (("namespace", self.namespace),))
        self.host.log.warning(
            "rpc_owner_mismatch", security=True, namespace=self.namespace, object_id=self.id,
            owner_tenant_id=self.owner_tenant, owner_identity_id=self.owner_identity,
            caller_tenant_id=call.tenant_id, caller_identity_id=call.identity_id)
        raise OwnerMismatch()

    def claim_owner(self, call: Call) -> bool:
        """Inside ``init``'s transaction: store the caller as owner. True when newly claimed;
        False when the same owner already holds it (idempotent); a different owner is refused."""
        identity = call.identity_id if self.cls.owner_kind == "identity" else None
        if call.tenant_id is None or (self.cls.owner_kind == "identity" and identity is None):
            raise MailboxActorsError(
                ErrorCode.INVALID_REQUEST,
                f"init of {self.namespace} needs tenant_id"
                + (" and identity_id" if self.cls.owner_kind == "identity" else "")
                + " in the envelope")
        if self.owner_tenant is not None:
            if self.owner_tenant != call.tenant_id or self.owner_identity != identity:
                self.owner_mismatch(call)
            return False
        sql = self.storage
        sql.sys_exec("INSERT OR REPLACE INTO _ma_meta (k, v) VALUES ('owner_tenant', ?)",
                     (call.tenant_id,))
        if identity is not None:
            sql.sys_exec("INSERT OR REPLACE INTO _ma_meta (k, v) VALUES ('owner_identity', ?)",
                         (identity,))
        self.owner_tenant, self.owner_identity = call.tenant_id, identity
        return True

    def mark_erased(self) -> None:
        """Inside the erase transaction (RPC-4); from now on every op is identity_not_found."""
        self.storage.sys_exec("INSERT OR REPLACE INTO _ma_meta (k, v) VALUES ('erased', '1')")
        self.erased = True

    # ---- alarm purposes (AL-2) -------------------------------------------------------------

    def schedule(self, purpose: str, at_ms: int) -> None:
        """Record ``alarm:{purpose}`` and lower the alarm to it when earlier. Commits with the
        surrounding transaction."""
        key = meta_key(purpose)
        self.storage.sys_exec("INSERT OR REPLACE INTO _ma_meta (k, v) VALUES (?, ?)", (key, str(at_ms)))
        current = self.storage.get_alarm()
        new = alarm_after_schedule(current, at_ms)
        if new != current:
            self.storage.set_alarm(new)

    def cancel(self, purpose: str) -> None:
        self.storage.sys_exec("DELETE FROM _ma_meta WHERE k = ?", (meta_key(purpose),))

    def scheduled(self) -> dict[str, int]:
        rows = self.storage.sys_exec("SELECT k, v FROM _ma_meta WHERE k >= 'alarm:' AND k < 'alarm;'")
        return {k[6:]: int(v) for k, v in rows}

    async def run_due_purposes(self, actor: Actor) -> None:
        """Run each due purpose's method, earliest first; then re-arm to the earliest pending.

        A purpose stays recorded while its method runs, so a crash or an exception leaves it due
        and the retry (or the restarted node) runs it again; it is cleared after its method
        returns, unless the method re-scheduled it. The alarm is re-armed even when a method
        raises, so the retry finds it due.
        """
        now = self.host.clock.now_ms()
        pending = self.scheduled()
        try:
            for purpose in due_purposes(pending, now):
                method_name = actor.alarm_purposes.get(purpose)
                if method_name is None and purpose != "outbox":
                    self.host.log.warning("alarm_purpose_unknown", namespace=self.namespace,
                                          purpose=purpose)
                elif method_name is None:  # the runtime's own purpose
                    await outbox.dispatch(self)
                else:
                    await getattr(actor, method_name)()
                self.storage.transaction_sync(functools.partial(
                    self._clear_tx, purpose, pending[purpose], method_name is None))
        finally:
            if not self.closed:
                self.storage.transaction_sync(lambda _tx: self._rearm())

    def _clear_tx(self, purpose: str, ran_at: int, runtime_outbox: bool, tx: SqlStorage) -> None:
        if purpose == "outbox" and runtime_outbox and outbox.has_undispatched(tx):
            self.schedule("outbox", tx.now_ms())  # events emitted while it ran
            return
        tx.sys_exec("DELETE FROM _ma_meta WHERE k = ? AND v = ?", (meta_key(purpose), str(ran_at)))

    def _rearm(self) -> None:
        sql = self.storage
        nxt = earliest(self.scheduled())
        current = sql.stored_alarm()
        if nxt is None:
            if current is not None and not sql.alarm_hidden:
                sql.delete_alarm()
            # inside the handler the host clears the fired alarm once the handler succeeds
        elif nxt != current:
            sql.set_alarm(nxt)
        elif sql.alarm_hidden:
            sql.alarm_set_in_handler = True  # still due as stored: the host must keep it

    # ---- events (EV-1) --------------------------------------------------------------------

    def emit(self, tx: SqlStorage, type_: str, data: dict[str, Any] | None = None) -> Event:
        """Inside the state-change transaction: append an event to the outbox (EV-1)."""
        return outbox.emit(self, tx, type_, data or {})

    # ---- calls to other actors (RPC-9) -----------------------------------------------------

    async def call(self, namespace: str, object_id: str, req: Any, *, tenant_id: str | None,
                   identity_id: str | None = None) -> Any:
        """Call another actor through the same envelope and router; returns the ``ok`` value
        (as plain JSON types) or raises ``MailboxActorsError``."""
        self.storage.flush()  # the output gate: no message leaves before the writes it follows
        writes = implicit_writes.get()
        if writes:
            self.storage.check_writes(writes)  # ...nor after writes SQLite rolled back
        return await self.host.call_actor(namespace, object_id, req, tenant_id=tenant_id,
                                          identity_id=identity_id)
