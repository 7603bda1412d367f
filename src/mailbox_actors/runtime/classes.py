"""The actor classes a node serves, by namespace; some imported only at their namespace's first use.

A node start imports no object's code it may never run (PERF, issue 28: ``serve`` answers within
1.5x of the libraries' import floor): the platform's objects are registered by namespace name
(``DeferredActor``) and imported when a request, an alarm or an inspection first needs the class.
Knowing a namespace (its key, its ids, its directory, the scan for alarms) never imports it. A
deferred class is checked when it arrives, as an eager one is when it is registered (``on_load``),
and must declare the namespace it was registered under.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a start makes DeferredActors before it imports any actor code
    from mailbox_actors.runtime.actor import Actor

__all__ = ["ActorClasses", "DeferredActor"]


class DeferredActor:
    """An actor class known by its namespace now, imported by ``load`` at its first use."""

    __slots__ = ("_load", "namespace")

    def __init__(self, namespace: str, load: Callable[[], type[Actor[Any]]]) -> None:
        self.namespace = namespace
        self._load = load

    def load(self) -> type[Actor[Any]]:
        cls = self._load()
        if getattr(cls, "namespace", None) != self.namespace:
            raise TypeError(f"{cls!r} was registered for namespace {self.namespace!r} but "
                            f"declares {getattr(cls, 'namespace', None)!r}")
        return cls

    def __repr__(self) -> str:
        return f"DeferredActor({self.namespace!r})"


class ActorClasses:
    """namespace -> actor class. A class added is checked at once (``on_load``); a deferred one
    at its first ``get``, which imports it. Iterating lists every namespace, loaded or not."""

    __slots__ = ("_deferred", "_loaded", "_on_load")

    def __init__(self, on_load: Callable[[type[Actor[Any]]], None]) -> None:
        self._loaded: dict[str, type[Actor[Any]]] = {}
        self._deferred: dict[str, DeferredActor] = {}
        self._on_load = on_load

    def add(self, entry: type[Actor[Any]] | DeferredActor) -> str:
        """Serve ``entry`` (replacing what its namespace had); answers the namespace."""
        name = entry.namespace
        self._loaded.pop(name, None)
        self._deferred.pop(name, None)
        if isinstance(entry, DeferredActor):
            self._deferred[name] = entry
        else:
            self._on_load(entry)
            self._loaded[name] = entry
        return name

    def get(self, namespace: str) -> type[Actor[Any]] | None:
        cls = self._loaded.get(namespace)
        if cls is None:
            deferred = self._deferred.get(namespace)
            if deferred is None:
                return None
            cls = deferred.load()
            self._on_load(cls)
            self._loaded[namespace] = cls
            del self._deferred[namespace]
        return cls

    def is_loaded(self, namespace: str) -> bool:
        return namespace in self._loaded

    def __contains__(self, namespace: object) -> bool:
        return namespace in self._loaded or namespace in self._deferred

    def __iter__(self) -> Iterator[str]:
        return iter([*self._loaded, *self._deferred])

    def __len__(self) -> int:
        return len(self._loaded) + len(self._deferred)
