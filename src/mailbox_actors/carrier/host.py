"""What Carrier asks of the actor it lives in (CA-15): the seed's host contract, and the host every
actor of this runtime has (``ActorCarrierHost``, the seed's ``createCloudflareCarrier``).

``commit(mutation)`` runs the mutation as one transaction; a wake asked for inside it (``wake``)
commits with it, so an Email and the wake that dispatches it are durable together or not at all.
``request_wake`` durably schedules recovery outside any mutation. The host calls
``Carrier.tick()`` from that wake, and keeps it armed while ``has_pending_work()``. One Carrier
owns one store (its tables in the actor's file) for the actor's lifetime.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from mailbox_actors.platform.storage.sql import SqlStorage

if TYPE_CHECKING:
    from mailbox_actors.runtime.context import ActorContext

__all__ = ["ActorCarrierHost", "CarrierHost"]

T = TypeVar("T")


class CarrierHost(Protocol):
    """The actor's side of Carrier: transactions, the durable wake, events, ids and the clock."""

    def commit(self, mutation: Callable[[SqlStorage], T]) -> T:
        """Run ``mutation`` as one transaction; wakes it asks for commit with it."""
        ...

    def wake(self, at_ms: int) -> int:
        """Inside ``commit``: a durable wake at ``at_ms`` or earlier; returns the wake's time."""
        ...

    def set_wake(self, at_ms: int) -> None:
        """Inside ``commit``, from ``tick``: the wake moves to ``at_ms``, later or earlier (the
        wake the tick runs from is replaced)."""
        ...

    def scheduled_wake(self) -> int | None:
        """When the durable wake is due (None: none is armed)."""
        ...

    def request_wake(self) -> None:
        """Outside any mutation: durably schedule recovery now."""
        ...

    def emit(self, tx: SqlStorage, type_: str, data: dict[str, Any]) -> None:
        """Inside ``commit``: one event (ids, statuses and codes only) with the mutation."""
        ...

    def new_id(self, prefix: str) -> str: ...

    def now_ms(self) -> int:
        """The clock (frozen inside a transaction)."""
        ...

    @property
    def erased(self) -> bool:
        """The store's content is gone: work started before must not use it."""
        ...

    @property
    def log(self) -> Any: ...


class ActorCarrierHost:
    """The host of an actor of this runtime: its storage's transactions, its alarm purpose
    ``purpose`` as the wake, its outbox for events, its ids and clock."""

    __slots__ = ("_ctx", "_sql", "purpose")

    def __init__(self, ctx: ActorContext, purpose: str) -> None:
        self._ctx = ctx
        self._sql = ctx.storage
        self.purpose = purpose

    def commit(self, mutation: Callable[[SqlStorage], T]) -> T:
        return self._sql.transaction_sync(mutation)

    def wake(self, at_ms: int) -> int:
        # Scheduling a purpose replaces its time: an earlier wake must not be put off.
        pending = self._ctx.scheduled().get(self.purpose)
        if pending is None or at_ms < pending:
            self._ctx.schedule(self.purpose, at_ms)
            return at_ms
        return pending

    def set_wake(self, at_ms: int) -> None:
        self._ctx.schedule(self.purpose, at_ms)

    def scheduled_wake(self) -> int | None:
        return self._ctx.scheduled().get(self.purpose)

    def request_wake(self) -> None:
        self._sql.transaction_sync(lambda tx: self.wake(tx.now_ms()))

    def emit(self, tx: SqlStorage, type_: str, data: dict[str, Any]) -> None:
        self._ctx.emit(tx, type_, data)

    def new_id(self, prefix: str) -> str:
        return self._ctx.new_id(prefix)

    def now_ms(self) -> int:
        return self._ctx.now_ms()

    @property
    def erased(self) -> bool:
        return self._ctx.erased

    @property
    def log(self) -> Any:
        return self._ctx.log
