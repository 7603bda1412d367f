"""The transport settings (CA-14, CL-4): flags, MAILBOX_ACTORS_* and TOML choose the node's mail
transport; a misconfigured one is refused at start naming the setting (serve exits 2); the node
registers what it built under MAIL_TRANSPORT and closes it at stop, and keeps a caller's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mailbox_actors.node.config import load_config
from mailbox_actors.platform.mail.recording import RecordingTransport
from mailbox_actors.platform.mail.smtp import SmtpTransport
from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT, TransportClosed
from mailbox_actors.runtime.settings import SettingsError
from mailbox_actors.testing import TestRuntime
from mailbox_actors.testing.smtp import SmtpSink
from mailbox_actors.wire.transport import OutboundEmail, ProviderAccepted

MAIL = OutboundEmail(email_id="eml_1", message_id_header="<1@example.test>",
                     from_="a@example.test", to=["b@example.test"], subject="s", text="t")


def test_default_is_no_transport() -> None:
    """Without settings the transport is none: submitted mail stays queued (CA-14)."""
    cfg = load_config({}, env={})
    assert cfg.transport == "none"
    assert cfg.runtime_settings().transport == "none"


def test_sources_and_precedence(tmp_path: Path) -> None:
    """TOML, MAILBOX_ACTORS_* and flags set every transport setting; flags win over the
    environment, which wins over the file (CL-4, CA-14)."""
    secret = tmp_path / "pw"
    secret.write_text("hunter2\n")
    toml = tmp_path / "node.toml"
    toml.write_text(f'transport = "smtp"\nsmtp_host = "file.example"\nsmtp_tls = "starttls"\n'
                    f'smtp_username = "relay"\nsmtp_password_file = "{secret}"\n'
                    f'smtp_timeout_s = 30.5\n')
    cfg = load_config({}, env={}, toml_file=str(toml))
    st = cfg.runtime_settings()
    assert (st.transport, st.smtp_host, st.smtp_tls, st.smtp_username) == (
        "smtp", "file.example", "starttls", "relay")
    assert st.smtp_port_or_default == 587 and st.smtp_timeout_s == 30.5
    env = {"MAILBOX_ACTORS_SMTP_HOST": "env.example", "MAILBOX_ACTORS_SMTP_PORT": "2525"}
    assert load_config({}, env=env, toml_file=str(toml)).smtp_host == "env.example"
    assert load_config({}, env=env, toml_file=str(toml)).smtp_port == 2525
    flagged = load_config({"smtp_host": "flag.example"}, env=env, toml_file=str(toml))
    assert flagged.smtp_host == "flag.example"


@pytest.mark.parametrize(("flags", "named"), [
    ({"transport": "smtp"}, "smtp_host"),
    ({"transport": "smtp", "smtp_host": "relay.example", "smtp_port": 70000}, "smtp_port"),
    ({"transport": "smtp", "smtp_host": "relay.example", "smtp_tls": "ssl"}, "smtp_tls"),
    ({"transport": "smtp", "smtp_host": "relay.example", "smtp_timeout_s": 0}, "smtp_timeout_s"),
    ({"transport": "smtp", "smtp_host": "relay.example", "smtp_username": "u"}, "smtp_username"),
    ({"transport": "pigeon"}, "transport"),
    ({"transport": "cloudflare", "cloudflare_token_file": "/x"}, "cloudflare_url"),
    ({"transport": "cloudflare", "cloudflare_url": "ftp://x"}, "cloudflare_url"),
    ({"transport": "cloudflare", "cloudflare_url": "https://api.example/send"},
     "cloudflare_token_file"),
])
def test_misconfigured_transport_is_refused(flags: dict[str, object], named: str) -> None:
    """A transport without its host, with a bad port or mode, or without its URL or token file is
    refused at start, the message naming the setting (CA-14, CL-4)."""
    with pytest.raises(SettingsError, match=named):
        load_config(flags, env={})


def test_unreadable_or_empty_credentials_are_refused(tmp_path: Path) -> None:
    """A password or token file that cannot be read, or is empty, is refused naming the setting,
    and the message never quotes a secret (CA-14)."""
    base = {"transport": "smtp", "smtp_host": "relay.example", "smtp_username": "u"}
    with pytest.raises(SettingsError, match="smtp_password_file"):
        load_config(base | {"smtp_password_file": str(tmp_path / "missing")}, env={})
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(SettingsError, match=r"smtp_password_file.*empty"):
        load_config(base | {"smtp_password_file": str(empty)}, env={})
    with pytest.raises(SettingsError, match="cloudflare_token_file"):
        load_config({"transport": "cloudflare", "cloudflare_url": "https://api.example/send",
                     "cloudflare_token_file": str(tmp_path)}, env={})  # a directory


def test_serve_refuses_a_misconfigured_transport(tmp_path: Path) -> None:
    """`mailbox-actors serve` with transport smtp and no host exits 2 before serving, saying which
    setting is wrong (CA-14, CL-4)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILBOX_ACTORS_")}
    env["MAILBOX_ACTORS_TRANSPORT"] = "smtp"
    proc = subprocess.run([sys.executable, "-m", "mailbox_actors", "serve", "--data",
                           str(tmp_path / "d"), "--port", "0"], env=env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert "smtp_host" in proc.stderr and "listening" not in proc.stdout


@pytest.mark.anyio
async def test_node_builds_registers_and_closes_the_smtp_transport(tmp_path: Path) -> None:
    """transport=smtp gives objects an SmtpTransport under MAIL_TRANSPORT that logs in with the
    password file's account; the node closes it at stop (CA-8, CA-14)."""
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    async with SmtpSink(users={"relay": "s3cret"}) as sink:
        rt = TestRuntime(transport="smtp", smtp_host=sink.host, smtp_port=sink.port,
                         smtp_username="relay", smtp_password_file=str(secret))
        async with rt:
            transport = rt.node.host.services.get(MAIL_TRANSPORT)
            assert isinstance(transport, SmtpTransport)
            assert isinstance(await transport.send(MAIL), ProviderAccepted)
            assert sink.auth_logins == ["relay"]
        with pytest.raises(TransportClosed):
            await transport.send(MAIL)


@pytest.mark.anyio
async def test_a_given_transport_is_kept_and_not_closed() -> None:
    """A transport passed in services wins over the settings and stays the caller's (CA-14)."""
    fake = RecordingTransport()
    async with TestRuntime(services={MAIL_TRANSPORT: fake}, transport="smtp",
                           smtp_host="relay.example") as rt:
        assert rt.node.host.services.get(MAIL_TRANSPORT) is fake
    assert not fake.closed
    async with TestRuntime() as rt:  # transport none: nothing registered
        assert rt.node.host.services.get(MAIL_TRANSPORT) is None


@pytest.mark.anyio
async def test_starttls_through_settings_with_a_private_ca(tmp_path: Path) -> None:
    """smtp_tls=starttls with smtp_ca_file trusts a private CA's relay; a CA file that is not
    PEM is refused at start naming the setting (CA-14)."""
    import ssl

    import trustme

    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    async with SmtpSink(tls_context=server) as sink:
        async with TestRuntime(transport="smtp", smtp_host=sink.host, smtp_port=sink.port,
                               smtp_tls="starttls", smtp_ca_file=str(ca_file)) as rt:
            transport = rt.node.host.services.get(MAIL_TRANSPORT)
            assert transport is not None
            assert isinstance(await transport.send(MAIL), ProviderAccepted)
        assert len(sink.messages) == 1
    not_pem = tmp_path / "junk.pem"
    not_pem.write_text("junk\n")
    with pytest.raises(SettingsError, match="smtp_ca_file"):
        load_config({"transport": "smtp", "smtp_host": "relay.example",
                     "smtp_ca_file": str(not_pem)}, env={})
