"""An identity's received mail from the command line (UI-2), against a real node with its SMTP door:
mail sent with smtplib is listed, shown, searched, its thread followed, its raw source and its
attachment written out byte for byte, and ``wait`` returns when a matching message arrives."""

from __future__ import annotations

import email.policy
import json
import smtplib
import subprocess
import sys
import time
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path

import pytest

from child_output import Lines
from serve_proc import serving

ATTACHMENT = bytes(range(256)) * 40


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mailbox_actors", *args], capture_output=True,
                          text=True, timeout=120)


def _ok(*args: str) -> str:
    done = _cli(*args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def _mail(subject: str, mid: str, *, reply_to: str | None = None,
          attachment: bytes | None = None) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = "Alice <alice@example.com>"
    msg["To"] = "bob@example.com"
    msg["Subject"] = subject
    msg["Message-ID"] = f"<{mid}@example.com>"
    if reply_to:
        msg["In-Reply-To"] = f"<{reply_to}@example.com>"
    msg.set_content(f"about the {subject}\n")
    if attachment is not None:
        msg.add_attachment(attachment, maintype="application", subtype="octet-stream",
                           filename="numbers.bin")
    return msg


class Node:
    def __init__(self, data: Path, smtp_port: int) -> None:
        self.data, self.smtp_port = data, smtp_port

    def send(self, msg: EmailMessage) -> bytes:
        raw = msg.as_bytes(policy=email.policy.SMTP)  # CRLF, as on the wire
        with smtplib.SMTP("127.0.0.1", self.smtp_port, timeout=30) as s:
            assert s.sendmail("alice@example.com", ["bob@example.com"], raw) == {}
        return raw

    def messages(self, *args: str) -> list[str]:
        return ["messages", *args, "--identity", "bob", "--tenant", "acme", "--data",
                str(self.data)]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    data = tmp_path_factory.mktemp("messages") / "node"
    with serving(data, "--smtp-listen-port", "0") as lines:
        door = next(x for x in lines.seen if "SMTP door on" in x)
        _ok("tenant", "create", "acme", "--data", str(data))
        _ok("identity", "create", "--tenant", "acme", "--name", "bob", "--address",
            "bob@example.com", "--data", str(data))
        yield Node(data, int(door.rsplit(":", 1)[1]))


def test_received_mail_is_listed_shown_searched_and_threaded(node: Node, tmp_path: Path) -> None:
    """UI-2: list (newest first), show (headers, text, attachments), thread, search; raw and
    attachment write the bytes received; an unknown message is exit 1."""
    first = node.send(_mail("quarterly report", "q1"))
    node.send(_mail("re: quarterly report", "q2", reply_to="q1", attachment=ATTACHMENT))
    listed = json.loads(_ok(*node.messages("list", "--json")))["messages"]
    assert [m["subject"] for m in listed][:2] == ["re: quarterly report", "quarterly report"]
    reply, original = listed[0], listed[1]
    assert reply["thread_id"] == original["thread_id"]
    table = _ok(*node.messages("list"))
    assert "quarterly report" in table and table.split()[:3] == ["message", "thread", "from"]

    shown = json.loads(_ok(*node.messages("show", reply["message_id"], "--json")))
    assert shown["attachments"] == [{"filename": "numbers.bin",
                                     "content_type": "application/octet-stream",
                                     "size": len(ATTACHMENT)}]
    text = _ok(*node.messages("show", original["message_id"]))
    assert "about the quarterly report" in text and "alice@example.com" in text

    out = tmp_path / "original.eml"
    _ok(*node.messages("raw", original["message_id"], "-o", str(out)))
    raw = out.read_bytes()
    assert raw.endswith(first)  # as sent (the door may add its trace headers before it)
    stdout = subprocess.run([sys.executable, "-m", "mailbox_actors",
                             *node.messages("raw", original["message_id"])],
                            capture_output=True, timeout=120)
    assert stdout.returncode == 0 and stdout.stdout == raw
    part = tmp_path / "numbers.bin"
    _ok(*node.messages("attachment", reply["message_id"], "0", "-o", str(part)))
    assert part.read_bytes() == ATTACHMENT

    thread = json.loads(_ok(*node.messages("thread", reply["thread_id"], "--json")))
    assert [m["subject"] for m in thread["messages"]] == ["quarterly report",
                                                         "re: quarterly report"]
    found = json.loads(_ok(*node.messages("search", "quarterly", "--has-attachment",
                                          "--json")))["messages"]
    assert [m["message_id"] for m in found] == [reply["message_id"]]

    done = _cli(*node.messages("show", "imsg_nope"))
    assert done.returncode == 1 and "no such message" in done.stderr
    done = _cli(*node.messages("search", '"unclosed'))
    assert done.returncode == 1 and "invalid_request" in done.stderr
    done = _cli(*node.messages("list", "--limit", "0"))
    assert done.returncode == 2
    done = _cli("messages", "list", "--identity", "nobody", "--tenant", "acme", "--data",
                str(node.data))
    assert done.returncode == 1 and "identity_not_found" in done.stderr


def test_wait_returns_when_a_matching_message_arrives(node: Node) -> None:
    """UI-2, IN-4: ``messages wait --subject`` ends with the message's id once one arrives that
    matches after it started; with nothing matching it ends with status 1 at its timeout."""
    since = str(int(time.time() * 1000) - 1)
    waiter = subprocess.Popen(
        [sys.executable, "-m", "mailbox_actors",
         *node.messages("wait", "--subject", "invoice 42", "--timeout-s", "90", "--after-ms",
                        since, "--json")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        lines = Lines(waiter)
        # Sent while the command may not have registered its wait yet: it matches what arrived
        # since --after-ms all the same (looked back at registration, IN-4).
        node.send(_mail("invoice 42 is due", "inv42"))
        got = json.loads(lines.until("matched")[-1])
        assert got["status"] == "matched" and got["message_id"].startswith("imsg_")
        assert waiter.wait(timeout=60) == 0
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
        if waiter.stdout is not None:
            waiter.stdout.close()
    done = _cli(*node.messages("wait", "--subject", "never sent", "--timeout-s", "1"))
    assert done.returncode == 1 and "no matching message arrived within 1 s" in done.stderr
