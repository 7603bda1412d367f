"""The rolling per-recipient cap (CA-6): at most N Emails per normalized address in a window.

The caller counts, per normalized address, the Emails created inside the window whose status
counts (``states.COUNTED_BY_CAP``: those that reached, or may have reached, the provider); this
decides. An Email naming one address twice counts once for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

__all__ = ["CapPolicy", "full_at", "over_cap", "window_start"]


class CapPolicy(msgspec.Struct, frozen=True):
    limit: int = 50  # Emails per normalized recipient ...
    window_ms: int = 86_400_000  # ... in this rolling window


def window_start(policy: CapPolicy, now_ms: int) -> int:
    """Emails created after this instant are inside the window."""
    return now_ms - policy.window_ms


def full_at(policy: CapPolicy) -> int:
    """An address already counted this many times in the window refuses one more Email (the
    store asks for such an address in the same statement that inserts the Email)."""
    return policy.limit


def over_cap(policy: CapPolicy, keys: Iterable[str], counted: Mapping[str, int]) -> list[str]:
    """The keys (in first-seen order, once each) that one more Email would take over the cap."""
    full = full_at(policy)
    out: list[str] = []
    for key in dict.fromkeys(keys):
        if counted.get(key, 0) >= full:
            out.append(key)
    return out
