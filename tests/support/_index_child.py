"""Child process of tests/objects/test_mailbox_index_kill.py: a node (``TestRuntime`` on the data
directory given) that ingests one message, says ``ingested <message id>`` and waits to be killed.
Its clock is a FakeClock nobody advances, so ``alarm:index`` never runs in it: the message is
queued for the index, not indexed, when the SIGKILL comes."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

NS = "identity_mailbox"
IDS = {"tenant_id": "ten_1", "identity_id": "idn_1"}
RAW = (b"From: <alice@example.com>\r\nTo: bob@example.com\r\nSubject: aardvark\r\n"
       b"Message-ID: <k1@example.com>\r\n\r\nthe quokka report\r\n")


async def _child(data: Path) -> None:
    from mailbox_actors.testing import TestRuntime
    from mailbox_actors.wire.inbound import Ingest
    from mailbox_actors.wire.mailbox import MailboxInit

    async with TestRuntime(data) as rt:
        m = rt.id_from_name(NS, "bob")
        await rt.call(NS, m, MailboxInit(), **IDS)
        out = await rt.call(NS, m, Ingest(source_id="k1", raw=RAW), **IDS)
        print("ingested", out["message_id"], flush=True)
        await anyio.sleep_forever()  # until the SIGKILL


if __name__ == "__main__":
    anyio.run(_child, Path(sys.argv[1]))
