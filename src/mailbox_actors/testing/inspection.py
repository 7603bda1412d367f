"""Reaching into a live actor from a test (TK-2): what ``TestRuntime`` builds its
``run_in_actor``, ``list_ids``, ``get_alarm``/``set_alarm`` and error re-raising on.

- ``run_in_actor`` runs ``fn(instance, storage)`` inside the actor's activation with its input gate
  closed (no request or alarm of the actor runs meanwhile) and its output gate applied (implicit
  writes committed before it returns), as Miniflare's ``runInDurableObject``.
- ``ErrorTap`` gives each actor class a subclass whose ``handle`` and ``alarm`` note the exception a
  handler raised (by request id), so the test can see it, with its traceback, instead of the
  ``internal_error`` a caller gets.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from mailbox_actors.runtime.actor import Actor, Call
from mailbox_actors.runtime.scope import RequestScope, entered
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

if TYPE_CHECKING:
    from mailbox_actors.node.node import Node

__all__ = ["ErrorTap", "actor_ids_on_disk", "run_in_actor", "stored_alarm"]

T = TypeVar("T")


class ErrorTap:
    """Where the wrapped actor classes put the exceptions their handlers raised."""

    def __init__(self) -> None:
        self.by_request: dict[str, BaseException] = {}
        self.alarms: list[BaseException] = []

    def wrap(self, classes: Sequence[type[Actor]]) -> list[type[Actor]]:
        return [self._wrap(cls) for cls in classes]

    def _wrap(self, cls: type[Actor]) -> type[Actor]:
        tap = self

        async def handle(actor: Actor, call: Call, req: Any) -> Any:
            try:
                return await cls.handle(actor, call, req)
            except MailboxActorsError:
                raise  # an answer the caller is meant to get, not a bug
            except Exception as e:
                if len(tap.by_request) < 10_000:
                    tap.by_request.setdefault(call.request_id, e)
                raise

        def noting(method: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
            async def run(actor: Actor, *args: Any) -> None:
                try:
                    await method(actor, *args)
                except Exception as e:
                    if len(tap.alarms) < 10_000:
                        tap.alarms.append(e)
                    raise
            return run

        # Same name and namespace: logs, migrations and ids are the class's own.
        attrs: dict[str, Any] = {"handle": handle, "__module__": cls.__module__,
                                 "__qualname__": cls.__qualname__}
        if cls.alarm is not Actor.alarm:  # it handles its alarm itself
            attrs["alarm"] = noting(cls.alarm)
        else:  # the runtime runs its purposes' methods
            for name in cls.alarm_purposes.values():
                attrs[name] = noting(getattr(cls, name))
        return type(cls.__name__, (cls,), attrs)

    def take(self, request_id: str | None, err: MailboxActorsError) -> BaseException | None:
        """The handler's exception behind an ``internal_error`` answer to ``request_id``."""
        if request_id is None or err.code != ErrorCode.INTERNAL_ERROR:
            return None
        return self.by_request.pop(request_id, None)


async def run_in_actor(node: Node, namespace: str, object_id: str,
                       fn: Callable[[Any, Any], T | Awaitable[T]]) -> T:
    """Run ``fn(instance, storage)`` in the live actor, under its gates (see the module doc).

    The actor is activated (its file created if there is none, as ``runInDurableObject`` makes
    the object exist); ``fn`` may be sync or async; what it raises reaches the caller, and the
    actor is not reset for it."""
    host = node.host
    cls = host.actor_class(namespace)
    if cls is None:
        raise MailboxActorsError(ErrorCode.INVALID_REQUEST, f"no namespace {namespace!r} here")
    object_id = node.router.id_from_string(namespace, object_id)
    act = host.activate(cls, object_id, create=True)
    assert act is not None
    outcome: list[Any] = []

    async def inside() -> None:
        try:
            result = fn(act.actor, act.storage)
            if inspect.isawaitable(result):
                result = await result
            outcome.append(result)
        except BaseException as e:  # kept apart: a failing fn is the test's, not a reset
            outcome.append(e)
            outcome.append(None)

    with entered(RequestScope(node.ids.new_id("req"), None)):
        await act.started()
        await act.gate.hold(inside, None)
    if not act.closed:
        act.runtime_storage.flush()  # the output gate: fn's writes are committed when it returns
    if len(outcome) == 2:
        raise outcome[0]
    return outcome[0]  # type: ignore[no-any-return]


def stored_alarm(node: Node, namespace: str, object_id: str) -> int | None:
    """The actor's alarm as stored (even while its handler runs), or None (no alarm, no object)."""
    cls = node.host.actor_class(namespace)
    if cls is None:
        raise MailboxActorsError(ErrorCode.INVALID_REQUEST, f"no namespace {namespace!r} here")
    act = node.host.activate(cls, node.router.id_from_string(namespace, object_id), create=False)
    return None if act is None else act.runtime_storage.stored_alarm()


def actor_ids_on_disk(node: Node, namespace: str) -> list[str]:
    """Every id of ``namespace`` whose file exists (or that is active), sorted."""
    host = node.host
    if host.actor_class(namespace) is None:
        raise MailboxActorsError(ErrorCode.INVALID_REQUEST, f"no namespace {namespace!r} here")
    found = {oid for ns, oid in host.active_keys() if ns == namespace}
    root: Path = host.actors_dir / namespace
    if root.is_dir():
        for f in root.glob("*/*.sqlite"):
            try:
                found.add(node.router.id_from_string(namespace, f.stem))
            except MailboxActorsError:
                continue  # not one of this namespace's ids
    return sorted(found)
