"""``HeldReplies``: a test server's replies kept back until the test lets them go.

The SMTP and Cloudflare sinks hold a reply on request (a provider that has the message and has not
answered yet), so a test can act in that window (kill a node, replay, read a receipt) and then
``release`` every held reply at once, without sleeping. ``wait_held(n)`` returns once ``n``
replies are waiting.
"""

from __future__ import annotations

import anyio

__all__ = ["HeldReplies"]


class HeldReplies:
    def __init__(self) -> None:
        self._release = anyio.Event()
        self._held = 0
        self._held_changed = anyio.Event()

    @property
    def held(self) -> int:
        return self._held

    def release(self) -> None:
        """Let every held reply go; later holds wait for the next release."""
        self._release.set()
        self._release = anyio.Event()

    async def wait_held(self, n: int = 1) -> None:
        """Return once ``n`` replies are being held."""
        while self._held < n:
            await self._held_changed.wait()

    async def hold(self) -> None:
        """Wait here, counted as held, until the next ``release``."""
        release = self._release
        self._held += 1
        self._held_changed.set()
        self._held_changed = anyio.Event()
        try:
            await release.wait()
        finally:
            self._held -= 1
