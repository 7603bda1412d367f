"""The node's mail transport, built from its settings (CA-14): ``transport`` = smtp | cloudflare |
none, and the credentials files those name.

A file that cannot be read, or is empty, is a refused setting (``SettingsError`` naming it), found
when the configuration is loaded, so ``serve`` and ``cluster`` stop with exit status 2 before
anything serves. Secrets are never quoted in a message.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, cast

from mailbox_actors.runtime.settings import RuntimeSettings, SettingsError

if TYPE_CHECKING:
    import ssl

    from mailbox_actors.platform.clock import Clock
    from mailbox_actors.platform.mail.transport import Transport

__all__ = ["check_transport_files", "read_secret_file", "smtp_tls_context",
           "transport_from_settings"]


def read_secret_file(path: str, setting: str) -> str:
    """The file's text without its trailing line end; refused if unreadable or empty."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise SettingsError(f"setting {setting!r} names a file that cannot be read "
                            f"({path!r}: {e.strerror or type(e).__name__})") from None
    except UnicodeDecodeError:
        raise SettingsError(f"setting {setting!r}: {path!r} is not UTF-8 text") from None
    secret = text.rstrip("\r\n")
    if not secret.strip():
        raise SettingsError(f"setting {setting!r}: {path!r} is empty")
    return secret


def check_transport_files(settings: RuntimeSettings) -> None:
    """Refuse, naming the setting, a credentials or CA file the chosen transport cannot read."""
    if settings.transport == "smtp" and settings.smtp_password_file is not None:
        read_secret_file(settings.smtp_password_file, "smtp_password_file")
    if settings.transport == "smtp":
        smtp_tls_context(settings)
    if settings.transport == "cloudflare" and settings.cloudflare_token_file is not None:
        read_secret_file(settings.cloudflare_token_file, "cloudflare_token_file")


def smtp_tls_context(settings: RuntimeSettings) -> ssl.SSLContext | None:
    """The context the relay's certificate is checked with: ``smtp_ca_file``'s CAs, else None
    (the system's). Host name and certificate are always checked."""
    if settings.smtp_ca_file is None:
        return None
    import ssl  # only with a CA file: 6 ms of every start otherwise

    try:
        return ssl.create_default_context(cafile=settings.smtp_ca_file)
    except (OSError, ssl.SSLError) as e:
        raise SettingsError(f"setting 'smtp_ca_file' names no readable PEM file of CA "
                            f"certificates ({settings.smtp_ca_file!r}: "
                            f"{getattr(e, 'strerror', None) or type(e).__name__})") from None


def transport_from_settings(settings: RuntimeSettings,
                            clock: Clock | None = None) -> Transport | None:
    """The transport the settings choose (None for ``none``); it opens nothing until it sends.
    ``clock``: the node's (SMTP's Date header comes from it)."""
    # Each transport's code is imported when chosen: a node with none answers without loading
    # aiosmtplib or the HTTP client.
    if settings.transport == "smtp":
        from mailbox_actors.platform.mail.smtp import SmtpConfig, SmtpTransport
        from mailbox_actors.platform.mail.smtp_client_session import TlsMode

        assert settings.smtp_host is not None  # RuntimeSettings refuses smtp without a host
        password = (None if settings.smtp_password_file is None
                    else read_secret_file(settings.smtp_password_file, "smtp_password_file"))
        return SmtpTransport(SmtpConfig(
            host=settings.smtp_host, port=settings.smtp_port_or_default,
            tls=cast(TlsMode, settings.smtp_tls),  # one of SMTP_TLS_MODES, checked by settings
            username=settings.smtp_username, password=password,
            final_timeout_s=settings.smtp_timeout_s, tls_context=smtp_tls_context(settings)),
            clock=clock)
    if settings.transport == "cloudflare":
        from mailbox_actors.http.client import HttpPool
        from mailbox_actors.platform.mail.cloudflare import CloudflareTransport

        assert settings.cloudflare_url is not None and settings.cloudflare_token_file is not None
        token = read_secret_file(settings.cloudflare_token_file, "cloudflare_token_file").strip()
        # The project's own keep-alive pool (ADR 0003), owned and closed by the transport.
        return CloudflareTransport(settings.cloudflare_url, token, http=HttpPool(max_per_host=16))
    return None
