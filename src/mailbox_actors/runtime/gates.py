"""The input and output gates of an actor (RT-4), as workerd's io-gate has them.

The input gate is ``block_concurrency_while``: while one runs, no other request or alarm run is
delivered to the actor; they wait in arrival order (a request only until its deadline, RPC-5). If
the critical section raises, the gate is reset (the host drops the activation, keeping its storage)
and every waiter is answered ``unavailable``. The output gate holds a reply, or a call to another
actor, until the writes before it have committed, and refuses to let it leave as a success when
SQLite rolled those writes back.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, TypeVar

import anyio

from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.storage.runtime_access import RuntimeStorage
from mailbox_actors.runtime.scope import RequestScope
from mailbox_actors.wire.errors import DeadlineExceeded, ErrorCode, MailboxActorsError

__all__ = ["BlockConcurrencyTimeout", "InputGate", "output_gate"]

T = TypeVar("T")

# The gates whose critical section the current task is inside (its own nested calls go in).
_held: ContextVar[tuple[int, ...]] = ContextVar("mailbox_actors_gates_held", default=())


class BlockConcurrencyTimeout(MailboxActorsError):
    """A critical section ran past its bound (RT-16): workerd resets the object."""

    def __init__(self, limit_ms: int) -> None:
        super().__init__(ErrorCode.TIMEOUT, f"block_concurrency_while gave up after {limit_ms} ms; "
                         "the actor was reset", details={"block_concurrency_timeout_ms": limit_ms})


class InputGate:
    """One activation's ``block_concurrency_while``."""

    __slots__ = ("_clock", "_depth", "_of", "_on_failure", "_reset", "_timeout_ms", "_waiters")

    def __init__(self, clock: Clock, on_failure: Callable[[Any], None], of: Any,
                 timeout_ms: int | None = None) -> None:
        """``on_failure(of)``: the host drops the activation ``of`` names, keeping its storage (one
        callable for every gate, not one made per actor)."""
        self._clock = clock
        self._on_failure = on_failure
        self._of = of
        self._timeout_ms = timeout_ms  # workerd gives up on a critical section after 30 s
        self._depth = 0
        # Made by the first waiter: an idle actor's gate holds no queue (an empty deque is 600 B,
        # and ten thousand actors may be open).
        self._waiters: deque[anyio.Event] | None = None
        self._reset = False

    @property
    def closed(self) -> bool:
        """A critical section is running."""
        return self._depth > 0

    async def hold(self, fn: Callable[[], Awaitable[T]], deadline_ms: int | None, *,
                   reset_on_error: bool = True) -> T:
        """Run ``fn`` with the gate closed. A task already inside this gate goes straight in; one
        that is not waits for the running section first (until ``deadline_ms``). A section that
        outlasts the gate's timeout is given up (``timeout``) and the actor reset (RT-16)."""
        inside = _held.get()
        if id(self) not in inside:
            await self.wait_open(deadline_ms)  # returns with the gate open: no await between
        held = _held.set((*inside, id(self)))  # that and closing it here
        self._depth += 1
        try:
            return await self._bounded(fn)
        except BlockConcurrencyTimeout:
            self._reset = True
            self._on_failure(self._of)
            raise
        except BaseException:
            if reset_on_error:
                self._reset = True
                self._on_failure(self._of)
            raise
        finally:
            _held.reset(held)
            self._depth -= 1
            if not self._depth or self._reset:
                self._open()

    async def _bounded(self, fn: Callable[[], Awaitable[T]]) -> T:
        """``fn()``, given up once the gate's timeout passes on the clock (a FakeClock too)."""
        limit = self._timeout_ms
        if limit is None or len(_held.get()) > 1:  # the outermost section carries the bound
            return await fn()
        deadline = self._clock.now_ms() + limit
        done = anyio.Event()
        timed_out = False
        outcome: list[T] = []
        failure: list[BaseException] = []
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                nonlocal timed_out
                await self._clock.sleep_until(deadline, done)
                if not outcome and not failure:
                    timed_out = True
                    tg.cancel_scope.cancel()

            tg.start_soon(watch)
            try:
                outcome.append(await fn())
            except Exception as e:  # raised below as itself, not inside an ExceptionGroup
                failure.append(e)
            finally:
                done.set()
        if timed_out:
            raise BlockConcurrencyTimeout(limit)
        if failure:
            raise failure[0]
        return outcome[0]

    def reset(self) -> None:
        """``ctx.abort``: drop the activation now (storage kept); queued requests are answered
        ``unavailable``, and so are those in flight when they finish."""
        self._reset = True
        self._on_failure(self._of)
        self._open()

    def _open(self) -> None:
        waiters, self._waiters = self._waiters, None
        for ev in waiters or ():
            ev.set()

    async def wait_open(self, deadline_ms: int | None) -> None:
        """Wait, in arrival order, until no critical section runs. A request whose deadline
        passes while it waits is answered ``timeout`` without running (RPC-5); one queued on a
        gate that was reset, ``unavailable``."""
        clock = self._clock
        while self._depth:
            ev = anyio.Event()
            if self._waiters is None:
                self._waiters = deque()
            self._waiters.append(ev)
            await clock.sleep_until(None if deadline_ms is None else deadline_ms + 1, ev)
            if self._reset:
                raise MailboxActorsError(ErrorCode.UNAVAILABLE,
                                         "the actor was reset while the request was queued")
            if deadline_ms is not None and clock.now_ms() > deadline_ms:
                if self._waiters is not None and ev in self._waiters:
                    self._waiters.remove(ev)
                raise DeadlineExceeded("the deadline passed while the request was queued")


def output_gate(storage: RuntimeStorage, scope: RequestScope) -> None:
    """Before a reply or an outgoing call leaves: commit the implicit writes it follows, and raise
    if SQLite rolled back any of the scope's (never acknowledge a write that was not stored)."""
    storage.flush()
    if scope.writes:
        storage.check_writes(scope.writes)
