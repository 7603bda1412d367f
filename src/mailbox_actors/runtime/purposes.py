"""Alarm purposes (AL-2): many timed purposes of one actor multiplexed onto its one alarm.

``alarm:{purpose}`` keys in ``meta`` record when each purpose is due; scheduling one lowers the
alarm to it. The default alarm run calls each due purpose's method (the outbox's is the runtime's
own), clears it, and re-arms the alarm to the earliest purpose still pending. The rules are
``core.alarm_purposes``'; this module reads and writes the actor's storage for them.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar, Token
from typing import Any

from mailbox_actors.core.alarm_purposes import (
    alarm_after_schedule,
    due_purposes,
    earliest,
    meta_key,
)
from mailbox_actors.platform.storage.runtime_access import RuntimeStorage
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.runtime import outbox

__all__ = ["CLEARED_WITHOUT_AWAIT", "cancel", "default_run", "lower_alarm", "offering_default_run",
           "rearm", "run_due", "schedule", "scheduled"]

# The alarm run's default handling (its due purposes, then the re-arm), offered to an actor that
# overrides ``alarm`` for the length of its run: ``Actor.alarm``'s base runs it, so
# ``await super().alarm(info)`` in an override does what the base promises (AL-2).
_DEFAULT_RUN: ContextVar[Callable[[], Awaitable[None]] | None] = ContextVar(
    "mailbox_actors_default_alarm_run", default=None)


class offering_default_run:  # named as the function it replaced: ``with offering_default_run(run):``
    """While an overriding handler runs: what ``Actor.alarm``'s base does when it is called.
    (A class, not ``contextlib.contextmanager``: its generator cost a few calls every alarm.)"""

    __slots__ = ("_run", "_token")

    def __init__(self, run: Callable[[], Awaitable[None]]) -> None:
        self._run = run
        self._token: Token[Callable[[], Awaitable[None]] | None] | None = None

    def __enter__(self) -> None:
        self._token = _DEFAULT_RUN.set(self._run)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _DEFAULT_RUN.reset(self._token)
            self._token = None


def default_run() -> Callable[[], Awaitable[None]] | None:
    """The current alarm run's default handling, or None outside an alarm run."""
    return _DEFAULT_RUN.get()

# Contract CLEARED_WITHOUT_AWAIT: in ``run_due``, between a purpose method's return and the
# transaction that clears (or keeps) its purpose there is no await, so nothing else of the actor
# runs in between. Carrier's ``DispatchWake`` relies on it: a submit cannot commit and learn a
# wake that the clearing then removes. tests/runtime/test_purpose_contract.py fails when the
# window gains an await.
CLEARED_WITHOUT_AWAIT = "cleared_without_await"


def schedule(storage: RuntimeStorage, purpose: str, at_ms: int) -> None:
    """Record ``alarm:{purpose}`` and lower the alarm to it when earlier. Commits with the
    surrounding transaction."""
    storage.put_meta(meta_key(purpose), str(at_ms))
    lower_alarm(storage, at_ms)


def lower_alarm(storage: RuntimeStorage, at_ms: int) -> None:
    """The alarm moves to ``at_ms`` when that is earlier (a purpose just recorded for then, as
    the outbox's ``append`` records its own)."""
    sql = storage.sql
    if storage.purposes_running:
        # The runner re-arms the alarm from the recorded purposes when it ends or fails, so a
        # purpose recorded meanwhile for no earlier than the alarm as stored needs no alarm
        # write of its own (a request's event during an outbox run would write one).
        run, stored = storage.alarm_run, storage.stored_alarm()
        if run is not None and not run.set_in_handler and stored is not None and stored <= at_ms:
            return  # the run's re-arm covers it; the stored alarm is due no later meanwhile
    current = sql.get_alarm()
    new = alarm_after_schedule(current, at_ms)
    if new != current:
        sql.set_alarm(new)


def cancel(storage: RuntimeStorage, purpose: str) -> None:
    storage.delete_meta(meta_key(purpose))


def scheduled(storage: RuntimeStorage) -> dict[str, int]:
    """Every purpose recorded, with when it is due."""
    return {k[6:]: int(v) for k, v in storage.meta_range("alarm:", "alarm;").items()}


async def run_due(storage: RuntimeStorage, actor: Any, methods: Mapping[str, str], *, now_ms: int,
                  dispatch_outbox: Callable[[], Awaitable[int | None]], still_open: Callable[[], bool],
                  log: Any, namespace: str,
                  prune_outbox: Callable[[], Awaitable[None]] | None = None) -> None:
    """Run each due purpose's method, earliest first; then re-arm to the earliest pending.

    A purpose stays recorded while its method runs, so a crash or an exception leaves it due
    and the retry (or the restarted node) runs it again; it is cleared after its method
    returns, unless the method re-scheduled it. The alarm is re-armed even when a method
    raises, so the retry finds it due. Holds ``CLEARED_WITHOUT_AWAIT``.
    """
    pending = scheduled(storage)
    sql = storage.sql
    due = due_purposes(pending, now_ms)
    finished = False
    storage.purposes_running = True
    try:
        for n, purpose in enumerate(due):
            method_name = methods.get(purpose)
            published = None  # the outbox's last published sequence, marked with the clear
            if method_name is None and purpose not in outbox.RUNTIME_PURPOSES:
                log.warning("alarm_purpose_unknown", namespace=namespace, purpose=purpose)
            elif method_name is None and purpose == outbox.OUTBOX_PURPOSE:  # the runtime's own
                published = await dispatch_outbox()
            elif method_name is None:  # the runtime's prune of old events (EV-4)
                if prune_outbox is not None:
                    await prune_outbox()
            else:
                await getattr(actor, method_name)()
            clear = functools.partial(_clear, storage, purpose, pending[purpose],
                                      method_name is None, published)
            # A request's ctx.transaction begun while this run awaited refuses the commit
            # below (StorageBusy: joined to it, its rollback would undo the clear and re-arm
            # after the run was settled, review s23 R5); the run fails and is retried (AL-3).
            # No await here: CLEARED_WITHOUT_AWAIT.
            if n < len(due) - 1:
                sql.transaction_sync(clear)
            else:
                # The last purpose is cleared and the alarm re-armed (or, with nothing left,
                # the fired alarm removed) in one transaction: one commit for the run's end.
                sql.transaction_sync(functools.partial(_clear_and_rearm, storage, clear))
                finished = True
    finally:
        try:
            if still_open() and not finished and not sql.async_open:
                # (Under another task's ctx.transaction it is not written: the file's alarm is
                # still the one that fired, due, which the retry finds.)
                sql.transaction_sync(lambda _tx: rearm(storage))
        finally:
            storage.purposes_running = False


def _clear_and_rearm(storage: RuntimeStorage, clear: Callable[[SqlStorage], None],
                     tx: SqlStorage) -> None:
    clear(tx)
    rearm(storage, finished=True)


def _clear(storage: RuntimeStorage, purpose: str, ran_at: int, runtime_outbox: bool,
           published: int | None, tx: SqlStorage) -> None:
    if published is not None:  # the outbox's last batch: marked in the run's closing commit
        outbox.mark_dispatched(published, tx)
    if purpose == outbox.OUTBOX_PURPOSE and runtime_outbox:
        outbox.prune_later(storage, tx.now_ms())  # dispatched events are kept: prune them daily
    if purpose == outbox.OUTBOX_PURPOSE and runtime_outbox and outbox.has_undispatched(tx):
        # Events emitted while it ran: the purpose stays recorded (each append recorded it for
        # its own time, never later than now), so the re-arm that follows makes the alarm due
        # again; writing it once more for now would only add a page to this commit.
        return
    storage.delete_meta(meta_key(purpose), only_if=str(ran_at))


def rearm(storage: RuntimeStorage, finished: bool = False) -> None:
    """Point the alarm at the earliest purpose still pending (inside a transaction). ``finished``:
    every due purpose of this alarm run ran, so with none pending the fired alarm goes now."""
    sql = storage.sql
    nxt = earliest(scheduled(storage))
    current = storage.stored_alarm()
    run = storage.alarm_run
    if nxt is None:
        if current is not None and (run is None or finished):
            sql.delete_alarm()
        # otherwise, inside the handler, the host clears the fired alarm once the run succeeds
    elif nxt != current:
        sql.set_alarm(nxt)
    elif run is not None:
        run.set_in_handler = True  # still due as stored: the host must keep it
