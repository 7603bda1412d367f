"""What the queues hold (Q-1, Q-2): depth, per-queue counts, and when the next message or batch of
a queue is due (the consumers' and the FakeClock's schedule). Part of ``QueueService``."""

from __future__ import annotations

from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.queues.bodies import check_batch_size, check_queue_name
from mailbox_actors.platform.shared_store import SharedStore

__all__ = ["QueueReads"]


class QueueReads:
    """The reading half of ``QueueService``."""

    _store: SharedStore
    _clock: Clock

    async def depth(self, queue: str) -> int:
        """Messages waiting (ready or delayed) plus those in flight."""
        check_queue_name(queue)
        rows = await self._store.fetch("SELECT COUNT(*) FROM messages WHERE queue = ?", (queue,))
        return int(rows[0][0])

    async def stats(self) -> dict[str, dict[str, int]]:
        """Per queue: ready, delayed, in_flight, and dead_letters recorded from it."""
        now = self._clock.now_ms()
        out: dict[str, dict[str, int]] = {}

        def entry(queue: str) -> dict[str, int]:
            return out.setdefault(queue, {"ready": 0, "delayed": 0, "in_flight": 0,
                                          "dead_letters": 0})

        for queue, ready, delayed, in_flight in await self._store.fetch(
                "SELECT queue, SUM(CASE WHEN visible_at_ms <= ? THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN visible_at_ms > ? AND lease IS NULL THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN visible_at_ms > ? AND lease IS NOT NULL THEN 1 ELSE 0 END) "
                "FROM messages GROUP BY queue", (now, now, now)):
            entry(queue).update(ready=int(ready), delayed=int(delayed), in_flight=int(in_flight))
        for queue, n in await self._store.fetch(
                "SELECT queue, COUNT(*) FROM dead_letters GROUP BY queue"):
            entry(queue)["dead_letters"] = int(n)
        return dict(sorted(out.items()))

    async def next_visible_ms(self, queue: str) -> int | None:
        """When the next message of ``queue`` is (or was) visible; in-flight ones count at their
        visibility timeout. None when the queue is empty."""
        check_queue_name(queue)
        rows = await self._store.fetch("SELECT MIN(visible_at_ms) FROM messages WHERE queue = ?", (queue,))
        return None if rows[0][0] is None else int(rows[0][0])

    async def batch_due_ms(self, queue: str, *, max_batch_size: int, max_batch_timeout_ms: int
                           ) -> int | None:
        """When a batch of ``queue`` is due: ``max_batch_size`` messages visible, or the oldest
        visible one waited ``max_batch_timeout_ms``, whichever is first. None when empty."""
        check_queue_name(queue)
        check_batch_size(max_batch_size)
        rows = await self._store.fetch(
            "SELECT MIN(visible_at_ms), (SELECT visible_at_ms FROM messages WHERE queue = ? "
            "ORDER BY visible_at_ms LIMIT 1 OFFSET ?) FROM messages WHERE queue = ?",
            (queue, max_batch_size - 1, queue))
        oldest, full = rows[0]
        if oldest is None:
            return None
        due = int(oldest) + max(0, max_batch_timeout_ms)
        return due if full is None else min(due, int(full))
