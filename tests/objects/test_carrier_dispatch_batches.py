"""Dispatch with more Emails in flight than the transport has connections (CA-4), where the outcomes
that come back while another Email with intent still waits for a connection may share one commit
with the intents of the next Emails (these tests prove what that must never break, not that the
commit is shared: that is a speed measure, in the benchmark). A node that dies at any moment of
such a run (its files copied as a SIGKILL would leave them: before each send, and after each
answer) comes back with every Email sent at most once: what had intent and no committed outcome
is ``outcome_unknown`` and never sent again, what had no intent is sent exactly once, and nothing
is ``provider_accepted`` unsent."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from _carrier import call, email, mailbox, receipt
from mailbox_actors.platform.mail.recording import RecordingTransport
from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.carrier import CancelEmail
from mailbox_actors.wire.transport import OutboundEmail, TransportOutcome

pytestmark = pytest.mark.anyio
EMAILS = 7


class OneConnection:
    """A transport with one connection (``slots`` 1): sends wait their turn, as the SMTP
    transport's do on a pool of one. ``at`` is called before each send and after each answer."""

    slots = 1

    def __init__(self, at: Any) -> None:
        self.inner = RecordingTransport()
        self._lock = anyio.Lock()
        self._at = at
        self.started: list[str] = []  # email ids, as their sends began

    async def send(self, email: OutboundEmail) -> TransportOutcome:
        async with self._lock:
            self._at(f"before send {len(self.started) + 1}")
            self.started.append(email.email_id)
            outcome = await self.inner.send(email)
            self._at(f"after answer {len(self.started)}")
            return outcome

    async def aclose(self) -> None:
        await self.inner.aclose()


def runtime(transport: Any, path: Path) -> TestRuntime:
    return TestRuntime(path, services={MAIL_TRANSPORT: transport})


async def test_a_crash_anywhere_in_a_batch_sends_each_email_at_most_once(tmp_path: Path) -> None:
    """CA-4: seven Emails through one connection, the node's files copied before every send and
    after every answer; each copy restarted with a new transport and run until idle: no Email
    sent by the first node is sent again, an Email the first node never sent is either sent once
    now or outcome_unknown (its intent had committed), and every provider_accepted one was sent."""
    snapshots: list[tuple[str, Path, list[str]]] = []
    live = tmp_path / "live"
    first: OneConnection

    def snapshot(label: str) -> None:
        dest = tmp_path / f"snap{len(snapshots)}"
        shutil.copytree(live, dest)  # what a SIGKILL now would leave (no transaction is open)
        snapshots.append((label, dest, list(first.started)))

    first = OneConnection(snapshot)
    async with runtime(first, live) as rt:
        mid = await mailbox(rt)
        for i in range(EMAILS):
            await call(rt, mid, email(f"b-{i}", to=[f"r{i}@example.com"]))
        await rt.run_until_idle()
        final = [(await receipt(rt, mid, f"b-{i}"))["status"] for i in range(EMAILS)]
        assert final == ["provider_accepted"] * EMAILS
        assert len(set(first.started)) == EMAILS
    assert len(snapshots) == 2 * EMAILS
    unknown_seen = 0
    for label, path, sent_before in snapshots:
        again = RecordingTransport()
        async with runtime(again, path) as rt:
            await rt.run_until_idle()
            await rt.advance(24 * 3_600_000)
            sent_after = [e.email_id for e in again.sent]
            assert len(sent_after) == len(set(sent_after)), label
            for i in range(EMAILS):
                r = await receipt(rt, mid, f"b-{i}")
                eid, status = r["email_id"], r["status"]
                was_sent = eid in sent_before
                assert not (was_sent and eid in sent_after), (label, i)  # at most once
                if was_sent:
                    assert status in ("provider_accepted", "outcome_unknown"), (label, i, status)
                else:
                    assert (eid in sent_after) == (status == "provider_accepted"), (label, i)
                    assert status in ("provider_accepted", "outcome_unknown"), (label, i, status)
                unknown_seen += status == "outcome_unknown"
    assert unknown_seen > 0  # some copies caught Emails between intent and outcome


async def test_an_email_cancelled_after_it_was_read_ahead_is_left_out_of_its_batch() -> None:
    """CA-4: eight Emails, four in flight and held, the rest read ahead by the run; one of those
    cancelled meanwhile: the next intents (each guarded by the Email's status) skip it, it stays
    superseded and is never sent, and the others are each sent once."""
    transport = RecordingTransport()
    transport.hold()
    async with TestRuntime(services={MAIL_TRANSPORT: transport}) as rt:
        mid = await mailbox(rt)
        for i in range(8):
            await call(rt, mid, email(f"c-{i}", to=[f"r{i}@example.com"]))
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(rt.run_until_idle)
                await transport.wait_sent(4)  # c-0..c-3 in flight; c-4..c-7 read ahead
                await call(rt, mid, CancelEmail(source_id="c-5"))
                transport.release()
        statuses = [(await receipt(rt, mid, f"c-{i}"))["status"] for i in range(8)]
        assert statuses == ["provider_accepted"] * 5 + ["superseded"] + ["provider_accepted"] * 2
        sent = [e.email_id for e in transport.sent]
        assert len(sent) == len(set(sent)) == 7
        cancelled = (await receipt(rt, mid, "c-5"))["email_id"]
        assert cancelled not in sent
        dispatching = [e.data["email_id"] for e in rt.events.events("email.dispatching")]
        assert cancelled not in dispatching and len(dispatching) == 7
