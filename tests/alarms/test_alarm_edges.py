"""Alarm edge cases as workerd has them (AL-7): get_alarm inside the handler, an alarm set by a
handler that then fails, a time in the past."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.runtime.actor import Call
from mailbox_actors.testing import TestRuntime

pytestmark = pytest.mark.anyio


async def test_get_alarm_inside_the_handler_returns_what_the_handler_set(tmp_path: Path) -> None:
    """AL-7: inside the alarm handler get_alarm() is None until the handler sets an alarm, then
    returns it (workerd's deferred delete is cancelled by the set); after a delete_alarm it is None
    again, and an alarm the handler set stands after it returns."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        t0 = rt.now_ms()
        oid = await afs.new_scratch(rt, "a", alarm_at=t0 + 1_000)
        seen: list[int | None] = []

        async def handler(actor: Scratch, info: Any) -> None:
            sql = actor.sql
            seen.append(sql.get_alarm())
            sql.transaction_sync(lambda tx: tx.set_alarm(t0 + 50_000))
            seen.append(sql.get_alarm())
            sql.transaction_sync(lambda tx: tx.delete_alarm())
            seen.append(sql.get_alarm())
            sql.transaction_sync(lambda tx: tx.set_alarm(t0 + 60_000))
            seen.append(sql.get_alarm())

        afs.ALARM_HOOKS[oid] = handler
        await rt.advance(1_000)
        assert seen == [None, t0 + 50_000, None, t0 + 60_000]
        assert await rt.get_alarm("scratch", oid) == t0 + 60_000


async def test_an_alarm_set_by_a_failing_handler_replaces_the_retry(tmp_path: Path) -> None:
    """AL-7: a handler that sets a new alarm (committed) and then raises is not retried: the new
    alarm stands and runs at its time as a fresh alarm (retry_count 0, is_retry False), as
    workerd's scheduler runs a queued alarm instead of retrying the failed one."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        t0 = rt.now_ms()
        oid = await afs.new_scratch(rt, "a", alarm_at=t0 + 1_000)
        runs = 0

        async def handler(actor: Scratch, info: Any) -> None:
            nonlocal runs
            runs += 1
            if runs == 1:
                actor.sql.transaction_sync(lambda tx: tx.set_alarm(t0 + 30_000))
                raise RuntimeError("after setting the next alarm")

        afs.ALARM_HOOKS[oid] = handler
        await rt.advance(1_000)
        await rt.advance(10_000)  # a retry would have run by now (2 s backoff)
        assert [(s.scheduled_ms, s.retry_count) for s in afs.ALARM_LOG] == [(t0 + 1_000, 0)]
        assert await rt.get_alarm("scratch", oid) == t0 + 30_000
        await rt.advance(19_000)
        assert [(s.scheduled_ms, s.retry_count, s.is_retry) for s in afs.ALARM_LOG] == [
            (t0 + 1_000, 0, False), (t0 + 30_000, 0, False)]
        assert await rt.get_alarm("scratch", oid) is None


async def test_a_failing_handler_that_set_nothing_is_retried(tmp_path: Path) -> None:
    """AL-7 (with AL-3): a handler that raises without setting an alarm is retried with backoff,
    its retry_count counting up."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        t0 = rt.now_ms()
        oid = await afs.new_scratch(rt, "a", alarm_at=t0 + 1_000)
        runs = 0

        async def handler(actor: Scratch, info: Any) -> None:
            nonlocal runs
            runs += 1
            if runs == 1:
                raise RuntimeError("once")

        afs.ALARM_HOOKS[oid] = handler
        await rt.advance(1_000)
        await rt.advance(10_000)
        assert [(s.retry_count, s.is_retry) for s in afs.ALARM_LOG] == [(0, False), (1, True)]


async def test_set_alarm_in_the_past_stores_now(tmp_path: Path) -> None:
    """AL-7: set_alarm with a time in the past stores the current time (as workerd does), so
    get_alarm reads now and the alarm fires at once."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        now = rt.now_ms()

        async def past(actor: Scratch, call: Call, arg: Any) -> Any:
            actor.sql.transaction_sync(lambda tx: tx.set_alarm(now - 3_600_000))
            return actor.sql.get_alarm()

        assert await afs.run(rt, oid, past) == now
        assert await rt.get_alarm("scratch", oid) == now
        await rt.run_until_idle()
        assert [s.scheduled_ms for s in afs.ALARM_LOG] == [now]
