"""Acks written behind a running consumer, as Cloudflare Queues applies ``message.ack()``.

A consumer that waited for each ack's DELETE before taking the next message would spend most of its
time waiting on the queue file. A running consumer (``Consumer.run``) instead notes the ack and goes
on; one task per consumer writes what has gathered (through the service's group commit, so the acks
of every consumer of the process share a transaction). The ack still follows the effect it
acknowledges; a process that dies before the DELETE is written has those messages delivered again,
as it would had it died just before an awaited ack: delivery is at least once either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup

from mailbox_actors.platform.logging import get_logger

if TYPE_CHECKING:
    from mailbox_actors.platform.queues.message import Message
    from mailbox_actors.platform.queues.service import QueueService

__all__ = ["AckBehind"]

_log = get_logger("mailbox_actors.queues")
_GATHER_S = 0.01  # real time an ack may wait for others to share its write
_GATHER_COUNT = 64  # ...or until this many wait


class AckBehind:
    """The acks of one running consumer, written by a task of ``task_group``. Past ``max_pending``
    unwritten acks, ``add`` waits for them (the queue file is behind: slow the consumer down)."""

    def __init__(self, service: QueueService, queue: str, task_group: TaskGroup, *,
                 max_pending: int = 1024) -> None:
        self._service = service
        self._queue = queue
        self._tg = task_group
        self._max = max_pending
        self._pending: list[str] = []
        self._writing: list[str] = []
        self._writer_running = False
        self._full = anyio.Event()  # set when _GATHER_COUNT acks wait

    async def add(self, msg: Message) -> None:
        msg._settled = True
        self._pending.append(msg.id)
        if len(self._pending) >= self._max:
            await self._write()
        elif len(self._pending) >= _GATHER_COUNT:
            self._full.set()
        elif not self._writer_running:
            self._writer_running = True
            self._tg.start_soon(self._writer)

    async def _writer(self) -> None:
        try:
            while self._pending:
                # Let acks gather for a moment: every write takes the file's write lock, which the
                # other processes of the cluster wait for. A later ack only delays a redelivery.
                with anyio.move_on_after(_GATHER_S):
                    await self._full.wait()
                await self._write()
        finally:
            self._writer_running = False

    async def _write(self) -> None:
        ids, self._pending = self._pending, []
        self._full = anyio.Event()
        self._writing.extend(ids)
        try:
            await self._service.ack_many(self._queue, ids)
        except Exception as exc:
            # The leases lapse and the messages are delivered again; nothing is lost.
            _log.error("queue_settle_failed", queue=self._queue, messages=len(ids),
                       error_type=type(exc).__name__)
        # Not on cancellation: close() writes what a cancelled writer left.
        done = set(ids)
        self._writing = [i for i in self._writing if i not in done]

    async def close(self) -> None:
        """Write every ack noted so far (also those a cancelled writer was writing: a DELETE is
        idempotent). Call shielded."""
        ids = [*self._writing, *self._pending]
        self._pending, self._writing = [], []
        if ids:
            try:
                await self._service.ack_many(self._queue, ids)
            except Exception as exc:
                _log.error("queue_settle_failed", queue=self._queue, messages=len(ids),
                           error_type=type(exc).__name__)
