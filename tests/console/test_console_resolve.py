"""CA-12, UI-4: an Email whose relay gave no definite answer to its body is ``outcome_unknown``;
the console's "resolve…" link on its delivery record fills the resolve form with its email id, so
an operator settles it from the page without knowing the submitter's key (which, like addresses,
the console does not show)."""

from __future__ import annotations

import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster_proc import Cluster
from console_stack import DOMAIN, ConsoleProc, Session, cli

SOURCE = "order-17-confirmation"


class _Relay(socketserver.StreamRequestHandler):
    """An SMTP relay that takes the body and answers its final dot with a 354: no final reply
    (the message may or may not have been taken), so the sender cannot know (CA-11)."""

    def handle(self) -> None:
        self.wfile.write(b"220 relay.test\r\n")
        in_body = False
        for line in self.rfile:
            if in_body:
                if line == b".\r\n":
                    self.wfile.write(b"354 and what now\r\n")
                    in_body = False
                continue
            verb = line[:4].upper()
            if verb == b"QUIT":
                self.wfile.write(b"221 bye\r\n")
                return
            self.wfile.write({b"EHLO": b"250-relay.test\r\n250 8BITMIME\r\n",
                              b"DATA": b"354 go on\r\n"}.get(verb, b"250 ok\r\n"))
            in_body = verb == b"DATA"


@pytest.fixture
def relay() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Relay)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _record(data: Path, identity: str) -> dict[str, Any]:
    page = cli(data, "deliveries", identity)
    emails = [r for r in page["records"] if r["kind"] == "email"]
    assert len(emails) == 1, page
    return dict(emails[0])


def test_an_outcome_unknown_email_is_resolved_from_its_records_link(tmp_path: Path,
                                                                     relay: int) -> None:
    cluster = Cluster(tmp_path, 1, extra=("--transport", "smtp", "--smtp-host", "127.0.0.1",
                                          "--smtp-port", str(relay)))
    console = None
    try:
        cluster.wait_running()
        cli(tmp_path, "tenant", "create", "acme")
        ident = cli(tmp_path, "identity", "create", "--tenant", "acme", "--name", "support",
                    "--address", f"support@{DOMAIN}")
        cli(tmp_path, "send", "--tenant", "acme", "--identity", "support", "--from",
            f"support@{DOMAIN}", "--to", "someone@example.net", "--subject", "your order",
            "--text", "shipped", "--source-id", SOURCE)
        for _ in range(600):  # dispatch runs in the mailbox's alarm, on the node's own time
            record = _record(tmp_path, ident["id"])
            if record["status"] == "outcome_unknown":
                break
            time.sleep(0.1)
        assert record["status"] == "outcome_unknown", record
        email_id = record["email_id"]

        console = ConsoleProc(tmp_path)
        s = Session(console.url)
        s.sign_in((tmp_path / "operator.token").read_text().strip())
        status, page, _ = s.request("GET", f"/identities/{ident['id']}")
        assert status == 200 and f'href="?resolve={email_id}#resolve">resolve…' in page
        assert SOURCE not in page
        status, page, _ = s.request("GET", f"/identities/{ident['id']}?resolve={email_id}")
        assert status == 200 and f'value="{email_id}"' in page and 'id="resolve" open' in page
        assert "data-refresh=" not in page  # the form is not wiped by a refresh while typed in
        csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        status, _, headers = s.request("POST", f"/identities/{ident['id']}/resolve", {
            "csrf": csrf, "email_id": email_id, "outcome": "provider_accepted",
            "provider_message_id": "relay-4711", "evidence": "relay log line 4711"})
        assert status == 303 and headers["location"].endswith("#outbound")
        record = _record(tmp_path, ident["id"])
        assert (record["status"], record["resolved"], record["provider_message_id"]) == \
            ("provider_accepted", True, "relay-4711")
        status, page, _ = s.request("GET", f"/identities/{ident['id']}")
        assert "#resolve\">resolve…" not in page and ">resolved<" in page
        status, page, _ = s.request("GET", f"/identities/{ident['id']}?resolve=a%20b")
        assert status == 400 and "invalid_request" in page and "resolve" in page
    finally:
        if console is not None:
            console.stop()
        cluster.stop()
