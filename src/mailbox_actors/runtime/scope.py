"""The request scope (RPC-5, RPC-9, RT-4, RT-12): what one request or alarm run carries through
every ``await`` of its task, in one ContextVar.

A scope holds the deadline (checked before each transaction opens), the request id (carried into
every actor call made inside it, and bound to every log line) and the implicit transactions its
writes joined (the output gate refuses to answer a success when SQLite rolled one back). The host
enters a scope for each request it delivers and each alarm run it starts; nothing else sets these.
"""

from __future__ import annotations

from contextvars import ContextVar

import structlog

from mailbox_actors.platform.clock import Clock
from mailbox_actors.wire.errors import DeadlineExceeded

__all__ = ["RequestScope", "ScopeHooks", "current_scope", "entered"]


class RequestScope:
    """One request (or alarm run): deadline, request id, implicit writes."""

    __slots__ = ("deadline_ms", "request_id", "writes")

    def __init__(self, request_id: str, deadline_ms: int | None) -> None:
        self.request_id = request_id
        self.deadline_ms = deadline_ms  # None: an alarm run, which has no caller waiting
        self.writes: list[int] = []  # the implicit transactions its writes went into, in order

    def passed(self, now_ms: int) -> bool:
        return self.deadline_ms is not None and now_ms > self.deadline_ms


_current: ContextVar[RequestScope | None] = ContextVar("mailbox_actors_request_scope", default=None)


def current_scope() -> RequestScope | None:
    """The scope of the request or alarm run this task serves, or None outside any."""
    return _current.get()


class _Entered:
    """Entering and leaving a scope, on every request's path: two ContextVar sets and resets,
    no generator (a ``contextmanager`` here cost a tenth of an in-process call)."""

    __slots__ = ("_log_tokens", "_scope", "_token")

    def __init__(self, scope: RequestScope) -> None:
        self._scope = scope

    def __enter__(self) -> RequestScope:
        self._token = _current.set(self._scope)
        self._log_tokens = structlog.contextvars.bind_contextvars(
            request_id=self._scope.request_id)
        return self._scope

    def __exit__(self, *exc: object) -> None:
        structlog.contextvars.reset_contextvars(**self._log_tokens)
        _current.reset(self._token)


def entered(scope: RequestScope) -> _Entered:
    """Serve ``scope`` in this task (``with entered(scope):``): every log line carries its
    request id."""
    return _Entered(scope)


class ScopeHooks:
    """An actor storage's view of the request being served (``platform.storage.hooks``)."""

    __slots__ = ("_clock",)

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def before_transaction(self) -> None:
        scope = _current.get()
        if scope is not None and scope.passed(self._clock.now_ms()):
            raise DeadlineExceeded()

    def joined_implicit(self, generation: int) -> None:
        scope = _current.get()
        if scope is not None and (not scope.writes or scope.writes[-1] != generation):
            scope.writes.append(generation)
