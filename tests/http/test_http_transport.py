"""The node's HTTP/1.1 transport and the keep-alive pool, over real sockets on 127.0.0.1."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
import pytest
from anyio.abc import SocketStream

from mailbox_actors.bench.transport import measure_calls, tcp_echo
from mailbox_actors.http.client import (
    HttpConnectError,
    HttpConnectionLost,
    HttpPool,
    HttpTimeout,
    HttpTransportError,
)
from mailbox_actors.http.server import RpcHttpServer, loop_backend_options

pytestmark = pytest.mark.anyio

try:
    import uvloop  # noqa: F401
    _LOOPS = [("asyncio", {}), ("asyncio", {"use_uvloop": True})]
except ImportError:   # uvloop is optional: the node falls back to asyncio's own loop
    _LOOPS = [("asyncio", {})]


@pytest.fixture(params=_LOOPS, ids=[("uvloop" if o else "asyncio") for _, o in _LOOPS])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """Both loops the node may run on (ADR 0003)."""
    return request.param  # type: ignore[no-any-return]


class App:
    """A tiny application: echoes what it got; ``/boom`` raises; ``/hang`` waits to be released."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, str], bytes]] = []
        self.release = anyio.Event()
        self.entered = anyio.Event()

    async def __call__(self, method: str, path: str, headers: Mapping[str, str],
                       body: bytes) -> tuple[int, bytes, str]:
        self.calls.append((method, path, dict(headers), body))
        if path == "/boom":
            raise RuntimeError("a bug in the application")
        if path == "/hang":
            self.entered.set()
            await self.release.wait()
        reply = {"method": method, "path": path, "len": len(body),
                 "auth": headers.get("authorization")}
        return 200, msgspec.json.encode(reply), "application/json"


@asynccontextmanager
async def serving(app: App | None = None, **options: Any) -> AsyncIterator[
        tuple[RpcHttpServer, int]]:
    server = RpcHttpServer(app or App(), **options)
    port = await server.start("127.0.0.1", 0)
    try:
        yield server, port
    finally:
        await server.stop(grace_s=1.0)


async def read_response(stream: SocketStream) -> tuple[int, dict[str, str], bytes]:
    """Read one response framed by Content-Length (what the server always sends)."""
    buf = b""
    with anyio.fail_after(5):
        while b"\r\n\r\n" not in buf:
            buf += await stream.receive()
        head, _, rest = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip()
                   for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers["content-length"])
        while len(rest) < length:
            rest += await stream.receive()
    return status, headers, rest[:length]


async def read_responses(stream: SocketStream, n: int) -> list[tuple[int, bytes]]:
    """Read ``n`` back-to-back responses that may arrive in one segment."""
    buf = b""
    out: list[tuple[int, bytes]] = []
    with anyio.fail_after(5):
        while len(out) < n:
            if b"\r\n\r\n" in buf:
                head, _, rest = buf.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                if len(rest) >= length:
                    out.append((int(head.split()[1]), rest[:length]))
                    buf = rest[length:]
                    continue
            buf += await stream.receive()
    return out


async def assert_closed(stream: SocketStream, bound_s: float = 3.0) -> None:
    """The server closed the connection within ``bound_s`` (EOF or reset, after any reply)."""
    with anyio.fail_after(bound_s):
        try:
            while True:
                await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
            return


def request(path: str = "/rpc/ns/id", body: bytes = b"{}", *, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body


def err_code(body: bytes) -> str:
    decoded = msgspec.json.decode(body)
    assert set(decoded) == {"err"}
    assert decoded["err"]["retryable"] is False
    assert decoded["err"]["fix"]
    return str(decoded["err"]["code"])


async def test_keep_alive_reuses_one_connection() -> None:
    """Sequential requests on one socket each get their answer and the socket stays open (RPC-7)."""
    app = App()
    async with serving(app) as (server, port):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            for i in range(3):
                await stream.send(request(f"/rpc/ns/{i}", b'{"i":%d}' % i,
                                          extra="Authorization: Bearer tok\r\n"))
                status, headers, body = await read_response(stream)
                assert status == 200
                assert headers["content-type"] == "application/json"
                assert "connection" not in headers
                reply = msgspec.json.decode(body)
                assert reply == {"method": "POST", "path": f"/rpc/ns/{i}", "len": 7,
                                 "auth": "Bearer tok"}
            assert server.connection_count == 1
    assert [c[3] for c in app.calls] == [b'{"i":0}', b'{"i":1}', b'{"i":2}']


async def test_pool_keeps_one_connection_for_sequential_calls() -> None:
    """The pool reuses its keep-alive connection instead of opening one per call (RPC-8)."""
    async with serving() as (server, port), HttpPool() as pool:
        base = f"http://127.0.0.1:{port}"
        for _ in range(5):
            status, body = await pool.request(base, "POST", "/rpc/ns/x",
                                              {"authorization": "Bearer t"}, b"{}", 5.0)
            assert status == 200
            assert msgspec.json.decode(body)["auth"] == "Bearer t"
        assert server.connection_count == 1


async def test_oversized_body_is_413_without_reading_it() -> None:
    """A Content-Length over the cap is answered 413 payload_too_large at once, then closed (RPC-7)."""
    app = App()
    async with serving(app, max_body_bytes=1000) as (_, port):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            # Only the head is sent: the answer must not wait for the 5,000 bytes announced.
            await stream.send(b"POST /rpc/ns/id HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n")
            status, headers, body = await read_response(stream)
            assert status == 413
            assert headers["connection"] == "close"
            assert err_code(body) == "payload_too_large"
            assert msgspec.json.decode(body)["err"]["details"] == {"limit": "body_bytes",
                                                                   "max": 1000}
            await assert_closed(stream)
    assert app.calls == []


async def test_oversized_chunked_body_is_413() -> None:
    """A chunked body that grows past the cap is cut off with 413 (RPC-7, REL-2)."""
    async with serving(max_body_bytes=1000) as (_, port):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            chunk = b"800\r\n" + b"a" * 0x800 + b"\r\n"
            await stream.send(b"POST /rpc/ns/id HTTP/1.1\r\nHost: x\r\n"
                              b"Transfer-Encoding: chunked\r\n\r\n" + chunk)
            status, _, body = await read_response(stream)
            assert status == 413
            assert err_code(body) == "payload_too_large"
            await assert_closed(stream)


async def test_body_at_the_cap_is_accepted() -> None:
    """A body exactly at the cap is handled normally (RPC-7)."""
    async with serving(max_body_bytes=1000) as (_, port):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(request(body=b"x" * 1000))
            status, _, body = await read_response(stream)
            assert status == 200
            assert msgspec.json.decode(body)["len"] == 1000


@pytest.mark.parametrize("garbage", [
    b"\x00\x01\x02 garbage\r\n\r\n",
    b"POST /x HTTP/9.9\r\n\r\n",
    b"POST /x HTTP/1.1\r\nContent-Length: nope\r\n\r\n",
    b"POST /x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST /x HTTP/1.1\r\nBad Header\r\n\r\n",
    b"GET http://elsewhere/x HTTP/1.1\r\nHost: x\r\n\r\n",
])
async def test_malformed_http_is_400_and_closed(garbage: bytes) -> None:
    """Malformed HTTP gets 400 invalid_request and a closed connection, never a crash (REL-2)."""
    app = App()
    async with serving(app) as (server, port):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(garbage)
            status, headers, body = await read_response(stream)
            assert status == 400
            assert headers["connection"] == "close"
            assert err_code(body) == "invalid_request"
            await assert_closed(stream)
        # The server still serves.
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(request())
            assert (await read_response(stream))[0] == 200
        assert server.connection_count <= 1
    assert all(c[1] == "/rpc/ns/id" for c in app.calls)


async def test_oversized_head_is_400_limit_exceeded() -> None:
    """A request head over the header cap is refused with 400 limit_exceeded (REL-2)."""
    async with serving(max_header_bytes=1024) as (_, port):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"POST /x HTTP/1.1\r\nX-Big: " + b"a" * 4096)  # never finishes
            status, _, body = await read_response(stream)
            assert status == 400
            assert err_code(body) == "limit_exceeded"
            await assert_closed(stream)


async def test_slow_head_is_closed_after_the_timeout() -> None:
    """A client that never finishes its headers is disconnected after request_timeout_s (REL-2)."""
    async with serving(request_timeout_s=0.2) as (server, port):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"POST /rpc/ns/id HTTP/1.1\r\nHost: x\r\n")
            await assert_closed(stream, bound_s=3.0)
        assert server.connection_count == 0


async def test_slow_body_is_closed_after_the_timeout() -> None:
    """A client that never finishes its body is disconnected after request_timeout_s (REL-2)."""
    app = App()
    async with serving(app, request_timeout_s=0.2) as (_, port):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"POST /rpc/ns/id HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
                              b"only ten..")
            await assert_closed(stream, bound_s=3.0)
    assert app.calls == []


async def test_silent_connection_is_closed_after_the_timeout() -> None:
    """A connection that sends nothing at all is closed after request_timeout_s (REL-2)."""
    async with serving(request_timeout_s=0.2) as (_, port):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await assert_closed(stream, bound_s=3.0)


async def test_idle_keep_alive_is_closed_after_its_timeout() -> None:
    """An idle keep-alive connection closes after keepalive_timeout_s (RPC-7)."""
    async with serving(keepalive_timeout_s=0.2) as (_, port):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(request())
            assert (await read_response(stream))[0] == 200
            await assert_closed(stream, bound_s=3.0)


async def test_pipelined_requests_are_answered_in_order() -> None:
    """Requests sent back to back in one write are each answered, in order (RPC-7)."""
    app = App()
    async with serving(app) as (_, port):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"".join(request(f"/p/{i}", b"x" * i) for i in range(10)))
            replies = await read_responses(stream, 10)
    assert [s for s, _ in replies] == [200] * 10
    assert [msgspec.json.decode(b)["path"] for _, b in replies] == [f"/p/{i}" for i in range(10)]
    assert [c[1] for c in app.calls] == [f"/p/{i}" for i in range(10)]


async def test_pipelined_request_then_garbage() -> None:
    """Good requests before a malformed one are answered first, then 400, then close (REL-2)."""
    async with serving() as (_, port):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(request("/a") + request("/b") + b"NOT HTTP AT ALL\r\n\r\n")
            replies = await read_responses(stream, 3)
            assert [s for s, _ in replies] == [200, 200, 400]
            assert err_code(replies[2][1]) == "invalid_request"
            await assert_closed(stream)


async def test_connection_close_is_honoured() -> None:
    """`Connection: close` gets its answer marked close, then the server closes (RPC-7)."""
    app = App()
    async with serving(app) as (_, port):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            # The second request, pipelined after the close, must not run.
            await stream.send(request("/a", extra="Connection: close\r\n") + request("/b"))
            status, headers, _ = await read_response(stream)
            assert status == 200
            assert headers["connection"] == "close"
            await assert_closed(stream)
    assert [c[1] for c in app.calls] == ["/a"]


async def test_upgrade_is_answered_as_plain_http_and_closed() -> None:
    """An Upgrade request gets an ordinary answer, then the connection closes (REL-2)."""
    async with serving() as (_, port):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\n"
                              b"Upgrade: websocket\r\n\r\nnot http anymore")
            status, headers, _ = await read_response(stream)
            assert status == 200
            assert headers["connection"] == "close"
            await assert_closed(stream)


async def test_http10_without_keep_alive_closes() -> None:
    """An HTTP/1.0 request without keep-alive is answered and the connection closed (RPC-7)."""
    async with serving() as (_, port):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"POST /x HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}")
            status, headers, _ = await read_response(stream)
            assert status == 200
            assert headers["connection"] == "close"
            await assert_closed(stream)


async def test_expect_100_continue() -> None:
    """`Expect: 100-continue` gets the interim answer so curl does not stall (RPC-7)."""
    async with serving() as (_, port):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                              b"Expect: 100-continue\r\n\r\n")
            with anyio.fail_after(5):
                interim = await stream.receive()
            assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
            await stream.send(b"{}")
            status, _, body = await read_response(stream)
            assert status == 200
            assert msgspec.json.decode(body)["len"] == 2


def mutate(rng: random.Random, good: bytes) -> bytes:
    """One malformed variant of ``good``: flipped, inserted, deleted or duplicated bytes."""
    data = bytearray(good)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(6)
        at = rng.randrange(len(data) + 1)
        if kind == 0 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif kind == 1:
            data[at:at] = rng.choice([b"\r", b"\n", b"\x00", b" ", b":", b"\r\n\r\n", b"../"])
        elif kind == 2:
            del data[at:at + rng.randint(1, 8)]
        elif kind == 3:
            data[at:at] = rng.choice([b"Content-Length: 99999999999999999999\r\n",
                                      b"Content-Length: -1\r\n", b"Transfer-Encoding: chunked\r\n",
                                      b"Transfer-Encoding: gzip, chunked\r\n"])
        elif kind == 4:
            data = data[:at]
        else:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))
    return bytes(data)


async def test_fuzzed_requests_never_break_the_server() -> None:
    """A thousand seeded malformed requests each get a well-formed answer or a close (REL-2)."""
    rng = random.Random(20261129)
    good = request("/rpc/ns/id", b'{"v":1}', extra="Authorization: Bearer t\r\n")
    seen: set[int] = set()
    async with serving(max_body_bytes=4096, request_timeout_s=2.0) as (server, port):
        async def one(data: bytes) -> None:
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                await stream.send(data)
                await stream.send_eof()
                got = b""
                with anyio.fail_after(5):
                    try:
                        while True:
                            got += await stream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
                        pass
            while got:   # every answer present is complete, well-formed HTTP
                assert got.startswith(b"HTTP/1.1 "), got[:60]
                head, sep, rest = got.partition(b"\r\n\r\n")
                assert sep, got[:60]
                status = int(head.split()[1])
                seen.add(status)
                if status == 100:
                    got = rest
                    continue
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                if status != 200:
                    err_code(rest[:length])
                got = rest[length:]

        for _ in range(50):
            async with anyio.create_task_group() as tg:
                for _ in range(20):
                    tg.start_soon(one, mutate(rng, good))
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(good)
            assert (await read_response(stream))[0] == 200
        assert server.connection_count <= 1
    assert seen <= {100, 200, 400, 413}
    assert {200, 400} <= seen


async def test_handler_exception_is_500_and_keeps_serving() -> None:
    """An exception in the application is a 500 internal_error without a trace (REL-2)."""
    async with serving() as (_, port):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(request("/boom"))
            status, _, body = await read_response(stream)
            assert status == 500
            decoded = msgspec.json.decode(body)
            assert decoded["err"]["code"] == "internal_error"
            assert "Traceback" not in body.decode() and "RuntimeError" not in body.decode()
            await stream.send(request("/after"))
            assert (await read_response(stream))[0] == 200


async def test_head_request_has_no_body() -> None:
    """HEAD is answered with the length but no body, and the connection stays usable (RPC-7)."""
    async with serving() as (_, port):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + request("/next"))
            with anyio.fail_after(5):
                buf = b""
                while buf.count(b"\r\n\r\n") < 2:
                    buf += await stream.receive()
            first, _, rest = buf.partition(b"\r\n\r\n")
            assert first.startswith(b"HTTP/1.1 200 ")
            assert rest.startswith(b"HTTP/1.1 200 ")


async def test_many_concurrent_clients() -> None:
    """Two hundred concurrent calls through a small pool all get their own answer (RPC-7, RPC-8)."""
    app = App()
    async with serving(app) as (server, port), HttpPool(max_per_host=8) as pool:
        base = f"http://127.0.0.1:{port}"
        results: dict[int, int] = {}

        async def one(i: int) -> None:
            status, body = await pool.request(base, "POST", f"/c/{i}", None, b"y" * i, 5.0)
            assert status == 200
            reply = msgspec.json.decode(body)
            assert reply["path"] == f"/c/{i}"
            results[i] = reply["len"]

        async with anyio.create_task_group() as tg:
            for i in range(200):
                tg.start_soon(one, i)
        assert results == {i: i for i in range(200)}
        assert server.connection_count <= 8
    assert len(app.calls) == 200


async def test_many_raw_connections_at_once() -> None:
    """Fifty separate connections served at once, each on its own socket (RPC-7)."""
    async with serving() as (_, port):
        async def one(i: int) -> None:
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                await stream.send(request(f"/r/{i}"))
                status, _, body = await read_response(stream)
                assert status == 200
                assert msgspec.json.decode(body)["path"] == f"/r/{i}"

        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(one, i)


async def test_pool_connect_failure_is_a_connection_error() -> None:
    """A node that does not listen raises HttpConnectError, a ConnectionError, nothing sent (RPC-8)."""
    server = RpcHttpServer(App())
    port = await server.start("127.0.0.1", 0)
    await server.stop()
    async with HttpPool() as pool:
        with pytest.raises(HttpConnectError) as info:
            await pool.request(f"http://127.0.0.1:{port}", "POST", "/x", None, b"", 5.0)
    assert isinstance(info.value, ConnectionError)
    assert info.value.request_sent is False
    assert info.value.base_url == f"http://127.0.0.1:{port}"


async def test_pool_timeout_and_recovery() -> None:
    """No answer within timeout_s raises HttpTimeout; the pool then works again (RPC-8)."""
    app = App()
    async with serving(app) as (_, port), HttpPool() as pool:
        base = f"http://127.0.0.1:{port}"
        with pytest.raises(HttpTimeout) as info:
            await pool.request(base, "POST", "/hang", None, b"", 0.2)
        assert isinstance(info.value, HttpTransportError)
        assert isinstance(info.value, TimeoutError)
        assert info.value.request_sent is True
        app.release.set()
        status, _ = await pool.request(base, "POST", "/ok", None, b"", 5.0)
        assert status == 200


async def test_pool_wait_for_a_free_connection_times_out() -> None:
    """With every connection busy, a caller waits at most its timeout_s, nothing sent (RPC-8)."""
    app = App()
    async with serving(app) as (_, port), HttpPool(max_per_host=1) as pool:
        base = f"http://127.0.0.1:{port}"
        async with anyio.create_task_group() as tg:
            tg.start_soon(pool.request, base, "POST", "/hang", None, b"", 5.0)
            await app.entered.wait()
            with pytest.raises(HttpTimeout) as info:
                await pool.request(base, "POST", "/waits", None, b"", 0.2)
            assert info.value.request_sent is False
            app.release.set()
        status, _ = await pool.request(base, "POST", "/then", None, b"", 5.0)
        assert status == 200
    assert [c[1] for c in app.calls] == ["/hang", "/then"]


async def test_pool_connection_lost_mid_request() -> None:
    """The server going away during a request raises HttpConnectionLost (RPC-8)."""
    app = App()
    server = RpcHttpServer(app)
    port = await server.start("127.0.0.1", 0)
    async with HttpPool() as pool:
        async def stop_when_entered() -> None:
            await app.entered.wait()
            await server.stop(grace_s=0.0)

        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_when_entered)
            with pytest.raises(HttpConnectionLost) as info:
                await pool.request(f"http://127.0.0.1:{port}", "POST", "/hang", None, b"", 5.0)
        assert info.value.request_sent is True


async def test_pool_cancelled_request_does_not_poison_the_pool() -> None:
    """A call cancelled by an anyio cancel scope drops its connection; the next call works (RPC-8)."""
    app = App()
    async with serving(app) as (_, port), HttpPool() as pool:
        base = f"http://127.0.0.1:{port}"
        with anyio.move_on_after(0.1) as scope:
            await pool.request(base, "POST", "/hang", None, b"", 5.0)
        assert scope.cancelled_caught
        app.release.set()
        status, body = await pool.request(base, "POST", "/fine", None, b"", 5.0)
        assert status == 200
        assert msgspec.json.decode(body)["path"] == "/fine"


async def test_pool_refuses_header_injection_and_bad_urls() -> None:
    """CR/LF in a header or path, and a base URL that is not http(s), are refused before sending (REL-2)."""
    async with serving() as (_, port), HttpPool() as pool:
        base = f"http://127.0.0.1:{port}"
        with pytest.raises(ValueError):
            await pool.request(base, "POST", "/x", {"x-a": "1\r\nx-b: 2"}, b"", 5.0)
        with pytest.raises(ValueError):
            await pool.request(base, "POST", "/x HTTP/1.1\r\nx: y", None, b"", 5.0)
        with pytest.raises(ValueError):
            await pool.request("ftp://127.0.0.1:1", "POST", "/x", None, b"", 5.0)


async def test_bench_helpers_return_figures() -> None:
    """The bench helpers measure an echo and an HTTP call and return plain figures (PERF)."""
    for style in ("protocol", "anyio"):
        echo = await tcp_echo(b"q" * 300, b"r" * 150, concurrency=4, seconds=0.2,
                              warmup_s=0.05, style=style)
        assert echo["calls"] > 0 and echo["errors"] == 0
        assert echo["p50_ms"] <= echo["p99_ms"]
        assert echo["cpu_us_per_call"] > 0
    async with serving() as (_, port), HttpPool() as pool:
        base = f"http://127.0.0.1:{port}"

        async def call() -> None:
            await pool.request(base, "POST", "/b", None, b"{}", 5.0)

        figures = await measure_calls(call, concurrency=4, seconds=0.2, warmup_s=0.05)
    assert figures["calls"] > 0 and figures["errors"] == 0
    assert figures["calls_per_s"] == figures["calls"] / 0.2


async def test_each_caller_counts_a_call_even_when_its_warm_up_call_outlasts_the_window() -> None:
    """On a loaded machine a task's first call (a connection's set-up) can outlast the warm-up
    and the whole window: the figure is then of the calls that follow it, never of none."""
    made: list[int] = []

    async def slow_first() -> None:
        made.append(1)
        await anyio.sleep(0.2 if len(made) <= 2 else 0)  # each task's first call: 0.2 s

    figures = await measure_calls(slow_first, concurrency=2, seconds=0.05, warmup_s=0.05)
    assert figures["calls"] == 2 and figures["errors"] == 0  # one a task, after the window
    assert figures["p50_ms"] < 200
    assert figures["calls_per_s"] < 2 / 0.05  # over the time to their end, not the window's


def test_loop_backend_options_fall_back_to_asyncio() -> None:
    """Without uvloop asked for (or importable) the plain asyncio loop is used (ADR 0003)."""
    assert loop_backend_options(prefer_uvloop=False) == {}
    options = loop_backend_options()
    assert set(options) <= {"loop_factory"}


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
async def test_a_taken_address_is_refused_in_the_loops_words_and_a_free_one_serves(
        host: str) -> None:
    """An IP address is bound without a resolver (the server makes the socket itself), a name
    through the loop's: either way the server answers on it, and an address already taken is
    refused with EADDRINUSE and the words asyncio and uvloop use, which serve reports."""
    import errno

    server = RpcHttpServer(App())
    port = await server.start(host, 0)
    try:
        async with await anyio.connect_tcp(host, port) as stream:
            await stream.send(request("/x"))
            status, _, _ = await read_response(stream)
        assert status == 200
        with pytest.raises(OSError) as refused:
            await RpcHttpServer(App()).start(host, port)
        assert refused.value.errno == errno.EADDRINUSE
        said = refused.value.strerror or ""
        assert said.startswith("error while attempting to bind on address (")
        assert said.endswith("): address already in use")
        if host != "localhost":  # a name's address is the resolver's (IPv4 or IPv6 first)
            address = f"('::1', {port}, 0, 0)" if host == "::1" else f"('127.0.0.1', {port})"
            assert address in said
    finally:
        await server.stop(grace_s=1.0)
