"""Hand-off: messages a process sends to a queue it also consumes go straight to its own consumers.

A claim is a write to the shared queue file, and with every node of a cluster claiming one message at
a time those writes queue up behind one another. When a queue has running consumers in the sending
process (``Consumer.run``, no batch timeout), ``send_batch`` inserts the messages already leased to
them, exactly as a claim would have left them, and puts them here; the consumers take them without
touching the file. Nothing changes for durability: the rows are written before ``send_batch``
returns, and if the process dies the leases lapse after the visibility timeout and any consumer of
the cluster claims them, as for a consumer that died mid-batch.

The hand-off holds at most ``room`` messages, and takes none while its oldest has waited
``BEHIND_MS``: a send then inserts visible messages as before, so a process whose consumers are behind
(a slow endpoint holds them) shares its work with the rest of the cluster. A message held longer than
``STALE_MS`` (or half its lease) is handed back to the queue rather than handled late.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mailbox_actors.platform.queues.message import Message

__all__ = ["BEHIND_MS", "STALE_MS", "Handoff"]

BEHIND_MS = 1_000
STALE_MS = 5_000


class Handoff:
    """The messages held for one queue's running consumers in this process."""

    __slots__ = (
        "_held",
        "dead_letter_queue",
        "look_at",
        "looker",
        "max_retries",
        "queue",
        "quiet",
        "room",
        "visibility_ms",
        "wakers",
    )

    def __init__(self, queue: str, *, visibility_ms: int, max_retries: int | None,
                 dead_letter_queue: str, room: int) -> None:
        self.queue = queue
        self.visibility_ms = visibility_ms
        self.max_retries = max_retries
        self.dead_letter_queue = dead_letter_queue
        self.room = room
        # One per running consumer: ``wake(rouse)`` tells it of a hand-off and says whether that
        # roused it from its wait (``Consumer._wake_for_handoff``).
        self.wakers: list[Callable[[bool], bool]] = []
        self.look_at = 0.0  # when the running consumers next read the queue file (anyio time)
        self.looker: object | None = None  # the one of them that waits for that time (Consumer)
        self.quiet = 0  # their looks in a row that found nothing (Consumer: the next is later)
        self._held: deque[tuple[int, Message]] = deque()  # (held since, message), oldest first

    @property
    def runners(self) -> int:
        return len(self.wakers)

    def space(self, now_ms: int) -> int:
        """How many of the messages being sent now to hand over (0: insert them visible)."""
        if not self.runners or (self._held and now_ms - self._held[0][0] >= BEHIND_MS):
            return 0
        return max(0, self.room - len(self._held))

    def put(self, now_ms: int, messages: list[Message]) -> None:
        """Hold ``messages``, rouse as many idle running consumers as there are messages and tell
        the busy ones (without making any look at the file: a hand-off is not news of the file).
        The other idle ones sleep on: waking every consumer for each message cost about 13 us
        a consumer woken for nothing, a third of a hand-off's instructions with 8 consumers."""
        self._held.extend((now_ms, m) for m in messages)
        idle = len(messages)
        for wake in self.wakers:
            if wake(idle > 0):
                idle -= 1

    def take(self, limit: int, now_ms: int) -> tuple[list[Message], list[Message]]:
        """Up to ``limit`` messages to handle, and those held too long (``STALE_MS`` or half the
        lease): the caller hands them back to the queue for any consumer of the cluster."""
        batch: list[Message] = []
        stale: list[Message] = []
        too_old = min(STALE_MS, self.visibility_ms // 2)
        while self._held and len(batch) < limit:
            since, msg = self._held.popleft()
            (stale if now_ms - since >= too_old else batch).append(msg)
        return batch, stale

    def drain(self) -> list[Message]:
        """Everything still held (the last consumer stops)."""
        out = [m for _, m in self._held]
        self._held.clear()
        return out

    def __len__(self) -> int:
        return len(self._held)
