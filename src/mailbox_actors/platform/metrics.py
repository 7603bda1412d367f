"""In-process metrics for one node: counters, gauges, histograms, and their Prometheus text (0.0.4).

Owns the registry a node serves at ``GET /metrics``. Recording runs on every RPC, so it is one dict
lookup and an add; names and labels are checked once, when a series first appears. It must never
hold message content or addresses (label values containing ``@`` are refused), and it has no
dependencies: it is not a client library and does no I/O.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

__all__ = [
    "BUCKETS",
    "CONTENT_TYPE",
    "GaugeFn",
    "HistogramSnapshot",
    "Kind",
    "Labels",
    "Metrics",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds; from half a millisecond (one in-process RPC) to ten (a slow provider call).
BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
)

Labels = tuple[tuple[str, str], ...]
Kind = Literal["counter", "gauge", "histogram"]
# A scrape-time gauge: one value, or one value per label set.
GaugeFn = Callable[[], float | Mapping[Labels, float]]

_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    count: int
    sum: float
    # (upper bound, cumulative count), ending with (+inf, count).
    buckets: tuple[tuple[float, int], ...]


class _Cell:
    """One counter or gauge series. Mutable, so label orderings of one series can share it."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0


class _Hist:
    __slots__ = ("count", "counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * len(BUCKETS)  # per bucket, not cumulative: observe adds to one slot
        self.sum = 0.0
        self.count = 0


_S = TypeVar("_S", _Cell, _Hist)


class Metrics:
    """A registry of named series keyed by ``(name, labels)``; single event loop, no locking."""

    def __init__(self, *, prefix: str = "") -> None:
        # Every name is exported with this prefix (OPS-10: "mailbox_actors_" in a node); callers
        # record and read by the bare name.
        if prefix and not _NAME_RE.match(prefix):
            raise ValueError(f"metric prefix {prefix!r} must match {_NAME_RE.pattern}")
        self.prefix = prefix
        self._unlabelled: set[str] = set()  # counters declared without labels: 0 from the start
        # Keyed by the labels exactly as callers pass them (the fast path) and also by the
        # canonical (sorted) labels; both keys point to the same cell.
        self._counters: dict[tuple[str, Labels], _Cell] = {}
        self._gauges: dict[tuple[str, Labels], _Cell] = {}
        self._hists: dict[tuple[str, Labels], _Hist] = {}
        self._kinds: dict[str, Kind] = {}
        self._help: dict[str, str] = {}
        self._gauge_fns: dict[str, GaugeFn] = {}
        # Unique series per name, canonical labels, in creation order; what render walks.
        self._series: dict[str, dict[Labels, _Cell | _Hist]] = {}
        self._scrape_errors: dict[str, int] = {}

    # -- recording (hot path) -------------------------------------------------------------------

    def inc(self, name: str, labels: Labels = (), value: float = 1) -> None:
        """Add ``value`` (>= 0) to a counter."""
        if value < 0:
            raise ValueError(f"counter {name!r} cannot decrease (inc by {value})")
        cell = self._counters.get((name, labels))
        if cell is None:
            cell = self._new_cell(self._counters, "counter", name, labels)
        cell.value += value

    def set_gauge(self, name: str, value: float, labels: Labels = ()) -> None:
        """Set a gauge to ``value``."""
        cell = self._gauges.get((name, labels))
        if cell is None:
            cell = self._new_cell(self._gauges, "gauge", name, labels)
        cell.value = value

    def observe(self, name: str, value_seconds: float, labels: Labels = ()) -> None:
        """Record one duration in a histogram with the fixed ``BUCKETS``."""
        hist = self._hists.get((name, labels))
        if hist is None:
            hist = self._new_series(self._hists, "histogram", name, labels, _Hist)
        # bisect_left finds the first bound >= value: Prometheus buckets are "less or equal".
        i = bisect.bisect_left(BUCKETS, value_seconds)
        if i < len(BUCKETS):
            hist.counts[i] += 1
        hist.sum += value_seconds
        hist.count += 1

    # -- definition -----------------------------------------------------------------------------

    def describe(self, name: str, help: str, kind: Kind, labels: tuple[str, ...] = ()) -> None:
        """Give a metric its HELP text and TYPE; it is listed even before it has a sample. A
        counter described without ``labels`` exports 0 until it is first incremented, so a rate
        over it is defined from the first scrape (OPS-10)."""
        self._claim(name, kind)
        self._help[name] = help
        if kind == "counter" and not labels:
            self._unlabelled.add(name)
        else:
            self._unlabelled.discard(name)

    def register_gauge_fn(self, name: str, fn: GaugeFn, help: str,
                          kind: Literal["gauge", "counter"] = "gauge") -> None:
        """A value computed at scrape time (open actors, pending alarms, queue depth); ``kind``
        "counter" for one that only grows (the process's CPU seconds)."""
        if self._series.get(name):
            raise ValueError(f"metric {name!r} already has recorded samples")
        self._claim(name, kind)
        self._help[name] = help
        self._gauge_fns[name] = fn

    # -- reading --------------------------------------------------------------------------------

    def get(self, name: str, labels: Labels = ()) -> float:
        """The value of a counter or gauge series; 0 when it has never been recorded."""
        kind = self._kinds.get(name)
        if kind == "histogram":
            raise TypeError(f"{name!r} is a histogram: use get_histogram")
        canon = _canonical(labels)
        fn = self._gauge_fns.get(name)
        if fn is not None:
            result = fn()
            if isinstance(result, Mapping):
                found = {_canonical(k): v for k, v in result.items()}.get(canon)
                return float(found) if found is not None else 0.0
            return float(result) if not canon else 0.0
        series = self._series.get(name, {}).get(canon)
        return series.value if isinstance(series, _Cell) else 0.0

    def get_histogram(self, name: str, labels: Labels = ()) -> HistogramSnapshot:
        """Count, sum and cumulative buckets of a histogram series (all zero if never observed)."""
        kind = self._kinds.get(name)
        if kind is not None and kind != "histogram":
            raise TypeError(f"{name!r} is a {kind}, not a histogram")
        series = self._series.get(name, {}).get(_canonical(labels))
        hist = series if isinstance(series, _Hist) else _Hist()
        return HistogramSnapshot(hist.count, hist.sum, _cumulative(hist))

    def render_prometheus(self) -> str:
        """Every metric in the Prometheus text exposition format, version 0.0.4."""
        out: list[str] = []
        p = self.prefix
        for bare in sorted(self._kinds):
            kind = self._kinds[bare]
            name = p + bare
            if bare in self._help:
                out.append(f"# HELP {name} {_escape_help(self._help[bare])}")
            out.append(f"# TYPE {name} {kind}")
            fn = self._gauge_fns.get(bare)
            if fn is not None:
                out.extend(self._render_gauge_fn(bare, fn))
                continue
            recorded = self._series.get(bare, {})
            if not recorded and bare in self._unlabelled:
                out.append(f"{name} 0")
            for labels, series in recorded.items():
                if isinstance(series, _Cell):
                    out.append(f"{name}{_render_labels(labels)} {_fmt(series.value)}")
                    continue
                for bound, cumulative in _cumulative(series):
                    le = (*labels, ("le", _fmt(bound)))
                    out.append(f"{name}_bucket{_render_labels(le)} {cumulative}")
                out.append(f"{name}_sum{_render_labels(labels)} {_fmt(series.sum)}")
                out.append(f"{name}_count{_render_labels(labels)} {series.count}")
        if self._scrape_errors:
            errors = p + "metrics_gauge_fn_errors_total"
            out.append(f"# HELP {errors} Scrape-time gauges that raised.")
            out.append(f"# TYPE {errors} counter")
            for metric, n in sorted(self._scrape_errors.items()):
                rendered = _render_labels((("metric", metric),))
                out.append(f"{errors}{rendered} {n}")
        return "\n".join(out) + "\n" if out else ""

    # -- internals ------------------------------------------------------------------------------

    def _render_gauge_fn(self, name: str, fn: GaugeFn) -> Iterable[str]:
        try:
            result = fn()
            items = (
                [(_canonical(k), float(v)) for k, v in result.items()]
                if isinstance(result, Mapping)
                else [((), float(result))]
            )
            for labels, _ in items:
                _check_labels(name, labels)
        except Exception:
            # One broken gauge must not take /metrics down with it; it is counted instead.
            self._scrape_errors[name] = self._scrape_errors.get(name, 0) + 1
            return []
        return [f"{self.prefix}{name}{_render_labels(labels)} {_fmt(v)}" for labels, v in items]

    def _claim(self, name: str, kind: Kind) -> None:
        known = self._kinds.get(name)
        if known is None:
            if not _NAME_RE.match(name):
                raise ValueError(f"metric name {name!r} must match {_NAME_RE.pattern}")
            self._kinds[name] = kind
        elif known != kind:
            raise ValueError(f"metric {name!r} is a {known}, not a {kind}")

    def _new_cell(
        self, index: dict[tuple[str, Labels], _Cell], kind: Kind, name: str, labels: Labels
    ) -> _Cell:
        return self._new_series(index, kind, name, labels, _Cell)

    def _new_series(
        self,
        index: dict[tuple[str, Labels], _S],
        kind: Kind,
        name: str,
        labels: Labels,
        make: Callable[[], _S],
    ) -> _S:
        if name in self._gauge_fns:
            raise ValueError(f"metric {name!r} is computed at scrape time; it cannot be set")
        self._claim(name, kind)
        canon = _canonical(labels)
        _check_labels(name, canon)
        if kind == "histogram" and any(k == "le" for k, _ in canon):
            raise ValueError(f"histogram {name!r} cannot have a label named 'le'")
        existing = index.get((name, canon))
        series = existing if existing is not None else make()
        index[(name, canon)] = series
        index[(name, labels)] = series
        self._series.setdefault(name, {})[canon] = series
        return series


def _canonical(labels: Labels) -> Labels:
    return tuple(sorted(labels))


def _check_labels(name: str, labels: Labels) -> None:
    seen: set[str] = set()
    for k, v in labels:
        if not _LABEL_RE.match(k) or k.startswith("__"):
            raise ValueError(f"label name {k!r} of {name!r} must match {_LABEL_RE.pattern}")
        if k in seen:
            raise ValueError(f"label {k!r} of {name!r} given twice")
        seen.add(k)
        if "@" in v:
            # /metrics is served without a token (RPC-7); an address must never reach it.
            raise ValueError(f"label {k!r} of {name!r} looks like it carries an address")


def _cumulative(hist: _Hist) -> tuple[tuple[float, int], ...]:
    running = 0
    out: list[tuple[float, int]] = []
    for bound, n in zip(BUCKETS, hist.counts, strict=True):
        running += n
        out.append((float(bound), running))
    out.append((math.inf, hist.count))
    return tuple(out)


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == int(v) and abs(v) < 2**53:
        return str(int(v))
    return repr(float(v))


def _escape_help(s: str) -> str:
    return s.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_value(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _render_labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape_value(v)}"' for k, v in labels) + "}"
