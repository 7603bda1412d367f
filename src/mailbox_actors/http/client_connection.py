"""One pooled client connection (an asyncio protocol with an httptools response parser) and the
framing of the requests it sends; the pool that owns connections is ``client``'s."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import cast

import httptools

from mailbox_actors.http.client_errors import (
    HttpConnectionLost,
    HttpProtocolError,
    HttpTimeout,
    HttpTransportError,
)

__all__ = ["ClientConnection", "expire", "header_block", "request_head"]


class ClientConnection(asyncio.Protocol):
    """One keep-alive connection: at most one request in flight."""

    __slots__ = ("_body", "_framed", "_max_body", "_parser", "_size", "closed", "deadline", "fut",
                 "keep", "last_used", "transport", "used")

    def __init__(self, max_body: int) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._max_body = max_body
        self._body: list[bytes] = []
        self._size = 0
        self._framed = True
        self.transport: asyncio.Transport | None = None
        self.fut: asyncio.Future[tuple[int, bytes]] | None = None
        self.closed = False
        self.keep = True
        self.used = 0
        self.last_used = 0.0
        self.deadline = 0.0

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop transports are not subclasses
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.fut is None:   # nothing asked: a server talking out of turn cannot be trusted
            self.abort()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(HttpProtocolError, f"malformed HTTP response: {exc}")
        except httptools.HttpParserUpgrade:
            self._fail(HttpProtocolError, "unexpected protocol upgrade")

    def eof_received(self) -> bool | None:
        self.keep = False
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self._framed and exc is None and self.fut is not None:  # body ends at close
            self._framed = True
            self.on_message_complete()
        why = f": {exc}" if exc else ""
        self._fail(HttpConnectionLost, f"connection closed before the answer{why}")

    # httptools callbacks

    def on_message_begin(self) -> None:
        self._body = []
        self._size = 0
        self._framed = False

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self._framed = True

    # No on_headers_complete: a 1xx, 204 or 304 answer has no body, so llhttp completes it (and
    # on_message_complete marks it framed) within the same feed_data that ends its head.

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > self._max_body:
            raise ValueError("response body over the cap")
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._framed = True
        if 100 <= self._parser.get_status_code() < 200:   # interim answer: wait for the final one
            self._body = []
            return
        fut, self.fut = self.fut, None
        if not self._parser.should_keep_alive():
            self.keep = False
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self._body = []
        if fut is not None and not fut.done():
            fut.set_result((self._parser.get_status_code(), body))

    # pool side

    def _fail(self, kind: type[HttpTransportError], message: str) -> None:
        fut, self.fut = self.fut, None
        self.keep = False
        if fut is not None and not fut.done():
            fut.set_exception(kind(message, base_url="", request_sent=True))
        self.abort()

    def abort(self) -> None:
        self.keep = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()


def expire(conn: ClientConnection) -> None:
    fut, conn.fut = conn.fut, None
    if fut is not None and not fut.done():
        fut.set_exception(HttpTimeout("no answer before the timeout", base_url="",
                                      request_sent=True))
    conn.abort()


_header_blocks: dict[tuple[tuple[str, str], ...], bytes] = {}


def header_block(headers: Mapping[str, str]) -> bytes:
    """The encoded header lines, cached: callers send the same few header sets again and again."""
    key = tuple(headers.items())
    block = _header_blocks.get(key)
    if block is None:
        block = "".join(f"{name}: {value}\r\n" for name, value in key).encode("latin-1")
        # A CR or LF inside a name or value would split it into extra headers (injection).
        if block.count(b"\n") != len(key) or block.count(b"\r") != len(key) or any(
                not name or ":" in name or " " in name for name, _ in key):
            raise ValueError("a header name or value contains CR, LF or is malformed")
        if len(_header_blocks) >= 256:
            _header_blocks.clear()
        _header_blocks[key] = block
    return block


_heads: dict[tuple[str, str, bytes, bytes], bytes] = {}


def request_head(method: str, path: str, hostport: bytes, headers: Mapping[str, str] | None,
                 length: int) -> bytes:
    block = header_block(headers) if headers else b""
    key = (method, path, hostport, block)
    head = _heads.get(key)
    if head is None:  # checked once per method, path, host and headers: the same few recur
        if not path.startswith("/") or "\r" in path or "\n" in path or " " in path:
            raise ValueError("path must start with '/' and hold no space, CR or LF")
        if not method.isalpha() or method == "HEAD":
            # HEAD is refused: its answer carries a Content-Length but no body, which this
            # parser cannot be told about.
            raise ValueError("method must be a token other than HEAD")
        head = b"%s %s HTTP/1.1\r\nhost: %s\r\n%scontent-length: " % (
            method.encode("ascii"), path.encode("latin-1"), hostport, block)
        if len(_heads) >= 1024:
            _heads.clear()
        _heads[key] = head
    return b"%s%d\r\n\r\n" % (head, length)
