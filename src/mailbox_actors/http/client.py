"""A keep-alive HTTP/1.1 connection pool for calls between host services and nodes.

Owns sockets, request framing and response parsing (httptools) only: no retries, no envelopes, no
error-body decoding (the RPC client above it decides those). Every failure to get an answer is raised
as an ``HttpTransportError`` (a ``ConnectionError``) that says whether the request may have reached
the server, so the caller can map it to ``unavailable`` and retry only where that is safe.
Runs on asyncio (plain or under anyio); a pool belongs to the event loop it first ran on. One
connection and the request framing are ``client_connection``'s; the errors ``client_errors``'.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from collections.abc import Mapping
from urllib.parse import urlsplit

from mailbox_actors.http.client_connection import ClientConnection, expire, request_head
from mailbox_actors.http.client_errors import (
    HttpConnectError,
    HttpConnectionLost,
    HttpProtocolError,
    HttpTimeout,
    HttpTlsError,
    HttpTransportError,
)

__all__ = [
    "HttpConnectError",
    "HttpConnectionLost",
    "HttpPool",
    "HttpProtocolError",
    "HttpTimeout",
    "HttpTlsError",
    "HttpTransportError",
]


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _idna(text: str) -> bytes:
    """``text.encode("idna")``: an ASCII name (every IP address, most host names) is the codec's
    own fast path, taken here without importing the codec (and unicodedata and stringprep with
    it) into every command that calls a node; anything else goes to the codec."""
    if text.isascii():
        labels = text.split(".")
        if all(0 < len(label) < 64 for label in labels[:-1]) and len(labels[-1]) < 64:
            return text.encode("ascii")
    return text.encode("idna")


class _Host:
    """The connections to one base URL."""

    __slots__ = ("base_url", "host", "hostport", "idle", "port", "size", "tls", "waiters")

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
            raise ValueError(f"base_url must be http(s)://host[:port], got {base_url!r}")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError(f"base_url must have no path, query or fragment: {base_url!r}")
        self.base_url = base_url
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        default_port = _DEFAULT_PORTS[parts.scheme]
        self.port = parts.port or default_port
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.hostport = _idna(host if self.port == default_port else f"{host}:{self.port}")
        self.idle: list[ClientConnection] = []
        self.size = 0           # open or opening connections, idle or not
        self.waiters: deque[asyncio.Future[None]] = deque()


class HttpPool:
    """Keep-alive HTTP/1.1 connections to a set of base URLs (``http://host:port``, or ``https://``
    verified against ``ssl_context``, by default the system's trusted CAs).

    At most ``max_per_host`` connections per base URL; callers beyond that wait for one to come
    free (inside their ``timeout_s``). Idle connections are dropped after ``idle_timeout_s``, which
    must stay below the server's keep-alive timeout so a request is never sent on a connection the
    server is closing.
    """

    def __init__(self, *, max_per_host: int = 64, connect_timeout_s: float = 5.0,
                 idle_timeout_s: float = 30.0, max_response_bytes: int = 16 * 1024 * 1024,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        if max_per_host < 1:
            raise ValueError("max_per_host must be >= 1")
        # For https base URLs; None: the system's trusted CAs, made on first use.
        self._ssl = ssl_context
        self.max_per_host = max_per_host
        self.connect_timeout_s = connect_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_response_bytes = max_response_bytes
        self._hosts: dict[str, _Host] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._busy: set[ClientConnection] = set()
        self._sweeper: asyncio.Task[None] | None = None

    async def request(self, base_url: str, method: str, path: str,
                      headers: Mapping[str, str] | None, body: bytes,
                      timeout_s: float) -> tuple[int, bytes]:
        """Send one request and return ``(status, body)``; raise ``HttpTransportError`` otherwise.

        ``path`` is sent as given (origin form); ``Host`` and ``Content-Length`` are set here.
        """
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None:
                raise RuntimeError("HttpPool is bound to another event loop")
            self._loop = loop
        if self._closed:
            raise RuntimeError("HttpPool is closed")
        host = self._hosts.get(base_url)
        if host is None:
            host = self._hosts[base_url] = _Host(base_url)
        head = request_head(method, path, host.hostport, headers, len(body))
        deadline = loop.time() + timeout_s
        if self._sweeper is None:
            self._sweeper = loop.create_task(self._sweep())
        conn: ClientConnection | None = None
        idle = host.idle
        while idle:   # the common case, without an extra coroutine
            conn = idle.pop()
            if not conn.closed and conn.keep and deadline - timeout_s - conn.last_used \
                    < self.idle_timeout_s:
                break
            conn.abort()
            host.size -= 1
            conn = None
        if conn is None:
            conn = await self._acquire(loop, host, deadline)
        fut: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        conn.fut = fut
        conn.deadline = deadline
        self._busy.add(conn)
        transport = conn.transport
        assert transport is not None
        ok = False
        try:
            if len(body) < 65536:
                transport.write(head + body)
            else:
                transport.write(head)
                transport.write(body)
            status, data = await fut
            ok = True
            return status, data
        except HttpTransportError as exc:
            exc.base_url = base_url
            raise
        finally:
            self._busy.discard(conn)
            self._release(loop, host, conn, ok)

    async def _sweep(self) -> None:
        """Fail requests past their deadline; one shared tick instead of a timer per request."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(_SWEEP_S)
            now = loop.time()
            for conn in [c for c in self._busy if c.deadline <= now]:
                expire(conn)

    async def _acquire(self, loop: asyncio.AbstractEventLoop, host: _Host,
                       deadline: float) -> ClientConnection:
        while True:
            now = loop.time()
            while host.idle:
                conn = host.idle.pop()
                if not conn.closed and conn.keep and now - conn.last_used < self.idle_timeout_s:
                    return conn
                conn.abort()
                host.size -= 1
            if host.size < self.max_per_host:
                host.size += 1
                try:
                    return await self._connect(loop, host, deadline)
                except BaseException:
                    host.size -= 1
                    self._wake(host)
                    raise
            if now >= deadline:
                raise HttpTimeout("no connection came free in time", base_url=host.base_url,
                                  request_sent=False)
            waiter: asyncio.Future[None] = loop.create_future()
            host.waiters.append(waiter)
            turn_taken = False
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
                turn_taken = True
            except TimeoutError:
                raise HttpTimeout("no connection came free in time", base_url=host.base_url,
                                  request_sent=False) from None
            finally:
                if not waiter.done():
                    waiter.cancel()
                    with contextlib.suppress(ValueError):
                        host.waiters.remove(waiter)
                elif not turn_taken and not waiter.cancelled() and waiter.exception() is None:
                    # Woken, but leaving anyway (timeout or cancellation): pass the turn on.
                    self._wake(host)

    async def _connect(self, loop: asyncio.AbstractEventLoop, host: _Host,
                       deadline: float) -> ClientConnection:
        limit = self.max_response_bytes
        tls: ssl.SSLContext | None = None
        if host.tls:
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            tls = self._ssl
        try:
            async with asyncio.timeout_at(min(deadline, loop.time() + self.connect_timeout_s)):
                _, conn = await loop.create_connection(
                    lambda: ClientConnection(limit), host.host, host.port, ssl=tls,
                    server_hostname=host.host if tls is not None else None)
        except TimeoutError:
            raise HttpTimeout("connect timed out", base_url=host.base_url,
                              request_sent=False) from None
        except ssl.SSLCertVerificationError as exc:
            raise HttpTlsError(f"TLS certificate not accepted: {exc.verify_message}",
                               base_url=host.base_url, certificate=True) from exc
        except ssl.SSLError as exc:
            raise HttpTlsError(f"TLS handshake failed: {exc.reason or exc}",
                               base_url=host.base_url, certificate=False) from exc
        except OSError as exc:
            raise HttpConnectError(f"cannot connect: {exc.strerror or exc}",
                                   base_url=host.base_url, request_sent=False) from exc
        return conn

    def _release(self, loop: asyncio.AbstractEventLoop, host: _Host, conn: ClientConnection,
                 ok: bool) -> None:
        conn.fut = None
        if ok and conn.keep and not conn.closed and not self._closed:
            conn.used += 1
            conn.last_used = loop.time()
            host.idle.append(conn)
        else:   # unknown state (timeout, cancellation, error) or the server is closing it
            conn.abort()
            host.size -= 1
        if host.waiters:
            self._wake(host)

    @staticmethod
    def _wake(host: _Host) -> None:
        while host.waiters:
            waiter = host.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def aclose(self) -> None:
        """Close every idle connection; connections in use close when their request ends."""
        self._closed = True
        for host in self._hosts.values():
            for conn in host.idle:
                conn.abort()
            host.size -= len(host.idle)
            host.idle.clear()
            while host.waiters:   # callers waiting for a connection: fail, do not cancel them
                waiter = host.waiters.popleft()
                if not waiter.done():
                    waiter.set_exception(HttpConnectError(
                        "the pool was closed", base_url=host.base_url, request_sent=False))
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
        await asyncio.sleep(0)   # let the transports run connection_lost

    async def __aenter__(self) -> HttpPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


_SWEEP_S = 0.02   # how late a timeout may fire; a shared tick is cheaper than a timer per call
