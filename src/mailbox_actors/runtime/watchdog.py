"""The loop-blocking watchdog (RT-17): a handler step that holds the event loop too long.

One event loop runs many actors, so a handler that computes for a second without an ``await``
stalls every neighbour (in production it would run elsewhere). The host runs each handler and
alarm handler through ``LoopWatch.timed``, which times every synchronous step of the coroutine
(from one ``await`` to the next, on the process's monotonic clock: this is CPU held, not fake
time) and, for a step longer than ``loop_block_warn_ms``, logs ``event_loop_blocked`` with the
namespace, op and duration and counts ``actor_loop_blocked_total``. A step of another actor
called in-process within a step is that actor's, not the caller's.
"""

from __future__ import annotations

import time
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

__all__ = ["LoopWatch", "op_of"]

T = TypeVar("T")


def op_of(req: Any) -> str:
    """The request's op (its Struct tag), for the log line and the metric's labels."""
    tag = getattr(getattr(type(req), "__struct_config__", None), "tag", None)
    return tag if isinstance(tag, str) else type(req).__name__


class LoopWatch:
    """Times handler steps; reports the slow ones (``metrics.inc``, ``log.warning``)."""

    __slots__ = ("_log", "_metrics", "_nested", "threshold_ms")

    def __init__(self, threshold_ms: int, metrics: Any, log: Any) -> None:
        self.threshold_ms = threshold_ms
        self._metrics = metrics
        self._log = log
        self._nested: list[float] = []  # per running step: time spent in steps nested in it

    def timed(self, coro: Coroutine[Any, Any, T], namespace: str, op: str) -> _Timed[T]:
        return _Timed(self, coro, namespace, op)

    def _step_done(self, started: float, namespace: str, op: str) -> None:
        elapsed = time.perf_counter() - started
        inner = self._nested.pop()
        if self._nested:
            self._nested[-1] += elapsed
        own_ms = (elapsed - inner) * 1000
        if own_ms >= self.threshold_ms:
            self._metrics.inc("actor_loop_blocked_total", (("namespace", namespace), ("op", op)))
            self._log.warning("event_loop_blocked", namespace=namespace, op=op,
                              duration_ms=round(own_ms), threshold_ms=self.threshold_ms)


class _Timed(Generator[Any, Any, T]):
    """An awaitable that drives ``coro`` step by step, timing each step."""

    __slots__ = ("_coro", "_namespace", "_op", "_watch")

    def __init__(self, watch: LoopWatch, coro: Coroutine[Any, Any, T], namespace: str,
                 op: str) -> None:
        self._watch = watch
        self._coro = coro
        self._namespace = namespace
        self._op = op

    def __await__(self) -> Generator[Any, Any, T]:
        return self

    def __iter__(self) -> Generator[Any, Any, T]:
        return self

    def __next__(self) -> Any:
        return self.send(None)

    def send(self, value: Any) -> Any:
        return self._step(lambda: self._coro.send(value))

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        exc = typ if isinstance(typ, BaseException) else typ(val)
        return self._step(lambda: self._coro.throw(exc))

    def close(self) -> None:
        self._coro.close()

    def _step(self, advance: Any) -> Any:
        watch = self._watch
        watch._nested.append(0.0)
        started = time.perf_counter()
        try:
            return advance()
        finally:
            watch._step_done(started, self._namespace, self._op)
