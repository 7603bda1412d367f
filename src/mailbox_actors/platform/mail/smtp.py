"""``SmtpTransport``: relays an ``OutboundEmail`` to one SMTP server on aiosmtplib (CA-8, CA-11).

Connections are pooled (at most ``pool_size`` at once) and reused across sends; a connection the
server closed while idle is found at its first command, before anything of the email was sent,
and replaced by a fresh one. A transaction that did not end with a final reply leaves its
connection closed; one that ended with a refusal is RSET before its next use (a completed DATA
already resets the session, RFC 5321 4.1.1.4, so a clean connection goes straight to MAIL).
How each phase's failures map to outcomes is ``smtp_client_session``'s.
"""

from __future__ import annotations

import asyncio
import socket

import anyio

from mailbox_actors.platform.clock import Clock, SystemClock
from mailbox_actors.platform.mail.mime import build_message
from mailbox_actors.platform.mail.smtp_client_session import (
    Definite,
    SmtpConfig,
    SmtpConnection,
    Stale,
    open_connection,
)
from mailbox_actors.platform.mail.transport import TransportClosed
from mailbox_actors.wire.transport import OutboundEmail, ProviderRejected, TransportOutcome

__all__ = ["SmtpConfig", "SmtpTransport"]


class SmtpTransport:
    """A ``Transport`` speaking SMTP to ``config.host``; ``aclose`` ends its connections."""

    def __init__(self, config: SmtpConfig, *, clock: Clock | None = None) -> None:
        """``clock``: where the Date header's time comes from (the node's Clock; a FakeClock
        gives byte-identical messages)."""
        if config.pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        self.config = config
        self._clock: Clock = clock or SystemClock()
        # asyncio's: a free slot is taken without a turn of the event loop (anyio's takes one
        # at every acquire, a checkpoint a send).
        self._slots = asyncio.Semaphore(config.pool_size)
        self._idle: list[SmtpConnection] = []
        self._local_hostname = config.local_hostname
        self._closed = False
        self.connections_opened = 0  # for tests and the benchmark: how often a session began

    @property
    def slots(self) -> int:
        """Emails sent at once (one a connection); a dispatcher with more in flight has the rest
        waiting here, and may let their outcomes share a commit."""
        return self.config.pool_size

    async def send(self, email: OutboundEmail) -> TransportOutcome:
        if self._closed:
            raise TransportClosed("SmtpTransport.send after aclose")
        try:
            message = build_message(email, date_s=self._clock.now_ms() // 1000)
        except (ValueError, TypeError, UnicodeError):
            # The email package refuses the message (a header with CR or LF, say): no server
            # would take it either, so it is refused for good before any connection.
            return ProviderRejected(code="invalid_message", klass="permanent")
        async with self._slots:
            try:
                return await self._send_once(email, message)
            except Definite as definite:
                return definite.outcome

    async def _send_once(self, email: OutboundEmail, message: bytes) -> TransportOutcome:
        # Idle connections may all have been closed by the server; each stale one is dropped and
        # the next tried, then a fresh connection (whose failures are definite rejections).
        while True:
            conn = self._idle.pop() if self._idle else await self._open()
            try:
                outcome = await conn.transact(email, message)
            except Stale:
                continue
            if conn.usable and not self._closed:
                conn.reused = True
                self._idle.append(conn)
            else:
                conn.close()
            return outcome

    async def _open(self) -> SmtpConnection:
        if self._local_hostname is None:
            # getfqdn may ask the resolver: once, off the event loop.
            self._local_hostname = await anyio.to_thread.run_sync(socket.getfqdn)
        conn = await open_connection(self.config, self._local_hostname)
        self.connections_opened += 1
        return conn

    async def aclose(self) -> None:
        """QUIT every idle connection; sends still running close theirs when they end."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.quit()
