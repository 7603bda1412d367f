"""DomainMonitor (OBJ-3): one sending domain's DNS checks; one module per concern beside ``actor``.

``DomainMonitor`` is imported on first use (PEP 562), so a submodule (its inspection, its wire helpers)
can be imported without the actor's whole code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mailbox_actors.objects.domain_monitor.actor import DomainMonitor

__all__ = ["DomainMonitor"]


def __getattr__(name: str) -> Any:
    if name == "DomainMonitor":
        from mailbox_actors.objects.domain_monitor.actor import DomainMonitor

        globals()[name] = DomainMonitor
        return DomainMonitor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
