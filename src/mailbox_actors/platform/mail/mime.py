"""The RFC 5322 message an SMTP transport sends for an ``OutboundEmail`` (CA-8, CA-12).

Built with the standard library's ``email`` package: the stable Message-ID stamped at submit, the
caller's extra headers, text and/or html (both: multipart/alternative, text first). Bcc recipients
are envelope-only: no header names them. Bodies are encoded 7-bit clean (quoted-printable or base64
when needed) so any relay takes them; an address outside ASCII needs SMTPUTF8 and a UTF-8 message.
"""

from __future__ import annotations

from datetime import UTC, datetime
from email import policy
from email.message import EmailMessage
from email.utils import format_datetime, localtime

from mailbox_actors.wire.transport import OutboundEmail

__all__ = ["RESERVED_HEADERS", "build_message", "needs_smtputf8"]

# Headers the transport writes itself from the email's fields; an extra header of the same name is
# dropped, so a caller's headers can never add a Bcc line or a second From (Carrier refuses these
# at submit too: CA-5's header codes).
RESERVED_HEADERS = frozenset({
    "from", "to", "cc", "bcc", "subject", "message-id", "date", "mime-version",
    "content-type", "content-transfer-encoding", "sender", "return-path",
})

# 7-bit bodies and RFC 2047 headers for ASCII envelopes; raw UTF-8 when SMTPUTF8 is needed.
_ASCII_POLICY = policy.SMTP.clone(cte_type="7bit")
_UTF8_POLICY = policy.SMTPUTF8.clone(cte_type="7bit")


def needs_smtputf8(email: OutboundEmail) -> bool:
    """Whether an address is outside ASCII (RFC 6531: the relay must offer SMTPUTF8)."""
    return any(not addr.isascii() for addr in (email.from_, *email.recipients))


def build_message(email: OutboundEmail, *, date_s: float | None = None) -> bytes:
    """The message as CRLF-terminated bytes, ready for DATA (dot-stuffing is the sender's job).

    ``date_s`` fixes the Date header (Unix seconds); None uses the current time. Raises
    ``ValueError`` for a header value the email package refuses (CR or LF in it: injection).
    """
    utf8 = needs_smtputf8(email)
    msg = EmailMessage(policy=_UTF8_POLICY if utf8 else _ASCII_POLICY)
    msg["From"] = email.from_
    if email.to:
        msg["To"] = ", ".join(email.to)
    if email.cc:
        msg["Cc"] = ", ".join(email.cc)
    msg["Subject"] = email.subject
    msg["Message-ID"] = email.message_id_header
    msg["Date"] = format_datetime(localtime() if date_s is None
                                  else datetime.fromtimestamp(date_s, tz=UTC))
    for name, value in email.headers.items():
        if name.strip().lower() not in RESERVED_HEADERS:
            msg[name] = value
    if email.text is not None and email.html is not None:
        msg.set_content(email.text)
        msg.add_alternative(email.html, subtype="html")
    elif email.html is not None:
        msg.set_content(email.html, subtype="html")
    else:
        msg.set_content(email.text or "")
    return msg.as_bytes()

