"""The request scope (RPC-5, RPC-9, RT-4, RT-12): what one request or alarm run carries through
every ``await`` of its task, in one ContextVar.

A scope holds the deadline (checked before each transaction opens), the request id (carried into
every actor call made inside it, and bound to every log line) and the implicit transactions its
writes joined (the output gate refuses to answer a success when SQLite rolled one back). The host
enters a scope for each request it delivers and each alarm run it starts; nothing else sets these.

The one ContextVar is the log lines' (``platform.logging.LOG_REQUEST_ID``): a log line writes
``str()`` of what it holds, and a scope's ``str`` is its request id. An alarm run's id is minted
at its first read (a log line, a call to another actor), not when the run starts: most runs of a
burst never read it, and minting one was a tenth of such a run.
"""

from __future__ import annotations

import threading
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING

from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.logging import LOG_REQUEST_ID
from mailbox_actors.wire.errors import DeadlineExceeded

if TYPE_CHECKING:
    from mailbox_actors.platform.ids import Ids

__all__ = ["RequestScope", "ScopeHooks", "bound_request_id", "current_scope", "entered"]

_FIRST_READ = threading.Lock()  # a scope's lazily minted id is set once


# What this task serves: a ``RequestScope`` (entered by the host), a request id a host service
# bound outside any scope (a queue delivery: a ``str``), or None.
_current: ContextVar[object] = LOG_REQUEST_ID


class RequestScope:
    """One request (or alarm run): deadline, request id, implicit writes. Entered once
    (``with entered(scope):``), by the host."""

    __slots__ = ("_id", "_ids", "_token", "deadline_ms", "writes")

    def __init__(self, request_id: str | None, deadline_ms: int | None,
                 ids: Ids | None = None) -> None:
        """``request_id`` None: ``ids`` mints it at its first read (an alarm run's)."""
        if request_id is None and ids is None:
            raise ValueError("a request scope needs a request id or the ids to mint one")
        self._id = request_id
        self._ids = ids
        self.deadline_ms = deadline_ms  # None: an alarm run, which has no caller waiting
        self.writes: list[int] = []  # the implicit transactions its writes went into, in order
        self._token: Token[object] | None = None

    @property
    def request_id(self) -> str:
        rid = self._id
        if rid is None:
            assert self._ids is not None
            minted = self._ids.new_id("req")
            with _FIRST_READ:  # two threads reading it first at once: one id, the same for both
                rid = self._id
                if rid is None:
                    rid = self._id = minted
        return rid

    def __str__(self) -> str:  # what a log line written inside the scope carries
        return self.request_id

    def passed(self, now_ms: int) -> bool:
        return self.deadline_ms is not None and now_ms > self.deadline_ms

    # On every request's path: one ContextVar set and reset, no generator and no object of its
    # own (a ``contextmanager`` here cost a tenth of an in-process call).
    def __enter__(self) -> RequestScope:
        if self._token is not None:
            raise RuntimeError("a request scope is entered once")
        self._token = _current.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        token = self._token
        if token is not None:
            self._token = None
            _current.reset(token)


def current_scope() -> RequestScope | None:
    """The scope of the request or alarm run this task serves, or None outside any."""
    scope = _current.get()
    return scope if type(scope) is RequestScope else None


def bound_request_id() -> str | None:
    """The request id this task's log lines carry: its scope's, or one a host service bound
    outside any scope (a queue delivery: ``platform.logging.bind_request``), or None."""
    rid = _current.get()
    return None if rid is None else str(rid)


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
        if type(scope) is RequestScope and scope.deadline_ms is not None and \
                self._clock.now_ms() > scope.deadline_ms:
            raise DeadlineExceeded()

    def joined_implicit(self, generation: int) -> None:
        scope = _current.get()
        if type(scope) is RequestScope and (not scope.writes or scope.writes[-1] != generation):
            scope.writes.append(generation)
