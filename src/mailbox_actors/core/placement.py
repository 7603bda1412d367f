"""Which node owns an object (CL-2): rendezvous (highest-random-weight) hashing over the node list.

Pure and deterministic: every node and every client computes the same owner from the same list, and
removing one node moves only that node's objects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = ["owner_index"]


def owner_index(nodes: Sequence[str], namespace: str, object_id: str) -> int:
    """Index in ``nodes`` of the node that owns (namespace, object_id)."""
    if not nodes:
        raise ValueError("the node list is empty")
    if len(nodes) == 1:
        return 0
    key = f"{namespace}/{object_id}".encode()
    best, best_score = 0, b""
    for i, node in enumerate(nodes):
        score = hashlib.blake2b(key, key=node.encode()[:64], digest_size=8).digest()
        if score > best_score:
            best, best_score = i, score
    return best
