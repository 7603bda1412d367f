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
switches phase by appending a list, with the same caller, node and actor throughout.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time

import anyio

from mailbox_actors.bench.actors import BenchTicker, TickRead, ticker_name
from mailbox_actors.node import Node

__all__ = ["PAUSE_S", "request_stream"]

PAUSE_S = 0.002  # the caller's pause between an answer and its next request

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
