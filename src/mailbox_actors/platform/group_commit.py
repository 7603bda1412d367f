"""Group commit: items from concurrent callers written together, in order.

Each caller adds its items to the newest open group and waits. Whoever holds the lock writes the
oldest groups, one write per group, and stops once its own group is written, so no caller waits for
more than the groups ahead of it. A failed write fails exactly the callers of that group; a writer
that is cancelled leaves its group for the next one (writes must be idempotent).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, TypeVar

import anyio

__all__ = ["GroupCommit"]

T = TypeVar("T")


class _Group(Generic[T]):
    __slots__ = ("done", "error", "items")

    def __init__(self) -> None:
        self.items: list[T] = []
        self.done = anyio.Event()
        self.error: BaseException | None = None


class GroupCommit(Generic[T]):
    def __init__(self, write: Callable[[list[T]], Awaitable[None]], *, max_items: int) -> None:
        if max_items < 1:
            raise ValueError("max_items must be >= 1")
        self._write = write
        self._max = max_items
        self._pending: deque[_Group[T]] = deque()
        self._lock = anyio.Lock()

    async def submit(self, items: Iterable[T]) -> None:
        """Return once ``items`` are written; raise what their group's write raised."""
        if not self._pending or len(self._pending[-1].items) >= self._max:
            self._pending.append(_Group())
        group = self._pending[-1]
        group.items.extend(items)
        async with self._lock:
            while not group.done.is_set():
                ahead = self._pending.popleft()
                try:
                    await self._write(ahead.items)
                except Exception as e:
                    ahead.error = e
                    ahead.done.set()
                except BaseException:
                    # This writer was cancelled, not the group's other callers: put the group
                    # back first in line for the next holder (writes are idempotent).
                    self._pending.appendleft(ahead)
                    raise
                else:
                    ahead.done.set()
        if group.error is not None:
            raise group.error
