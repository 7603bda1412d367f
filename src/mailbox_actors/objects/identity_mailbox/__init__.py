"""IdentityMailbox (OBJ-1): one identity's mailbox; one module per concern beside ``actor``.

``IdentityMailbox`` is imported on first use (PEP 562), so a submodule (its inspection, its wire helpers)
can be imported without the actor's whole code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mailbox_actors.objects.identity_mailbox.actor import IdentityMailbox

__all__ = ["IdentityMailbox"]


def __getattr__(name: str) -> Any:
    if name == "IdentityMailbox":
        from mailbox_actors.objects.identity_mailbox.actor import IdentityMailbox

        globals()[name] = IdentityMailbox
        return IdentityMailbox
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
