"""The console's guard (UI-4, CA-10): the operator token everywhere, CSRF on every action, the
project's error codes for bad input, no mail content outside dev mode, dev mode on loopback only,
and the Content-Security-Policy of its pages and of a message's HTML."""

from __future__ import annotations

import json
import re
import signal
import smtplib
import subprocess
import sys
from email.message import EmailMessage
from pathlib import Path

import pytest

from console_stack import DOMAIN, ConsoleProc, Session, Stack, cli
from mailbox_actors.console.session import Sessions
from mailbox_actors.console.settings import ConsoleSettings, is_loopback
from mailbox_actors.runtime.settings import SettingsError
from mailbox_actors.testing.ports import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


def test_every_page_needs_the_operator_token(stack: Stack) -> None:
    """UI-4: without a session every page sends the browser to sign in, the API answers
    unauthenticated; a wrong token (or the cluster token) opens no session."""
    s = Session(stack.dev.url)
    for path in ("/", "/actors", f"/identities/{stack.support['id']}", "/domains", "/queues",
                 "/actors/identity_mailbox"):
        status, _, headers = s.request("GET", path)
        assert (status, headers.get("location")) == (303, "/login"), path
    status, body, _ = s.request("GET", "/api/cursor")
    assert status == 401 and json.loads(body)["err"]["code"] == "unauthenticated"
    cluster_token = (stack.data / "cluster.token").read_text().strip()
    for wrong in ("x" * 43, cluster_token, ""):
        status, body, _ = s.request("POST", "/login", {"token": wrong})
        assert status == 401 and "unauthenticated" in body
        assert s.request("GET", "/")[0] == 303
    s.sign_in(stack.operator_token)
    assert s.request("GET", "/")[0] == 200


def test_every_action_needs_the_sessions_csrf_token(stack: Stack) -> None:
    """UI-4: a POST without the CSRF token, with another session's, or from another Origin is
    permission_denied, and nothing is done."""
    s, other = Session(stack.dev.url), Session(stack.dev.url)
    s.sign_in(stack.operator_token)
    other.sign_in(stack.operator_token)
    page = s.request("GET", f"/identities/{stack.support['id']}")[1]
    mine, theirs = _csrf(page), _csrf(other.request("GET", "/")[1])
    assert mine != theirs
    action = f"/identities/{stack.support['id']}/post-retry"
    for form, headers in (({"key": "k"}, {}), ({"key": "k", "csrf": theirs}, {}),
                          ({"key": "k", "csrf": mine}, {"origin": "http://evil.example"})):
        status, body, _ = s.request("POST", action, form, headers)
        assert status == 403 and "permission_denied" in body, (form, headers)


def test_bad_input_is_refused_with_the_projects_codes(stack: Stack) -> None:
    """UI-4: ids, cursors and form fields are checked: invalid_request naming the field,
    identity_not_found / domain_not_found / email_not_found for what does not exist,
    invalid_request for a path (with RPC-7's HTTP 404) or a dead letter that names nothing."""
    s = Session(stack.dev.url)
    s.sign_in(stack.operator_token)
    iid = stack.support["id"]
    cases = [
        ("GET", "/identities/idn_nope", None, 404, "identity_not_found"),
        ("GET", "/identities/idn%3Cscript%3E", None, 400, "invalid_request"),
        ("GET", "/identities/..%2F..%2Fetc", None, 404, "invalid_request"),
        ("GET", f"/identities/{iid}?cursor=%27%3Bdrop", None, 400, "invalid_request"),
        ("GET", f"/identities/{iid}/messages/imsg_0000", None, 404, "email_not_found"),
        ("GET", f"/identities/{iid}/messages/bad%20id", None, 400, "invalid_request"),
        ("GET", f"/identities/{iid}/threads/thr_0000", None, 404, "email_not_found"),
        ("GET", "/domains/dom_nope", None, 404, "domain_not_found"),
        ("GET", "/no/such/page", None, 404, "invalid_request"),  # RPC-7: unknown path
        ("POST", "/", {}, 405, "method_not_allowed"),
        ("POST", "/queues/webhooks/redrive", {"message_id": "qm_0000"}, 400, "invalid_request"),
        ("POST", "/queues/webhooks/redrive", {"message_id": "a b"}, 400, "invalid_request"),
        ("POST", "/queues/no%20such/redrive", {"message_id": "qm_0000"}, 400, "invalid_request"),
    ]
    for method, path, form, want_status, want_code in cases:
        csrf = _csrf(s.request("GET", "/")[1])
        status, body, _ = s.request(method, path, None if form is None else {**form,
                                                                               "csrf": csrf})
        assert (status, want_code in body) == (want_status, True), (path, status, body[-300:])
    csrf = _csrf(s.request("GET", "/")[1])
    status, body, _ = s.request("POST", f"/identities/{iid}/resolve",
                                {"csrf": csrf, "source_id": "src-1", "outcome": "maybe",
                                 "evidence": "ticket 1"})
    assert status == 400 and "invalid_request" in body and "outcome" in body
    status, body, _ = s.request("POST", f"/identities/{iid}/resolve",
                                {"csrf": csrf, "source_id": "src-1", "outcome": "rejected",
                                 "code": "5.1.1"})
    assert status == 400 and "evidence" in body
    status, body, _ = s.request("POST", f"/identities/{iid}/resolve",
                                {"csrf": csrf, "source_id": "never-sent", "outcome": "rejected",
                                 "code": "5.1.1", "evidence": "ticket 1"})
    assert status == 404 and "email_not_found" in body
    status, body, _ = s.request("POST", f"/identities/{iid}/post-retry", {"csrf": csrf, "key": ""})
    assert status == 400 and "invalid_request" in body
    status, body, _ = s.request("GET", f"/identities/{iid}?q=%22unbalanced")
    assert status == 400 and "invalid_request" in body and "query" in body
    private = Session(stack.private.url)
    private.sign_in(stack.operator_token)
    status, body, _ = private.request("GET", f"/identities/{iid}?q=hello")
    assert status == 403 and "permission_denied" in body


def test_without_dev_mode_no_content_is_shown(stack: Stack) -> None:
    """CA-10, UI-4: the console without --dev shows ids, states, counts and evidence, never a
    subject, a body, a header's value or an address; a message's body is refused."""
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "leaky@elsewhere.example", f"support@{DOMAIN}", \
        "Secret subject line"
    msg.set_content("secret body text")
    with smtplib.SMTP("127.0.0.1", stack.smtp_port, timeout=30) as smtp:
        smtp.send_message(msg)
    s = Session(stack.private.url)
    s.sign_in(stack.operator_token)
    iid = stack.support["id"]
    page = s.request("GET", f"/identities/{iid}")[1]
    mid = re.search(r"/messages/(imsg_[0-9A-Z]+)", page)
    assert mid is not None
    shown = page + s.request("GET", f"/identities/{iid}/messages/{mid.group(1)}")[1]
    for thread in set(re.findall(r"/threads/(thr_[0-9A-Z]+)", page)):
        shown += s.request("GET", f"/identities/{iid}/threads/{thread}")[1]
    shown += s.request("GET", "/")[1] + s.request("GET", "/actors")[1]
    actor = s.request("GET", f"/actors/identity_mailbox/{stack.support['mailbox_id']}")[1]
    shown += actor
    tables = set(re.findall(r'href="(/actors/identity_mailbox/[0-9a-f]{64}/rows/[a-z_0-9]+)"',
                            actor))
    assert tables
    for table in tables:
        status, page, _ = s.request("GET", table)
        assert status == 200, (table, page[-300:])
        shown += page
    for secret in ("Secret subject line", "secret body text", "leaky@elsewhere.example",
                   f"support@{DOMAIN}", "Welcome to the console"):
        assert secret not in shown, secret
    assert "content hidden" in shown
    status, body, _ = s.request("GET", f"/identities/{iid}/messages/{mid.group(1)}/body")
    assert status == 403 and "permission_denied" in body


def test_pages_and_mail_bodies_carry_their_content_security_policy(stack: Stack) -> None:
    """UI-4: the console's pages allow only its own script and style; a message's HTML is served
    under a policy with no script, no remote load and a sandbox."""
    s = Session(stack.dev.url)
    s.sign_in(stack.operator_token)
    iid = stack.support["id"]
    _, page, headers = s.request("GET", f"/identities/{iid}")
    assert "script-src 'self'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    mid = re.search(r"/messages/(imsg_[0-9A-Z]+)", page)
    assert mid is not None
    _, _, body_headers = s.request("GET", f"/identities/{iid}/messages/{mid.group(1)}/body")
    csp = body_headers["content-security-policy"]
    assert "default-src 'none'" in csp and "sandbox" in csp and "script-src" not in csp


def test_dev_mode_is_refused_off_loopback() -> None:
    """UI-4: dev mode shows content, so a non-loopback bind is refused (settings and command,
    exit status 2); loopback forms are accepted."""
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.com", ""))
    with pytest.raises(SettingsError, match="loopback"):
        ConsoleSettings(host="0.0.0.0", dev=True)
    ConsoleSettings(host="0.0.0.0", dev=False)
    out = subprocess.run([sys.executable, "-m", "mailbox_actors", "console", "--dev", "--host",
                          "0.0.0.0", "--data", "/nonexistent"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "loopback" in out.stderr


def test_sessions_are_macs_of_the_operator_token() -> None:
    """UI-4: a session cookie and its CSRF token are checked in constant time against MACs
    under a key derived from the operator token; another token's session is refused."""
    a, b = Sessions("a" * 32), Sessions("b" * 32)
    cookie = a.new_session()
    assert a.session_ok(cookie) and not b.session_ok(cookie)
    assert "a" * 32 not in cookie
    assert a.csrf_ok(cookie, a.csrf_for(cookie))
    assert not a.csrf_ok(cookie, b.csrf_for(cookie)) and not a.csrf_ok(cookie, None)
    assert not a.session_ok(cookie[:-1] + ("0" if cookie[-1] != "0" else "1"))
    assert a.token_ok("a" * 32) and not a.token_ok("a" * 31)


def test_dev_mode_and_capture_are_checked_at_start() -> None:
    """UI-6: a node in dev mode listens on loopback only; capture needs dev mode and a door port
    (it sends to the node's own door) and refuses a relay host; capture becomes SMTP to
    127.0.0.1 at the node's door."""
    from mailbox_actors.node.config import load_config

    for flags, what in (({"dev": True, "host": "0.0.0.0"}, "loopback"),
                        ({"transport": "capture", "smtp_listen_port": 2525}, "dev mode"),
                        ({"transport": "capture", "dev": True}, "smtp_listen_port"),
                        ({"transport": "capture", "dev": True, "smtp_listen_port": 2525,
                          "smtp_host": "relay.example"}, "smtp_host")):
        with pytest.raises(SettingsError, match=what):
            load_config(flags, env={})
    cfg = load_config({"transport": "capture", "dev": True, "smtp_listen_port": 2600}, env={})
    rs = cfg.runtime_settings()
    assert (rs.transport, rs.smtp_host, rs.smtp_port) == ("smtp", "127.0.0.1", 2600)
    assert load_config({"dev": "true"}, env={}).dev is True


def test_raw_source_and_attachments_are_downloads_in_dev_mode_only(stack: Stack) -> None:
    """UI-2, UI-4: in dev mode a message's raw source is shown as plain text (or downloaded as
    .eml) and each attachment is downloaded as bytes, never rendered, whatever type it claims,
    under the mail's sandboxing policy; without dev mode both are permission_denied."""
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "a@elsewhere.example", f"support@{DOMAIN}", \
        "With attachments"
    msg.set_content("see attached")
    msg.add_attachment(b"%PDF-1.4 not really", maintype="application", subtype="pdf",
                       filename="report.pdf")
    msg.add_attachment("<script>alert(1)</script>", subtype="html", filename="../evil.html")
    with smtplib.SMTP("127.0.0.1", stack.smtp_port, timeout=30) as smtp:
        smtp.send_message(msg)
    s = Session(stack.dev.url)
    s.sign_in(stack.operator_token)
    iid = stack.support["id"]
    page = s.request("GET", f"/identities/{iid}?q=attachments")[1]
    mid = re.search(r"/messages/(imsg_[0-9A-Z]+)", page)
    assert mid is not None
    base = f"/identities/{iid}/messages/{mid.group(1)}"
    view = s.request("GET", base)[1]
    assert f'{base}/attachments/0"' in view and f'{base}/attachments/1"' in view
    status, body, headers = s.request("GET", f"{base}/attachments/0")
    assert status == 200 and body == "%PDF-1.4 not really"
    assert headers["content-type"] == "application/octet-stream"
    assert headers["content-disposition"] == 'attachment; filename="report.pdf"'
    status, body, headers = s.request("GET", f"{base}/attachments/1")
    assert status == 200 and "<script>" in body
    assert headers["content-type"] == "application/octet-stream"
    assert headers["content-disposition"] == 'attachment; filename=".._evil.html"'
    assert "sandbox" in headers["content-security-policy"]
    status, body, headers = s.request("GET", f"{base}/raw")
    assert status == 200 and "Subject: With attachments" in body
    assert headers["content-type"].startswith("text/plain")
    status, _, headers = s.request("GET", f"{base}/raw?download=1")
    assert status == 200 and headers["content-disposition"].endswith('.eml"')
    status, body, _ = s.request("GET", f"{base}/attachments/7")  # the mailbox: no such part
    assert status == 400 and "invalid_request" in body and "part" in body
    private = Session(stack.private.url)
    private.sign_in(stack.operator_token)
    for path in (f"{base}/raw", f"{base}/attachments/0"):
        status, body, _ = private.request("GET", path)
        assert status == 403 and "permission_denied" in body


def test_a_dev_console_over_a_cluster_not_in_dev_mode_shows_no_content(tmp_path: Path) -> None:
    """UI-4, UI-1: the nodes decide too: a console in dev mode over a node that is not shows an
    actor's tables with text and blobs described (the node refuses content), not an error."""
    port = free_port()
    node = subprocess.Popen([sys.executable, "-m", "mailbox_actors", "serve", "--data",
                             str(tmp_path), "--port", str(port), "--log-level", "warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    console = None
    try:
        assert node.stdout is not None
        for line in node.stdout:
            if "listening on" in line:
                break
        url = f"http://127.0.0.1:{port}"
        cli(tmp_path, "tenant", "create", "solo")
        ident = cli(tmp_path, "identity", "create", "--tenant", "solo", "--name", "one",
                    "--url", url)
        console = ConsoleProc(tmp_path, "--dev")  # finds the node where it recorded itself
        s = Session(console.url)
        s.sign_in((tmp_path / "operator.token").read_text().strip())
        status, page, _ = s.request(
            "GET", f"/actors/identity_mailbox/{ident['mailbox_id']}/rows/outbox")
        assert status == 200 and "permission_denied" not in page, page[-400:]
        assert "identity.created" in page and "B, hidden)" in page  # its body: described
    finally:
        if console is not None:
            console.stop()
        node.send_signal(signal.SIGTERM)
        node.wait(timeout=60)
        if node.stdout is not None:
            node.stdout.close()
