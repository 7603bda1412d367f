"""An actor storage's limits (RT-7) and durability modes: the settings a file is opened with."""

from __future__ import annotations

import msgspec

__all__ = ["PAGE_BYTES", "RESERVE_PAGES", "Durability", "Limits", "page_limits"]

_GIB = 1 << 30
PAGE_BYTES = 4096  # SQLite's page size for actor files (its default; never changed)
# The last pages under max_database_bytes are kept for the transactions that make room (a
# deleted message, an erase: ``transaction_freeing``), as a filesystem keeps blocks for root:
# ordinary writes stop this short of the limit, so a full file can always delete. 64 pages
# (256 KiB), or a sixteenth of a limit under 4 MiB.
RESERVE_PAGES = 64


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


def page_limits(limits: Limits) -> tuple[int, int]:
    """Pages of the file ordinary writes may fill, and pages a freeing transaction may fill
    (``max_database_bytes``'s own: the file never grows past it)."""
    hard = max(1, limits.max_database_bytes // PAGE_BYTES)
    return max(1, hard - min(RESERVE_PAGES, hard // 16)), hard
