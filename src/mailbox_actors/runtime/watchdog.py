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
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, TypeVar

__all__ = ["ENDED", "LoopWatch", "op_of"]

T = TypeVar("T")
_now = time.perf_counter


def op_of(req: Any) -> str:
    """The request's op (its Struct tag), for the log line and the metric's labels."""
    tag = getattr(getattr(type(req), "__struct_config__", None), "tag", None)
    return tag if isinstance(tag, str) else type(req).__name__


class LoopWatch:
    """Times handler steps; reports the slow ones (``metrics.inc``, ``log.warning``)."""

    __slots__ = ("_limit_s", "_log", "_metrics", "_nested", "threshold_ms")

    def __init__(self, threshold_ms: int, metrics: Any, log: Any) -> None:
        self.threshold_ms = threshold_ms
        self._limit_s = threshold_ms / 1000
        self._metrics = metrics
        self._log = log
        self._nested: list[float] = []  # per running step: time spent in steps nested in it

    def timed(self, coro: Coroutine[Any, Any, T], namespace: str, what: Any) -> _Timed[T]:
        """``coro`` with each step timed. ``what`` is the op's name, or the request, whose op is
        worked out only for a step that is reported (``op_of``)."""
        return _Timed(self, coro, namespace, what)

    def start(self, coro: Coroutine[Any, Any, Any], namespace: str,
              what: Any) -> Awaitable[Any]:
        """Run ``coro``'s first step now, timed as ``timed``'s steps are; returns what the caller
        awaits for the rest: a done awaitable when that step finished the coroutine (most alarm
        handlers never suspend: no wrapper, no second frame, no step of the caller's task),
        else the remaining steps, each timed. Whatever the first step raised is raised by the
        awaitable (the caller's one place for a handler's failure), never here."""
        nested = self._nested
        nested.append(0.0)
        done: _DoneStep | None = None
        started = _now()
        try:
            yielded = coro.send(None)
        except StopIteration as stop:
            value = stop.value
            done = _DONE if value is None else _DoneStep(value)
        except BaseException as error:  # the caller's await raises it
            done = _DoneStep(None, error)
        finally:
            elapsed = _now() - started
            inner = nested.pop()
            if nested:  # this step ran inside another actor's: it is not that actor's time
                nested[-1] += elapsed
            if elapsed - inner >= self._limit_s:
                self._report(elapsed - inner, namespace, what)
        if done is not None:
            return done
        return _Timed(self, coro, namespace, what, (yielded,))

    def _report(self, own_s: float, namespace: str, what: Any) -> None:
        op = what if isinstance(what, str) else op_of(what)
        self._metrics.inc("actor_loop_blocked_total", (("namespace", namespace), ("op", op)))
        self._log.warning("event_loop_blocked", namespace=namespace, op=op,
                          duration_ms=round(own_s * 1000), threshold_ms=self.threshold_ms)


class _DoneStep:
    """The awaitable of a coroutine that ended in the step ``LoopWatch.start`` ran: its value,
    or what it raised (raised again, with its own traceback, by the await)."""

    __slots__ = ("_error", "_value")

    def __init__(self, value: Any, error: BaseException | None = None) -> None:
        self._value = value
        self._error = error

    def __await__(self) -> Generator[Any, Any, Any]:
        error = self._error
        if error is not None:
            self._error = None  # no cycle through the traceback's frames
            raise error
        return self._value
        yield  # a generator, never suspended


class _Timed(Generator[Any, Any, T]):
    """An awaitable that drives ``coro`` step by step, timing each step. The step's timing is
    written out in ``send`` (every step of every handler passes there: no closure, no helper
    call unless the step is reported). ``first``: the value the coroutine yielded in a step
    already run (``LoopWatch.start``), handed to the awaiting task before any step runs here."""

    __slots__ = ("_coro", "_first", "_namespace", "_watch", "_what")

    def __init__(self, watch: LoopWatch, coro: Coroutine[Any, Any, T], namespace: str,
                 what: Any, first: tuple[Any] | None = None) -> None:
        self._watch = watch
        self._coro = coro
        self._namespace = namespace
        self._what = what
        self._first = first

    def __await__(self) -> Generator[Any, Any, T]:
        return self

    def __iter__(self) -> Generator[Any, Any, T]:
        return self

    def send(self, value: Any = None) -> Any:
        first = self._first
        if first is not None:  # the step ``start`` ran yielded this: the task gets it now
            self._first = None
            return first[0]
        nested = self._watch._nested
        nested.append(0.0)
        started = _now()
        try:
            return self._coro.send(value)
        finally:
            elapsed = _now() - started
            inner = nested.pop()
            if nested:  # this step ran inside another actor's: it is not that actor's time
                nested[-1] += elapsed
            if elapsed - inner >= self._watch._limit_s:
                self._watch._report(elapsed - inner, self._namespace, self._what)

    __next__ = send

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        exc = typ if isinstance(typ, BaseException) else typ(val)
        nested = self._watch._nested
        nested.append(0.0)
        started = _now()
        try:
            return self._coro.throw(exc)
        finally:
            elapsed = _now() - started
            inner = nested.pop()
            if nested:
                nested[-1] += elapsed
            if elapsed - inner >= self._watch._limit_s:
                self._watch._report(elapsed - inner, self._namespace, self._what)

    def close(self) -> None:
        self._coro.close()


_DONE = _DoneStep(None)  # most handlers return None: one awaitable for all of them
# What ``LoopWatch.start`` returns for a coroutine that returned None in its first step: its caller
# may skip the await (``alarm_runs.start`` settles such a run at once).
ENDED: Awaitable[Any] = _DONE
