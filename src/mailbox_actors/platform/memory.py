"""Memory (RT-9, OPS-4): how many open actors the machine's memory leaves room for, and giving the
memory of evicted actors back to the system.

An open actor is one SQLite connection (its page cache capped at ``PAGE_CACHE_KIB``, its statement
cache, its schema) and the runtime's objects around it: a small actor costs tens of KB, a busy
one up to ``ACTOR_BUDGET_BYTES``. Open actors are bounded so that that budget for every one of
them fits in a quarter of the machine's memory.

Closing a connection frees its memory into the C allocator, which keeps freed pages inside the
heap: a node that opened and evicted many actors would keep their memory for good. ``give_back``
asks glibc to return free pages to the system (``malloc_trim``); elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import gc
import os
from typing import Any

__all__ = ["ACTOR_BUDGET_BYTES", "PAGE_CACHE_KIB", "give_back", "memory_bound", "physical_memory"]

PAGE_CACHE_KIB = 256  # PRAGMA cache_size = -256 on every actor connection
# The page cache full, 64 statements cached, the runtime's part: measured 478 KB of RSS for such an
# actor (2026-12-01; an idle one that served a read, about 70 KB: README, ADR 0015).
ACTOR_BUDGET_BYTES = 512 * 1024
_MEMORY_SHARE = 4  # open actors may take a quarter of the machine's memory

_libc: Any = None
_libc_tried = False


def physical_memory() -> int | None:
    """Bytes of memory the machine has, or None when the system does not say."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def memory_bound(configured: int, memory: int | None = None) -> int:
    """``max_active_actors`` as memory allows (never below 1)."""
    memory = physical_memory() if memory is None else memory
    if memory is None:
        return configured
    return max(1, min(configured, memory // _MEMORY_SHARE // ACTOR_BUDGET_BYTES))


def give_back(collect: bool = False) -> bool:
    """Return the allocator's free pages to the system; True when it did (glibc only).
    ``collect``: first free the evicted actors' reference cycles (a full ``gc`` pass: for a
    batch the caller chose to wait for, not the periodic eviction)."""
    global _libc, _libc_tried
    if collect:
        gc.collect()
    if not _libc_tried:
        _libc_tried = True
        try:
            lib = ctypes.CDLL(None)
            _libc = lib.malloc_trim
        except (OSError, AttributeError):
            _libc = None
    return bool(_libc is not None and _libc(0))
