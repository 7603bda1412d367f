"""The queues' record of dead letters (Q-2): a message held from a dead-letter queue is recorded in
``dead_letters`` and removed in one transaction, logged and counted; the records read back by
original queue. Part of ``QueueService``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.logging import get_logger
from mailbox_actors.platform.queues.bodies import check_queue_name
from mailbox_actors.platform.queues.message import DeadLetterInfo, Message
from mailbox_actors.platform.shared_store import SharedStore, Tx

__all__ = ["DeadLetterRecords"]

_log = get_logger("mailbox_actors.queues")
_decoder = msgspec.json.Decoder(dict[str, Any])


class DeadLetterRecords:
    """The ``dead_letters`` half of ``QueueService``."""

    _store: SharedStore
    _clock: Clock
    _ids: Ids
    metrics: Any

    def _notify(self, queue: str, at_ms: int) -> None: ...

    async def record_dead_letter(self, msg: Message) -> bool:
        """Record a message held from a dead-letter queue in ``dead_letters`` and remove it, in one
        transaction; log it at error level and count it. False if the lease had lapsed."""
        info = msg.dead_letter or DeadLetterInfo(msg.queue, "sent_to_dead_letter_queue", msg.attempts)
        async def move(conn: Tx) -> list[Any]:
            rows = list(await conn.execute_fetchall(
                "DELETE FROM messages WHERE id = ? AND lease = ? RETURNING kind, body",
                (msg.id, msg._lease)))
            if rows:
                kind, body = rows[0]
                await conn.execute_fetchall(self._store.dialect.ignore_duplicates(
                    "dead_letters (queue, dead_letter_queue, message_id, kind, body, reason, "
                    "attempts, enqueued_at_ms, recorded_at_ms)",
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                    (info.origin_queue, msg.queue, msg.id, kind, body, info.reason, info.attempts,
                     msg.enqueued_at_ms, self._clock.now_ms()))
            return rows

        rows = await self._store.run(move)
        msg._settled = True
        if not rows:
            return False
        _log.error("queue_dead_letter", queue=info.origin_queue, dead_letter_queue=msg.queue,
                   message_id=msg.id, kind=msg.kind, reason=info.reason, attempts=info.attempts)
        if self.metrics is not None:
            self.metrics.inc("queue_dead_letters_total", (("queue", info.origin_queue),))
        return True

    async def dead_letters(self, queue: str, *, limit: int = 100) -> list[dict[str, Any]]:
        """The letters recorded from ``queue`` (its original name), oldest first."""
        check_queue_name(queue)
        rows = await self._store.fetch(
            "SELECT message_id, dead_letter_queue, kind, body, reason, attempts, enqueued_at_ms, "
            "recorded_at_ms FROM dead_letters WHERE queue = ? ORDER BY seq LIMIT ?",
            (queue, max(0, int(limit))))
        return [{"queue": queue, "message_id": mid, "dead_letter_queue": dlq, "kind": kind,
                 "body": _decoder.decode(body), "reason": reason, "attempts": attempts,
                 "enqueued_at_ms": enqueued, "recorded_at_ms": recorded}
                for mid, dlq, kind, body, reason, attempts, enqueued, recorded in rows]

    async def dead_letter_page(self, queue: str, *, after_seq: int = 0,
                               limit: int = 50) -> list[dict[str, Any]]:
        """UI-3: up to ``limit`` letters recorded from ``queue`` after record ``after_seq``, oldest
        first, each with its ``seq`` (where the next page starts)."""
        check_queue_name(queue)
        rows = await self._store.fetch(
            "SELECT seq, message_id, dead_letter_queue, kind, body, reason, attempts, "
            "enqueued_at_ms, recorded_at_ms FROM dead_letters WHERE queue = ? AND seq > ? "
            "ORDER BY seq LIMIT ?", (queue, int(after_seq), max(0, int(limit))))
        return [{"seq": seq, "queue": queue, "message_id": mid, "dead_letter_queue": dlq,
                 "kind": kind, "body": _decoder.decode(body), "reason": reason,
                 "attempts": attempts, "enqueued_at_ms": enqueued, "recorded_at_ms": recorded}
                for seq, mid, dlq, kind, body, reason, attempts, enqueued, recorded in rows]

    async def redrive(self, queue: str, message_ids: Sequence[str] | None = None, *,
                      limit: int = 100, restart_keys: Sequence[str] = ()) -> list[tuple[str, str]]:
        """UI-3: send letters recorded from ``queue`` back to it as new messages (their attempts
        start again) and remove their records, in one transaction: those named by
        ``message_ids``, or the oldest ``limit`` when none are named. ``restart_keys``: keys
        taken out of each body, where the consumer counts its own attempts (a webhook's
        ``attempt``). Returns (dead letter's id, new message's id) for each; an id with no
        record is skipped (redriven already)."""
        check_queue_name(queue)
        now = self._clock.now_ms()

        async def move(conn: Tx) -> list[tuple[str, str]]:
            if message_ids is None:
                found = list(await conn.execute_fetchall(
                    "SELECT seq, message_id, kind, body FROM dead_letters WHERE queue = ? "
                    "ORDER BY seq LIMIT ?", (queue, max(0, int(limit)))))
            else:
                found = []
                for mid in message_ids:
                    found += list(await conn.execute_fetchall(
                        "SELECT seq, message_id, kind, body FROM dead_letters WHERE queue = ? "
                        "AND message_id = ?", (queue, mid)))
            moved = []
            for seq, mid, kind, body in found:
                if restart_keys:
                    data = _decoder.decode(body)
                    body = msgspec.json.encode({k: v for k, v in data.items()
                                                if k not in restart_keys}).decode()
                new_id = self._ids.new_id("qm")
                await conn.execute_fetchall(
                    "INSERT INTO messages (id, queue, kind, body, enqueued_at_ms, visible_at_ms, "
                    "attempts, lease) VALUES (?, ?, ?, ?, ?, ?, 0, NULL)",
                    (new_id, queue, kind, body, now, now))
                await conn.execute_fetchall("DELETE FROM dead_letters WHERE seq = ?", (seq,))
                moved.append((str(mid), new_id))
            return moved

        moved = await self._store.run(move)
        if moved:
            _log.warning("queue_dead_letters_redriven", queue=queue, count=len(moved))
            self._notify(queue, now)
        return moved
