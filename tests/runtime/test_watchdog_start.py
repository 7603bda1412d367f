"""RT-17 and RT-12 on an alarm run's path: ``LoopWatch.start`` runs a handler's first step at once
(timed like every later step) and hands the rest to the caller's ``await``; an alarm run's
``req_`` id is minted at its first read, and is the one its log lines and calls carry."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.logging import bound_request_id, get_logger
from mailbox_actors.platform.metrics import Metrics
from mailbox_actors.platform.rng import SeededRng
from mailbox_actors.runtime import watchdog
from mailbox_actors.runtime.scope import RequestScope, current_scope
from mailbox_actors.runtime.scope import bound_request_id as scope_request_id
from mailbox_actors.runtime.watchdog import LoopWatch

pytestmark = pytest.mark.anyio
_log = get_logger("mailbox_actors.test_watchdog_start")


class _StepTimer:
    """The watchdog's timer, moved only by ``_hold``: a step's length is what the test says it
    is, never what a loaded machine made of it (a quick step preempted for 50 ms would be
    reported)."""

    now = 0.0

    def __call__(self) -> float:
        return self.now


_TIMER = _StepTimer()


@pytest.fixture(autouse=True)
def _step_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watchdog, "_now", _TIMER)


def _hold(ms: int) -> None:
    """The step holds the loop for ``ms`` (by the watchdog's timer), without an await."""
    _TIMER.now += ms / 1000


def _blocked(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [json.loads(r.getMessage()) for r in caplog.records
            if "event_loop_blocked" in r.getMessage()]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_first_step_that_ends_the_handler_is_timed_and_its_value_awaited(
        caplog: pytest.LogCaptureFixture) -> None:
    """The step runs inside ``start`` (before the caller awaits), a long one is reported with
    the op given; the await gives the handler's value, and a handler's failure is raised by the
    await, not by ``start``."""
    caplog.set_level(logging.WARNING, logger="mailbox_actors")
    metrics = Metrics()
    watch = LoopWatch(50, metrics, get_logger("mailbox_actors.runtime"))
    ran: list[str] = []

    async def quick() -> int:
        ran.append("quick")
        return 7

    async def slow() -> None:
        _hold(120)

    async def failing() -> None:
        raise KeyError("x")

    step = watch.start(quick(), "ns", "alarm")
    assert ran == ["quick"]  # already ran
    assert await step == 7
    assert await watch.start(slow(), "ns", "alarm") is None
    lines = _blocked(caplog)
    assert len(lines) == 1 and (lines[0]["namespace"], lines[0]["op"]) == ("ns", "alarm")
    assert 'actor_loop_blocked_total{namespace="ns",op="alarm"} 1' in metrics.render_prometheus()
    step = watch.start(failing(), "ns", "alarm")  # no raise here
    with pytest.raises(KeyError):
        await step


async def test_a_handler_that_suspends_gets_what_it_waits_for_and_its_later_steps_are_timed(
        caplog: pytest.LogCaptureFixture) -> None:
    """The first step's yield (a future the handler waits on) reaches the awaiting task, the
    handler resumes when it resolves, and a long later step is reported as before."""
    caplog.set_level(logging.WARNING, logger="mailbox_actors")
    watch = LoopWatch(50, Metrics(), get_logger("mailbox_actors.runtime"))
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[int] = loop.create_future()

    async def waits() -> int:
        got = await fut
        _hold(120)  # the second step holds the loop
        return got + 1

    step = watch.start(waits(), "ns", "alarm")
    assert not _blocked(caplog)
    loop.call_later(0.01, fut.set_result, 41)
    assert await step == 42
    assert len(_blocked(caplog)) == 1


async def test_an_alarm_scope_mints_its_id_at_first_read_and_its_log_lines_carry_it(
        caplog: pytest.LogCaptureFixture) -> None:
    """RT-12: a scope made without an id has none until it is read; inside it, a log line, the
    logging's ``bound_request_id`` and the scope's own read give that one id; a request's
    scope carries the id it was given."""
    caplog.set_level(logging.INFO, logger="mailbox_actors")
    ids = Ids(FakeClock(), SeededRng(1))
    scope = RequestScope(None, None, ids)
    assert scope._id is None  # nothing minted yet
    with scope:
        assert current_scope() is scope
        _log.info("inside_the_run")
        rid = scope.request_id
        assert rid.startswith("req_")
        assert bound_request_id() == scope_request_id() == str(scope) == rid
    assert current_scope() is None and bound_request_id() is None
    lines = [json.loads(r.getMessage()) for r in caplog.records
             if "inside_the_run" in r.getMessage()]
    assert len(lines) == 1 and lines[0]["request_id"] == rid
    with RequestScope("req_given", 5) as given:
        assert given.request_id == "req_given" and bound_request_id() == "req_given"
    with pytest.raises(ValueError):
        RequestScope(None, None)
