"""Which idle actors to evict (RT-9): those idle for ``idle_ms``, and past the bound the least
recently used; an actor whose alarm is due within ``idle_ms`` is kept (or evicted last), since it
would be opened again for that alarm at once. Closing them is the host's.
"""

from __future__ import annotations

from collections.abc import Iterable

from mailbox_actors.platform.storage.errors import StorageCorrupt, StorageUnavailable
from mailbox_actors.runtime.activation import Activation

__all__ = ["bound_victims", "due_soon", "idle_victims"]


def due_soon(act: Activation, soon_ms: int) -> bool:
    """The actor's stored alarm is due by ``soon_ms`` (it would be opened again for it)."""
    try:
        alarm = act.runtime_storage.stored_alarm()
    except (StorageCorrupt, StorageUnavailable):
        # A request's activation reads its alarm only at first use, so a damaged alarm table (or
        # a file locked or failing right now) can first be met here, while choosing for another
        # actor or for the idle sweep: that actor is only not kept open for an alarm; its own
        # calls report the damage (REL-4).
        return False
    return alarm is not None and alarm <= soon_ms


def idle_victims(by_last_use: Iterable[Activation], now_ms: int, idle_ms: int,
                 ) -> tuple[list[Activation], list[Activation]]:
    """(to evict, to keep as if used now): the idle actors unused for ``idle_ms``, split by
    whether their alarm is due within ``idle_ms``."""
    cutoff, soon = now_ms - idle_ms, now_ms + idle_ms
    victims: list[Activation] = []
    kept: list[Activation] = []
    for act in by_last_use:
        if act.last_used_ms > cutoff:
            break  # ordered by last use: the rest are younger
        if act.idle:
            (kept if due_soon(act, soon) else victims).append(act)
    return victims, kept


def bound_victims(by_last_use: Iterable[Activation], excess: int, keep: Activation | None,
                  soon_ms: int) -> list[Activation]:
    """Up to ``excess`` idle actors, least recently used first, those due by ``soon_ms`` last."""
    victims: list[Activation] = []
    due: list[Activation] = []
    for act in by_last_use:
        if act is keep or not act.idle:
            continue
        if due_soon(act, soon_ms):
            due.append(act)
            continue
        victims.append(act)
        if len(victims) >= excess:
            break
    return (victims + due)[:excess]
