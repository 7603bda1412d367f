"""The fault test's checker (CL-16) on synthetic list-append histories: a correct history passes, and
each kind of violation is found and named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from history_checker import Violation, check, load_history, operations


class History:
    """Builds a history the way the workload writes it, with a clock that only moves forward."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._t = 0.0
        self._op = 0

    def _now(self) -> float:
        self._t += 1.0
        return self._t

    def invoke(self, f: str, key: str, value: str | None = None) -> int:
        self._op += 1
        self.events.append({"op": self._op, "process": 0, "type": "invoke", "f": f, "key": key,
                            "value": value, "time": self._now()})
        return self._op

    def end(self, op: int, type_: str, value: Any = None, epoch: int | None = None) -> None:
        first = next(e for e in self.events if e["op"] == op)
        self.events.append({"op": op, "process": 0, "type": type_, "f": first["f"],
                            "key": first["key"], "value": value, "epoch": epoch,
                            "time": self._now()})

    def append(self, key: str, value: str, outcome: str = "ok", epoch: int = 1) -> None:
        op = self.invoke("append", key, value)
        self.end(op, outcome, value if outcome == "ok" else None, epoch if outcome == "ok" else None)

    def read(self, key: str, seen: list[list[Any]]) -> None:
        self.end(self.invoke("read", key), "ok", seen)


def kinds(found: list[Violation]) -> list[str]:
    return sorted(v.kind for v in found)


def test_a_correct_history_passes() -> None:
    """CL-16: acknowledged appends once each in order, an indeterminate one absent, another present
    once, reads that are prefixes, epochs rising across a failover: no violation."""
    h = History()
    h.append("k", "a", epoch=1)
    h.read("k", [["a", 1]])
    h.append("k", "b", outcome="timeout")
    h.append("k", "c", outcome="fail")
    h.append("k", "d", epoch=2)
    h.read("k", [["a", 1], ["c", 2], ["d", 2]])
    h.events.append({"type": "nemesis", "fault": "sigkill", "machine": "m1", "time": 99.0})
    final = {"k": [["a", 1], ["c", 2], ["d", 2]]}
    assert check(h.events, final, [("k", "a"), ("k", "d"), ("k", "c")]) == []


def test_concurrent_appends_may_land_in_either_order() -> None:
    """CL-16: two appends that overlap in time may be ordered either way."""
    h = History()
    a = h.invoke("append", "k", "a")
    b = h.invoke("append", "k", "b")
    h.end(b, "ok", "b", 1)
    h.end(a, "ok", "a", 1)
    assert check(h.events, {"k": [["b", 1], ["a", 1]]}, [("k", "a"), ("k", "b")]) == []


def test_a_lost_acknowledged_append_is_found() -> None:
    """CL-16: an acknowledged append missing from the final list is ``lost``."""
    h = History()
    h.append("k", "a")
    h.append("k", "b")
    found = check(h.events, {"k": [["a", 1]]}, [("k", "a"), ("k", "b")])
    assert kinds(found) == ["lost"] and "'b'" in found[0].detail


def test_an_acknowledged_append_twice_is_a_duplicate() -> None:
    """CL-16: every acknowledged append is present exactly once."""
    h = History()
    h.append("k", "a")
    found = check(h.events, {"k": [["a", 1], ["a", 1]]}, [("k", "a")])
    assert kinds(found) == ["duplicate"]


def test_a_timed_out_append_twice_is_a_duplicate() -> None:
    """CL-16: a timed-out (or failed) append is present at most once."""
    h = History()
    h.append("k", "a", outcome="timeout")
    h.append("k", "b", outcome="fail")
    final = {"k": [["a", 1], ["b", 1], ["a", 1], ["b", 1]]}
    assert kinds(check(h.events, final, [])) == ["duplicate", "duplicate"]


def test_a_value_never_written_is_a_phantom() -> None:
    """CL-16: no value that was never written appears, in the final list or in a read."""
    h = History()
    h.append("k", "a")
    h.read("j", [["zz", 1]])
    final = {"k": [["a", 1], ["x", 1]], "j": []}
    found = check(h.events, final, [("k", "a")])
    assert kinds(found) == ["not_prefix", "phantom", "phantom"]


def test_a_read_that_is_not_a_prefix_is_found() -> None:
    """CL-16: every acknowledged read is a prefix of the final list (order and epochs too)."""
    h = History()
    h.append("k", "a")
    h.append("k", "b")
    h.read("k", [["b", 1]])
    h.read("k", [["a", 2]])
    final = {"k": [["a", 1], ["b", 1]]}
    assert kinds(check(h.events, final, [("k", "a"), ("k", "b")])) == [
        "not_prefix", "not_prefix", "stale_read", "stale_read"]


def test_a_read_missing_an_earlier_acknowledged_append_is_stale() -> None:
    """CL-16 real-time order: a read that began after an append was acknowledged sees it."""
    h = History()
    h.append("k", "a")
    h.read("k", [])
    assert kinds(check(h.events, {"k": [["a", 1]]}, [("k", "a")])) == ["stale_read"]


def test_a_read_shorter_than_an_earlier_read_is_stale() -> None:
    """CL-16 real-time order: a read never sees less than a read that ended before it began."""
    h = History()
    h.append("k", "a", outcome="timeout")
    h.read("k", [["a", 1]])
    h.read("k", [])
    assert kinds(check(h.events, {"k": [["a", 1]]}, [])) == ["stale_read"]


def test_appends_out_of_real_time_order_are_found() -> None:
    """CL-16 real-time order: an append acknowledged before another began precedes it."""
    h = History()
    h.append("k", "a")
    h.append("k", "b", outcome="timeout")
    h.append("k", "c")
    found = check(h.events, {"k": [["c", 1], ["b", 1], ["a", 1]]},
                  [("k", "a"), ("k", "c")])
    assert kinds(found) == ["order", "order"]


def test_a_decreasing_epoch_is_found() -> None:
    """CL-16, CL-11: epochs never decrease along a list (a fenced-off holder's late write)."""
    h = History()
    h.append("k", "a", epoch=3)
    h.append("k", "b", outcome="timeout")
    found = check(h.events, {"k": [["a", 3], ["b", 2]]}, [("k", "a")])
    assert kinds(found) == ["epoch"] and "epoch 2 after an element of epoch 3" in found[0].detail


def test_an_epoch_other_than_the_acknowledged_one_is_found() -> None:
    """CL-16: the element stored carries the epoch its acknowledgement named."""
    h = History()
    h.append("k", "a", epoch=3)
    assert kinds(check(h.events, {"k": [["a", 4]]}, [("k", "a")])) == ["epoch_ack"]


def test_an_acknowledged_write_whose_event_never_arrived_is_found() -> None:
    """CL-16, CL-14: every event of an acknowledged write reaches the webhook receiver."""
    h = History()
    h.append("k", "a")
    h.append("k", "b", outcome="timeout")
    assert kinds(check(h.events, {"k": [["a", 1], ["b", 1]]}, [])) == ["undelivered"]


def test_an_operation_never_completed_is_a_timeout(tmp_path: Path) -> None:
    """CL-16: a history read back from JSON lines; an invoke without completion (its client died)
    counts as timed out, and faults' lines are skipped."""
    lines = [{"op": 1, "type": "invoke", "f": "append", "key": "k", "value": "a", "time": 1.0},
             {"type": "nemesis", "fault": "pg_restart", "time": 2.0}]
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    events = load_history(path)
    (op,) = operations(events)
    assert op.outcome == "timeout" and op.complete_t == float("inf")
    assert check(events, {"k": [["a", 1]]}, []) == []
    assert kinds(check(events, {"k": [["a", 1], ["a", 1]]}, [])) == ["duplicate"]


@pytest.mark.parametrize("n", [200])
def test_many_keys_and_operations_pass_in_one_pass(n: int) -> None:
    """CL-16: a large correct history (interleaved keys, reads after every append) passes."""
    h = History()
    final: dict[str, list[list[Any]]] = {f"k{i}": [] for i in range(5)}
    for i in range(n):
        key = f"k{i % 5}"
        h.append(key, f"v{i}", epoch=1 + i // 50)
        final[key].append([f"v{i}", 1 + i // 50])
        h.read(key, list(final[key]))
    delivered = [(k, v) for k, lst in final.items() for v, _ in lst]
    assert check(h.events, final, delivered) == []
