"""RPC: the router inside a node, the client for host services, the published contract."""

from mailbox_actors.rpc.client import IDEMPOTENT_OPS, Client, RpcError
from mailbox_actors.rpc.router import DEFAULT_DEADLINE_MS, LONG_DEADLINE_MS, Router

__all__ = ["DEFAULT_DEADLINE_MS", "IDEMPOTENT_OPS", "LONG_DEADLINE_MS", "Client", "Router",
           "RpcError"]
