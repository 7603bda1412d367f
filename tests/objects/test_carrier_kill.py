"""A real ``mailbox-actors serve`` process, its SMTP transport pointed at an aiosmtpd sink on
loopback, killed with SIGKILL at the two moments that matter (CA-4): after dispatch intent
committed and before the relay answered (the sink has the body at most once; the receipt is
outcome_unknown after restart and stays so across replays and restarts), and after submit
answered and before intent (the Email is sent exactly once after restart)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from _carrier import NS, OWNER, email
from child_output import Lines, _port
from mailbox_actors.rpc import Client
from mailbox_actors.testing.smtp import SinkStep, SmtpSink
from mailbox_actors.wire.carrier import GetEmail
from mailbox_actors.wire.mailbox import MailboxInit

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@contextmanager
def serving(data: Path, port: int, *mail: str) -> Iterator[subprocess.Popen[bytes]]:
    """``serve`` on ``port`` with the mail settings ``mail``; SIGKILLed (by pid) on the way out
    unless the test ended it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mailbox_actors", "serve", "--data", str(data), "--port",
         str(port), "--log-level", "warning", *mail],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        Lines(proc).until("operator token in")
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def sigkill(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL


async def status_once_settled(c: Client, mid: str, *, leave: set[str]) -> dict[str, Any]:
    """Poll the receipt (a real process works on its own clock) until its status is none of
    ``leave``; the deadline only bounds a broken run."""
    with anyio.fail_after(60):
        while True:
            r: dict[str, Any] = await c.call(NS, mid, GetEmail(source_id="s-1"), **OWNER)
            if r["status"] not in leave:
                return r
            await anyio.sleep(0.05)


def smtp_to(sink: SmtpSink) -> tuple[str, ...]:
    return ("--transport", "smtp", "--smtp-host", sink.host, "--smtp-port", str(sink.port))


async def test_killed_after_intent_is_outcome_unknown_and_never_resent(tmp_path: Path) -> None:
    """CA-4, CA-11: SIGKILL while the relay holds its final reply (the body and the dot are
    there): after restart the receipt is outcome_unknown, an unchanged replay answers it, another
    restart keeps it, and the sink has the Email exactly once."""
    data, port = tmp_path / "node", _port()
    url = f"http://127.0.0.1:{port}"
    async with SmtpSink() as sink:
        sink.queue(SinkStep(hold=True))
        with serving(data, port, *smtp_to(sink)) as proc:
            token = (data / "cluster.token").read_text().strip()
            async with Client(url, token) as c:
                mid = await c.id_from_name(NS, "support")
                await c.call(NS, mid, MailboxInit(), **OWNER)
                queued = await c.call(NS, mid, email(), **OWNER)
                assert queued["status"] == "queued"
                await sink.wait_held(1)  # the node has sent the body and waits for the reply
                r = await c.call(NS, mid, GetEmail(source_id="s-1"), **OWNER)
                assert r["status"] == "dispatching"
            sigkill(proc)
        sink.release()
        assert sink.transactions == 1
        for _restart in range(2):
            with serving(data, port, *smtp_to(sink)):
                async with Client(url, token) as c:
                    r = await status_once_settled(c, mid, leave={"dispatching"})
                    assert r["status"] == "outcome_unknown"
                    assert r["email_id"] == queued["email_id"]
                    assert await c.call(NS, mid, email(), **OWNER) == r
        assert sink.transactions == 1 and len(sink.messages) == 1


async def test_killed_after_submit_before_intent_is_sent_exactly_once(tmp_path: Path) -> None:
    """CA-4: SIGKILL after submit answered queued and before any dispatch intent (the node had
    no transport yet): the node restarted with its SMTP transport sends the Email once; it ends
    provider_accepted and neither a replay nor another restart sends it again."""
    data, port = tmp_path / "node", _port()
    url = f"http://127.0.0.1:{port}"
    async with SmtpSink() as sink:
        with serving(data, port, "--transport", "none", "--mail-recheck-ms", "200") as proc:
            token = (data / "cluster.token").read_text().strip()
            async with Client(url, token) as c:
                mid = await c.id_from_name(NS, "support")
                await c.call(NS, mid, MailboxInit(), **OWNER)
                assert (await c.call(NS, mid, email(), **OWNER))["status"] == "queued"
            sigkill(proc)
        assert sink.transactions == 0
        with serving(data, port, *smtp_to(sink)):
            async with Client(url, token) as c:
                r = await status_once_settled(c, mid, leave={"queued", "dispatching"})
                assert r["status"] == "provider_accepted"
                assert await c.call(NS, mid, email(), **OWNER) == r
        with serving(data, port, *smtp_to(sink)):
            async with Client(url, token) as c:
                assert (await c.call(NS, mid, GetEmail(source_id="s-1"), **OWNER)) == r
        assert sink.transactions == 1 and len(sink.messages) == 1
