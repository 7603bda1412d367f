"""The request scope (RPC-5, RPC-9, RT-4, RT-12): what one request or alarm run carries through
every ``await`` of its task, in one ContextVar.

A scope holds the deadline (checked before each transaction opens), the request id (carried into
every actor call made inside it, and bound to every log line) and the implicit transactions its
writes joined (the output gate refuses to answer a success when SQLite rolled one back). The host
enters a scope for each request it delivers and each alarm run it starts; nothing else sets these.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from typing import Any

from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.logging import LOG_REQUEST_ID
from mailbox_actors.wire.errors import DeadlineExceeded

__all__ = ["RequestScope", "ScopeHooks", "bound_request_id", "current_scope", "entered"]


# The log lines' ``request_id`` (``platform.logging``): entering a scope sets it directly.
_log_request_id: ContextVar[Any] = LOG_REQUEST_ID


class RequestScope:
    """One request (or alarm run): deadline, request id, implicit writes. Entered once
    (``with entered(scope):``), by the host."""

    __slots__ = ("_tokens", "deadline_ms", "request_id", "writes")

    def __init__(self, request_id: str, deadline_ms: int | None) -> None:
        self.request_id = request_id
        self.deadline_ms = deadline_ms  # None: an alarm run, which has no caller waiting
        self.writes: list[int] = []  # the implicit transactions its writes went into, in order
        self._tokens: tuple[Token[RequestScope | None], Token[Any]] | None = None

    def passed(self, now_ms: int) -> bool:
        return self.deadline_ms is not None and now_ms > self.deadline_ms

    # On every request's path: two ContextVar sets and resets, no generator and no object of its
    # own (a ``contextmanager`` here cost a tenth of an in-process call).
    def __enter__(self) -> RequestScope:
        if self._tokens is not None:
            raise RuntimeError("a request scope is entered once")
        self._tokens = (_current.set(self), _log_request_id.set(self.request_id))
        return self

    def __exit__(self, *exc: object) -> None:
        tokens = self._tokens
        if tokens is not None:
            self._tokens = None
            _log_request_id.reset(tokens[1])
            _current.reset(tokens[0])


_current: ContextVar[RequestScope | None] = ContextVar("mailbox_actors_request_scope", default=None)


def current_scope() -> RequestScope | None:
    """The scope of the request or alarm run this task serves, or None outside any."""
    return _current.get()


def bound_request_id() -> str | None:
    """The request id this task's log lines carry: its scope's, or one a host service bound
    outside any scope (a queue delivery: ``platform.logging.bind_request``), or None."""
    rid = _log_request_id.get()
    return rid if isinstance(rid, str) else None


def entered(scope: RequestScope) -> RequestScope:
    """Serve ``scope`` in this task (``with entered(scope):``): every log line carries its
    request id."""
    return scope


class ScopeHooks:
    """An actor storage's view of the request being served (``platform.storage.hooks``)."""

    __slots__ = ("_clock",)

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def before_transaction(self) -> None:
        scope = _current.get()
        if scope is not None and scope.deadline_ms is not None and \
                self._clock.now_ms() > scope.deadline_ms:
            raise DeadlineExceeded()

    def joined_implicit(self, generation: int) -> None:
        scope = _current.get()
        if scope is not None and (not scope.writes or scope.writes[-1] != generation):
            scope.writes.append(generation)
