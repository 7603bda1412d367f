"""The checker of the multi-machine fault test (CL-16): a list-append history judged against the
final lists and the webhook deliveries.

A history is JSON lines of operations, each an ``invoke`` followed by one completion of the same
``op``: ``ok``, ``fail`` (an error answer) or ``timeout`` (no answer). ``f`` is ``append`` (``key``,
``value``; its ``ok`` carries the ``epoch`` it wrote with) or ``read`` (its ``ok`` carries ``value``:
the list as ``[[value, epoch], ...]``). Other lines (the faults' own, ``type: nemesis``) are ignored.
A failed append counts as indeterminate like a timed-out one: a forwarding hop that lost its answer
says ``unavailable`` for a write the holder may have committed. The checker never raises on a bad
history; it returns every violation it finds, so a failing run shows them all.
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Op", "Violation", "check", "load_history", "operations"]

Element = tuple[str, int]  # (value, epoch of the writer's slot lease)


@dataclass(frozen=True)
class Violation:
    kind: str  # lost, duplicate, phantom, not_prefix, stale_read, order, epoch, epoch_ack, undelivered
    key: str
    detail: str


@dataclass
class Op:
    op: int
    f: str
    key: str
    invoke_t: float
    value: Any = None
    outcome: str = "timeout"  # a completion never written (a client killed) is a timeout
    complete_t: float = float("inf")
    result: Any = None
    epoch: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def load_history(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def operations(events: Iterable[Mapping[str, Any]]) -> list[Op]:
    """Pair each invoke with its completion."""
    ops: dict[int, Op] = {}
    for e in events:
        if e.get("type") == "invoke":
            ops[e["op"]] = Op(e["op"], e["f"], e["key"], e["time"], e.get("value"))
        elif e.get("type") in ("ok", "fail", "timeout") and e.get("op") in ops:
            o = ops[e["op"]]
            o.outcome, o.complete_t = e["type"], e["time"]
            if e["type"] == "ok":
                o.result, o.epoch = e.get("value"), e.get("epoch")
    return list(ops.values())


def _elements(raw: Sequence[Any]) -> list[Element]:
    return [(str(v), int(ep)) for v, ep in raw]


def check(events: Iterable[Mapping[str, Any]], final: Mapping[str, Sequence[Any]],
          delivered: Iterable[tuple[str, str]]) -> list[Violation]:
    """Every violation of the history against the final lists (key -> [[value, epoch], ...]) and
    the (key, value) pairs the webhook receiver got."""
    ops = operations(events)
    out: list[Violation] = []
    appends: dict[str, list[Op]] = defaultdict(list)
    reads: dict[str, list[Op]] = defaultdict(list)
    for o in ops:
        (appends if o.f == "append" else reads)[o.key].append(o)
    got = set(delivered)
    for key in sorted(set(appends) | set(reads) | set(final)):
        lst = _elements(final.get(key, []))
        out += _check_key(key, lst, appends[key], reads[key], got)
    return out


def _check_key(key: str, lst: list[Element], appends: list[Op], reads: list[Op],
               delivered: set[tuple[str, str]]) -> list[Violation]:
    out: list[Violation] = []
    bad = lambda kind, detail: out.append(Violation(kind, key, detail))  # noqa: E731
    written = {o.value for o in appends}
    counts = Counter(v for v, _ in lst)
    pos = {v: i for i, (v, _) in enumerate(lst)}
    for v, n in counts.items():
        if v not in written:
            bad("phantom", f"{v!r} in the final list was never written")
        elif n > 1:
            bad("duplicate", f"{v!r} appears {n} times")
    for o in appends:
        if o.outcome == "ok":
            if o.value not in counts:
                bad("lost", f"acknowledged append {o.value!r} (op {o.op}) is missing")
            elif o.epoch is not None and lst[pos[o.value]][1] != o.epoch:
                bad("epoch_ack", f"{o.value!r} acknowledged at epoch {o.epoch}, stored at "
                                 f"{lst[pos[o.value]][1]}")
            if (key, o.value) not in delivered:
                bad("undelivered", f"the event of acknowledged append {o.value!r} never arrived")
    for (_, e1), (v2, e2) in itertools.pairwise(lst):
        if e2 < e1:
            bad("epoch", f"{v2!r} written at epoch {e2} after an element of epoch {e1}")
    # Real time: whatever was acknowledged before an operation began precedes its effect.
    acked = sorted((o for o in appends if o.outcome == "ok" and o.value in pos),
                   key=lambda o: o.complete_t)
    done_t = [o.complete_t for o in acked]
    most = list(_running_max(pos[o.value] for o in acked))
    for o in appends:
        n = bisect.bisect_left(done_t, o.invoke_t)
        if o.value in pos and n and most[n - 1] > pos[o.value]:
            bad("order", f"{o.value!r} (op {o.op}) precedes a value acknowledged before it began")
    ok_reads = sorted((o for o in reads if o.outcome == "ok"), key=lambda o: o.complete_t)
    read_t = [o.complete_t for o in ok_reads]
    read_len = list(_running_max(len(o.result) for o in ok_reads))
    for o in ok_reads:
        seen = _elements(o.result)
        for v, _ in seen:
            if v not in written:
                bad("phantom", f"read op {o.op} saw {v!r}, never written")
        if seen != lst[:len(seen)]:
            bad("not_prefix", f"read op {o.op} ({len(seen)} elements) is not a prefix of the final "
                              "list")
        n = bisect.bisect_left(done_t, o.invoke_t)
        r = bisect.bisect_left(read_t, o.invoke_t)
        if (n and most[n - 1] >= len(seen)) or (r and read_len[r - 1] > len(seen)):
            bad("stale_read", f"read op {o.op} misses what was acknowledged or read before it began")
    return out


def _running_max(values: Iterable[int]) -> Iterable[int]:
    top = -1
    for v in values:
        top = max(top, v)
        yield top
