"""LISTEN/NOTIFY for the shared state (CL-7): one connection per process listens on the channels
its users subscribed to, and hands each notification's payload to them; idle queue consumers are
woken this way instead of polling, and the SMTP door's address cache learns of a change.

The connection is the listener's own (a pooled one would be handed back). When it is lost (a
server restart) the listener connects again with a growing pause; every subscriber is then told
``None``: notifications may have been missed, look again. ``generation`` counts the connections
made and is None while none listens (a cache must not trust itself then).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import psycopg
from psycopg import sql

from mailbox_actors.platform.logging import get_logger

__all__ = ["PgListener"]

_log = get_logger("mailbox_actors.postgres")
_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)
_LOOK_S = 1.0  # how often the listening loop looks for channels subscribed to since

Subscriber = Callable[[str | None], None]


class PgListener:
    """``listener.subscribe("ma_queues", on_payload)`` then ``await listener.start()``."""

    def __init__(self, dsn: str, where: str) -> None:
        self._dsn = dsn
        self._where = where
        self._subs: dict[str, list[Subscriber]] = {}
        self._task: asyncio.Task[None] | None = None
        self._listening: asyncio.Event = asyncio.Event()
        self._generation = 0
        self.generation: int | None = None

    def subscribe(self, channel: str, fn: Subscriber) -> None:
        """Call ``fn(payload)`` for each notification on ``channel``; a channel subscribed to
        while listening is listened to within ``_LOOK_S`` (its subscribers are told None then)."""
        self._subs.setdefault(channel, []).append(fn)

    async def start(self) -> None:
        """Start listening; returns once the first connection listens (or failed once). Nothing
        to listen for: nothing started."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())
            waiter = asyncio.ensure_future(self._listening.wait())
            await asyncio.wait([waiter, self._task], return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.generation = None

    async def _loop(self) -> None:
        tries = 0
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self._dsn, autocommit=True)
            except Exception as e:
                if tries == 0:
                    _log.warning("postgres_listen_failed", error=type(e).__name__,
                                 where=self._where)
                self._listening.set()  # start() returns; listening goes on being tried
                await asyncio.sleep(_BACKOFF_S[min(tries, len(_BACKOFF_S) - 1)])
                tries += 1
                continue
            try:
                listened: set[str] = set()
                first = True
                while True:
                    new = [c for c in self._subs if c not in listened]
                    for channel in new:
                        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                        listened.add(channel)
                    if first:
                        first = False
                        self._generation += 1
                        self.generation = self._generation
                        if tries:
                            _log.info("postgres_listening_again", where=self._where)
                        tries = 0
                        self._listening.set()
                    for channel in new:  # all of them after a reconnection: look again
                        for fn in self._subs[channel]:
                            fn(None)
                    async for note in conn.notifies(timeout=_LOOK_S):
                        for fn in self._subs.get(note.channel, ()):
                            fn(note.payload)
            except Exception as e:
                _log.warning("postgres_listen_lost", error=type(e).__name__, where=self._where)
            finally:
                self.generation = None
                with contextlib.suppress(Exception):
                    await conn.close()
            await asyncio.sleep(_BACKOFF_S[min(tries, len(_BACKOFF_S) - 1)])
            tries += 1

