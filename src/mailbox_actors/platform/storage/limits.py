"""An actor storage's limits (RT-7) and durability modes: the settings a file is opened with."""

from __future__ import annotations

import msgspec

__all__ = ["Durability", "Limits"]

_GIB = 1 << 30


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """RT-7 storage limits; the defaults are Durable Objects' own."""

    max_bound_parameters: int = 100
    max_statement_bytes: int = 100_000
    max_value_bytes: int = 2_000_000
    max_columns: int = 100
    max_database_bytes: int = 10 * _GIB


class Durability:
    NORMAL = "normal"  # survives a process crash (WAL, synchronous=NORMAL)
    FULL = "full"  # survives power loss (synchronous=FULL)
    ALL = (NORMAL, FULL)
