"""What the node's HTTP server puts on the wire and takes off it: status lines, extra response
headers (checked so none can split the head), error bodies, and the parsed request and the answer
each connection queues in order. The connection itself is ``_connection``'s."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

__all__ = ["HEADER_NAMES", "METHODS", "AppAnswer", "Answer", "Reject", "Request", "body_error",
           "error_reply", "extra_headers", "header_error", "message_cap", "message_error",
           "status_line"]

_encode = msgspec.json.Encoder().encode

_REASONS = {200: b"OK", 204: b"No Content", 400: b"Bad Request", 401: b"Unauthorized",
            403: b"Forbidden", 404: b"Not Found", 405: b"Method Not Allowed", 409: b"Conflict",
            413: b"Content Too Large", 429: b"Too Many Requests",
            500: b"Internal Server Error", 502: b"Bad Gateway", 503: b"Service Unavailable",
            504: b"Gateway Timeout"}
_STATUS_LINES: dict[int, bytes] = {}

# The names of the headers clients send on every request, as they send them, to their lower-case
# text: one lookup instead of a decode and a lower() per header. Fixed: what is not here is
# decoded as it comes.
HEADER_NAMES: dict[bytes, str] = {
    variant.encode("latin-1"): name
    for name in ("host", "authorization", "content-type", "content-length", "connection",
                 "expect", "accept", "accept-encoding", "user-agent", "transfer-encoding",
                 "x-mailbox-actors-forwarded")
    for variant in (name, name.title(), name.upper())}
METHODS: dict[bytes, str] = {m.encode("ascii"): m for m in (
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")}


def status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        if not 100 <= status <= 999:
            raise ValueError(f"HTTP status out of range: {status}")
        line = b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Status"))
        _STATUS_LINES[status] = line
    return line



class Reject(Exception):
    """Raised inside a parser callback to stop the connection with an error answer."""

    def __init__(self, status: int, error: MailboxActorsError) -> None:
        super().__init__(error.message)
        self.status = status
        self.error = error


# What an application returns: (status, body, content type[, extra response headers]).
AppAnswer = tuple[int, bytes, str] | tuple[int, bytes, str, Mapping[str, str]]
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def extra_headers(headers: Mapping[str, str]) -> bytes:
    """Extra response header lines; a name or value that could split the head is a bug, refused."""
    out = []
    for name, value in headers.items():
        raw_name, raw_value = name.encode("latin-1"), value.encode("latin-1")
        if not raw_name or not set(raw_name) <= _TOKEN or b"\r" in raw_value or \
                b"\n" in raw_value:
            raise ValueError(f"response header {name!r} is not a valid header")
        out.append(b"%s: %s\r\n" % (raw_name, raw_value))
    return b"".join(out)


def error_reply(error: MailboxActorsError) -> bytes:
    return _encode({"err": error.to_body()})


# A parsed request as a connection queues it: (method, path, headers, body, keep_alive); a tuple,
# not a class, as one is made for every request.
Request = tuple[str, str, dict[str, str], bytes, bool]


def header_error(limit: int) -> MailboxActorsError:
    return MailboxActorsError(ErrorCode.LIMIT_EXCEEDED, f"request head over {limit} bytes",
                              details={"limit": "header_bytes", "max": limit})


def message_cap(max_header_bytes: int, max_body_bytes: int) -> int:
    # Room for the head, the body twice over (chunk framing) and one read of slack.
    return max_header_bytes + 2 * max_body_bytes + 65536


def message_error(cap: int) -> MailboxActorsError:
    return MailboxActorsError(
        ErrorCode.PAYLOAD_TOO_LARGE, f"request over {cap} bytes with its chunk framing and trailers",
        details={"limit": "message_bytes", "max": cap})


def body_error(limit: int) -> MailboxActorsError:
    return MailboxActorsError(ErrorCode.PAYLOAD_TOO_LARGE, f"request body over {limit} bytes",
                              details={"limit": "body_bytes", "max": limit})


class Answer:
    """A reply decided by the transport itself (protocol error): written in order, then close."""

    __slots__ = ("body", "status")

    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.body = body
