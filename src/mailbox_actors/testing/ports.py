"""Free loopback ports for servers a test starts in another process (or starts later): the
platform's picker (``platform.ports``), below the kernel's ephemeral range."""

from __future__ import annotations

from mailbox_actors.platform.ports import free_port, free_port_block

__all__ = ["free_port", "free_port_block"]
