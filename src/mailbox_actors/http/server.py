"""The node's HTTP/1.1 server: framing, keep-alive, pipelining and limits; the application is injected.

Chosen by measurement (docs/adr/0003): an ``asyncio.Protocol`` with httptools (llhttp) parsing. It owns
the wire rules only (body and header caps, slow-client and idle timeouts, 400 on malformed input,
``Connection: close``); routing, tokens and envelopes belong to the injected ``HttpApp``. It must
never crash on what a client sends, and never show a caller a stack trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from ssl import SSLContext
from typing import Any

from mailbox_actors.http._connection import AppAnswer, Connection, HttpApp

__all__ = ["AppAnswer", "HttpApp", "RpcHttpServer", "loop_backend_options"]


def loop_backend_options(prefer_uvloop: bool = True) -> dict[str, Any]:
    """``backend_options`` for ``anyio.run``: uvloop's loop when it is importable, else plain asyncio."""
    if prefer_uvloop:
        try:
            import uvloop
        except ImportError:
            return {}
        return {"loop_factory": uvloop.new_event_loop}
    return {}


def _bound_socket(host: str, port: int) -> socket.socket | None:
    """For an IP address, the socket ``create_server`` would make for it, bound (address reuse on;
    an IPv6 one takes IPv6 only), and the same error when the address is taken; None for a name.
    Given the socket, the loop asks no resolver: uvloop would start libuv's four resolver threads
    and import the IDNA codec to read an address that is already one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        address = socket.inet_ntop(family, socket.inet_pton(family, host))
    except (OSError, ValueError):  # a name (or an address with a scope): the loop resolves it
        return None
    sockaddr: tuple[Any, ...] = (address, port) if family == socket.AF_INET else (address, port, 0, 0)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            sock.bind(sockaddr)
        except OSError as e:  # as asyncio and uvloop say it
            raise OSError(e.errno, f"error while attempting to bind on address {sockaddr!r}: "
                                   f"{(e.strerror or str(e)).lower()}") from None
    except BaseException:
        sock.close()
        raise
    return sock


class RpcHttpServer:
    """An HTTP/1.1 server with keep-alive and pipelining whose application is injected.

    ``start(host, port)`` binds (port 0 picks a free one) and returns the port; ``stop()`` stops
    accepting, lets in-flight requests finish for ``grace_s``, then closes every connection.
    A request head or body must arrive within ``request_timeout_s`` of its first byte (and a new
    connection must send within that time); an idle keep-alive connection closes after
    ``keepalive_timeout_s``. Deadlines are checked by a sweep a few times per timeout, so a close can
    come up to a quarter of the timeout late.
    """

    def __init__(self, handler: HttpApp, *, max_body_bytes: int = 1024 * 1024,
                 max_header_bytes: int = 16 * 1024, request_timeout_s: float = 10.0,
                 keepalive_timeout_s: float = 75.0, max_pipelined: int = 32,
                 backlog: int = 1024) -> None:
        if max_body_bytes < 0 or max_header_bytes < 256 or max_pipelined < 2:
            raise ValueError("max_body_bytes >= 0, max_header_bytes >= 256, max_pipelined >= 2")
        if request_timeout_s <= 0 or keepalive_timeout_s <= 0:
            raise ValueError("timeouts must be positive")
        self.handler = handler
        self.max_body_bytes = max_body_bytes
        self.max_header_bytes = max_header_bytes
        self.request_timeout_s = request_timeout_s
        self.keepalive_timeout_s = keepalive_timeout_s
        self.max_pipelined = max_pipelined
        self._backlog = backlog
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._connections: set[Connection] = set()
        self._drained: asyncio.Event | None = None
        self._idle_waiters: list[asyncio.Event] = []
        self.port: int | None = None

    def _loop_or_raise(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("RpcHttpServer is not started")
        return self._loop

    async def start(self, host: str = "127.0.0.1", port: int = 0, *,
                    ssl: SSLContext | None = None) -> int:
        """Listen; the bound port. ``ssl``: serve HTTPS (a webhook receiver; nodes serve HTTP)."""
        if self._server is not None:
            raise RuntimeError("RpcHttpServer already started")
        self._loop = asyncio.get_running_loop()
        loop = self._loop
        sock = _bound_socket(host, port)
        if sock is not None:
            self._server = await loop.create_server(
                lambda: Connection(self, loop), sock=sock, backlog=self._backlog, ssl=ssl)
        else:
            self._server = await loop.create_server(
                lambda: Connection(self, loop), host, port, backlog=self._backlog,
                reuse_address=True, ssl=ssl)
        self.port = int(self._server.sockets[0].getsockname()[1])
        self._sweeper = self._loop.create_task(self._sweep())
        return self.port

    async def _sweep(self) -> None:
        loop = self._loop_or_raise()
        tick = min(max(min(self.request_timeout_s, self.keepalive_timeout_s) / 4, 0.005), 1.0)
        while True:
            await asyncio.sleep(tick)
            now = loop.time()
            for conn in [c for c in self._connections if c.deadline is not None
                         and c.deadline <= now]:
                conn.expire()

    def opened(self, conn: Connection) -> None:
        self._connections.add(conn)

    def forget(self, conn: Connection) -> None:
        self._connections.discard(conn)
        if not self._connections:
            if self._drained is not None:
                self._drained.set()
            for idle in self._idle_waiters:
                idle.set()
            self._idle_waiters.clear()

    async def wait_idle(self) -> None:
        """Return once no connection is open: every client has gone or was timed out."""
        if self._connections:
            idle = asyncio.Event()
            self._idle_waiters.append(idle)
            await idle.wait()

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def stop(self, grace_s: float = 5.0) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        for conn in list(self._connections):
            conn.shutdown()
        if self._connections:
            self._drained = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained.wait(), grace_s)
        workers = []
        for conn in list(self._connections):
            if conn._transport is not None:
                conn._transport.abort()
            if conn._worker is not None:
                conn._worker.cancel()
                workers.append(conn._worker)
        await asyncio.gather(*workers, return_exceptions=True)
        await server.wait_closed()
        self._connections.clear()
