"""The SMTP door's group commit (IN-5): the messages for one mailbox whose DATA ends in the same
turn of the event loop, or while another message for it is on its way, go to it in one call, so
they share one transaction.

Sessions of the door are served on one event loop; when several clients finish DATA at once,
their handlers run in the same turn. The first to reach a mailbox opens that mailbox's batch and
starts its flush, which runs on the next turn, once the others of this turn have joined (at most
``BATCH_MAX_ITEMS``; a full batch is flushed and the next message opens another).

Under load, messages for one mailbox rarely end DATA in the same turn: each client's commands
take their own turns. So the door tells the batches which messages are on their way (``expect``:
a session has a recipient of this mailbox accepted and has not yet handed its message over;
``release`` when it does, or resets, or goes away), and a batch whose mailbox has one on its way
waits for it, at most ``LINGER_S``, before its flush. A message for a mailbox no other session
is sending to goes at once, one turn later, as it always went: lingering costs only a message
that has company coming, and the pair then shares one commit (its pages, BEGIN and COMMIT, the
events' outbox run), which is what lets the door keep up with the clients under load. The
sessions that share a commit are answered in the same turn, so their next messages tend to
arrive together again. Each session waits for its
own message's answer, which comes only after the commit (``ingest_batch``), and is what the
message alone would have been answered. A session that goes away meanwhile (its client hung up)
leaves its message to be ingested: the client had no 250, so its retry is a duplicate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from mailbox_actors.objects.identity_mailbox.ingest_batch import BATCH_MAX_ITEMS
from mailbox_actors.wire.inbound import Ingest

__all__ = ["Batches"]

# The longest a batch waits for a message on its way to the same mailbox (well under a
# client's round trip on a loaded machine; a message with no company coming never waits).
LINGER_S = 0.002
R = TypeVar("R")  # what the door knows of a recipient (the same for every message of a batch)
_Waiting = list[tuple[Ingest, "asyncio.Future[str]"]]


class Batches(Generic[R]):
    """``await batches.deliver(key, recipient, item)``: the SMTP reply for ``item``. ``one``
    ingests a message alone, ``many`` several in one call (a reply each, in order); neither
    raises for a message's refusal, which is its reply. ``expect(key)`` and ``release(key)``
    count the messages on their way to a mailbox (module docstring); ``linger_s`` bounds the
    wait for them."""

    def __init__(self, one: Callable[[R, Ingest], Awaitable[str]],
                 many: Callable[[R, list[Ingest]], Awaitable[list[str]]], *,
                 linger_s: float = LINGER_S) -> None:
        self._one = one
        self._many = many
        self._linger_s = linger_s
        self._open: dict[str, _Waiting] = {}
        self._flushes: set[asyncio.Task[None]] = set()  # kept: the loop holds tasks weakly
        self._coming: dict[str, int] = {}  # key -> messages on their way (expect - release)
        self._wakers: dict[str, asyncio.Future[None]] = {}  # key -> its lingering flush's wake

    def expect(self, key: str) -> None:
        """A message for ``key`` is on its way (a session has its recipient accepted)."""
        self._coming[key] = self._coming.get(key, 0) + 1

    def release(self, key: str) -> None:
        """One ``expect``ed message for ``key`` is handed over, or will not come."""
        left = self._coming.get(key, 0) - 1
        if left > 0:
            self._coming[key] = left
            return
        self._coming.pop(key, None)
        self._wake(key)

    def waiting(self, key: str) -> int:
        """How many messages ``key``'s open batch holds (not yet flushed)."""
        return len(self._open.get(key, ()))

    def _wake(self, key: str) -> None:
        waker = self._wakers.pop(key, None)
        if waker is not None and not waker.done():
            waker.set_result(None)

    async def deliver(self, key: str, recipient: R, item: Ingest) -> str:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[str] = loop.create_future()
        waiting = self._open.get(key)
        if waiting is None:
            waiting = self._open[key] = []
            task = loop.create_task(self._flush(key, recipient, waiting))
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)
        waiting.append((item, answer))
        if len(waiting) >= BATCH_MAX_ITEMS:
            del self._open[key]  # full: the next message opens another
        self._wake(key)  # a lingering flush looks again
        return await answer

    async def _linger(self, key: str, waiting: _Waiting) -> None:
        """While a message is on its way to ``key`` and this batch is open (not full): wait for
        it, at most ``linger_s`` in all."""
        if not self._coming.get(key) or self._open.get(key) is not waiting:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._linger_s
        while self._coming.get(key) and self._open.get(key) is waiting:
            left = deadline - loop.time()
            if left <= 0 or not self._linger_s:  # past the deadline, or the door is draining
                return
            waker: asyncio.Future[None] = loop.create_future()
            self._wakers[key] = waker
            timer = loop.call_later(left, _done, waker)
            try:
                await waker
            finally:
                timer.cancel()
                if self._wakers.get(key) is waker:
                    del self._wakers[key]

    async def _flush(self, key: str, recipient: R, waiting: _Waiting) -> None:
        try:
            try:
                await self._linger(key, waiting)
            finally:
                if self._open.get(key) is waiting:
                    del self._open[key]  # whoever comes now opens the next batch
            if len(waiting) == 1:
                replies = [await self._one(recipient, waiting[0][0])]
            else:
                replies = await self._many(recipient, [item for item, _ in waiting])
        except BaseException as e:  # the node stopping; never a message's refusal
            for _, answer in waiting:
                if not answer.done():
                    answer.cancel() if isinstance(e, asyncio.CancelledError) else \
                        answer.set_exception(e)
            if isinstance(e, asyncio.CancelledError):
                raise
            return
        for (_, answer), reply in zip(waiting, replies, strict=True):
            if not answer.done():  # its session went away meanwhile
                answer.set_result(reply)

    async def drain(self) -> None:
        """Until every flush started has ended (the door stopping): none lingers any longer."""
        self._linger_s = 0.0
        for key in list(self._wakers):
            self._wake(key)
        while self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)


def _done(waker: asyncio.Future[None]) -> None:
    if not waker.done():
        waker.set_result(None)
