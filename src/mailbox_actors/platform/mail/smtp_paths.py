"""The reverse-path and forward-paths of MAIL and RCPT (RFC 5321 4.1.2), and the two commands.

aiosmtplib's ``mail``/``rcpt`` run every address through ``email.utils.parseaddr`` first (about a
tenth of a dispatch's CPU). An address made only of atext, dots and one at sign, with a plain
domain, is already its own path between angle brackets, so it is written as it is; any other
address takes aiosmtplib's quoting (which refuses what could smuggle parameters onto the line).
The replies are checked as aiosmtplib's own commands check them, raising the same exceptions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from aiosmtplib import SMTP, SMTPRecipientRefused, SMTPSenderRefused, SMTPStatus
from aiosmtplib.email import quote_address

__all__ = ["mail", "path", "rcpt"]

# RFC 5322 atext (ASCII) in the local part, letters, digits, hyphens and dots in the domain.
_PLAIN = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.\-]+@[A-Za-z0-9.\-]+")


def path(address: str, encoding: str) -> bytes:
    """``<address>`` as the command's bytes; raises ``ValueError`` (as aiosmtplib does) for an
    address that cannot be put on an SMTP command line."""
    if _PLAIN.fullmatch(address):
        return b"<" + address.encode("ascii") + b">"
    return quote_address(address).encode(encoding)


async def mail(smtp: SMTP, sender: str, options: Sequence[str], encoding: str,
               command_s: float) -> None:
    """MAIL FROM; raises ``SMTPSenderRefused`` for any reply but 250."""
    extra = [o.encode("ascii") for o in options]
    reply = await smtp.execute_command(b"MAIL", b"FROM:" + path(sender, encoding), *extra,
                                       timeout=command_s)
    if reply.code != SMTPStatus.completed:
        raise SMTPSenderRefused(reply.code, reply.message, sender)


async def rcpt(smtp: SMTP, recipient: str, encoding: str, command_s: float) -> None:
    """RCPT TO; raises ``SMTPRecipientRefused`` for any reply but 250 or 251."""
    reply = await smtp.execute_command(b"RCPT", b"TO:" + path(recipient, encoding),
                                       timeout=command_s)
    if reply.code not in (SMTPStatus.completed, SMTPStatus.will_forward):
        raise SMTPRecipientRefused(reply.code, reply.message, recipient)
