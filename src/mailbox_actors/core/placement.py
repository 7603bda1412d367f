"""Which node owns an object (CL-2): rendezvous (highest-random-weight) hashing over the node list.

Pure and deterministic: every node and every client computes the same owner from the same list, and
removing one node moves only that node's objects.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["Rendezvous", "owner_index"]


def owner_index(nodes: Sequence[str], namespace: str, object_id: str) -> int:
    """Index in ``nodes`` of the node that owns (namespace, object_id)."""
    if not nodes:
        raise ValueError("the node list is empty")
    if len(nodes) == 1:
        return 0
    import hashlib  # here: a single node (serve alone) never loads OpenSSL's digests for it

    key = f"{namespace}/{object_id}".encode()
    best, best_score = 0, b""
    for i, node in enumerate(nodes):
        score = hashlib.blake2b(key, key=node.encode()[:64], digest_size=8).digest()
        if score > best_score:
            best, best_score = i, score
    return best


class Rendezvous:
    """``owner_index`` over a fixed list of names, made cheap for a long list (the slots of a
    cluster on many machines, CL-8): each name's keyed hash state is made once and copied per
    id, and the answers for the ids seen lately are kept (an id's place never changes)."""

    __slots__ = ("_cache", "_states", "names")

    CACHE_MAX = 16_384

    def __init__(self, names: Sequence[str]) -> None:
        if not names:
            raise ValueError("the name list is empty")
        import hashlib

        self.names = tuple(names)
        self._states = [hashlib.blake2b(key=n.encode()[:64], digest_size=8) for n in self.names]
        self._cache: dict[tuple[str, str], int] = {}

    def index(self, namespace: str, object_id: str) -> int:
        at = (namespace, object_id)
        found = self._cache.get(at)
        if found is not None:
            return found
        if len(self._states) == 1:
            best = 0
        else:
            key = f"{namespace}/{object_id}".encode()
            best, best_score = 0, b""
            for i, state in enumerate(self._states):
                h = state.copy()
                h.update(key)
                score = h.digest()
                if score > best_score:
                    best, best_score = i, score
        if len(self._cache) >= self.CACHE_MAX:
            self._cache.clear()
        self._cache[at] = best
        return best
