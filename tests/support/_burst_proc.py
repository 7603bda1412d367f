"""A node firing a burst of alarms, for the SIGKILL-during-a-burst test:
``python tests/support/_burst_proc.py DATA_DIR``.

It starts a node on the system clock over DATA_DIR's ``BenchTicker`` actors (their alarms all
overdue), prints ``STARTED``, and then ``FIRED <object id>`` after each alarm's transaction has
committed, until it is killed. Logs go to stderr so stdout carries only these lines.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio

from mailbox_actors.bench.actors import BenchTicker
from mailbox_actors.node import Node
from mailbox_actors.platform.logging import configure_logging
from mailbox_actors.runtime.actor import AlarmInfo
from mailbox_actors.runtime.settings import RuntimeSettings


async def main(data_dir: str) -> None:
    fire = BenchTicker.alarm

    async def fire_then_say(self: Any, info: AlarmInfo) -> None:
        await fire(self, info)
        sys.stdout.write(f"FIRED {self.ctx.id}\n")  # after the commit: the effect is stored
        sys.stdout.flush()

    BenchTicker.alarm = fire_then_say  # type: ignore[method-assign]
    async with Node(RuntimeSettings(data_dir=data_dir), objects=(BenchTicker,)):
        sys.stdout.write("STARTED\n")
        sys.stdout.flush()
        await anyio.sleep_forever()


if __name__ == "__main__":
    configure_logging(level="warning", stream=sys.stderr)
    anyio.run(main, sys.argv[1])
