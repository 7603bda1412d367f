"""Node-level collaborators that objects use by key: a mail transport, a DNS resolver, settings.

The node (or ``TestRuntime``) is built with them, once; an object asks ``ctx.service(KEY)``. A key
is declared beside the protocol it names (``platform/mail``, ``platform/dns``), so the runtime
knows no object's collaborators, and a test swaps a real one for its fake by passing another.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar

__all__ = ["ServiceKey", "Services"]

T = TypeVar("T")


class ServiceKey(Generic[T]):
    """A typed name for one collaborator: ``MAIL_TRANSPORT: ServiceKey[Transport]``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"ServiceKey({self.name!r})"


class Services:
    """The collaborators of one node, read-only once built."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[ServiceKey[Any], Any] | None = None) -> None:
        self._items: dict[ServiceKey[Any], Any] = dict(items or {})

    def get(self, key: ServiceKey[T]) -> T | None:
        """The collaborator registered under ``key``, or None (the object's default applies)."""
        value = self._items.get(key)
        return value

    def items(self) -> list[tuple[ServiceKey[Any], Any]]:
        return list(self._items.items())
