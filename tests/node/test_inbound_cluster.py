"""The SMTP door of a real cluster (IN-5, IN-4, CL-2): node processes listening for SMTP beside
HTTP, an identity created with an address on the command line, a real SMTP client delivering
through a node that does not own the mailbox, the owner SIGKILLed right after the 250, and the
client's ``wait_for_message`` receiving the message once the supervisor has restarted it."""

from __future__ import annotations

import json
import os
import signal
import smtplib
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from cluster_proc import Cluster
from mailbox_actors.rpc import Client
from mailbox_actors.testing.ports import free_port_block as _free_port_block

pytestmark = pytest.mark.slow


def cli(data: Path, *args: str) -> Any:
    out = subprocess.run([sys.executable, "-m", "mailbox_actors", *args, "--data", str(data)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def send(port: int, rcpt: str, subject: str) -> dict[str, Any]:
    raw = (f"From: Alice <alice@example.com>\r\nTo: {rcpt}\r\nSubject: {subject}\r\n"
           f"Message-ID: <{subject}@example.com>\r\n\r\nhello through the door\r\n")
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as s:
        refused: dict[str, Any] = s.sendmail("alice@example.com", [rcpt], raw.encode())
        return refused


@pytest.mark.anyio
async def test_mail_through_a_clusters_smtp_door_survives_sigkill_after_250(
        tmp_path: Path) -> None:
    """IN-5: `cluster` gives node i SMTP port P+i and prints it; `identity create --address`
    makes an address; a message sent with smtplib to the node that does not own the mailbox is
    answered 250 after the owner committed it; the owner is SIGKILLed at once, and
    `wait_for_message` (IN-4) still receives the message after the restart; a wait registered
    before the next message catches it."""
    base = _free_port_block(4)
    data = tmp_path / "cluster"
    c = Cluster(data, 2, extra=("--smtp-listen-port", str(base + 2)), port=base)
    try:
        c.wait_running()
        assert any(f"SMTP at 127.0.0.1:{base + 2}" in line for line in c.log)
        assert any(f"SMTP at 127.0.0.1:{base + 3}" in line for line in c.log)
        tenant = await anyio.to_thread.run_sync(cli, data, "tenant", "create", "acme")
        bob = await anyio.to_thread.run_sync(
            cli, data, "identity", "create", "--tenant", tenant["id"], "--name", "bob",
            "--address", "Bob@Example.com")
        assert bob["addresses"] == ["bob@example.com"]
        ids = {"tenant_id": tenant["id"], "identity_id": bob["id"]}
        async with Client.from_data_dir(data) as client:
            owner_url = client.owner_url("identity_mailbox", bob["mailbox_id"])
            nodes = c.nodes()
            owner = next(i for i, n in enumerate(nodes) if n["url"] == owner_url)
            door = base + 2 + (1 - owner)  # the other node's door: it forwards to the owner
            before = client.clock.now_ms()
            refused = await anyio.to_thread.run_sync(send, door, "bob@example.com", "first")
            assert refused == {}
            os.kill(nodes[owner]["pid"], signal.SIGKILL)  # right after the 250
            got = await client.wait_for_message(bob["mailbox_id"], **ids, timeout_ms=60_000,
                                                subject_contains="FIRST",
                                                received_after_ms=before - 1)
            view = await client.call("identity_mailbox", bob["mailbox_id"],
                                     {"op": "get_message", "message_id": got["message_id"]},
                                     **ids)
            assert view["subject"] == "first" and view["from"] == "alice@example.com"
            c.wait_for(f"{nodes[owner]['name']} back")

            wait = await client.call("identity_mailbox", bob["mailbox_id"], {
                "op": "register_wait", "filter": {"subject_contains": "second"},
                "expires_at_ms": client.clock.now_ms() + 60_000}, **ids)
            poll = {"op": "wait_poll", "wait_id": wait["wait_id"]}
            assert (await client.call("identity_mailbox", bob["mailbox_id"], poll, **ids)) == {
                "status": "pending"}
            assert await anyio.to_thread.run_sync(send, base + 2 + owner, "bob@example.com",
                                                  "second") == {}
            second = await client.call("identity_mailbox", bob["mailbox_id"], poll, **ids)
            assert second["status"] == "matched" and second["thread_id"] != got["thread_id"]
            with pytest.raises(smtplib.SMTPRecipientsRefused) as info:
                await anyio.to_thread.run_sync(send, door, "nobody@example.com", "x")
            assert info.value.recipients["nobody@example.com"][0] == 550
    finally:
        c.stop()
