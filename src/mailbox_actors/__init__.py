"""mailbox-actors: a Python runtime that emulates Cloudflare Durable Objects.

The names below are the public API; each is imported on first use, so ``import mailbox_actors``
stays cheap and the command line starts fast.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "Actor",
    "ActorContext",
    "AlarmInfo",
    "Client",
    "ErrorCode",
    "FakeClock",
    "MailboxActorsError",
    "Migration",
    "Node",
    "RpcError",
    "RuntimeSettings",
    "SeededRng",
    "SystemClock",
    "TestRuntime",
]

_WHERE = {
    "Actor": "mailbox_actors.runtime.actor",
    "ActorContext": "mailbox_actors.runtime.actor",
    "AlarmInfo": "mailbox_actors.runtime.actor",
    "Client": "mailbox_actors.rpc.client",
    "ErrorCode": "mailbox_actors.wire.errors",
    "FakeClock": "mailbox_actors.platform.clock",
    "MailboxActorsError": "mailbox_actors.wire.errors",
    "Migration": "mailbox_actors.runtime.migrations",
    "Node": "mailbox_actors.node.node",
    "RpcError": "mailbox_actors.rpc.client",
    "RuntimeSettings": "mailbox_actors.runtime.settings",
    "SeededRng": "mailbox_actors.platform.rng",
    "SystemClock": "mailbox_actors.platform.clock",
    "TestRuntime": "mailbox_actors.testing",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'mailbox_actors' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
