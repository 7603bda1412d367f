"""A node whose disk fills up, for the OPS-3 test: ``python tests/support/_disk_full_proc.py MODE DATA_DIR``.

MODE ``tmpfs``: DATA_DIR is on a small file system of its own (the test mounts a tmpfs in a private
mount namespace); ``fill`` writes a filler file beside it until the file system answers ENOSPC,
``free`` deletes it. MODE ``fsize``: ``fill`` lowers this process's RLIMIT_FSIZE to 0 (SIGXFSZ
ignored, so growing any file fails with EFBIG), ``free`` lifts it.

The node (Scratch actors, the alarm index, the control database and the queue file with their
webhook consumers) runs on the system clock; commands come one per line on stdin and each answer
is one line on stdout:

- ``init NAME`` -> ``OK <id>`` | ``ERR <code>``; ``put ID K V`` / ``get ID K`` -> ``OK <json>`` |
  ``ERR <code>``; ``alarm ID AT_MS`` sets the actor's alarm; ``fired ID`` -> its alarm runs.
- ``lazy ID AT_MS``: tell the scheduler, as an actor's commit does, that the alarm moved later (the
  index write this needs is lazy: the next flush, on the loop's own schedule).
- ``state`` -> ``STATE <json>``: whether the node failed, whether the index flush is failing, how
  many lazy index changes wait, the index's entry for each actor.
- ``fill`` / ``free`` -> ``FILLED`` / ``FREED``.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import structlog

import actors_for_tests as afs
from mailbox_actors.node import Node
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.wire.errors import MailboxActorsError


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def fill(mode: str, data: Path) -> None:
    if mode == "fsize":
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
        return
    fd = os.open(data.parent / "filler", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (65536, 1):  # big chunks, then byte by byte to the last byte
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)


def free(mode: str, data: Path) -> None:
    if mode == "fsize":
        resource.setrlimit(resource.RLIMIT_FSIZE,
                           (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        return
    (data.parent / "filler").unlink()


async def main(mode: str, data_dir: str) -> None:
    data = Path(data_dir)
    settings = RuntimeSettings(data_dir=data_dir, control_db=str(data / "control.sqlite"),
                               queues_db=str(data / "queues.sqlite"))
    async with Node(settings, objects=afs.ALL_OBJECTS) as node:
        assert node.scheduler is not None
        say("READY")
        while True:
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
            if not line:
                return
            cmd, *args = line.split()
            try:
                out: Any = None
                if cmd == "init":
                    out = await afs.new_scratch(node, args[0])
                elif cmd == "put":
                    out = await afs.scratch(node, args[0], afs.Put(k=args[1], v=args[2]))
                elif cmd == "get":
                    out = await afs.scratch(node, args[0], afs.Get(k=args[1]))
                elif cmd == "alarm":
                    out = await afs.scratch(node, args[0], afs.SetAlarm(at_ms=int(args[1])))
                elif cmd == "fired":
                    out = await afs.scratch(node, args[0], afs.Fired())
                elif cmd == "lazy":
                    node.alarm_book.committed(("scratch", args[0]), int(args[1]))
                elif cmd == "state":
                    index = node.scheduler.index.load()
                    say("STATE " + json.dumps({
                        "failed": node.failed.is_set(),
                        "index_failing": node.alarm_book._index_failing,
                        "lazy": len(node.alarm_book._lazy),
                        "index": {k[1]: v for k, v in index.items()}}))
                    continue
                elif cmd == "fill":
                    fill(mode, data)
                    say("FILLED")
                    continue
                elif cmd == "free":
                    free(mode, data)
                    say("FREED")
                    continue
                say("OK " + json.dumps(out))
            except MailboxActorsError as e:
                say(f"ERR {e.code.value}")


if __name__ == "__main__":
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past RLIMIT_FSIZE fails, not kills
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    anyio.run(main, sys.argv[1], sys.argv[2])
