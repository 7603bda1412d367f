"""An actor that overrides ``alarm`` and calls ``super().alarm(info)`` gets the runtime's default:
its due ``alarm_purposes`` run, then the re-arm (AL-2). Regression: the base raised
NotImplementedError on every run and the purposes never ran."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import actors_for_tests as afs
from mailbox_actors.runtime.actor import AlarmInfo
from mailbox_actors.testing import TestRuntime

pytestmark = pytest.mark.anyio

EXTENDED: list[str] = []


class Extended(afs.Purposes):
    """The Purposes test actor, extending the default alarm handling around it."""

    namespace = "purposes_extended"

    async def alarm(self, info: AlarmInfo) -> None:
        EXTENDED.append(f"before:{info.retry_count}")
        await super().alarm(info)
        EXTENDED.append("after")


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    afs.reset_state()
    EXTENDED.clear()
    yield
    afs.reset_state()
    EXTENDED.clear()


async def _call(rt: TestRuntime, oid: str, req: Any) -> Any:
    return await rt.call("purposes_extended", oid, req, tenant_id="t1")


async def test_super_alarm_runs_the_due_purposes_and_rearms(tmp_path: Path) -> None:
    """AL-2: with two purposes scheduled, the override's super().alarm(info) runs the one due
    (between the override's own steps), clears it and re-arms to the other; at the other's time
    the next run runs it and leaves no alarm."""
    async with TestRuntime(tmp_path, objects=(Extended,)) as rt:
        oid = rt.id_from_name("purposes_extended", "x")
        await _call(rt, oid, afs.PInit())
        t0 = rt.now_ms()
        await _call(rt, oid, afs.Schedule(purpose="check", at_ms=t0 + 1_000))
        await _call(rt, oid, afs.Schedule(purpose="outbox", at_ms=t0 + 5_000))
        await rt.advance(1_000)
        assert [(p, at) for _, p, at in afs.PURPOSE_LOG] == [("check", t0 + 1_000)]
        assert EXTENDED == ["before:0", "after"]
        state = await _call(rt, oid, afs.PState())
        assert state == {"alarm": t0 + 5_000, "scheduled": {"outbox": t0 + 5_000}}
        await rt.advance(4_000)
        assert [p for _, p, _ in afs.PURPOSE_LOG] == ["check", "outbox"]
        assert EXTENDED == ["before:0", "after", "before:0", "after"]
        assert await _call(rt, oid, afs.PState()) == {"alarm": None, "scheduled": {}}


async def test_a_failing_purpose_under_super_is_retried(tmp_path: Path) -> None:
    """AL-2, AL-3: a purpose that raises inside super().alarm(info) fails the run (the override
    sees the exception) and stays due; the retry runs it."""
    async with TestRuntime(tmp_path, objects=(Extended,)) as rt:
        oid = rt.id_from_name("purposes_extended", "y")
        await _call(rt, oid, afs.PInit())
        afs.FAIL_PURPOSE_ONCE.add("check")
        await _call(rt, oid, afs.Schedule(purpose="check", at_ms=rt.now_ms() + 1_000))
        await rt.advance(60_000)
        assert [p for _, p, _ in afs.PURPOSE_LOG] == ["check"]
        # The first run raised through the override (no "after"); a later one ran it.
        assert EXTENDED[:1] == ["before:0"] and EXTENDED[1] != "after"
        assert EXTENDED.count("after") == 1 and EXTENDED[-1] == "after"
        assert await _call(rt, oid, afs.PState()) == {"alarm": None, "scheduled": {}}


async def test_the_base_alarm_outside_an_alarm_run_says_so(tmp_path: Path) -> None:
    """AL-2: the base method called outside an alarm run raises RuntimeError saying why, never
    NotImplementedError."""
    async with TestRuntime(tmp_path, objects=(Extended,)) as rt:
        oid = rt.id_from_name("purposes_extended", "z")
        await _call(rt, oid, afs.PInit())
        ctx = rt.node.host.activate(Extended, oid, create=False)
        assert ctx is not None
        with pytest.raises(RuntimeError, match="outside one"):
            await afs.Purposes.alarm(ctx.actor, AlarmInfo(0, False, 0))  # type: ignore[arg-type]
