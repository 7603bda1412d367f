"""The per-recipient cap's SQL agrees with its pure rule (CA-6): whatever the history of Emails
(recipients shared or not, written in another case, some canceled, time moving across the
window's edge), ``submit`` refuses exactly when ``core/carrier/cap.over_cap`` says one more Email
would take an address over the cap. A property test over real mailbox files on a FakeClock."""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _carrier import NS, OWNER, email, mailbox
from mailbox_actors.carrier.store import recipient_key
from mailbox_actors.core.carrier.cap import CapPolicy, over_cap, window_start
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.carrier import CancelEmail

POLICY = CapPolicy(limit=2, window_ms=100_000)
ADDRESSES = ["ann@x.example", "ANN@X.example", "bob@x.example", "cy@y.example", "dee@y.example"]

step = st.tuples(
    st.integers(min_value=0, max_value=45_000),                       # time passing first
    st.lists(st.sampled_from(ADDRESSES), min_size=1, max_size=3),     # the Email's recipients
    st.booleans())                                                    # cancel it afterwards?


async def _run(steps: list[tuple[int, list[str], bool]]) -> None:
    model: list[tuple[int, list[str], bool]] = []  # (created, keys, counted)
    with tempfile.TemporaryDirectory() as tmp:
        async with TestRuntime(Path(tmp), recipient_cap=POLICY.limit,
                               recipient_cap_window_ms=POLICY.window_ms) as rt:
            mid = await mailbox(rt)
            for n, (wait_ms, recipients, cancel) in enumerate(steps):
                await rt.advance(wait_ms)
                now = rt.now_ms()
                keys = [recipient_key(a) for a in recipients]
                counted: dict[str, int] = {}
                for created, email_keys, counts in model:
                    if counts and created > window_start(POLICY, now):
                        for k in set(email_keys):
                            counted[k] = counted.get(k, 0) + 1
                expected_refused = bool(over_cap(POLICY, keys, counted))
                r = await rt.call(NS, mid, email(f"s-{n}", to=recipients), **OWNER)
                assert (r["status"] == "refused") == expected_refused, (n, recipients, counted)
                accepted = r["status"] == "queued"
                if accepted and cancel:
                    await rt.call(NS, mid, CancelEmail(source_id=f"s-{n}"), **OWNER)
                model.append((now, keys, accepted and not cancel))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=12))
def test_submit_refuses_exactly_when_the_pure_cap_rule_says_so(
        steps: list[tuple[int, list[str], bool]]) -> None:
    """CA-6: the cap's statements (a quick look at the cap's index, then the counts) decide as
    ``over_cap`` does on the same history: counted statuses only, distinct Emails per address,
    the window's start excluded."""
    anyio.run(_run, steps)
