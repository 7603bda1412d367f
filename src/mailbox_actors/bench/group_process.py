"""Each figure group of ``mailbox-actors bench`` measured in a fresh process of its own.

A user's node does not carry a benchmark's earlier work: its heap, the collector's generations and
thresholds, the allocator's arenas, descriptors, threads and imported modules are its own. So
``measure`` runs every group as ``python -m mailbox_actors.bench.group_process JOB`` (JOB: the
group, its scratch directory, the sizes and the wanted figures, as JSON), started once the group
before it has ended and its files are gone; a group measures the same whether it runs alone
(``--only``) or after all the others. The child writes its progress to the bench's stderr, and its
figures and errors, as one JSON object, to a descriptor of its own (its stdout, which it points at
stderr for anything else that prints). It dies with the bench: it reads its stdin, a pipe the bench
holds, and stops at its end, however the bench ended: interrupted first (what it started is
stopped by its own cleanup), ended outright if that takes longer than ``_CLEANUP_S``.
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
import time
from pathlib import Path

import anyio
import msgspec

from mailbox_actors.bench.figures import Figure, Progress, Sizes

__all__ = ["Job", "Outcome", "run_group"]


class Job(msgspec.Struct, frozen=True, kw_only=True):
    """What a group's process measures (``started``: the run's ``Progress`` origin, so the
    child's progress lines count from the same instant as the bench's)."""

    group: str
    work: str
    sizes: Sizes
    want: list[str]
    progress: bool
    started: float


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    figures: list[Figure]
    errors: list[str]


async def run_group(group: str, work: Path, sizes: Sizes, want: frozenset[str],
                    progress: Progress) -> tuple[list[Figure], list[str], int]:
    """Measure ``group`` in a fresh process; (figures, errors, the process's pid). A process that
    ends without an outcome (killed, crashed) is an error of its group."""
    job = Job(group=group, work=str(work), sizes=sizes, want=sorted(want),
              progress=progress.enabled, started=progress.started)
    cmd = [sys.executable, "-m", "mailbox_actors.bench.group_process",
           msgspec.json.encode(job).decode()]
    async with await anyio.open_process(cmd, stderr=None) as proc:
        assert proc.stdout is not None
        out = b""
        async for chunk in proc.stdout:
            out += chunk
        code = await proc.wait()
    try:
        outcome = msgspec.json.decode(out, type=Outcome)
    except msgspec.DecodeError:
        how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        return [], [f"{group}: its process ended without figures ({how})"], proc.pid
    return outcome.figures, outcome.errors, proc.pid


# After the bench is gone, how long the group may take to stop what it started (its servers,
# its nodes: the ``finally`` blocks an interruption runs) before it is ended outright.
_CLEANUP_S = 30.0


# Set when the bench is gone: the group's outcome has no reader, so the process ends by the
# interruption even where the group's code finished its round meanwhile (or a cancellation it
# was given landed where it was not taken), never with an outcome and exit status 0.
_BENCH_GONE = threading.Event()


def _die_with_the_bench() -> None:
    def watch() -> None:
        try:
            while os.read(0, 4096):
                pass  # the bench never writes
        except OSError:
            pass
        _BENCH_GONE.set()
        _thread.interrupt_main()  # KeyboardInterrupt in the group: anyio cancels, cleanups run
        time.sleep(_CLEANUP_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="bench-lifeline", daemon=True).start()


def _main(text: str) -> None:
    job = msgspec.json.decode(text, type=Job)
    result = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print goes with the progress lines, never into the outcome
    _die_with_the_bench()
    from mailbox_actors.bench.command import GROUPS
    from mailbox_actors.platform.logging import configure_logging

    configure_logging(json=False, level="warning")  # as the bench's own process (command.run)
    # The nodes measured here empty a sleeping actor's -shm at its last close, as serve's do
    # (ADR 0012). The raw sides' own connections to actor files are not counted: each opens
    # and closes with no await between, and a close that finds one keeps that file's index.
    from mailbox_actors.platform.storage.wal_index import empty_indexes_at_close

    empty_indexes_at_close()
    progress = Progress(enabled=job.progress, started=job.started)
    _, fn = GROUPS[job.group]
    errors: list[str] = []
    try:
        figures = anyio.run(fn, Path(job.work), job.sizes, progress, frozenset(job.want), errors)
    except Exception as e:  # one broken group must not hide the others' figures
        errors.append(f"{job.group}: {type(e).__name__}: {e}")
        progress.say(f"{job.group} failed: {type(e).__name__}: {e}")
        figures = []
    if _BENCH_GONE.is_set():
        raise KeyboardInterrupt  # as the interruption would have ended it: no outcome
    result.write(msgspec.json.encode(Outcome(figures=figures, errors=errors)))
    result.flush()


if __name__ == "__main__":
    _main(sys.argv[1])
