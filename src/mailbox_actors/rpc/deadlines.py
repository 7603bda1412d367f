"""How long a caller waits by default (RPC-5): one table for the router and the client."""

from __future__ import annotations

__all__ = ["DEFAULT_DEADLINE_MS", "LONG_DEADLINE_MS", "LONG_OPS", "default_deadline_ms"]

DEFAULT_DEADLINE_MS = 10_000
LONG_DEADLINE_MS = 30_000
LONG_OPS = frozenset({"ingest", "submit"})


def default_deadline_ms(op: str) -> int:
    """How long a caller waits by default for ``op`` (RPC-5)."""
    return LONG_DEADLINE_MS if op in LONG_OPS else DEFAULT_DEADLINE_MS
