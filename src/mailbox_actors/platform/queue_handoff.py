"""Hand-off: messages a process sends to a queue it also consumes go straight to its own consumers.

A claim is a write to the shared queue file, and with every node of a cluster claiming one message at
a time those writes queue up behind one another. When a queue has running consumers in the sending
process (``Consumer.run``, no batch timeout), ``send_batch`` inserts the messages already leased to
them, exactly as a claim would have left them, and puts them here; the consumers take them without
touching the file. Nothing changes for durability: the rows are written before ``send_batch``
returns, and if the process dies the leases lapse after the visibility timeout and any consumer of
the cluster claims them, as for a consumer that died mid-batch.

The hand-off holds at most ``room`` messages; a send past that inserts visible messages as before,
so a process whose consumers are behind shares its work with the rest of the cluster.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mailbox_actors.platform.queue_service import Message

__all__ = ["Handoff"]


class Handoff:
    """The messages held for one queue's running consumers in this process."""

    __slots__ = (
        "_held",
        "dead_letter_queue",
        "max_retries",
        "queue",
        "room",
        "runners",
        "visibility_ms",
    )

    def __init__(self, queue: str, *, visibility_ms: int, max_retries: int | None,
                 dead_letter_queue: str, room: int) -> None:
        self.queue = queue
        self.visibility_ms = visibility_ms
        self.max_retries = max_retries
        self.dead_letter_queue = dead_letter_queue
        self.room = room
        self.runners = 0
        self._held: deque[tuple[int, Message]] = deque()  # (lease end, message), oldest first

    def space(self) -> int:
        return max(0, self.room - len(self._held)) if self.runners else 0

    def put(self, until_ms: int, messages: list[Message]) -> None:
        self._held.extend((until_ms, m) for m in messages)

    def take(self, limit: int, now_ms: int) -> tuple[list[Message], list[Message]]:
        """Up to ``limit`` messages to handle, and those whose lease is half gone (held too long:
        the caller hands them back to the queue rather than risk a second delivery mid-attempt)."""
        batch: list[Message] = []
        stale: list[Message] = []
        while self._held and len(batch) < limit:
            until, msg = self._held.popleft()
            (stale if until - now_ms < self.visibility_ms // 2 else batch).append(msg)
        return batch, stale

    def drain(self) -> list[Message]:
        """Everything still held (the last consumer stops)."""
        out = [m for _, m in self._held]
        self._held.clear()
        return out

    def __len__(self) -> int:
        return len(self._held)
