"""One SMTP connection and one mail transaction on it, phase by phase (CA-11), on aiosmtplib.

Every failure is classified by where it happened. Before the final dot of the body is written, a
server refusal is a definite rejection (4yz temporary, 5yz permanent; RCPT refusals are per
recipient) and a lost connection or timeout is a temporary one: the server cannot have taken a
message it never saw the end of. A failure before any recipient was accepted with no server's
refusal in it (a connection refused, a name or TLS failure, a drop or timeout) is not a rejection
at all but ``Unreachable`` (CA-16). Once the dot is written, only the server's final reply decides;
without one the outcome is unknown. Codes carry the reply code and its enhanced status code
("451 4.3.0"), never the reply text (it may echo an address).
"""

from __future__ import annotations

import re
import socket
import ssl
from dataclasses import dataclass
from typing import Literal

import anyio
from aiosmtplib import (
    SMTP,
    SMTPConnectError,
    SMTPConnectResponseError,
    SMTPConnectTimeoutError,
    SMTPException,
    SMTPRecipientRefused,
    SMTPResponseException,
    SMTPServerDisconnected,
    SMTPTimeoutError,
)
from aiosmtplib.protocol import SMTPProtocol

from mailbox_actors.platform.mail import smtp_paths
from mailbox_actors.platform.mail.mime import needs_smtputf8
from mailbox_actors.wire.transport import (
    OutboundEmail,
    OutcomeUnknown,
    ProviderAccepted,
    ProviderRejected,
    RecipientRefusal,
    RejectionClass,
    TransportOutcome,
    Unreachable,
)

__all__ = ["Definite", "SmtpConfig", "SmtpConnection", "Stale", "TlsMode", "open_connection",
           "reply_class", "reply_code"]

TlsMode = Literal["none", "starttls", "tls"]

_ENHANCED = re.compile(r"^\s*([245]\.\d{1,3}\.\d{1,3})(?!\S)")
_QUEUED_AS = re.compile(r"queued as ([A-Za-z0-9._\-]{1,64})", re.IGNORECASE)
_LEADING_DOT = re.compile(rb"(?m)^\.")
_CHUNK = 64 * 1024  # body bytes handed to the socket between flow-control waits


@dataclass(frozen=True, kw_only=True)
class SmtpConfig:
    """Where and how to relay (CA-14's ``smtp_*`` settings, already read and validated)."""

    host: str
    port: int = 25
    tls: TlsMode = "none"
    username: str | None = None
    password: str | None = None  # the contents of ``smtp_password_file``
    final_timeout_s: float = 600.0  # RFC 5321 4.5.3.2: DATA termination, 10 minutes
    command_timeout_s: float = 300.0  # RFC 5321 4.5.3.2: MAIL, RCPT, 5 minutes (capped by final)
    pool_size: int = 4
    tls_context: ssl.SSLContext | None = None  # None: the system's trust store
    local_hostname: str | None = None  # EHLO name; None: this host's FQDN

    @property
    def command_s(self) -> float:
        return min(self.command_timeout_s, self.final_timeout_s)


class Definite(Exception):
    """A definite rejection found before the body's end was written. ``answered``: the server
    refused in a reply, so the session is still in step and can be reused after RSET.
    ``unreachable``: no server took part (a connection refused, a name or TLS failure, a drop or
    timeout before any recipient was accepted): ``Unreachable`` evidence, not a rejection
    (CA-16)."""

    def __init__(self, code: str, klass: RejectionClass,
                 refused: list[RecipientRefusal] | None = None, *, answered: bool = False,
                 unreachable: bool = False) -> None:
        super().__init__(code)
        self.outcome: TransportOutcome = (
            Unreachable(failure=code) if unreachable
            else ProviderRejected(code=code, klass=klass, refused=refused or []))
        self.answered = answered


class Stale(Exception):
    """A reused connection turned out closed at its first command: nothing was sent, reopen."""


def reply_code(code: int, message: str) -> str:
    """"451 4.3.0" from a reply (the enhanced code when the server gave one), never its text."""
    if not 200 <= code <= 599:
        return "invalid_reply"
    found = _ENHANCED.match(message)
    return f"{code} {found.group(1)}" if found else str(code)


def reply_class(code: int) -> RejectionClass:
    # 5yz is permanent; 4yz and anything that is not a proper refusal code is worth a retry.
    return "permanent" if 500 <= code <= 599 else "temporary"


def _refused(err: SMTPResponseException) -> Definite:
    # A malformed reply (aiosmtplib's code -1) may leave the session out of step: not reused.
    return Definite(reply_code(err.code, err.message), reply_class(err.code),
                    answered=200 <= err.code <= 599)


class SmtpConnection:
    """An open, greeted (and, as configured, encrypted and authenticated) SMTP session."""

    def __init__(self, smtp: SMTP, config: SmtpConfig) -> None:
        self.smtp = smtp
        self._config = config
        self.clean = True  # the last transaction ended with a final reply: no RSET needed
        self.reused = False
        self.rcpt_accepted = False  # this transaction: the server took a recipient (CA-16)

    @property
    def usable(self) -> bool:
        return self.smtp.is_connected

    def close(self) -> None:
        self.smtp.close()

    async def quit(self) -> None:
        with anyio.move_on_after(min(self._config.command_s, 5.0)):
            try:
                await self.smtp.quit()
            except (SMTPException, OSError):
                pass
        self.smtp.close()

    async def transact(self, email: OutboundEmail, message: bytes) -> TransportOutcome:
        """One transaction; the connection is closed on any outcome but a server's reply."""
        try:
            return await self._transact(email, message)
        except Definite as definite:
            if not definite.answered:
                self.smtp.close()
            return definite.outcome
        except BaseException:
            self.smtp.close()
            raise

    async def _transact(self, email: OutboundEmail, message: bytes) -> TransportOutcome:
        smtp, cmd = self.smtp, self._config.command_s
        needs_rset = self.reused and not self.clean
        first_command = self.reused  # a reused connection may have been closed while idle
        self.clean = False
        self.rcpt_accepted = False
        try:
            if needs_rset:
                try:
                    await smtp.rset(timeout=cmd)
                except SMTPResponseException as err:
                    raise Stale() from err
            if not email.recipients:
                raise Definite("no_recipients", "permanent", answered=True)
            utf8 = needs_smtputf8(email)
            if utf8 and not smtp.supports_extension("smtputf8"):
                raise Definite("smtputf8_not_offered", "permanent", answered=True)
            enc = "utf-8" if utf8 else "ascii"
            try:
                await smtp_paths.mail(smtp, email.from_, ["SMTPUTF8"] if utf8 else [], enc, cmd)
            except SMTPResponseException as err:
                if first_command and err.code == 421:  # the server timed the idle session out
                    raise Stale() from err
                raise _refused(err) from None
            first_command = False
            refused = await self._recipients(email, enc, cmd)
            response = await smtp.execute_command(b"DATA", timeout=cmd)
            if response.code != 354:
                raise Definite(reply_code(response.code, response.message),
                               reply_class(response.code), answered=True)
            protocol = await self._write_body(message, cmd)
        except (SMTPServerDisconnected, ConnectionError) as err:
            if first_command:
                raise Stale() from err
            raise Definite("connection_lost", "temporary",
                           unreachable=not self.rcpt_accepted) from None
        except (SMTPTimeoutError, TimeoutError):
            raise Definite("timeout", "temporary", unreachable=not self.rcpt_accepted) from None
        except (ValueError, UnicodeError):
            # aiosmtplib refuses an address with a control character or outside the encoding.
            raise Definite("invalid_envelope", "permanent") from None
        except SMTPException:  # a malformed reply, and the like: nothing of the body went
            raise Definite("invalid_reply", "temporary") from None
        except OSError:  # a TLS record error, say, on an encrypted session
            raise Definite("connection_lost", "temporary",
                           unreachable=not self.rcpt_accepted) from None
        # The final dot is written: from here only the server's reply is definite.
        try:
            final = await protocol.read_response(timeout=self._config.final_timeout_s)
        except (SMTPServerDisconnected, SMTPTimeoutError, ConnectionError, TimeoutError):
            self.smtp.close()
            return OutcomeUnknown(reason="no_final_reply")
        except (SMTPException, OSError):  # a reply that is not one: it may have been taken
            self.smtp.close()
            return OutcomeUnknown(reason="invalid_final_reply")
        if 200 <= final.code <= 299:
            self.clean = True
            queued = _QUEUED_AS.search(final.message)
            provider_id = queued.group(1) if queued else email.message_id_header
            return ProviderAccepted(provider_message_id=provider_id, refused=refused)
        if 400 <= final.code <= 599:
            self.clean = True
            return ProviderRejected(code=reply_code(final.code, final.message),
                                    klass=reply_class(final.code))
        self.smtp.close()  # a 1yz or 3yz to the dot is no answer to it
        return OutcomeUnknown(reason="invalid_final_reply")

    async def _recipients(self, email: OutboundEmail, enc: str,
                          cmd: float) -> list[RecipientRefusal]:
        refused: list[RecipientRefusal] = []
        recipients = email.recipients
        for index, address in enumerate(recipients):
            try:
                await smtp_paths.rcpt(self.smtp, address, enc, cmd)
                self.rcpt_accepted = True
            except SMTPRecipientRefused as err:
                refused.append(RecipientRefusal(index, reply_code(err.code, err.message),
                                                reply_class(err.code)))
        if len(refused) == len(recipients):
            # Nothing will be sent. A retry can help if any refusal was temporary; the code is
            # that of the first refusal of the class reported.
            temporary = [r for r in refused if r.klass == "temporary"]
            first = (temporary or refused)[0]
            raise Definite(first.code, first.klass, refused, answered=True)
        return refused

    async def _write_body(self, message: bytes, cmd: float) -> SMTPProtocol:
        """Dot-stuffed body in chunks, waiting for the socket between them, then the final dot.

        Losing the connection before the dot is written is a definite (temporary) rejection;
        the caller treats everything after this returns as possibly delivered.
        """
        protocol = self.smtp.protocol
        if protocol is None:
            raise SMTPServerDisconnected("connection lost")
        # Most messages have no line starting with a dot: two byte searches instead of the regex.
        dotted = message.startswith(b".") or b"\n." in message
        data = _LEADING_DOT.sub(b"..", message) if dotted else message
        if not data.endswith(b"\r\n"):
            data += b"\r\n"
        # aiosmtplib's protocol keeps the stdlib's flow-control helper; without it the body is
        # buffered whole and a loss during the body is reported as unknown (the safe side).
        drain = getattr(protocol, "_drain_helper", None)
        last = max(0, len(data) - _CHUNK)
        for start in range(0, last, _CHUNK):
            protocol.write(data[start:min(start + _CHUNK, last)])
            if drain is not None:
                with anyio.fail_after(cmd):
                    await drain()
        # The last chunk and the dot go in one write (as aiosmtplib's own DATA does: one system
        # call fewer per message); it raises when the connection is already gone: not sent.
        protocol.write(data[last:] + b".\r\n")
        return protocol


async def open_connection(config: SmtpConfig, local_hostname: str) -> SmtpConnection:
    """Connect, greet, EHLO (HELO if refused), STARTTLS and AUTH as configured.

    Raises ``Definite`` for every failure: nothing of any email was sent yet.
    """
    tls_context = None
    if config.tls != "none":
        tls_context = config.tls_context or await _system_context()
    smtp = SMTP(hostname=config.host, port=config.port, use_tls=config.tls == "tls",
                start_tls=False, tls_context=tls_context,
                timeout=config.command_s, local_hostname=local_hostname)
    try:
        await smtp.connect()
    except SMTPConnectResponseError as err:
        raise _refused(err) from None
    except ssl.SSLError:
        raise Definite("tls_failed", "temporary", unreachable=True) from None
    except socket.gaierror:
        raise Definite("dns_failed", "temporary", unreachable=True) from None
    except (SMTPConnectTimeoutError, TimeoutError):
        raise Definite("timeout", "temporary", unreachable=True) from None
    except SMTPConnectError as err:
        # aiosmtplib wraps the socket's error (a name that did not resolve says so there); one
        # without it is a server that answered with something that is no greeting: a rejection.
        cause = err.__cause__
        if isinstance(cause, OSError):
            failure = "dns_failed" if isinstance(cause, socket.gaierror) else "connect_failed"
            raise Definite(failure, "temporary", unreachable=True) from None
        raise Definite("connect_failed", "temporary") from None
    except SMTPException:
        raise Definite("connect_failed", "temporary") from None
    except OSError:
        raise Definite("connect_failed", "temporary", unreachable=True) from None
    try:
        await _greet(smtp)
        if config.tls == "starttls":
            if not smtp.supports_extension("starttls"):
                raise Definite("starttls_not_offered", "temporary")
            try:
                await smtp.starttls(tls_context=tls_context)
            except SMTPResponseException as err:
                raise _refused(err) from None
            except (ssl.SSLError, ssl.CertificateError):
                raise Definite("tls_failed", "temporary", unreachable=True) from None
            await _greet(smtp)  # RFC 3207 4.2: forget what was learnt before TLS
        if config.username is not None:
            try:
                await smtp.login(config.username, config.password or "")
            except SMTPResponseException as err:  # SMTPAuthenticationError among them
                raise _refused(err) from None
    except Definite:
        smtp.close()
        raise
    except (SMTPServerDisconnected, ConnectionError, OSError):
        smtp.close()
        raise Definite("connection_lost", "temporary", unreachable=True) from None
    except SMTPTimeoutError:
        smtp.close()
        raise Definite("timeout", "temporary", unreachable=True) from None
    except SMTPException:  # e.g. no AUTH mechanism in common with the server
        smtp.close()
        raise Definite("auth_not_offered", "temporary") from None
    except BaseException:
        smtp.close()
        raise
    return SmtpConnection(smtp, config)


_SYSTEM_CONTEXT: list[ssl.SSLContext] = []


async def _system_context() -> ssl.SSLContext:
    """The system trust store's client context, made once and off the event loop: loading the
    store takes about 40 ms, which every new connection (plain ones too) used to spend on the
    loop, holding up every request and send of the node meanwhile."""
    if not _SYSTEM_CONTEXT:
        context = await anyio.to_thread.run_sync(ssl.create_default_context)
        if not _SYSTEM_CONTEXT:
            _SYSTEM_CONTEXT.append(context)
    return _SYSTEM_CONTEXT[0]


async def _greet(smtp: SMTP) -> None:
    try:
        await smtp.ehlo()
    except SMTPResponseException as ehlo_err:
        if ehlo_err.code < 500:  # 421 and other temporary refusals: HELO would fare no better
            raise _refused(ehlo_err) from None
        try:
            await smtp.helo()
        except SMTPResponseException as err:
            raise _refused(err) from None
