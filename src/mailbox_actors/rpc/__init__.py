"""RPC: the router inside a node, the client for host services, the published contract.

The package gives the client's names (importing it pulls in neither the runtime nor sqlite3: a
host service needs none of them); the router is ``rpc.router``'s.
"""

from mailbox_actors.rpc.client import IDEMPOTENT_OPS, Client, RpcError
from mailbox_actors.rpc.deadlines import DEFAULT_DEADLINE_MS, LONG_DEADLINE_MS

__all__ = ["DEFAULT_DEADLINE_MS", "IDEMPOTENT_OPS", "LONG_DEADLINE_MS", "Client", "RpcError"]
