"""One HTTP/1.1 connection of the node's server: parsing with httptools, limits, keep-alive and
pipelining, answers written in request order (the framing is ``server_framing``'s). Private to
``http.server``; it never routes.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from typing import Protocol, cast

import httptools
import msgspec

from mailbox_actors.http.server_framing import (
    HEADER_NAMES,
    METHODS,
    Answer,
    AppAnswer,
    Reject,
    Request,
    body_error,
    error_reply,
    extra_headers,
    header_error,
    message_cap,
    message_error,
    status_line,
)
from mailbox_actors.platform.logging import get_logger
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

__all__ = ["AppAnswer", "Connection", "ConnectionOwner", "HttpApp"]

_log = get_logger("mailbox_actors.http.server")
_encode = msgspec.json.Encoder().encode
_CLOSE = b"connection: close\r\n"

class HttpApp(Protocol):
    """The application: one call per request; header names arrive lower-cased.

    ``path`` is the raw request target (percent-encoding untouched, query included). Returns
    ``(status, body, content_type)``, or ``(status, body, content_type, headers)`` with extra
    response headers (``Allow`` on a 405). An exception is answered 500 ``internal_error`` and
    logged.
    """

    async def __call__(self, method: str, path: str, headers: Mapping[str, str],
                       body: bytes) -> AppAnswer: ...


class ConnectionOwner(Protocol):
    """What a connection needs of the server that accepted it: the application, the limits, and
    where it reports that it opened and that it is gone (the server's sweep and drain)."""

    handler: HttpApp
    max_body_bytes: int
    max_header_bytes: int
    request_timeout_s: float
    keepalive_timeout_s: float
    max_pipelined: int

    def opened(self, conn: Connection) -> None: ...

    def forget(self, conn: Connection) -> None: ...


class Connection(asyncio.Protocol):
    """One client connection: parses requests, runs them one at a time in order, writes replies."""

    def __init__(self, server: ConnectionOwner, loop: asyncio.AbstractEventLoop) -> None:
        self._server = server
        self._max_head = server.max_header_bytes
        self._loop = loop
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._queue: deque[Request | Answer] = deque()
        self._worker: asyncio.Task[None] | None = None
        self._closing = False          # no more requests are read; close after the queue drains
        self._lost = False
        self._lingering = False
        self._reading_paused = False
        self._drain: asyncio.Future[None] | None = None   # set while the transport's buffer is full
        self.deadline: float | None = None                 # monotonic; the sweeper closes us after it
        # the request being parsed
        self._url = b""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._body_len = 0
        self._head_len = 0
        self._head_size = 0
        self._in_head = False
        self._mid_body = False     # head done, body (or chunked trailers) still arriving
        self._msg_len = 0          # bytes fed since this request began (head, body, framing)
        # A request ended inside the current read: how many of its bytes were the next request's
        # is unknown, so that read is not counted (an undercount of at most one read).
        self._began_here = False

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop transports are not subclasses
        self._transport = transport
        self._server.opened(self)
        self.deadline = self._loop.time() + self._server.request_timeout_s

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._began_here = False
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # No upgrades here: answer what was asked, then close.
            self._closing = True
        except httptools.HttpParserCallbackError as exc:
            reject = exc.__context__
            if isinstance(reject, Reject):
                self._fail(reject.status, reject.error)
            else:  # a bug in a callback: never let it reach the event loop
                _log.error("http_parser_callback_failed", error=repr(reject))
                self._fail(400, MailboxActorsError(ErrorCode.INVALID_REQUEST,
                                                   "the request could not be parsed"))
        except httptools.HttpParserError as exc:
            self._fail(400, MailboxActorsError(
                ErrorCode.INVALID_REQUEST, "malformed HTTP/1.1 request",
                details={"reason": str(exc)[:200]},
                fix="Send a well-formed HTTP/1.1 request (RFC 9112)."))
        else:
            if (self._in_head or self._mid_body) and not self._began_here:
                # Cap what a request may make us buffer before it completes: an endless header
                # line, or endless chunk framing and trailers after a small body.
                self._msg_len += len(data)
                if self._in_head:
                    self._head_len += len(data)
                    if self._head_len > self._server.max_header_bytes:
                        self._fail(400, self._header_error())
                elif self._msg_len > self._message_cap():
                    self._fail(413, self._message_error())

    def eof_received(self) -> bool | None:
        # The client finished sending: answer what is queued, then close.
        self._closing = True
        if self._worker is None and not self._queue:
            self._close()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._closing = True
        self._queue.clear()
        self._server.forget(self)
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    def pause_writing(self) -> None:
        if self._drain is None or self._drain.done():
            self._drain = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    # httptools callbacks

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._body = []
        self._body_len = 0
        self._head_len = 0
        self._head_size = 0
        self._msg_len = 0
        self._in_head = True
        self.deadline = self._loop.time() + self._server.request_timeout_s

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value) + 4
        if len(self._url) + self._head_size > self._max_head:
            raise Reject(400, self._header_error())
        key = HEADER_NAMES.get(name) or name.decode("latin-1").lower()
        val = value.decode("latin-1")
        headers = self._headers
        if key in headers:
            headers[key] = f"{headers[key]}, {val}"
        else:
            headers[key] = val

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._mid_body = True
        if len(self._url) + self._head_size > self._server.max_header_bytes:
            raise Reject(400, self._header_error())
        length = self._headers.get("content-length")
        limit = self._server.max_body_bytes
        if length is not None and length.isdigit() and int(length) > limit:
            # Refuse before reading the body; the connection cannot be reused after this.
            raise Reject(413, self._body_error())
        if self._headers.get("expect", "").lower() == "100-continue" and self._worker is None \
                and not self._queue and self._transport is not None:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._body_len += len(body)
        if self._body_len > self._server.max_body_bytes:   # chunked bodies have no length up front
            raise Reject(413, self._body_error())
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._mid_body = False
        self._began_here = True   # a message ended inside this chunk: the next head's offset is unknown
        self.deadline = None
        raw = self._parser.get_method()
        method = METHODS.get(raw) or raw.decode("ascii", "replace")
        path = self._url.decode("latin-1")
        if not path.startswith("/"):
            raise Reject(400, MailboxActorsError(
                ErrorCode.INVALID_REQUEST, "the request target must be an absolute path",
                fix="Send the path in origin form, e.g. POST /rpc/{namespace}/{object_id}."))
        if "host" not in self._headers and self._parser.get_http_version() == "1.1":
            # RFC 9112 section 3.2: a server must answer 400 to an HTTP/1.1 request without Host.
            raise Reject(400, MailboxActorsError(
                ErrorCode.INVALID_REQUEST, "an HTTP/1.1 request must carry a Host header",
                fix="Send 'Host: <host>:<port>' (every HTTP/1.1 client does)."))
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        keep_alive = self._parser.should_keep_alive()
        if self._worker is None and not self._queue:  # _enqueue's common case, inline
            self._queue.append((method, path, self._headers, body, keep_alive))
            self._worker = self._loop.create_task(self._run_queue())
        else:
            self._enqueue((method, path, self._headers, body, keep_alive))
        if not keep_alive:
            self._closing = True

    # running requests in order

    def _header_error(self) -> MailboxActorsError:
        return header_error(self._server.max_header_bytes)

    def _message_cap(self) -> int:
        return message_cap(self._server.max_header_bytes, self._server.max_body_bytes)

    def _message_error(self) -> MailboxActorsError:
        return message_error(self._message_cap())

    def _body_error(self) -> MailboxActorsError:
        return body_error(self._server.max_body_bytes)

    def _fail(self, status: int, error: MailboxActorsError) -> None:
        """Answer a protocol error after the replies already owed, then close; read nothing more."""
        if self._closing:
            return
        self._closing = True
        self._in_head = False
        self._enqueue(Answer(status, error_reply(error)))

    def _enqueue(self, item: Request | Answer) -> None:
        self._queue.append(item)
        if self._worker is None:
            self._worker = self._loop.create_task(self._run_queue())
        elif len(self._queue) >= self._server.max_pipelined and not self._reading_paused:
            assert self._transport is not None
            self._transport.pause_reading()
            self._reading_paused = True

    async def _run_queue(self) -> None:
        transport = self._transport
        assert transport is not None
        try:
            while self._queue and not self._lost:
                item = self._queue.popleft()
                if self._reading_paused and len(self._queue) < self._server.max_pipelined // 2:
                    self._reading_paused = False
                    if not self._closing:
                        transport.resume_reading()
                if isinstance(item, Answer):
                    self._write(transport, item.status, item.body)
                    self._queue.clear()
                    self._linger(transport)
                    break
                method, path, headers, body, keep_alive = item
                try:  # the application's answer; written out below, in order
                    answer = await self._server.handler(method, path, headers, body)
                    status, body, ctype = answer[0], answer[1], answer[2]
                    line = status_line(status)
                    extra = extra_headers(answer[3]) if len(answer) == 4 else b""
                except Exception as exc:
                    status, body, ctype, extra = _failed(method, exc)
                    line = status_line(status)
                if self._lost:
                    break
                last = not keep_alive or (self._closing and not self._queue)
                head = b"%scontent-type: %s\r\ncontent-length: %d\r\n%s%s\r\n" % (
                    line, ctype.encode("latin-1"), len(body), extra, _CLOSE if last else b"")
                if method == "HEAD" or status in (204, 304):
                    transport.write(head)
                else:
                    transport.write(head + body)
                if last:
                    self._queue.clear()
                    break
                if self._drain is not None and not self._drain.done():
                    self.deadline = self._loop.time() + self._server.request_timeout_s
                    await self._drain
                    self.deadline = None
        finally:
            self._worker = None
        if self._lingering:
            return
        if self._closing:
            self._close()
        elif not self._queue and not self._in_head and not self._mid_body:
            self.deadline = self._loop.time() + self._server.keepalive_timeout_s

    def _write(self, transport: asyncio.Transport, status: int, body: bytes) -> None:
        """A reply the transport decided (a protocol error): JSON, then the connection closes."""
        transport.write(b"%scontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s"
                        % (status_line(status), len(body), _CLOSE, body))

    def _linger(self, transport: asyncio.Transport) -> None:
        """Half-close after an error reply and drain what the client still sends, for a while.

        Closing a socket with unread input makes the kernel send a reset, which can destroy the
        reply before the client reads it (a 413 sent while the body is still arriving).
        """
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self._lingering = True
        if self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()
        self.deadline = self._loop.time() + min(self._server.request_timeout_s, 2.0)

    def _close(self) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.close()

    def expire(self) -> None:
        """The sweeper found this connection past its deadline (slow client or idle keep-alive)."""
        transport = self._transport
        self._closing = True
        self.deadline = None
        if transport is None or transport.is_closing():
            return
        if transport.get_write_buffer_size():
            transport.abort()   # the client is not reading either: do not wait for it
        else:
            transport.close()

    def shutdown(self) -> None:
        """Stop reading; idle connections close now, busy ones after their current reply."""
        self._closing = True
        if self._worker is None:
            self._close()


def _failed(method: str, exc: Exception) -> tuple[int, bytes, str, bytes]:
    """An exception in the application: logged, answered 500 ``internal_error`` (no trace)."""
    _log.error("http_handler_failed", method=method, error=repr(exc)[:300])
    err = MailboxActorsError(ErrorCode.INTERNAL_ERROR, "the request failed inside the node")
    return 500, error_reply(err), "application/json", b""
