"""Post routes (PO-1): which Struct addresses a recipient, which Struct is the event, where it goes.

A route pairs an address Struct and an event Struct with the target namespace, a name function
(address -> object name) and the recipient's fixed address-kind label. ``Routes`` is the checked
set a producer and its receivers share: every route to one namespace carries the same label (so
different event kinds to one recipient keep producer order), and a route to a namespace no actor
class declares is refused when the routes are declared.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import msgspec

from mailbox_actors.runtime.actor import Actor
from mailbox_actors.wire.errors import InvalidRequest

__all__ = ["Prepare", "Route", "Routes", "known_namespaces"]

A = TypeVar("A", bound=msgspec.Struct)
E = TypeVar("E", bound=msgspec.Struct)


@dataclass(frozen=True)
class Prepare:
    """Prepare a wire fact from the staged intent once, at the first attempt (PO-6).

    ``run(address, intent, deadline_ms)`` returns an instance of ``event``; it shares the
    attempt's ten-second deadline with the receiver's answer. The result is persisted before it
    is sent and reused by every later attempt.
    """

    event: type[msgspec.Struct]
    run: Callable[[Any, Any, int], Awaitable[msgspec.Struct]]


@dataclass(frozen=True)
class Route(Generic[A, E]):
    name: str                      # the event kind, unique within a Routes
    address: type[A]
    event: type[E]
    namespace: str                 # the receiving actor class's namespace
    object_name: Callable[[A], str]
    address_kind: str              # shared by every route to ``namespace``
    prepare: Prepare | None = None
    # The envelope's tenant for the receiver's owner check; default: the producer's own tenant.
    tenant_of: Callable[[A], str | None] | None = None
    identity_of: Callable[[A], str | None] | None = None
    _address_dec: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for label, value in (("name", self.name), ("namespace", self.namespace),
                             ("address_kind", self.address_kind)):
            if not isinstance(value, str) or not value or len(value) > 200:
                raise ValueError(f"a Post route's {label} is a non-empty string up to 200 chars")
        for label, tp in (("address", self.address), ("event", self.event)):
            if not (isinstance(tp, type) and issubclass(tp, msgspec.Struct)):
                raise TypeError(f"a Post route's {label} must be a msgspec Struct type")

    def check_event(self, event: Any) -> dict[str, Any]:
        """The event as JSON, or ``invalid_request`` when it does not match the route's schema."""
        return _checked(self.event, event, f"event of route {self.name!r}")

    def check_address(self, address: Any) -> dict[str, Any]:
        return _checked(self.address, address, f"address of route {self.name!r}")


def _checked(tp: type[msgspec.Struct], value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, tp):
        raise InvalidRequest(f"the {what} must be a {tp.__name__}",
                             details={"expected": tp.__name__})
    try:
        # Re-validate the constraints (Meta bounds) a plain constructor does not check.
        raw = msgspec.to_builtins(value)
        msgspec.convert(raw, tp)
    except (msgspec.ValidationError, TypeError) as e:
        raise InvalidRequest(f"the {what} does not match its schema: {e}",
                             details={"expected": tp.__name__}) from e
    if not isinstance(raw, dict):
        raise InvalidRequest(f"the {what} must encode as a JSON object")
    return raw


def known_namespaces() -> set[str]:
    """The namespaces of every actor class defined so far in this process."""
    seen: set[str] = set()
    todo = list(Actor.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        ns = cls.__dict__.get("namespace")
        if isinstance(ns, str):
            seen.add(ns)
    return seen


class Routes:
    """A checked set of routes, looked up by name."""

    def __init__(self, *routes: Route[Any, Any], namespaces: Iterable[str] | None = None) -> None:
        known = set(namespaces) if namespaces is not None else known_namespaces()
        self._by_name: dict[str, Route[Any, Any]] = {}
        labels: dict[str, str] = {}
        for r in routes:
            if r.name in self._by_name:
                raise ValueError(f"two Post routes are named {r.name!r}")
            if r.namespace not in known:
                raise ValueError(f"Post route {r.name!r} goes to unknown namespace "
                                 f"{r.namespace!r}; known: {', '.join(sorted(known))}")
            label = labels.setdefault(r.namespace, r.address_kind)
            if label != r.address_kind:
                raise ValueError(f"every Post route to {r.namespace!r} must share one address "
                                 f"kind: {r.name!r} has {r.address_kind!r}, another {label!r}")
            self._by_name[r.name] = r

    def get(self, name: str) -> Route[Any, Any] | None:
        return self._by_name.get(name)

    def __getitem__(self, name: str) -> Route[Any, Any]:
        return self._by_name[name]

    def __contains__(self, route: object) -> bool:
        return isinstance(route, Route) and self._by_name.get(route.name) is route

    def __iter__(self) -> Iterator[Route[Any, Any]]:
        return iter(self._by_name.values())
