"""The counter's tests, written only with the mailbox-actors pytest plugin's fixtures."""

from __future__ import annotations

from typing import Any

import pytest
from counter import DAY_MS, Add, Counter, Get, Start, Total

from mailbox_actors import MailboxActorsError, TestRuntime

pytestmark = [pytest.mark.anyio, pytest.mark.actor_runtime(objects=[Counter])]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_adds_up_and_answers_typed_replies(actor_runtime: TestRuntime) -> None:
    cid = actor_runtime.id_from_name("counter", "visits")
    await actor_runtime.call("counter", cid, Start(), tenant_id="t1")
    await actor_runtime.call("counter", cid, Add(n=2), tenant_id="t1")
    await actor_runtime.call("counter", cid, {"op": "add", "n": 3}, tenant_id="t1")
    total = await actor_runtime.call("counter", cid, Get(), tenant_id="t1", reply_type=True)
    assert total == Total(total=5)
    with pytest.raises(MailboxActorsError) as e:
        await actor_runtime.call("counter", cid, Add(n=0), tenant_id="t1")
    assert e.value.code == "invalid_request"


async def test_the_midnight_alarm_resets_the_counter(actor_runtime: TestRuntime) -> None:
    cid = actor_runtime.id_from_name("counter", "visits")
    await actor_runtime.call("counter", cid, Start(), tenant_id="t1")
    await actor_runtime.call("counter", cid, Add(n=7), tenant_id="t1")
    alarm = await actor_runtime.get_alarm("counter", cid)
    assert alarm is not None and alarm % DAY_MS == 0
    assert await actor_runtime.fire_alarm_now("counter", cid)  # no need to wait for midnight
    assert (await actor_runtime.call("counter", cid, Get(), tenant_id="t1"))["total"] == 0
    assert await actor_runtime.get_alarm("counter", cid) == alarm + DAY_MS


async def test_storage_can_be_inspected_and_changed_from_inside(actor_runtime: TestRuntime) -> None:
    cid = actor_runtime.id_from_name("counter", "visits")
    await actor_runtime.call("counter", cid, Start(), tenant_id="t1")

    def peek(counter: Any, storage: Any) -> int:
        storage.exec("UPDATE meta SET v = 41 WHERE k = 'total'")
        return storage.exec("SELECT v FROM meta WHERE k = 'total'").one()[0]

    assert await actor_runtime.run_in_actor("counter", cid, peek) == 41
    assert (await actor_runtime.call("counter", cid, Add(n=1), tenant_id="t1"))["total"] == 42
    assert actor_runtime.list_ids("counter") == [cid]


async def test_each_test_has_isolated_storage(actor_runtime: TestRuntime) -> None:
    assert actor_runtime.list_ids("counter") == []


async def test_a_restart_keeps_the_counter(actor_runtime_factory: Any) -> None:
    first = await actor_runtime_factory(objects=[Counter])
    cid = first.id_from_name("counter", "visits")
    await first.call("counter", cid, Start(), tenant_id="t1")
    await first.call("counter", cid, Add(n=4), tenant_id="t1")
    await first.stop()
    second = await actor_runtime_factory(objects=[Counter], data_dir=first.data_dir)
    assert (await second.call("counter", cid, Get(), tenant_id="t1"))["total"] == 4
