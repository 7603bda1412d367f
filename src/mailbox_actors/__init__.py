"""mailbox-actors: a Python runtime that emulates Cloudflare Durable Objects.

The names below are the public API; each is imported on first use, so ``import mailbox_actors``
stays cheap and the command line starts fast. A type checker reads the same names from the
``TYPE_CHECKING`` block instead, so ``from mailbox_actors import Actor`` has its real type (TK-3).
"""

from __future__ import annotations

# Not typing's: importing typing (and re with it) is about a third of `mailbox-actors --version`.
# Type checkers treat any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mailbox_actors.core.inbound.limits import InboundLimits
    from mailbox_actors.node.node import Node
    from mailbox_actors.platform.clock import FakeClock, SystemClock
    from mailbox_actors.platform.dns.resolver import DnsSettings
    from mailbox_actors.platform.rng import SeededRng
    from mailbox_actors.platform.storage.limits import Limits
    from mailbox_actors.rpc.client import Client, RpcError
    from mailbox_actors.runtime.actor import Actor, ActorContext, AlarmInfo
    from mailbox_actors.runtime.migrations import Migration
    from mailbox_actors.runtime.settings import RuntimeSettings
    from mailbox_actors.testing import TestRuntime
    from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

from mailbox_actors.platform.sqlite_library import configure_sqlite_before_import  # noqa: E402

# Before anything imports sqlite3: SQLite reads this setting once, when it initialises (ADR 0012).
# Made as _sqlite3 is imported, so a command that never opens SQLite loads no ctypes for it.
configure_sqlite_before_import()

# The distribution's version (pyproject.toml's; a test holds them equal): read here, where
# importlib.metadata would cost every `mailbox-actors --version` about 35 ms.
__version__ = "0.1.0"

__all__ = [
    "Actor",
    "ActorContext",
    "AlarmInfo",
    "Client",
    "DnsSettings",
    "ErrorCode",
    "FakeClock",
    "InboundLimits",
    "Limits",
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
    "DnsSettings": "mailbox_actors.platform.dns.resolver",
    "ErrorCode": "mailbox_actors.wire.errors",
    "FakeClock": "mailbox_actors.platform.clock",
    "InboundLimits": "mailbox_actors.core.inbound.limits",
    "Limits": "mailbox_actors.platform.storage.limits",
    "MailboxActorsError": "mailbox_actors.wire.errors",
    "Migration": "mailbox_actors.runtime.migrations",
    "Node": "mailbox_actors.node.node",
    "RpcError": "mailbox_actors.rpc.client",
    "RuntimeSettings": "mailbox_actors.runtime.settings",
    "SeededRng": "mailbox_actors.platform.rng",
    "SystemClock": "mailbox_actors.platform.clock",
    "TestRuntime": "mailbox_actors.testing",
}


def __getattr__(name: str) -> Any:  # at run time only: the names above are not bound here
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'mailbox_actors' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
