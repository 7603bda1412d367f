"""What an actor's code is given (RT-4, RT-8, AL-2, EV-1, RPC-3, RPC-9): ``ActorContext``.

One context per activation, with the names an object uses and nothing of the host: its storage,
id and namespace, the clock and ids, the node's services, alarm purposes, events, calls to other
actors, its owner, and ``block_concurrency_while``. The runtime's own state (meta keys, the real
alarm, the gates' bookkeeping) stays behind private collaborators it was built with.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, Protocol, TypeVar

from mailbox_actors.core.actor_ids import id_from_name, namespace_key
from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.rng import Rng
from mailbox_actors.platform.services import ServiceKey, Services
from mailbox_actors.platform.storage.runtime_access import RuntimeStorage
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.runtime import outbox, purposes
from mailbox_actors.runtime.gates import InputGate, output_gate
from mailbox_actors.runtime.owner import Owner
from mailbox_actors.runtime.scope import current_scope
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.wire.envelope import Envelope
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.events import Event

__all__ = ["ActorContext", "ActorEnv", "CallActor"]

T = TypeVar("T")


class CallActor(Protocol):
    """The node's way to another actor: the router's in-process call (same envelope, same checks)."""

    def __call__(self, namespace: str, object_id: str, req: Any, *, tenant_id: str | None = None,
                 identity_id: str | None = None,
                 deadline_ms: int | None = None) -> Awaitable[Any]: ...


class ActorEnv:
    """What every context of one node shares: settings, clock, randomness, ids, services, the log,
    calls out, the tenants' retention."""

    __slots__ = ("call", "clock", "events_days", "ids", "log", "rng", "services", "settings")

    def __init__(self, *, settings: RuntimeSettings, clock: Clock, rng: Rng, ids: Ids,
                 services: Services, log: Any, call: CallActor,
                 events_days: outbox.EventsDays) -> None:
        self.settings = settings
        self.clock = clock
        self.rng = rng
        self.ids = ids
        self.services = services
        self.log = log
        self.call = call
        self.events_days = events_days


class ActorContext:
    """One activation of one actor, as its code sees it."""

    __slots__ = ("__weakref__", "_env", "_gate", "_owner", "_runtime", "id", "namespace",
                 "schema_version", "storage")

    def __init__(self, *, namespace: str, object_id: str, storage: RuntimeStorage, owner: Owner,
                 gate: InputGate, schema_version: int, env: ActorEnv) -> None:
        self.namespace = namespace
        self.id = object_id
        self.storage: SqlStorage = storage.sql
        self.schema_version = schema_version
        self._runtime = storage
        self._owner = owner
        self._gate = gate
        self._env = env

    # ---- the node: settings, time, randomness, ids, services, the log ----------------------

    @property
    def settings(self) -> RuntimeSettings:
        """The node's settings (read only)."""
        return self._env.settings

    @property
    def clock(self) -> Clock:
        return self._env.clock

    @property
    def rng(self) -> Rng:
        """The node's randomness (seeded under TestRuntime)."""
        return self._env.rng

    @property
    def log(self) -> Any:
        """The runtime's logger (``platform.logging.Logger``); never give it content or addresses (CL-5)."""
        return self._env.log

    @property
    def deadline_ms(self) -> int | None:
        """The deadline of the request being served (None in an alarm run, or outside any)."""
        scope = current_scope()
        return None if scope is None else scope.deadline_ms

    def id_from_name(self, namespace: str, name: str) -> str:
        """The id the object named ``name`` has in ``namespace`` (Durable Objects'
        ``idFromName``), for calls to it."""
        return id_from_name(namespace_key(namespace, self._env.settings.id_secret.encode()), name)

    def now_ms(self) -> int:
        """The clock; frozen inside a transaction (RT-12)."""
        return self.storage.now_ms()

    def new_id(self, prefix: str) -> str:
        """A new ULID-based id such as ``evt_01J...`` (RT-12)."""
        return self._env.ids.new_id(prefix)

    def service(self, key: ServiceKey[T]) -> T | None:
        """The node's collaborator under ``key`` (a mail transport, a resolver), or None."""
        return self._env.services.get(key)

    # ---- owner (RPC-3, RPC-4) --------------------------------------------------------------

    @property
    def owner_tenant(self) -> str | None:
        return self._owner.tenant

    @property
    def owner_identity(self) -> str | None:
        return self._owner.identity

    def claim_owner(self, call: Envelope[Any]) -> bool:
        """Inside ``init``'s transaction: store the caller as owner. True when newly claimed;
        False when the same owner already holds it (idempotent); a different owner is refused."""
        return self._owner.claim(call, self._runtime)

    def mark_erased(self) -> None:
        """Inside the erase transaction (RPC-4); from now on every op is identity_not_found."""
        self._owner.mark_erased(self._runtime)

    @property
    def erased(self) -> bool:
        """Whether the object was erased (RPC-4): work it started before must not use content."""
        return self._owner.erased

    # ---- the input gate (RT-4) -------------------------------------------------------------

    async def block_concurrency_while(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Deliver no other request or alarm to this actor until ``fn`` completes.

        If ``fn`` raises, the actor is reset: its in-memory state is dropped, its storage kept.
        A request already running that asks for its own critical section while another's runs
        waits for it (with its deadline); one nested inside its own goes straight in.
        """
        scope = current_scope()
        return await self._gate.hold(fn, None if scope is None else scope.deadline_ms)

    def abort(self, reason: str = "aborted by the actor") -> NoReturn:
        """Reset the actor now (Durable Objects' ``ctx.abort``): its in-memory state is dropped,
        its storage kept; this request and every other in flight or queued fail ``unavailable``
        (a retry reaches a fresh instance). Never returns (RT-16)."""
        self._gate.reset()
        raise MailboxActorsError(ErrorCode.UNAVAILABLE, "the actor aborted itself",
                                 details={"reason": str(reason)[:200]})

    async def transaction(self, fn: Callable[[SqlStorage], Awaitable[T]]) -> T:
        """Run ``await fn(sql)`` as one transaction that may await: no other request or alarm
        of this actor is delivered until it ends; it commits when ``fn`` returns and rolls back
        when it raises (the exception propagates, the actor is not reset) (RT-16)."""
        scope = current_scope()
        return await self._gate.hold(lambda: self.storage._transaction_async(fn),
                                     None if scope is None else scope.deadline_ms,
                                     reset_on_error=False)

    # ---- alarm purposes (AL-2) -------------------------------------------------------------

    def schedule(self, purpose: str, at_ms: int) -> None:
        """Record ``alarm:{purpose}`` and lower the alarm to it when earlier. Commits with the
        surrounding transaction; at its time the method ``alarm_purposes[purpose]`` runs."""
        purposes.schedule(self._runtime, purpose, at_ms)

    def cancel(self, purpose: str) -> None:
        purposes.cancel(self._runtime, purpose)

    def scheduled(self) -> dict[str, int]:
        """Every purpose recorded, with when it is due."""
        return purposes.scheduled(self._runtime)

    # ---- events (EV-1, EV-4) ---------------------------------------------------------------

    def emit(self, tx: SqlStorage, type_: str, data: dict[str, Any] | None = None) -> Event:
        """Inside the state-change transaction: append an event to the outbox (EV-1)."""
        event = outbox.append(tx, self._runtime, event_id=self.new_id("evt"),
                              tenant_id=self._owner.tenant or "",
                              identity_id=self._owner.identity, type_=type_, data=data or {})
        purposes.lower_alarm(self._runtime, event.occurred_at_ms)  # append recorded the purpose
        return event

    async def tenant_events_days(self) -> int | None:
        """The owner tenant's ``events_days`` from the control database (None: not known)."""
        return await self._env.events_days(self._owner.tenant or "")

    # ---- calls to other actors (RPC-9) -----------------------------------------------------

    async def call(self, namespace: str, object_id: str, req: Any, *, tenant_id: str | None,
                   identity_id: str | None = None, deadline_ms: int | None = None) -> Any:
        """Call another actor through the same envelope and router; returns the ``ok`` value
        (as plain JSON types) or raises ``MailboxActorsError``. The request id of the request
        (or alarm run) being served carries over, and so does its deadline unless
        ``deadline_ms`` sets the call's own."""
        scope = current_scope()
        if scope is None:
            self._runtime.flush()
        else:  # the output gate: no message leaves before the writes it follows, nor after
            output_gate(self._runtime, scope)  # writes SQLite rolled back
        return await self._env.call(namespace, object_id, req, tenant_id=tenant_id,
                                    identity_id=identity_id, deadline_ms=deadline_ms)
