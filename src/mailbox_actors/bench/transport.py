"""Transport measurements for the benchmark (PERF, SPEC section 12): a bare TCP echo as the limit,
and calls/s with p50/p99 latency for any ``async def call()``.

The echo runs on ``asyncio.Protocol`` at both ends, the fastest way Python moves these bytes over
loopback, so it is the physical limit the HTTP figure is held against. Both measurements share
one driver, so the ratio compares the stacks and not the loops that drive them. Results are plain
dicts; printing and ratios belong to the bench command.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

import anyio
from anyio.abc import SocketAttribute, SocketStream

from mailbox_actors.http.server import HttpApp, RpcHttpServer, loop_backend_options

__all__ = [
    "fixed_reply_app",
    "measure_calls",
    "spawn_server",
    "start_echo_server",
    "tcp_echo",
]


async def measure_calls(call: Callable[[], Awaitable[object]], *, concurrency: int = 32,
                        seconds: float = 3.0, warmup_s: float = 0.5) -> dict[str, float]:
    """Run ``call`` from ``concurrency`` tasks back to back for ``warmup_s + seconds``.

    Only calls that start after the warm-up count, and each task makes at least one that counts
    (on a machine so loaded that its first call outlasts the whole window, the figure is then of
    that one call, not of none, and its rate is over the time to that call's end). Returns
    ``calls``, ``errors``, ``calls_per_s``, ``p50_ms``, ``p99_ms``, ``concurrency``, ``seconds``
    and ``cpu_us_per_call`` (this process's CPU time per call made, warm-up included); a call
    that raises counts as an error.
    """
    if concurrency < 1 or seconds <= 0 or warmup_s < 0:
        raise ValueError("concurrency >= 1, seconds > 0, warmup_s >= 0")
    clock = time.perf_counter
    start = clock() + warmup_s
    stop = start + seconds
    latencies: list[float] = []
    errors = 0
    attempts = 0
    ended = stop  # when the last call counted though it started after the window ended

    async def worker() -> None:
        nonlocal errors, attempts, ended
        record = latencies.append
        counted = False
        while True:
            t0 = clock()
            if t0 >= stop and counted:
                return
            attempts += 1
            counted = counted or t0 >= start
            try:
                await call()
            except Exception:
                if t0 >= start:
                    errors += 1
                continue
            if t0 >= start:
                t1 = clock()
                record(t1 - t0)
                if t0 >= stop:
                    ended = max(ended, t1)

    cpu0 = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    cpu = time.process_time() - cpu0
    latencies.sort()
    n = len(latencies)
    span = seconds + (ended - stop)  # the window, or to the end of the calls counted after it
    return {
        "calls": n,
        "cpu_us_per_call": cpu / attempts * 1e6 if attempts else float("nan"),
        "errors": errors,
        "calls_per_s": n / span,
        "p50_ms": latencies[n // 2] * 1e3 if n else float("nan"),
        "p99_ms": latencies[min(n - 1, int(n * 0.99))] * 1e3 if n else float("nan"),
        "concurrency": concurrency,
        "seconds": seconds,
    }


class _EchoServer(asyncio.Protocol):
    """Answers ``response`` for every ``request_len`` bytes received; parses nothing."""

    def __init__(self, request_len: int, response: bytes) -> None:
        self._n = request_len
        self._response = response
        self._pending = 0
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        self._pending += len(data)
        assert self._transport is not None
        while self._pending >= self._n:
            self._pending -= self._n
            self._transport.write(self._response)


class _EchoClient(asyncio.Protocol):
    """Resolves ``fut`` once ``response_len`` bytes have come back."""

    def __init__(self, response_len: int) -> None:
        self._n = response_len
        self._got = 0
        self.fut: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        self._got += len(data)
        if self._got >= self._n:
            self._got -= self._n
            fut, self.fut = self.fut, None
            if fut is not None and not fut.done():
                fut.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        fut, self.fut = self.fut, None
        if fut is not None and not fut.done():
            fut.set_exception(ConnectionError("echo connection lost"))


async def start_echo_server(request_len: int, response: bytes, host: str = "127.0.0.1",
                            port: int = 0) -> tuple[asyncio.Server, int]:
    """An echo server in this loop; returns it (close it when done) and its port."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _EchoServer(request_len, response), host, port)
    return server, int(server.sockets[0].getsockname()[1])


async def tcp_echo(request: bytes, response: bytes, *, concurrency: int = 32,
                   seconds: float = 3.0, warmup_s: float = 0.5, host: str = "127.0.0.1",
                   port: int | None = None, style: str = "protocol") -> dict[str, float]:
    """Round trips/s of ``request`` out and ``response`` back over ``concurrency`` connections.

    With ``port`` None an echo server is started in this event loop (client and server share one
    thread); otherwise the echo server already listening there is used (see ``spawn_server``).
    ``style="protocol"`` drives both ends with ``asyncio.Protocol`` (the limit); ``"anyio"`` uses
    anyio socket streams, the figure the issue quotes (about 13,000/s on asyncio in one process).
    """
    if style not in ("protocol", "anyio"):
        raise ValueError("style is 'protocol' or 'anyio'")
    if style == "anyio":
        return await _anyio_echo(request, response, concurrency, seconds, warmup_s, host, port)
    server: asyncio.Server | None = None
    if port is None:
        server, port = await start_echo_server(len(request), response, host)
    loop = asyncio.get_running_loop()
    clients: list[_EchoClient] = []
    try:
        for _ in range(concurrency):
            _, proto = await loop.create_connection(lambda: _EchoClient(len(response)), host,
                                                    port)
            clients.append(proto)
        free = list(clients)

        async def call() -> None:
            proto = free.pop()
            try:
                fut = proto.fut = loop.create_future()
                assert proto.transport is not None
                proto.transport.write(request)
                await fut
            finally:
                free.append(proto)

        result = await measure_calls(call, concurrency=concurrency, seconds=seconds,
                                     warmup_s=warmup_s)
    finally:
        for proto in clients:
            if proto.transport is not None:
                proto.transport.close()
        if server is not None:
            server.close()
            await server.wait_closed()
    return result


def _anyio_echo_handler(request_len: int,
                        response: bytes) -> Callable[[SocketStream], Awaitable[None]]:
    async def handle(stream: SocketStream) -> None:
        pending = 0
        async with stream:
            try:
                while True:
                    pending += len(await stream.receive())
                    while pending >= request_len:
                        pending -= request_len
                        await stream.send(response)
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                return

    return handle


async def _anyio_echo(request: bytes, response: bytes, concurrency: int, seconds: float,
                      warmup_s: float, host: str, port: int | None) -> dict[str, float]:
    listener: anyio.abc.Listener[SocketStream] | None = None
    async with anyio.create_task_group() as tg:
        if port is None:
            multi = await anyio.create_tcp_listener(local_host=host, local_port=0)
            listener = multi
            port = multi.extra(SocketAttribute.local_port)
            tg.start_soon(multi.serve, _anyio_echo_handler(len(request), response))
        streams = [await anyio.connect_tcp(host, port) for _ in range(concurrency)]
        free = list(streams)

        async def call() -> None:
            stream = free.pop()
            try:
                await stream.send(request)
                got = 0
                while got < len(response):
                    got += len(await stream.receive())
            finally:
                free.append(stream)

        try:
            result = await measure_calls(call, concurrency=concurrency, seconds=seconds,
                                         warmup_s=warmup_s)
        finally:
            for stream in streams:
                await stream.aclose()
            tg.cancel_scope.cancel()
    if listener is not None:
        await listener.aclose()
    return result


def fixed_reply_app(reply: bytes, content_type: str = "application/json") -> HttpApp:
    """An ``HttpApp`` that answers every request 200 with ``reply`` (the transport alone)."""

    async def app(method: str, path: str, headers: Mapping[str, str],
                  body: bytes) -> tuple[int, bytes, str]:
        return 200, reply, content_type

    return app


async def spawn_server(kind: str, request_len: int, response: bytes, *,
                       uvloop: bool = False) -> tuple[asyncio.subprocess.Process, int]:
    """Start an echo (``"echo"``, ``"echo_anyio"``) or fixed-reply HTTP server (``"http"``) in a
    child process, on uvloop if asked (and importable).

    An echo child answers ``response`` per ``request_len`` bytes; for ``"http"`` it runs
    ``RpcHttpServer`` answering ``response`` as the body. Returns the process (terminate it) and
    its port.
    """
    args = [sys.executable, "-m", "mailbox_actors.bench.transport", kind, str(request_len),
            response.hex()]
    if uvloop:
        args.append("--uvloop")
    proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    if not line.startswith(b"port "):
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"{kind} server did not start")
    return proc, int(line.split()[1])


async def _serve(kind: str, request_len: int, response: bytes) -> None:
    stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    if kind == "echo_anyio":
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        print(f"port {listener.extra(SocketAttribute.local_port)}", flush=True)
        await listener.serve(_anyio_echo_handler(request_len, response))
        return
    if kind == "echo":
        server, port = await start_echo_server(request_len, response)
        print(f"port {port}", flush=True)
        try:
            await stop
        finally:
            server.close()
        return
    http = RpcHttpServer(fixed_reply_app(response))
    port = await http.start("127.0.0.1", 0)
    print(f"port {port}", flush=True)
    try:
        await stop
    finally:
        await http.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="a benchmark server in its own process")
    parser.add_argument("kind", choices=["echo", "echo_anyio", "http"])
    parser.add_argument("request_len", type=int)
    parser.add_argument("response_hex")
    parser.add_argument("--uvloop", action="store_true")
    ns = parser.parse_args(argv)
    options: dict[str, Any] = {}
    if ns.uvloop:
        options = loop_backend_options()
    runner = asyncio.Runner(loop_factory=options.get("loop_factory"))
    with contextlib.suppress(KeyboardInterrupt), runner:
        runner.run(_serve(ns.kind, ns.request_len, bytes.fromhex(ns.response_hex)))


if __name__ == "__main__":
    main()
