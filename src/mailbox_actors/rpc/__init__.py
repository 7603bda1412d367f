"""RPC: the router inside a node, the client for host services, the published contract.

The package gives the client's names (importing it pulls in neither the runtime nor sqlite3: a
host service needs none of them); the router is ``rpc.router``'s. The client is imported on first
use (PEP 562), so a node, which imports the router, does not load the HTTP client to answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mailbox_actors.rpc.deadlines import DEFAULT_DEADLINE_MS, LONG_DEADLINE_MS

if TYPE_CHECKING:
    from mailbox_actors.rpc.client import IDEMPOTENT_OPS, Client, RpcError

__all__ = ["DEFAULT_DEADLINE_MS", "IDEMPOTENT_OPS", "LONG_DEADLINE_MS", "Client", "RpcError"]

_CLIENT_NAMES = frozenset({"IDEMPOTENT_OPS", "Client", "RpcError"})


def __getattr__(name: str) -> Any:
    if name in _CLIENT_NAMES:
        from mailbox_actors.rpc import client

        value = getattr(client, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
