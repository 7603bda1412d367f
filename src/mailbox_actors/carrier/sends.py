"""The sends of one dispatch run (CA-4): the Emails whose intent committed, handed to a few
worker tasks that call the transport, and the outcomes they bring back for the run's next commit.

Written on asyncio's own primitives (a deque, futures, an Event, a timer), not anyio's memory
stream, events and cancel scopes: each of those takes a turn of the event loop (a checkpoint) or
a cancel scope per use, and with one connection's worth of Emails a run they were a tenth of a
dispatch's CPU. Cancellation is the task's, as anyio delivers it on asyncio.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

from mailbox_actors.carrier.store import EmailRow
from mailbox_actors.wire.transport import OutboundEmail, TransportOutcome

__all__ = ["Sends"]


class Sends:
    """``hand`` an Email once its intent is committed; a worker sends it (``send``, unless
    ``skip`` says otherwise when its turn comes) and leaves its outcome in ``finished``;
    ``changed`` is set whenever a send ends."""

    def __init__(self, send: Callable[[OutboundEmail], Awaitable[TransportOutcome]],
                 skip: Callable[[], bool]) -> None:
        self._send = send
        self._skip = skip
        self._loop = asyncio.get_running_loop()
        self.in_flight: dict[str, EmailRow] = {}  # as intent left them, for their outcome
        self.finished: list[tuple[EmailRow, TransportOutcome]] = []
        self.changed = asyncio.Event()
        self.workers = 0  # started by the run, at most one an Email in flight
        self._queue: deque[tuple[EmailRow, OutboundEmail]] = deque()
        self._idle: deque[asyncio.Future[None]] = deque()  # workers waiting for an Email
        self._closed = False
        self._late = False

    def hand(self, row: EmailRow, email: OutboundEmail) -> None:
        self.in_flight[row.email_id] = row
        self._queue.append((row, email))
        while self._idle:
            waiter = self._idle.popleft()
            if not waiter.done():  # one cancelled meanwhile is passed over
                waiter.set_result(None)
                break

    def close(self) -> None:
        """No more Emails: each worker ends once the queue is empty."""
        self._closed = True
        while self._idle:
            waiter = self._idle.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def take(self) -> list[tuple[EmailRow, TransportOutcome]]:
        out, self.finished = self.finished, []
        return out

    async def linger(self, slots: int, seconds: float) -> None:
        """While an outcome is in hand and an Email with intent still waits for one of the
        transport's ``slots``, wait (at most ``seconds``) for more outcomes to share a commit."""
        self._late = False
        timer = self._loop.call_later(seconds, self._time_up)
        try:
            while self.finished and len(self.in_flight) > slots and not self._late:
                self.changed.clear()
                await self.changed.wait()
        finally:
            timer.cancel()

    def _time_up(self) -> None:
        self._late = True
        self.changed.set()

    async def worker(self) -> None:
        queue = self._queue
        while True:
            if not queue:
                if self._closed:
                    return
                waiter = self._loop.create_future()
                self._idle.append(waiter)
                await waiter
                continue
            row, email = queue.popleft()
            try:
                if self._skip():  # e.g. erase answered while this waited (RPC-4)
                    continue
                outcome = await self._send(email)
                self.finished.append((row, outcome))  # committed by the run's next commit
            finally:
                del self.in_flight[row.email_id]
                self.changed.set()
