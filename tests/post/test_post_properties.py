"""Post's promises under arbitrary failure scripts (PO-3, PO-4, PO-5), checked with hypothesis:
whatever each attempt does (fails, loses its answer, answers garbage, refuses), every address
receives its events exactly once and in send order, refused ones become dead letters, and no
address waits on another's failures for good."""

from __future__ import annotations

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import _post_actors as pa
from mailbox_actors.testing import TestRuntime

STEP = st.sampled_from(["fail", "lose", "garbage", "ok"])
EVENT = st.tuples(st.sampled_from(["a", "b", "c"]),
                  st.one_of(st.lists(STEP, max_size=3), st.just(["refuse"])))


async def _scenario(events: list[tuple[str, list[str]]]) -> None:
    pa.reset()
    async with TestRuntime(objects=pa.POST_OBJECTS) as rt:
        producer = rt.id_from_name("post_producer", "p")
        await rt.call("post_producer", producer, pa.PInit(), tenant_id=pa.TENANT)
        for r in ("a", "b", "c"):
            await rt.call("post_receiver", rt.id_from_name("post_receiver", r), pa.RInit(),
                          tenant_id=pa.TENANT)
        for i, (to, script) in enumerate(events):
            key = f"k{i:02d}"
            pa.SCRIPT[key] = script
            await rt.call("post_producer", producer, pa.Send(to=to, key=key, text=key),
                          tenant_id=pa.TENANT)
            if i % 3 == 0:
                await rt.run_until_idle()  # some sends land while earlier ones are in flight
        await rt.advance(3_600_000)
        for r in ("a", "b", "c"):
            got = await rt.call("post_receiver", rt.id_from_name("post_receiver", r), pa.Log(),
                                tenant_id=pa.TENANT)
            want = [[f"k{i:02d}", f"k{i:02d}"] for i, (to, s) in enumerate(events)
                    if to == r and s != ["refuse"]]
            assert got == want, (r, events)
        for i, (_, script) in enumerate(events):
            job = await rt.call("post_producer", producer, pa.GetJob(key=f"k{i:02d}"),
                                tenant_id=pa.TENANT)
            assert job["state"] == ("dead" if script == ["refuse"] else "delivered"), (i, events)


@settings(max_examples=30, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(EVENT, min_size=1, max_size=10))
def test_every_address_gets_its_events_once_and_in_order_whatever_the_attempts_do(
        events: list[tuple[str, list[str]]]) -> None:
    """PO-3, PO-4, PO-5: under any script of failed, lost, garbage and refused attempts, each
    address receives exactly its non-refused events, once each, in send order; refused ones are
    dead letters; everything else ends delivered."""
    try:
        anyio.run(_scenario, events)
    finally:
        pa.reset()
