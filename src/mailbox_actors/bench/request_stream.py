"""A caller outside the node's process: the request stream the alarm burst must not starve (issue 28).

The caller is a small process of its own on one end of a socket pair: it sends a request, waits
for the answer, pauses ``PAUSE_S`` and sends the next. Each request is timed from the moment the
caller sent it (its ``time.perf_counter``, the system's monotonic clock, which this process reads
too) to the moment the node had its answer: the wait for the event loop to look at the socket is
in it, as it is for a request over the network. (Timing in process from a caller's task, as the
figure did before, missed exactly that wait: the caller's task only started once the loop got to
it, and the call itself rarely waits again. And a caller on a thread of this process would wait
for the GIL, which no network client does.)

``phases`` is a list of lists: each answer's milliseconds go into the last one, so a measurement
switches phase by appending a list, with the same caller, node and actor throughout. A ``Window``
is such a list that says when it holds a given number of requests: windows of the same size, idle
and during a burst, interleaved, compare the two over the same number of requests and the same
stretch of the machine's load (``ticker_figures``).

``on_loop`` runs a measurement on the loop a served node runs on (``serve`` and ``machine``:
uvloop where it is importable, ``http.server.loop_backend_options``), in a thread of its own while
the bench's own loop (asyncio's) waits: the pool's look at what else waits for the loop is the
loop's own (ADR 0023), so the figure is measured where users run it. ``LOOP_ENV`` set to
"asyncio" keeps it on asyncio's loop.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from anyio.from_thread import start_blocking_portal

from mailbox_actors.bench.actors import BenchTicker, TickRead, ticker_name
from mailbox_actors.http.server import loop_backend_options
from mailbox_actors.node import Node

__all__ = ["LOOP_ENV", "PAUSE_S", "Window", "on_loop", "request_stream",
           "served_loop_name"]

PAUSE_S = 0.002  # the caller's pause between an answer and its next request

# ``bench --stream-loop``'s choice, for its groups' processes: "asyncio", the stream's phase
# runs on asyncio's own loop, in the bench's thread, as before session 15 (to compare with
# earlier records); "served" (or unset), on the loop ``serve`` runs a node on.
LOOP_ENV = "MAILBOX_ACTORS_BENCH_LOOP"

T = TypeVar("T")

_STAMP = struct.Struct("d")
# The caller: send the time, read the answer's time, pause, again; ends when the node closes.
_CALLER = """
import os, socket, struct, sys, time
stamp = struct.Struct("d")
sock = socket.socket(fileno=int(sys.argv[1]))
pause = float(sys.argv[2])
while True:
    try:
        sock.sendall(stamp.pack(time.perf_counter()))
        answer = b""
        while len(answer) < stamp.size:
            got = sock.recv(stamp.size - len(answer))
            if not got:
                sys.exit(0)
            answer += got
    except OSError:
        sys.exit(0)
    time.sleep(pause)
"""


class Window(list[float]):
    """A phase's milliseconds that sets ``full`` once it holds ``size`` of them (made on the loop
    that serves the stream)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self.full = anyio.Event()

    def append(self, ms: float) -> None:
        super().append(ms)
        if len(self) >= self.size:
            self.full.set()


async def request_stream(node: Node, tenant_id: str, phases: list[list[float]],
                         stop: anyio.Event) -> None:
    """Serve the outside caller's reads of ticker 0 until ``stop``; each request's milliseconds
    from its sending to its answer into ``phases[-1]``."""
    ours, theirs = socket.socketpair()
    caller = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CALLER, str(theirs.fileno()), str(PAUSE_S),
        pass_fds=(theirs.fileno(),))
    theirs.close()
    reader, writer = await asyncio.open_connection(sock=ours)
    oid = node.id_from_name(BenchTicker.namespace, ticker_name(0))
    read = TickRead()

    async def serve() -> None:
        while True:
            sent, = _STAMP.unpack(await reader.readexactly(_STAMP.size))
            await node.call(BenchTicker.namespace, oid, read, tenant_id=tenant_id)
            answered = time.perf_counter()
            phases[-1].append((answered - sent) * 1000)
            writer.write(_STAMP.pack(answered))

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            await stop.wait()
            tg.cancel_scope.cancel()
    finally:
        writer.close()
        with anyio.move_on_after(10):
            await caller.wait()
        if caller.returncode is None:
            caller.kill()
            await caller.wait()


async def on_loop(loop: str, fn: Callable[..., Awaitable[T]], *args: object) -> T:
    """``fn(*args)`` run to its end on ``loop`` (``served_loop_name``): "asyncio" in the caller's
    own loop, "uvloop" on a loop of that kind in a thread of its own (the caller's loop waits
    meanwhile, its thread asleep); cancelled with the caller (a bench interrupted), it is
    cancelled there, and its cleanup has run when this returns."""
    if loop == "asyncio":
        return await fn(*args)
    with start_blocking_portal("asyncio", loop_backend_options(), name="served-loop") as portal:
        return await asyncio.wrap_future(portal.start_task_soon(fn, *args))


def served_loop_name() -> str:
    """The loop a served node runs on (``serve``, ``machine``): "uvloop" where it is importable,
    else "asyncio"; "asyncio" too when ``LOOP_ENV`` says so."""
    if os.environ.get(LOOP_ENV) == "asyncio" or not loop_backend_options():
        return "asyncio"
    return "uvloop"
