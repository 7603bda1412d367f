"""Slots (CL-8): a cluster's id space cut into S parts fixed at its creation.

An id's slot is rendezvous hashing over the slot names (``core.placement``, the hash the
single-machine cluster uses over node names), so every machine and every client computes it alike
from S alone. A slot is one data directory (one volume) holding its actors' files and its alarm
index: ``VOLUMES/slot-<k>``. The id secret's fingerprint is recorded beside S, so a machine started
with another secret (whose ids would be refused by the others) is turned away at start.
"""

from __future__ import annotations

import hashlib
import hmac
from functools import lru_cache
from pathlib import Path

from mailbox_actors.core.placement import Rendezvous

__all__ = ["DEFAULT_SLOTS", "MAX_SLOTS", "secret_fingerprint", "slot_dir", "slot_names",
           "slot_of"]

DEFAULT_SLOTS = 64
MAX_SLOTS = 4096


def slot_names(slots: int) -> tuple[str, ...]:
    """The names the hash runs over: ``slot-0`` .. ``slot-<S-1>``."""
    return _rendezvous(slots).names


@lru_cache(maxsize=8)
def _rendezvous(slots: int) -> Rendezvous:
    if not 1 <= slots <= MAX_SLOTS:
        raise ValueError(f"slots must be 1..{MAX_SLOTS} (got {slots})")
    return Rendezvous([f"slot-{k}" for k in range(slots)])


def slot_of(slots: int, namespace: str, object_id: str) -> int:
    """The slot holding (namespace, object_id) in a cluster of ``slots`` slots (the same answer
    as ``owner_index`` over ``slot_names``, its hash states made once and its answers kept)."""
    return _rendezvous(slots).index(namespace, object_id)


def slot_dir(volumes: Path, slot: int) -> Path:
    """Slot ``slot``'s data directory (its volume) under ``volumes``."""
    return volumes / f"slot-{slot}"


def secret_fingerprint(secret: str) -> str:
    """What the cluster records of its id secret: enough to tell two secrets apart, nothing to
    derive ids with (an HMAC of a fixed text under the secret, 16 hex digits)."""
    return hmac.new(secret.encode(), b"mailbox-actors/cluster-fingerprint",
                    hashlib.sha256).hexdigest()[:16]
