"""The SMTP door's group commit (IN-5): the messages for one mailbox whose DATA ended in the same
turn of the event loop go to it in one call, so they share one transaction.

Sessions of the door are served on one event loop; when several clients finish DATA at once,
their handlers run in the same turn. The first to reach a mailbox opens that mailbox's batch and
starts its flush, which runs on the next turn, once the others of this turn have joined (at most
``BATCH_MAX_ITEMS``; a full batch is flushed and the next message opens another). A message
that finds no company goes alone, as it went before, one turn later. Each session waits for its
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

R = TypeVar("R")  # what the door knows of a recipient (the same for every message of a batch)
_Waiting = list[tuple[Ingest, "asyncio.Future[str]"]]


class Batches(Generic[R]):
    """``await batches.deliver(key, recipient, item)``: the SMTP reply for ``item``. ``one``
    ingests a message alone, ``many`` several in one call (a reply each, in order); neither
    raises for a message's refusal, which is its reply."""

    def __init__(self, one: Callable[[R, Ingest], Awaitable[str]],
                 many: Callable[[R, list[Ingest]], Awaitable[list[str]]]) -> None:
        self._one = one
        self._many = many
        self._open: dict[str, _Waiting] = {}
        self._flushes: set[asyncio.Task[None]] = set()  # kept: the loop holds tasks weakly

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
        return await answer

    async def _flush(self, key: str, recipient: R, waiting: _Waiting) -> None:
        if self._open.get(key) is waiting:
            del self._open[key]  # whoever comes now opens the next batch
        try:
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
        """Until every flush started has ended (the door stopping)."""
        while self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)
