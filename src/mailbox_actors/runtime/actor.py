"""The actor programming model (RT-4, RT-8, AL-2, RPC-3): ``Actor[Req]``, what its ``alarm`` is
told, and the context it is given.

An ``Actor`` subclass declares its namespace, its request union, migrations and owner kind, and
implements ``handle(call, req)``, with ``req`` typed by that union (``Actor[MyRequest]``), so mypy
sees every op a ``match`` must handle. Scheduling, eviction and routing belong to the host and the
router (``runtime.host``), never here; ``ActorContext`` (``runtime.context``) is the actor's whole
view of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Generic

import msgspec
from typing_extensions import TypeVar

from mailbox_actors.runtime import purposes
from mailbox_actors.runtime.context import ActorContext
from mailbox_actors.runtime.migrations import Migration
from mailbox_actors.runtime.owner import OwnerMismatch
from mailbox_actors.wire.envelope import Envelope
from mailbox_actors.wire.errors import ErrorCode

__all__ = ["Actor", "ActorContext", "AlarmInfo", "Call", "Migration", "OwnerMismatch",
           "handles_alarm_itself"]

# The request union an actor handles; a bare ``Actor`` handles ``Any``.
Req = TypeVar("Req", default=Any)
Call = Envelope[Any]


class AlarmInfo(msgspec.Struct, frozen=True):
    """What an alarm handler is told (AL-3)."""

    retry_count: int
    is_retry: bool
    scheduled_ms: int


class Actor(Generic[Req]):
    """Base class of every object. Subclasses set the class variables and implement ``handle``."""

    namespace: ClassVar[str]
    requests: ClassVar[Any]  # the tagged union of request Structs
    replies: ClassVar[Mapping[str, Any]] = {}  # op -> reply type, for the published contract
    init_request: ClassVar[type]  # the one op an object without owner accepts
    owner_kind: ClassVar[str] = "tenant"  # "tenant" or "identity"
    not_found: ClassVar[ErrorCode] = ErrorCode.TENANT_NOT_FOUND
    migrations: ClassVar[Sequence[Migration]] = ()
    # purpose -> name of an ``async def (self) -> None`` method, run by the default alarm handling.
    alarm_purposes: ClassVar[Mapping[str, str]] = {}
    # Ops that may be sent twice with the effect of once: a client retries only these (OPS-6).
    idempotent_ops: ClassVar[frozenset[str]] = frozenset()
    # Request types an erased object still serves (RPC-4's refusal spares them): records of its
    # own that are not the erased content, such as Post's dead letters (``post_dead_letters``,
    # ``post_retry``), so the operator and the platform can still finish what it staged.
    erased_ops: ClassVar[tuple[type, ...]] = ()

    def __init__(self, ctx: ActorContext) -> None:
        self.ctx = ctx
        self.sql = ctx.storage

    async def on_start(self) -> None:
        """Override to do async work when the actor is activated (load state, migrate data):
        it runs once per activation under the input gate, before any request or alarm reaches
        the actor (RT-16). If it raises, the actor is reset and the next request tries again."""

    async def handle(self, call: Call, req: Req) -> Any:
        raise NotImplementedError

    async def alarm(self, info: AlarmInfo) -> None:
        """Override to handle the alarm yourself. Left as it is, the runtime runs every due
        purpose of ``alarm_purposes`` instead, then re-arms to the earliest pending (AL-2). An
        override that calls ``await super().alarm(info)`` gets exactly that, once per call, at
        the point it calls it (outside an alarm run there is nothing to run: RuntimeError)."""
        run = purposes.default_run()
        if run is None:
            raise RuntimeError("Actor.alarm's default runs the due alarm_purposes of an alarm "
                               "run; it was called outside one")
        await run()


def handles_alarm_itself(actor: Actor[Any]) -> bool:
    """Whether the actor's class overrides ``alarm`` (otherwise the runtime runs its purposes)."""
    return type(actor).alarm is not Actor.alarm
