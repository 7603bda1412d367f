"""A host's wake for Post on the control database or PostgreSQL (PO-8, PO-9): run what is due,
sleep until the next pending head is due (or ``idle_ms``), and outlast database outages.

Actor Post needs none of this: its wake is the producer's alarm purpose.
"""

from __future__ import annotations

from typing import Protocol

import anyio

from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.logging import get_logger

__all__ = ["DuePost", "run_forever"]

_log = get_logger("mailbox_actors.post")


class DuePost(Protocol):
    async def run(self) -> int: ...

    async def next_wake(self) -> int | None: ...


async def run_forever(post: DuePost, clock: Clock, *, idle_ms: int = 1_000,
                      error_pause_ms: int = 500) -> None:
    """Until cancelled. A round that fails (the database restarting, a connection cut) is logged
    and tried again after ``error_pause_ms``; work it claimed is recovered when its lease ends."""
    while True:
        try:
            await post.run()
            wake = await post.next_wake()
        except Exception as e:  # an outage must not end the host's wake
            _log.warning("post_round_failed", error=type(e).__name__)
            await anyio.sleep(error_pause_ms / 1000)
            continue
        now = clock.now_ms()
        pause = idle_ms if wake is None else min(idle_ms, max(0, wake - now))
        await anyio.sleep(pause / 1000)
