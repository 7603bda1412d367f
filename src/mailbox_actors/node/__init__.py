"""A node: the runtime assembled (host, scheduler, router, objects), embedded or on the network."""

from mailbox_actors.node.node import Node

__all__ = ["Node"]
