"""One delivery of a queued message (Q-1, Q-2): what a handler gets, and how it settles it.

A ``Message`` is settled once (``ack``, ``retry``, ``give_up``); the service does the writing. Its
lease names this delivery, so a lapsed one can no longer settle a message another consumer holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from mailbox_actors.platform.queues.bodies import check_delay_ms

__all__ = ["DeadLetterInfo", "Message", "Policy", "Settler"]


class Settler(Protocol):
    """What writes a message's settlement: the queue service that delivered it
    (``service.QueueService``), passed in, so this module needs nothing of it."""

    async def ack_many(self, queue: str, ids: Sequence[str]) -> None: ...

    async def _retry_message(self, msg: Message, delay_ms: int, reason: str) -> None: ...

    async def _dead_letter(self, msg: Message, reason: str, *, deliveries: int | None = None
                           ) -> None: ...


@dataclass(frozen=True, slots=True)
class DeadLetterInfo:
    """Why a message sits in a dead-letter queue: where it came from, why, after how many
    deliveries."""

    origin_queue: str
    reason: str
    attempts: int


@dataclass(frozen=True, slots=True)
class Policy:
    """A consumer's retry budget and where its messages go past it."""

    max_retries: int | None  # None: retry forever (the dead-letter recorder)
    dead_letter_queue: str


class Message:
    """One delivery of a queued message. Settle it once: ``ack()`` or ``retry()``; later calls
    do nothing."""

    __slots__ = ("_lease", "_policy", "_service", "_settled", "attempts", "body", "dead_letter",
                 "enqueued_at_ms", "id", "queue")

    def __init__(self, service: Settler, *, id: str, queue: str, body: dict[str, Any],
                 attempts: int, enqueued_at_ms: int, lease: str, policy: Policy,
                 dead_letter: DeadLetterInfo | None) -> None:
        self.id = id
        self.queue = queue
        self.body = body
        self.attempts = attempts  # deliveries so far, this one included
        self.enqueued_at_ms = enqueued_at_ms
        self.dead_letter = dead_letter
        self._service = service
        self._lease = lease
        self._policy = policy
        self._settled = False

    @property
    def kind(self) -> str:
        return str(self.body["kind"])

    @property
    def settled(self) -> bool:
        return self._settled

    async def ack(self) -> None:
        """Done: this message is never delivered again."""
        if not self._settled:
            self._settled = True
            await self._service.ack_many(self.queue, [self.id])

    async def retry(self, delay_seconds: float = 0) -> None:
        """Deliver again after ``delay_seconds``; past ``max_retries`` it is dead-lettered instead."""
        await self._retry(check_delay_ms(delay_seconds), "retries_exhausted")

    async def give_up(self, reason: str) -> None:
        """Give up now: move to the dead-letter queue with ``reason`` (a consumer's own budget
        is spent, or the message can never succeed)."""
        if not self._settled:
            self._settled = True
            await self._service._dead_letter(self, reason)

    async def _retry(self, delay_ms: int, reason: str) -> None:
        if not self._settled:
            self._settled = True
            await self._service._retry_message(self, delay_ms, reason)

    def __repr__(self) -> str:
        return f"Message(id={self.id!r}, queue={self.queue!r}, attempts={self.attempts})"
