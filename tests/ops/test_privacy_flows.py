"""What a real node leaves behind of a user's mail and DNS (CL-5, EV-5, ERR, RPC-7): a ``serve``
process at debug level sends mail through its SMTP transport to an aiosmtpd relay on loopback that
refuses one RCPT, refuses a sender and answers 4yz, each refusal's text echoing the address as real
relays do; and it checks a domain against a DNS server on loopback. Nothing it logged (its own
lines and the libraries'), nothing in its metrics and nothing in any event it published carries an
address, a subject, a body, a DKIM key or the text of a DNS record."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest

from _carrier import NS, OWNER, email
from child_output import Lines, _port
from mailbox_actors.rpc import Client
from mailbox_actors.testing.dns import LoopbackDns
from mailbox_actors.testing.smtp import SinkStep, SmtpSink
from mailbox_actors.wire.carrier import GetEmail
from mailbox_actors.wire.domain import DomainCheck, DomainInit, ExpectedRecords
from mailbox_actors.wire.mailbox import MailboxInit

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SENDER = "sender.private@acme.example"
TO = ["first.reader@client-one.example", "refused.reader@client-two.example"]
CC = "copied.reader@client-three.example"
BCC = "hidden.reader@client-four.example"
SUBJECT = "Quarterly figures nobody may read"
BODY = "The confidential body text"
DKIM_KEY = "MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQDprivatekeymaterial"
SPF_INCLUDE = "_spf.secret-provider.example"
DMARC_RUA = "dmarc-reports@reports.example"
SECRETS = [SENDER, *TO, CC, BCC, SUBJECT, BODY, DKIM_KEY, "secret-provider", DMARC_RUA,
           "192.0.2.77"]
# An address is also looked for by its local part: a log may cut or quote it in pieces.
LOCAL_PARTS = [a.split("@")[0] for a in (SENDER, *TO, CC, BCC)]


def _leaks(text: str) -> list[str]:
    low = text.lower()
    return [s for s in [*SECRETS, *LOCAL_PARTS] if s.lower() in low]


def _published_events(data: Path) -> str:
    """Every event body the node wrote: its actors' outboxes, the control database's event
    index and the webhook queue's messages."""
    found: list[str] = []
    for path in data.rglob("*.sqlite"):
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            wanted = ["outbox", "event_index"] + (["messages"] if path.name == "queues.sqlite"
                                                  else [])
            for table in tables.intersection(wanted):
                found += [repr(r) for r in conn.execute(f"SELECT * FROM {table}")]  # tables of the list
    return "\n".join(found)


def _read_to_end(lines: Lines) -> None:
    """Everything the ended child wrote after what ``lines`` has seen."""
    while chunk := os.read(lines.fd, 65536):
        lines.buf += chunk
    lines.seen += [line.decode(errors="replace") for line in lines.buf.split(b"\n")]
    lines.buf = b""


async def _settled(c: Client, mid: str, source_id: str) -> dict[str, Any]:
    """Poll a receipt (a real process on its own clock) until the relay has answered it once;
    the bound only ends a broken run."""
    with anyio.fail_after(60):
        while True:
            r: dict[str, Any] = await c.call(NS, mid, GetEmail(source_id=source_id), **OWNER)
            if r["status"] != "dispatching" and (r["status"] != "queued" or r["attempts"]):
                return r
            await anyio.sleep(0.05)


async def test_logs_metrics_and_events_of_a_real_node_carry_no_address_or_content(
        tmp_path: Path) -> None:
    """CL-5, EV-5: a node at debug level relays three Emails (one RCPT of three refused with the
    address in the reply text; a sender refused at MAIL FROM; a 451 at the final dot, retried)
    and checks a domain whose records include a DKIM key, an SPF include and a DMARC report
    address; its whole output, its /metrics page, its receipts and every event it published name
    none of the addresses, the subject, the body or the records."""
    data, port = tmp_path / "node", _port()
    with LoopbackDns() as dns:
        dns.set("shop.example", "MX", "10 mx1.provider.example")
        dns.set("shop.example", "TXT", f"v=spf1 include:{SPF_INCLUDE} ip4:192.0.2.77 -all")
        dns.set(SPF_INCLUDE, "TXT", "v=spf1 ip4:192.0.2.0/24 -all")
        dns.set("_dmarc.shop.example", "TXT", f"v=DMARC1; p=reject; rua=mailto:{DMARC_RUA}")
        dns.set("s1._domainkey.shop.example", "TXT", f"v=DKIM1; k=rsa; p={DKIM_KEY}")
        async with SmtpSink() as sink:
            sink.queue(
                SinkStep(rcpt={1: f"550 5.1.1 <{TO[1]}>: Recipient address rejected"}),
                SinkStep(mail=f"553 5.7.1 <{SENDER}>: Sender address rejected"),
                SinkStep(final=f"451 4.3.0 <{TO[0]}>: try again later"))
            proc = subprocess.Popen(  # noqa: ASYNC220  # a real node, read by select below
                [sys.executable, "-m", "mailbox_actors", "serve", "--data", str(data), "--port",
                 str(port), "--log-level", "debug", "--transport", "smtp", "--smtp-host",
                 sink.host, "--smtp-port", str(sink.port), "--dns-nameservers", "127.0.0.1",
                 "--dns-port", str(dns.port)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            lines = Lines(proc)
            try:
                lines.until("operator token in")
                token = (data / "cluster.token").read_text().strip()
                url = f"http://127.0.0.1:{port}"
                async with Client(url, token) as c:
                    mid = await c.id_from_name(NS, "support")
                    await c.call(NS, mid, MailboxInit(), **OWNER)
                    receipts = []
                    for n in range(3):  # one at a time: each meets its scripted relay answer
                        await c.call(NS, mid, email(
                            f"s-{n}", from_=SENDER, to=TO, cc=[CC], bcc=[BCC], subject=SUBJECT,
                            text=BODY, html=f"<p>{BODY}</p>"), **OWNER)
                        receipts.append(await _settled(c, mid, f"s-{n}"))
                    dm = await c.id_from_name("domain_monitor", "shop")
                    await c.call("domain_monitor", dm, DomainInit(
                        domain="shop.example", expected=ExpectedRecords(
                            spf_include=SPF_INCLUDE, dkim_selector="s1", dkim_key=DKIM_KEY,
                            mx_hosts=["mx1.provider.example"])), tenant_id=OWNER["tenant_id"])
                    checked = await c.call("domain_monitor", dm, DomainCheck(),
                                           tenant_id=OWNER["tenant_id"])
                with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:  # noqa: ASYNC210  # one local GET
                    metrics = r.read().decode()
            finally:
                if proc.poll() is None:
                    os.kill(proc.pid, signal.SIGTERM)
                proc.wait(timeout=60)
                _read_to_end(lines)
                if proc.stdout is not None:
                    proc.stdout.close()
    # The flow happened as described (else the assertions below prove nothing).
    assert [m["status"] for m in receipts[0]["messages"]] == [
        "unconfirmed", "refused", "unconfirmed", "unconfirmed"]
    assert receipts[1]["status"] == "rejected"
    assert (receipts[2]["status"], receipts[2]["attempts"]) == ("queued", 1)
    assert checked["state"] == "verified", checked
    output = "\n".join(lines.seen)
    assert '"event_id":"evt_' in output  # the node logged about this flow's events
    assert _leaks(output) == [], output
    assert _leaks(metrics) == []
    assert _leaks(repr(receipts)) == []  # receipts know a Message by id, role, position
    events = _published_events(data)
    assert "email." in events and "domain.verified" in events
    assert _leaks(events) == []
