"""``SmtpSink``: a real SMTP server (aiosmtpd) on loopback that records mail and follows a script.

For tests of SMTP transports (CA-8, CA-11), ``make run`` and the benchmark. Each mail transaction
(MAIL FROM to the final reply) takes the next queued ``SinkStep``, which can refuse MAIL, single
RCPTs or DATA, drop the connection at DATA, inside the body or after the final dot, answer the dot
with a refusal, or hold the final reply until the test releases it. Session-wide refusals (the
greeting, EHLO, STARTTLS) and AUTH are constructor options. ``async with SmtpSink() as sink:``.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any, Literal, cast

import anyio
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from mailbox_actors.testing.held_replies import HeldReplies

__all__ = ["Received", "SinkStep", "SmtpSink"]

Drop = Literal["at_data", "in_body", "after_dot"]


@dataclass(frozen=True)
class SinkStep:
    """What the sink does with one mail transaction; every field None is a plain acceptance."""

    mail: str | None = None  # reply to MAIL FROM instead of 250, e.g. "550 5.7.1 Not allowed"
    rcpt: dict[int, str] = field(default_factory=dict)  # by position in this transaction
    data: str | None = None  # reply to DATA instead of 354
    drop: Drop | None = None  # close the connection: at DATA, after the first body line, after dot
    final: str | None = None  # reply to the final dot instead of "250 2.0.0 Ok: queued as ..."
    hold: bool = False  # keep the final reply back until ``SmtpSink.release``


@dataclass(frozen=True)
class Received:
    """One message as the sink got it (after the final dot)."""

    mail_from: str
    rcpt_tos: list[str]
    data: bytes
    connection: int  # which connection (1, 2, ...) carried it
    queue_id: str

    @property
    def message(self) -> EmailMessage:
        parsed = message_from_bytes(self.data, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed


class SmtpSink:
    """An aiosmtpd server on ``host``:``port`` (0: a free port) in the running event loop."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0,
                 tls_context: ssl.SSLContext | None = None, implicit_tls: bool = False,
                 users: dict[str, str] | None = None, greeting: str | None = None,
                 ehlo: str | None = None, starttls: str | None = None,
                 default: SinkStep | None = None, keep_messages: bool = True) -> None:
        self.host = host
        self.port = port
        self.tls_context = tls_context  # offered as STARTTLS, or spoken at once if implicit_tls
        self.implicit_tls = implicit_tls
        self.users = users  # AUTH accounts (login -> password); None: no AUTH offered
        self.greeting = greeting  # a refusal sent instead of the 220 greeting, then close
        self.ehlo = ehlo  # a refusal of EHLO and HELO
        self.starttls = starttls  # a refusal of STARTTLS
        self.default = default or SinkStep()
        self.keep_messages = keep_messages
        self.messages: list[Received] = []
        self.accepted = 0  # messages answered 250 (counted even when not kept)
        self.connections = 0
        self.transactions = 0  # bodies that reached the final dot
        self.auth_logins: list[str] = []
        self._steps: deque[SinkStep] = deque()
        self._server: asyncio.Server | None = None
        self._holds = HeldReplies()

    def queue(self, *steps: SinkStep) -> None:
        """Script the next transactions, after those already queued; then ``default`` applies."""
        self._steps.extend(steps)

    def release(self) -> None:
        """Let every held final reply go; later holds wait for the next release."""
        self._holds.release()

    async def wait_held(self, n: int = 1) -> None:
        """Return once ``n`` final replies are being held (the body and dot have arrived)."""
        await self._holds.wait_held(n)

    def drop_idle(self) -> None:
        """Close every open session (as a server's idle timeout does)."""
        for proto in list(self._sessions):
            if proto.transport is not None:
                proto.transport.close()

    async def start(self) -> SmtpSink:
        loop = asyncio.get_running_loop()
        self._sessions: set[_SinkSmtp] = set()
        self._server = await loop.create_server(
            self._make_session, self.host, self.port,
            ssl=self.tls_context if self.implicit_tls else None)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for proto in list(self._sessions):
            if proto.transport is not None:
                cast(asyncio.Transport, proto.transport).abort()
        self.release()
        await self._server.wait_closed()
        self._server = None

    async def __aenter__(self) -> SmtpSink:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- for the sessions --

    def _make_session(self) -> _SinkSmtp:
        self.connections += 1
        starttls_ctx = None if self.implicit_tls else self.tls_context
        proto = _SinkSmtp(self, self.connections, _Handler(self), tls_context=starttls_ctx,
                          authenticator=self._authenticate if self.users is not None else None,
                          auth_require_tls=starttls_ctx is not None,
                          hostname="sink.localhost", loop=asyncio.get_running_loop())
        self._sessions.add(proto)
        return proto

    def _next_step(self) -> SinkStep:
        return self._steps.popleft() if self._steps else self.default

    def _authenticate(self, server: SMTP, session: Session, envelope: Envelope,
                      mechanism: str, auth_data: Any) -> AuthResult:
        if isinstance(auth_data, LoginPassword) and self.users is not None:
            login = auth_data.login.decode("utf-8", "replace")
            if self.users.get(login) == auth_data.password.decode("utf-8", "replace"):
                self.auth_logins.append(login)
                return AuthResult(success=True)
        return AuthResult(success=False, handled=False)

    async def _hold(self) -> None:
        await self._holds.hold()


class _SinkSmtp(SMTP):
    """aiosmtpd's session with the sink's session-wide refusals and DATA-phase scripting."""

    def __init__(self, sink: SmtpSink, number: int, handler: _Handler, **kw: Any) -> None:
        super().__init__(handler, **kw)
        self.sink = sink
        self.number = number
        self.step = sink.default
        self.rcpt_seen = 0

    def connection_lost(self, error: Exception | None) -> None:
        self.sink._sessions.discard(self)
        super().connection_lost(error)

    async def _handle_client(self) -> None:
        if self.sink.greeting is not None:
            await self.push(self.sink.greeting)
            assert self.transport is not None
            self.transport.close()
            return
        await super()._handle_client()

    async def smtp_EHLO(self, hostname: str) -> None:
        if self.sink.ehlo is not None:
            await self.push(self.sink.ehlo)
            return
        await super().smtp_EHLO(hostname)

    async def smtp_HELO(self, hostname: str) -> None:
        if self.sink.ehlo is not None:
            await self.push(self.sink.ehlo)
            return
        await super().smtp_HELO(hostname)

    async def smtp_STARTTLS(self, arg: str) -> None:
        if self.sink.starttls is not None:
            await self.push(self.sink.starttls)
            return
        await super().smtp_STARTTLS(arg)

    async def smtp_DATA(self, arg: str) -> None:
        step = self.step
        if self.envelope is not None and self.envelope.rcpt_tos:
            if step.drop == "at_data":
                await self._abort()
            if step.data is not None:
                await self.push(step.data)
                return
            if step.drop == "in_body":
                await self.push("354 End data with <CR><LF>.<CR><LF>")
                await self._reader.readuntil(b"\r\n")
                await self._abort()  # unread body left behind: the client's writes fail
        await super().smtp_DATA(arg)

    async def _abort(self) -> None:
        assert self.transport is not None
        cast(asyncio.Transport, self.transport).abort()
        await anyio.sleep_forever()  # connection_lost cancels this session's task


class _Handler:
    """aiosmtpd handler hooks: the per-transaction script and the recording."""

    def __init__(self, sink: SmtpSink) -> None:
        self.sink = sink

    async def handle_EHLO(self, server: _SinkSmtp, session: Session, envelope: Envelope,
                          hostname: str, responses: list[str]) -> list[str]:
        session.host_name = hostname  # what aiosmtpd does itself when there is no hook
        if self.sink.users is None:  # no accounts: AUTH is not offered at all
            responses = [r for r in responses if not r[4:].upper().startswith("AUTH")]
        return responses

    async def handle_MAIL(self, server: _SinkSmtp, session: Session, envelope: Envelope,
                          address: str, mail_options: list[str]) -> str:
        server.step = self.sink._next_step()
        server.rcpt_seen = 0
        if server.step.mail is not None:
            return server.step.mail
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 2.1.0 Ok"

    async def handle_RCPT(self, server: _SinkSmtp, session: Session, envelope: Envelope,
                          address: str, rcpt_options: list[str]) -> str:
        position = server.rcpt_seen
        server.rcpt_seen += 1
        refusal = server.step.rcpt.get(position)
        if refusal is not None:
            return refusal
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 Ok"

    async def handle_DATA(self, server: _SinkSmtp, session: Session, envelope: Envelope) -> str:
        step = server.step
        sink = self.sink
        raw = envelope.original_content or b""
        sink.transactions += 1
        queue_id = f"Q{sink.transactions:06d}"
        received = Received(mail_from=str(envelope.mail_from),
                            rcpt_tos=list(envelope.rcpt_tos), data=bytes(raw),
                            connection=server.number, queue_id=queue_id)
        if step.final is None or step.final.startswith("2"):
            # The server has the whole message from here on: it counts as received even when
            # no reply makes it back (the case a client must treat as outcome unknown).
            if sink.keep_messages:
                sink.messages.append(received)
            sink.accepted += 1
        if step.drop == "after_dot":
            await server._abort()
        if step.hold:
            await sink._hold()
        return step.final or f"250 2.0.0 Ok: queued as {queue_id}"


async def _serve_forever() -> None:
    """``python -m mailbox_actors.testing.smtp``: a sink that counts and keeps no messages, for the
    benchmark and for trying a node's SMTP transport by hand; prints ``port N``, runs until
    killed."""
    async with SmtpSink(keep_messages=False) as sink:
        print(f"port {sink.port}", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(_serve_forever, backend="asyncio")
