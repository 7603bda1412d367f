"""Alarm runs on the host's side (AL-2, AL-3, AL-4, RT-12): one wake of one live actor.

A run waits for the input gate, serves its own request scope (a fresh ``req_`` id that every log
line and every actor call it makes carries; no deadline), hides the alarm from the handler while
it runs, and then either clears the fired alarm (success, unless the handler set another) or
leaves it for the scheduler's retry. Actors that do not override ``alarm`` get their due
``alarm_purposes`` run instead. Which actor, and whether the wake is due, is the host's call.
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from mailbox_actors.alarms.outcome import AlarmOutcome, AlarmResult
from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.storage.sql import AlarmRun
from mailbox_actors.runtime import outbox, purposes
from mailbox_actors.runtime.activation import Activation
from mailbox_actors.runtime.actor import AlarmInfo, handles_alarm_itself
from mailbox_actors.runtime.scope import RequestScope
from mailbox_actors.runtime.watchdog import ENDED, LoopWatch
from mailbox_actors.wire.errors import MailboxActorsError

__all__ = ["ABANDONED_PURPOSE_RETRY_MS", "Run", "abandon", "begin", "finish", "not_runnable", "run",
           "settle", "start"]

ABANDONED_PURPOSE_RETRY_MS = 64_000  # a purpose whose runs were abandoned is tried again then
# Read as globals at every run's end: Python 3.11's ``EnumType`` makes ``AlarmOutcome.DONE``
# the slow attribute path (about 850 instructions a read).
_DONE, _FAILED = AlarmOutcome.DONE, AlarmOutcome.FAILED


def not_runnable(act: Activation, stored: int | None, force: bool,
                 now_ms: int) -> AlarmResult | None:
    """Why this wake runs nothing (no alarm stored, not due, a run under way), or None: run it.
    ``stored``: the actor's alarm as stored."""
    if stored is None:
        return AlarmResult(AlarmOutcome.GONE, None)
    if stored > now_ms and not force:
        return AlarmResult(AlarmOutcome.LATER, stored)
    if act.alarm_running:
        return AlarmResult(AlarmOutcome.BUSY, stored)
    return None


class Run:
    """One alarm run under way on its actor, between ``begin`` and ``settle``: ``step`` is what
    the caller awaits (the handler, timed by the watchdog, or the purposes' default run)."""

    __slots__ = ("act", "alarm_run", "itself", "offered", "retry_count", "scope", "step", "stored")

    def __init__(self, act: Activation, retry_count: int, stored: int, scope: RequestScope,
                 alarm_run: AlarmRun, itself: bool,
                 offered: purposes.offering_default_run | None, step: Awaitable[object]) -> None:
        self.act = act
        self.scope = scope
        self.retry_count = retry_count
        self.stored = stored
        self.alarm_run = alarm_run
        self.itself = itself
        self.offered = offered
        self.step = step


def start(act: Activation, retry_count: int, stored: int, scope: RequestScope, *, clock: Clock,
          event_sink: outbox.EventSink, log: Any, watch: LoopWatch) -> Run | AlarmResult:
    """An open actor's run, started at once (the gate open, the actor started, the run admitted):
    ``scope`` is entered and the handler's first step runs, as ``begin`` does (its steps written
    out here for a handler of the actor's own: a call and a ``Run`` fewer an alarm). A handler
    that ended in that step, having set its alarm in its own transaction and written nothing
    outside one (a burst's usual run), leaves nothing to commit and nothing to clear: it is
    finished and settled here, the scope left, and its outcome returned (what ``finish`` and
    ``settle`` would say, without their calls). Otherwise the ``Run``, its scope still entered,
    for the caller to await, then ``finish``, leave the scope, and ``settle``."""
    if not handles_alarm_itself(act.actor):
        scope.__enter__()
        try:
            return begin(act, retry_count, stored, scope, clock=clock, event_sink=event_sink,
                         log=log, watch=watch)
        except BaseException:
            scope.__exit__()
            raise
    storage = act.runtime_storage
    alarm_run = storage.begin_alarm_run()
    offered = purposes.offering_default_run(
        functools.partial(_run_purposes, act, stored, clock, event_sink, log))
    scope.__enter__()  # every log line of the run carries its request id
    offered.__enter__()
    try:
        handler = act.actor.alarm(AlarmInfo(retry_count, retry_count > 0, stored))
    except Exception as e:  # not a coroutine function after all: the handler's failure
        return Run(act, retry_count, stored, scope, alarm_run, True, offered, _raising(e))
    except BaseException:
        offered.__exit__()
        storage.end_alarm_run()
        scope.__exit__()
        raise
    step = watch.start(handler, act.namespace, "alarm")
    if step is ENDED and alarm_run.set_in_handler and not scope.writes and not act.closed:
        offered.__exit__()
        storage.end_alarm_run()
        scope.__exit__()
        return AlarmResult(_DONE, storage.stored_alarm())
    return Run(act, retry_count, stored, scope, alarm_run, True, offered, step)


def begin(act: Activation, retry_count: int, stored: int, scope: RequestScope, *, clock: Clock,
          event_sink: outbox.EventSink, log: Any, watch: LoopWatch | None = None) -> Run:
    """Start the handler (inside ``scope``, the run's, entered; the gate open, the actor started):
    the alarm is hidden from it until ``finish``. ``stored``: the alarm as stored, which ``not_runnable``
    found due."""
    storage = act.runtime_storage
    alarm_run = storage.begin_alarm_run()
    # Purposes due by the fired alarm's time run, also when fire_alarm_now fires it early (TK-2:
    # the handler runs now, whatever its time).
    default = functools.partial(_run_purposes, act, stored, clock, event_sink, log)
    if not handles_alarm_itself(act.actor):
        return Run(act, retry_count, stored, scope, alarm_run, False, None, default())
    # An override may extend the default: ``await super().alarm(info)`` runs the purposes, as the
    # base's docstring says.
    offered = purposes.offering_default_run(default)
    offered.__enter__()
    try:
        handler = act.actor.alarm(AlarmInfo(retry_count, retry_count > 0, stored))
    except Exception as e:  # not a coroutine function after all: the handler's failure
        return Run(act, retry_count, stored, scope, alarm_run, True, offered, _raising(e))
    return Run(act, retry_count, stored, scope, alarm_run, True, offered,
               handler if watch is None else watch.start(handler, act.namespace, "alarm"))


async def _raising(error: Exception) -> None:
    raise error


def _run_purposes(act: Activation, stored: int, clock: Clock, event_sink: outbox.EventSink,
                  log: Any) -> Awaitable[None]:
    storage = act.runtime_storage
    return purposes.run_due(
        storage, act.actor, act.cls.alarm_purposes, now_ms=max(clock.now_ms(), stored),
        dispatch_outbox=lambda: outbox.dispatch(storage.sql, event_sink, act.namespace, act.id,
                                                leave_last=True),
        still_open=lambda: not act.closed, log=log, namespace=act.namespace,
        prune_outbox=lambda: outbox.prune_due(storage, act.ctx))


def finish(run: Run, error: BaseException | None, log: Any) -> None:
    """The step ended (``error``: what it raised; anything but an ``Exception`` is not the
    handler's failure, a cancellation, and the caller re-raises it): the alarm is visible
    again. Still inside the run's scope."""
    if run.offered is not None:
        run.offered.__exit__()
    act = run.act
    act.runtime_storage.end_alarm_run()
    if isinstance(error, Exception):
        # The type and the place, never the text: a handler's exception may quote content. Our
        # own errors' messages never do (SPEC 5), so theirs are kept with their code.
        where = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
        own = ({"code": error.code.value, "reason": error.message}
               if isinstance(error, MailboxActorsError) else {})
        log.warning("alarm_handler_failed", namespace=act.namespace, object_id=act.id,
                    retry_count=run.retry_count, error=type(error).__name__, **own,
                    at=None if where is None else
                    f"{Path(where.filename).name}:{where.lineno} in {where.name}")


def settle(run: Run, error: BaseException | None, log: Any) -> AlarmResult:
    """After ``finish``, outside the run's scope: commit the run's implicit writes with the fired
    alarm's removal (fail the run if SQLite did not), and say what became of the alarm."""
    act, stored = run.act, run.stored
    if act.closed:
        return AlarmResult(AlarmOutcome.FAILED, None)
    storage = act.runtime_storage
    ok = error is None
    set_in_handler = run.alarm_run.set_in_handler
    if ok and not set_in_handler and storage.writes_pending and storage.stored_alarm() == stored:
        # One commit per run: the fired alarm's removal joins the handler's open implicit
        # writes (workerd defers the delete the same way); if SQLite rolled them back, the
        # removal went with them and the run counts as failed below.
        storage.sql.delete_alarm()
    writes = run.scope.writes
    if writes:  # implicit writes: commit them, and fail the run if SQLite did not
        storage.flush()
        try:
            storage.check_writes(writes)
        except MailboxActorsError:
            # SQLite rolled back what the handler wrote (and any alarm it set): a failed run,
            # retried with backoff, not a success that loses its writes.
            log.warning("alarm_handler_writes_rolled_back", namespace=act.namespace,
                        object_id=act.id, retry_count=run.retry_count)
            ok = False
    now_stored = storage.stored_alarm()
    if error is not None and run.itself and set_in_handler and now_stored is not None:
        # The handler set a new alarm (committed) and then failed: as in workerd, the new alarm
        # replaces the retry and runs as a fresh one (retry_count 0) at its time (AL-7). (The
        # purposes' runner re-arms on failure itself: its purposes keep AL-3's retries.)
        return AlarmResult(AlarmOutcome.REPLACED, now_stored)
    if ok and not set_in_handler and now_stored == stored:
        storage.clear_fired_alarm()  # the handler committed its writes itself: no second fsync
        now_stored = storage.stored_alarm()
    return AlarmResult(_DONE if ok else _FAILED, now_stored)


async def run(act: Activation, retry_count: int, stored: int, scope: RequestScope, *,
              clock: Clock, event_sink: outbox.EventSink, log: Any,
              watch: LoopWatch | None = None) -> AlarmResult:
    """Run the actor's alarm handler once, waiting for its start hook and its input gate first
    (the host has admitted the run; ``stored``: the alarm as stored, which ``not_runnable``
    found due)."""
    with scope:  # entered: every log line of the run carries its request id
        try:
            if act.starting:
                await act.started()  # the start hook first (RT-16); its failure is the run's
            if act.gate.closed:  # a critical section runs
                await act.gate.wait_open(None)
        except Exception as e:
            log.warning("alarm_run_not_started", namespace=act.namespace, object_id=act.id,
                        error=type(e).__name__)
            return AlarmResult(AlarmOutcome.FAILED, None)
        r = begin(act, retry_count, stored, scope, clock=clock, event_sink=event_sink, log=log,
                  watch=watch)
        error: BaseException | None = None
        try:
            await r.step
        except BaseException as e:
            error = e
            finish(r, e, log)
            if not isinstance(e, Exception):
                raise
        else:
            finish(r, None, log)
    return settle(r, error, log)


def abandon(act: Activation, fired_ms: int | None, now_ms: int) -> int | None:
    """After the last retry: clear the alarm unless something set a new one meanwhile, or
    purposes are still pending (then it is re-armed). Returns the alarm stored after it."""
    storage = act.runtime_storage
    if fired_ms is None or storage.stored_alarm() == fired_ms:
        pending = purposes.scheduled(storage)
        if pending:
            # Purposes are still recorded (the outbox, maintenance): the actor's only alarm
            # must stay, or nothing would ever run them again. Give up on this run only.
            storage.sql.set_alarm(max(min(pending.values()), now_ms + ABANDONED_PURPOSE_RETRY_MS))
        else:
            storage.sql.delete_alarm()
        storage.flush()
    return storage.stored_alarm()
