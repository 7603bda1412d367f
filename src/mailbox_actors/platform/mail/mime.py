"""The RFC 5322 message an SMTP transport sends for an ``OutboundEmail`` (CA-8, CA-12).

The stable Message-ID stamped at submit, the caller's extra headers, text and/or html (both:
multipart/alternative, text first). Bcc recipients are envelope-only: no header names them. Bodies
are 7-bit clean (quoted-printable when not plain ASCII) so any relay takes them; an address outside
ASCII needs SMTPUTF8, and then headers are raw UTF-8 (RFC 6532).

Encoding is the standard library's (``email.header`` for RFC 2047 words, ``email.quoprimime`` for
bodies, ``email.utils`` for the date), composed directly: building an ``EmailMessage`` costs about
3 ms a message in its header registry, more than the SMTP exchange itself on loopback, and dispatch
must keep up with raw aiosmtplib (SPEC section 12). Tests read every message back with the
``email`` parser.
"""

from __future__ import annotations

import hashlib
import re
import time
from email import quoprimime
from email.header import Header
from email.utils import formatdate

from mailbox_actors.wire.transport import EMAIL_ID_HEADER, OutboundEmail

__all__ = ["RESERVED_HEADERS", "build_message", "needs_smtputf8"]

# Headers the transport writes itself from the email's fields; an extra header of the same name is
# dropped, so a caller's headers can never add a Bcc line or a second From (Carrier refuses these
# at submit too: CA-5's header codes).
RESERVED_HEADERS = frozenset({
    "from", "to", "cc", "bcc", "subject", "message-id", "date", "mime-version",
    "content-type", "content-transfer-encoding", "sender", "return-path",
    EMAIL_ID_HEADER.lower(),
})

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # written raw, these would break a header
_FIELD_NAME = re.compile(r"[!-9;-~]{1,76}")  # RFC 5322 2.2: printable ASCII except colon
_FOLD_AT = 78  # RFC 5322 2.1.1: SHOULD; raw lines stay far below the 998 MUST
_RAW_MAX = 900
_CRLF = "\r\n"


def needs_smtputf8(email: OutboundEmail) -> bool:
    """Whether an address is outside ASCII (RFC 6531: the relay must offer SMTPUTF8)."""
    return any(not addr.isascii() for addr in (email.from_, *email.recipients))


def build_message(email: OutboundEmail, *, date_s: float | None = None) -> bytes:
    """The message as CRLF-terminated bytes, ready for DATA (dot-stuffing is the sender's job).

    ``date_s`` fixes the Date header (Unix seconds: the transport passes its Clock's, so a
    FakeClock gives byte-identical messages); None uses the system's time. Raises
    ``ValueError`` for a header name that is not a field name or a value with CR or LF in it
    (header injection).
    """
    utf8 = needs_smtputf8(email)
    lines = [_addresses("From", [email.from_])]
    if email.to:
        lines.append(_addresses("To", email.to))
    if email.cc:
        lines.append(_addresses("Cc", email.cc))
    lines.append(_unstructured("Subject", email.subject, utf8))
    lines.append(_unstructured("Message-ID", email.message_id_header, utf8))
    lines.append(f"{EMAIL_ID_HEADER}: {email.email_id}")  # CA-17: named by its journal copy
    lines.append(f"Date: {_date(int(time.time()) if date_s is None else int(date_s))}")
    for name, value in email.headers.items():
        if not _FIELD_NAME.fullmatch(name):
            raise ValueError("header name is not an RFC 5322 field name")
        if name.lower() not in RESERVED_HEADERS:
            lines.append(_unstructured(name, value, utf8))
    lines.append("MIME-Version: 1.0")
    if email.text is not None and email.html is not None:
        parts = [_part(email.text, "plain"), _part(email.html, "html")]
        boundary = _boundary(email.message_id_header, [body for _, body in parts])
        lines.append(f'Content-Type: multipart/alternative; boundary="{boundary}"')
        out = [_CRLF.join(lines), "", ""]
        for head, body in parts:
            out += [f"--{boundary}", *head, "", body]
        out += [f"--{boundary}--", ""]
        text = _CRLF.join(out)
    else:
        head, body = (_part(email.html, "html") if email.html is not None
                      else _part(email.text or "", "plain"))
        text = _CRLF.join([*lines, *head, "", body])
    return text.encode("utf-8" if utf8 else "ascii")


# The Date of messages built within one second: formatdate is a third of a plain message's
# build, and a dispatcher builds hundreds a second.
_DATE = [(-1, "")]


def _date(second: int) -> str:
    """``formatdate(second, usegmt=True)``, made once per second (it has second resolution)."""
    last, text = _DATE[0]
    if last != second:
        text = formatdate(second, usegmt=True)
        _DATE[0] = (second, text)
    return text


def _check(value: str) -> str:
    if "\r" in value or "\n" in value:
        raise ValueError("header value contains CR or LF")
    return value


def _addresses(name: str, addresses: list[str]) -> str:
    """An address list folded between addresses (addr-specs are never split)."""
    out = f"{name}:"
    line = len(out)
    for i, addr in enumerate(addresses):
        piece = _check(addr) + ("," if i < len(addresses) - 1 else "")
        if line + 1 + len(piece) > _FOLD_AT and i > 0:
            out += _CRLF
            line = 0
        out += " " + piece
        line += 1 + len(piece)
    return out


def _unstructured(name: str, value: str, utf8: bool) -> str:
    _check(value)
    control = _CONTROL.search(value) is not None
    if (utf8 or value.isascii()) and not control and len(name) + 2 + len(value) <= _RAW_MAX:
        return f"{name}: {value}"
    # RFC 2047 encoded words (non-ASCII without SMTPUTF8, control characters), or folding of a
    # very long value.
    charset = "us-ascii" if value.isascii() and not control else "utf-8"
    encoded = Header(value, charset, header_name=name).encode(linesep=_CRLF)
    return f"{name}: {encoded}"


def _part(content: str, subtype: str) -> tuple[list[str], str]:
    """A text part's headers and body: 7bit when ASCII with short lines, else quoted-printable."""
    lines = content.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if content.isascii() and all(len(line) <= 998 for line in lines):
        head = [f'Content-Type: text/{subtype}; charset="us-ascii"',
                "Content-Transfer-Encoding: 7bit"]
        body = _CRLF.join(lines)
    else:
        head = [f'Content-Type: text/{subtype}; charset="utf-8"',
                "Content-Transfer-Encoding: quoted-printable"]
        # quoprimime works on code points; the body must be encoded as UTF-8 bytes first.
        raw = "\n".join(lines).encode("utf-8").decode("latin-1")
        body = quoprimime.body_encode(raw, maxlinelen=76, eol=_CRLF)
    if not body.endswith(_CRLF):
        body += _CRLF
    return head, body


def _boundary(seed: str, bodies: list[str]) -> str:
    """A boundary from the Message-ID (stable across attempts), longer until no body holds it."""
    digest = hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()
    size = 24
    while True:
        boundary = f"=_mbx_{digest[:size]}"
        if size >= len(digest) or not any(boundary in body for body in bodies):
            return boundary
        size += 8
