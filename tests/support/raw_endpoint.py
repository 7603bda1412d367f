"""A raw HTTP/1.1 endpoint on loopback for webhook tests that need an endpoint to misbehave: hang
with a request unanswered, hang up, answer with any status. A subclass's ``answer`` decides each
request; the endpoint reads the request's head and body, and ``stop`` releases every held request
and waits for their connections to end."""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["RawEndpoint"]


class RawEndpoint:
    def __init__(self) -> None:
        self._release = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def answer(self, fields: dict[str, str], writer: asyncio.StreamWriter) -> bool:
        """Answer one request (``fields``: its header fields, names lower-cased); True keeps the
        connection for another request, False ends it."""
        raise NotImplementedError

    async def hold(self) -> None:
        """Wait until the endpoint stops: a request held here is never answered."""
        await self._release.wait()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        self._release.set()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                fields = {name.strip().lower(): value.strip() for name, _, value in
                          (line.partition(":") for line in head.decode().split("\r\n")[1:] if line)}
                await reader.readexactly(int(fields.get("content-length", "0")))
                if not await self.answer(fields, writer):
                    return
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
