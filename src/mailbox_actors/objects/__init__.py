"""The platform's objects, each an actor class with its own namespace.

Each is imported on first use (PEP 562): a node serving one object does not load the others' code
(a mailbox's mail parsing, a domain monitor's DNS) before it answers. ``deferred_objects`` names
them by namespace for a node to register without importing any (``runtime.classes``): each is
imported at its namespace's first request, alarm or inspection.
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mailbox_actors.objects.domain_monitor import DomainMonitor
    from mailbox_actors.objects.identity_mailbox import IdentityMailbox
    from mailbox_actors.objects.notifier import Notifier
    from mailbox_actors.objects.tenant_quota import TenantQuota
    from mailbox_actors.runtime.actor import Actor
    from mailbox_actors.runtime.classes import DeferredActor

__all__ = ["DEFAULT_OBJECTS", "DomainMonitor", "IdentityMailbox", "Notifier", "TenantQuota",
           "deferred_objects"]

_WHERE = {
    "DomainMonitor": "mailbox_actors.objects.domain_monitor",
    "IdentityMailbox": "mailbox_actors.objects.identity_mailbox",
    "Notifier": "mailbox_actors.objects.notifier",
    "TenantQuota": "mailbox_actors.objects.tenant_quota",
}
DEFAULT_OBJECTS: tuple[type[Actor], ...]  # IdentityMailbox, DomainMonitor, TenantQuota, Notifier
# Each class's namespace, in DEFAULT_OBJECTS' order (a test checks them against the classes).
_NAMESPACES = {"identity_mailbox": "IdentityMailbox", "domain_monitor": "DomainMonitor",
               "tenant_quota": "TenantQuota", "notifier": "Notifier"}


def deferred_objects() -> tuple[DeferredActor, ...]:
    """The platform's objects as ``DEFAULT_OBJECTS`` lists them, each known by its namespace and
    imported at its first use."""
    from mailbox_actors.runtime.classes import DeferredActor

    return tuple(DeferredActor(namespace, functools.partial(__getattr__, name))
                 for namespace, name in _NAMESPACES.items())


def __getattr__(name: str) -> Any:
    if name == "DEFAULT_OBJECTS":
        value: Any = (__getattr__("IdentityMailbox"), __getattr__("DomainMonitor"),
                      __getattr__("TenantQuota"), __getattr__("Notifier"))
    elif name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # looked up once
    return value
