"""A node: the runtime assembled (host, scheduler, router, objects), embedded or on the network.

``Node`` is imported when first named, so that ``mailbox_actors.node.settings`` (what the command
line builds its flags from) can be read without importing the runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mailbox_actors.node.node import Node

__all__ = ["Node"]


def __getattr__(name: str) -> Any:
    if name == "Node":
        from mailbox_actors.node.node import Node

        return Node
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
