"""File descriptors (OPS-4): the process's limit raised to what it may use, and how many actors that
leaves room for.

An open actor holds about three descriptors (its file, the write-ahead log and the shared-memory
index); sockets, the shared files and the alarm index need the rest. A node whose actors took every
descriptor could no longer accept a connection, so open actors are bounded by the limit, with room
kept for everything else: past the bound the least recently used idle actors are evicted, and an
actor file that still cannot be opened answers ``unavailable`` (retryable).
"""

from __future__ import annotations

import resource

__all__ = ["FDS_PER_ACTOR", "actor_bound", "nofile_limit", "raise_nofile_limit", "reserved_fds"]

FDS_PER_ACTOR = 3
_MIN_RESERVED = 96  # sockets, shared files, the alarm index, logs, aiosqlite's threads
_CEILING = 1 << 20  # an "unlimited" hard limit is not a number to pass to setrlimit


def nofile_limit() -> int:
    """The soft descriptor limit now."""
    return int(resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def raise_nofile_limit() -> int:
    """Raise the soft descriptor limit to the hard one (as far as the system allows); returns the
    soft limit in force afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _CEILING if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= target:
        return nofile_limit()
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):  # e.g. macOS caps it below an "unlimited" hard limit
        pass
    return nofile_limit()


def reserved_fds(soft: int) -> int:
    return max(_MIN_RESERVED, soft // 4)


def actor_bound(configured: int, soft: int | None = None) -> int:
    """``max_active_actors`` as the descriptor limit allows (never below 1)."""
    soft = nofile_limit() if soft is None else soft
    return max(1, min(configured, (soft - reserved_fds(soft)) // FDS_PER_ACTOR))
