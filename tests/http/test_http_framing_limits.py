"""HTTP/1.1 framing at the edges (REL-2, RPC-7), over real sockets on 127.0.0.1: what a review found
the server and the pool got wrong. Pipelined requests are answered whatever the reads' boundaries;
a client cannot make the server buffer without bound (chunk trailers) or hold a connection by never
reading; the pool reads answers framed by the connection's close and skips interim 1xx answers."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import anyio
import pytest
import test_http_transport
from test_http_transport import App, assert_closed, read_response, read_responses, serving

from mailbox_actors.http.client import HttpPool

pytestmark = pytest.mark.anyio
anyio_backend = test_http_transport.anyio_backend  # both loops the node may run on


def post(path: str, body: bytes = b"{}") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode() + body


async def test_a_partial_head_after_a_large_pipelined_body_is_answered() -> None:
    """A 20 KB body (over the 16 KB head cap, under the body cap) followed in the same read by the
    start of the next request: both are answered 200, neither is taken for an oversized head."""
    async with serving() as (_, port), await anyio.connect_tcp("127.0.0.1", port) as s:
        second = post("/b")
        await s.send(post("/a", b"x" * 20_000) + second[:10])
        assert (await read_response(s))[0] == 200
        await s.send(second[10:])
        assert (await read_response(s))[0] == 200


async def test_thousands_of_small_pipelined_requests_are_all_answered() -> None:
    """5,000 valid requests written back to back get 5,000 answers, in order."""
    app = App()
    async with serving(app) as (_, port), await anyio.connect_tcp("127.0.0.1", port) as s:
        await s.send(b"".join(post(f"/p/{i}") for i in range(5_000)))
        answers = await read_responses(s, 5_000)
    assert all(status == 200 for status, _ in answers)
    assert [path for _, path, _, _ in app.calls] == [f"/p/{i}" for i in range(5_000)]


async def test_a_body_that_trickles_in_behind_a_request_gets_the_request_timeout() -> None:
    """The head of request 2 arrives while request 1 runs, then its body stalls: the connection is
    closed after the request timeout, not the (much longer) keep-alive timeout."""
    app = App()
    async with serving(app, request_timeout_s=0.5, keepalive_timeout_s=600) as (_, port), \
            await anyio.connect_tcp("127.0.0.1", port) as s:
        await s.send(post("/hang") + b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nx")
        with anyio.fail_after(5):
            await app.entered.wait()
        app.release.set()
        assert (await read_response(s))[0] == 200
        await assert_closed(s, bound_s=10)


async def test_a_client_that_never_reads_its_answers_is_timed_out() -> None:
    """Pipelined requests whose answers the client never reads (the server's send buffer stays
    full) do not hold the connection past the request timeout."""
    class Big:
        async def __call__(self, method: str, path: str, headers: Mapping[str, str],
                           body: bytes) -> tuple[int, bytes, str]:
            return 200, b"x" * (1 << 20), "application/octet-stream"

    async with serving(Big(), request_timeout_s=0.5, keepalive_timeout_s=600) as (server, port):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        try:
            await asyncio.get_running_loop().sock_sendall(
                sock, b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n" * 8)
            with anyio.fail_after(10):
                await server.wait_idle()
        finally:
            sock.close()


@pytest.mark.parametrize("trailer", [b"x-t: " + b"a" * 8_000 + b"\r\n", b"a" * 8_000],
                         ids=["many-lines", "one-endless-line"])
async def test_chunk_trailers_cannot_grow_the_server_without_bound(trailer: bytes) -> None:
    """Trailers after a chunked body are capped like a head: long before the client has sent a
    megabyte of them the request is refused (while they keep coming), and never reaches the app."""
    app = App()
    async with serving(app, max_body_bytes=1024) as (_, port), \
            await anyio.connect_tcp("127.0.0.1", port) as s:
        await s.send(b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"2\r\n{}\r\n0\r\n")
        try:
            for _ in range(8):
                await s.send(trailer * 16)  # 1 MB in all, never ended
        except (anyio.BrokenResourceError, OSError):
            pass  # refused and closed already
        status, _, _ = await read_response(s)
    assert status in (400, 413) and app.calls == []


@asynccontextmanager
async def canned(reply: bytes, *, close: bool) -> AsyncIterator[int]:
    """A raw HTTP server that reads one request and writes ``reply`` as is; then closes, or waits
    for the client to go."""
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        head = await r.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        await r.readexactly(length)
        w.write(reply)
        await w.drain()
        if not close:
            await r.read()  # until the client closes
        w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


async def test_the_pool_reads_an_answer_ended_by_the_close() -> None:
    """An answer with neither Content-Length nor chunking ends when the server closes (RFC 9112
    6.3), as simple receivers answer: it is the answer, not a lost connection."""
    async with canned(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nthanks", close=True) as port, \
            HttpPool() as pool:
        answer = await pool.request(f"http://127.0.0.1:{port}", "POST", "/hook", {}, b"{}",
                                    timeout_s=5)
    assert answer == (200, b"thanks")


async def test_the_pool_skips_an_interim_answer() -> None:
    """A 100 Continue before the real answer is not taken for it."""
    async with canned(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
                      close=False) as port, HttpPool() as pool:
        answer = await pool.request(f"http://127.0.0.1:{port}", "POST", "/hook", {}, b"{}",
                                    timeout_s=5)
    assert answer == (204, b"")
