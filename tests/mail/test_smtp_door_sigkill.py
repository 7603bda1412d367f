"""Mail the SMTP door answered 250 for survives a SIGKILL of its node while the mailbox's log is
being checkpointed by the checkpoint thread (IN-5, ``platform/storage/checkpoints``): a real node
process with its door on loopback, real SMTP clients, the mailbox's file read after the kill."""

from __future__ import annotations

import json
import signal
import smtplib
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

_NODE = textwrap.dedent("""
    import asyncio, json, sys
    from mailbox_actors.node import Node
    from mailbox_actors.node.app import NodeApp
    from mailbox_actors.node.control_ops import create_identity
    from mailbox_actors.node.smtp_door import SmtpDoor
    from mailbox_actors.platform.logging import configure_logging
    from mailbox_actors.platform.storage import checkpoints
    from mailbox_actors.runtime.settings import RuntimeSettings

    async def main(work):
        settings = RuntimeSettings(data_dir=work + "/node", control_db=work + "/control.sqlite",
                                   queues_db=work + "/queues.sqlite")
        async with Node(settings) as node:
            db = node.control_db
            tenant = await db.create_tenant("acme")
            bob = await create_identity(db, node, tenant.id, "bob", ["bob@example.com"])
            token = "cluster-token-0123456789abcdef"
            door = SmtpDoor.for_node(NodeApp(node, cluster_token=token,
                                             operator_token=token + "-op"), node, token,
                                     max_message_bytes=1 << 20)
            port = await door.start("127.0.0.1", 0)
            path = node.host.path_for("identity_mailbox", bob.mailbox_id)
            print("started", json.dumps({"port": port, "file": str(path)}), flush=True)
            while True:
                print("checkpoints", checkpoints.checkpoints_made(), flush=True)
                await asyncio.sleep(0.01)

    configure_logging(json=False, level="warning")
    asyncio.run(main(sys.argv[1]))
""")
CONNECTIONS = 4


def _letter(n: int) -> bytes:
    return (f"From: Alice <alice@example.com>\r\nTo: bob@example.com\r\nSubject: letter {n}\r\n"
            f"Message-ID: <letter-{n}@example.com>\r\n\r\n"
            + "A line of a letter's body, about seventy characters long, for its size.\r\n" * 12
            ).encode()


def test_mail_answered_250_survives_a_sigkill_during_checkpoints(tmp_path: Path) -> None:
    """IN-5, RT-2: while real clients send through the door and the checkpoint thread
    checkpoints the mailbox's log, the node is SIGKILLed; every message answered 250 is in the
    mailbox's file afterwards, and the file is sound."""
    acknowledged: list[int] = []
    at_work = threading.Event()  # the node's checkpoint thread made a checkpoint
    with subprocess.Popen([sys.executable, "-c", _NODE, str(tmp_path)], stdout=subprocess.PIPE,
                          text=True) as node:
        assert node.stdout is not None
        try:
            started = next(json.loads(line.split(" ", 1)[1]) for line in node.stdout
                           if line.startswith("started "))

            def follow() -> None:  # the node's checkpoint count, until it dies
                assert node.stdout is not None
                for line in node.stdout:
                    if line.startswith("checkpoints ") and int(line.split()[1]) >= 1:
                        at_work.set()

            def send(k: int) -> None:
                n = k
                try:
                    with smtplib.SMTP("127.0.0.1", started["port"], timeout=30) as client:
                        while True:
                            client.sendmail("alice@example.com", ["bob@example.com"],
                                            _letter(n))
                            acknowledged.append(n)  # answered 250
                            n += CONNECTIONS
                except (smtplib.SMTPException, OSError):
                    pass  # the node was killed under this connection

            threads = [threading.Thread(target=follow, daemon=True),
                       *(threading.Thread(target=send, args=(k,), daemon=True)
                         for k in range(CONNECTIONS))]
            for thread in threads:
                thread.start()
            at_work.wait(60)
            node.send_signal(signal.SIGKILL)
            for thread in threads:
                thread.join(30)
        finally:
            node.kill()
    assert node.returncode == -signal.SIGKILL
    assert at_work.is_set()  # the checkpoint thread was at work on the mailbox
    conn = sqlite3.connect(started["file"], isolation_level=None)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        stored = {row[0] for row in conn.execute("SELECT message_id_header FROM messages")}
    finally:
        conn.close()
    assert len(acknowledged) > 50
    assert {f"letter-{n}@example.com" for n in acknowledged} <= stored
