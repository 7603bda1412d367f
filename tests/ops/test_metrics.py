"""The in-process metrics registry and its Prometheus text exposition (RPC-7 ``GET /metrics``)."""

from __future__ import annotations

import math
import re

import pytest

from mailbox_actors.platform.metrics import BUCKETS, CONTENT_TYPE, Labels, Metrics

OP_GET: Labels = (("namespace", "identity_mailbox"), ("op", "get"))

# One sample line of the text format 0.0.4: name, optional labels, value.
SAMPLE_RE = re.compile(
    r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
    r'(,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*\})? (-?[0-9.e+-]+|\+Inf|-Inf|NaN)$'
)


def _check_exposition(text: str) -> None:
    assert text.endswith("\n")
    for line in text.splitlines():
        assert line.startswith(("# HELP ", "# TYPE ")) or SAMPLE_RE.match(line), line


# -- counters and gauges ------------------------------------------------------------------------


def test_counter_counts_per_label_set() -> None:
    """inc adds to the series named by (name, labels); other label sets are separate (RPC-7, OPS-10)."""
    m = Metrics()
    m.inc("rpc_requests_total", OP_GET)
    m.inc("rpc_requests_total", OP_GET, 2)
    m.inc("rpc_requests_total", (("namespace", "identity_mailbox"), ("op", "put")))
    assert m.get("rpc_requests_total", OP_GET) == 3
    assert m.get("rpc_requests_total", (("namespace", "identity_mailbox"), ("op", "put"))) == 1


def test_counter_without_labels() -> None:
    """A counter with no labels counts on its own, such as rpc_owner_mismatch_total (RPC-3)."""
    m = Metrics()
    assert m.get("rpc_owner_mismatch_total") == 0
    m.inc("rpc_owner_mismatch_total")
    assert m.get("rpc_owner_mismatch_total") == 1
    assert "rpc_owner_mismatch_total 1\n" in m.render_prometheus()


def test_label_order_does_not_split_a_series() -> None:
    """The same labels in another order update the same series, rendered once (RPC-7, OPS-10)."""
    m = Metrics()
    m.inc("x_total", (("a", "1"), ("b", "2")))
    m.inc("x_total", (("b", "2"), ("a", "1")))
    assert m.get("x_total", (("a", "1"), ("b", "2"))) == 2
    assert m.get("x_total", (("b", "2"), ("a", "1"))) == 2
    samples = [ln for ln in m.render_prometheus().splitlines() if ln.startswith("x_total")]
    assert samples == ['x_total{a="1",b="2"} 2']


def test_counter_cannot_decrease() -> None:
    """A negative increment is refused: Prometheus counters only go up (RPC-7, OPS-10)."""
    m = Metrics()
    with pytest.raises(ValueError):
        m.inc("x_total", (), -1)


def test_gauge_is_set_not_added() -> None:
    """set_gauge replaces the value (RPC-7, OPS-10)."""
    m = Metrics()
    m.set_gauge("actors_open", 5)
    m.set_gauge("actors_open", 3)
    assert m.get("actors_open") == 3
    m.set_gauge("queue_depth", 1.5, (("queue", "events"),))
    assert m.get("queue_depth", (("queue", "events"),)) == 1.5


def test_one_name_one_kind() -> None:
    """A name used as a counter cannot also be a gauge or a histogram (RPC-7, OPS-10)."""
    m = Metrics()
    m.inc("x_total")
    with pytest.raises(ValueError):
        m.set_gauge("x_total", 1)
    with pytest.raises(ValueError):
        m.observe("x_total", 0.1)
    with pytest.raises(ValueError):
        m.describe("x_total", "X.", "gauge")


@pytest.mark.parametrize("name", ["", "1abc", "a-b", "a b", "a{b}"])
def test_bad_metric_names_are_refused(name: str) -> None:
    """Names outside the Prometheus name syntax are refused when first used (RPC-7, OPS-10)."""
    with pytest.raises(ValueError):
        Metrics().inc(name)


@pytest.mark.parametrize(
    "labels",
    [(("1a", "v"),), (("a-b", "v"),), (("__name", "v"),), (("a", "1"), ("a", "2"))],
    ids=repr,
)
def test_bad_labels_are_refused(labels: Labels) -> None:
    """Invalid, reserved or repeated label names are refused when a series first appears (RPC-7, OPS-10)."""
    with pytest.raises(ValueError):
        Metrics().inc("x_total", labels)


def test_addresses_are_refused_as_label_values() -> None:
    """/metrics is public, so a label value that looks like an address is refused (RPC-7, CL-5)."""
    with pytest.raises(ValueError, match="address"):
        Metrics().inc("sent_total", (("rcpt", "bob@example.com"),))


# -- histograms ---------------------------------------------------------------------------------


def test_histogram_buckets_are_the_fixed_set() -> None:
    """Histograms use the fixed buckets from 0.5 ms to 10 s (RPC-7, OPS-10)."""
    assert BUCKETS == (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                       5, 10)


def test_histogram_counts_sum_and_cumulative_buckets() -> None:
    """observe puts each value in the first bucket whose bound is >= it; buckets are cumulative
    (RPC-7, OPS-10)."""
    m = Metrics()
    for v in (0.0005, 0.0007, 0.003, 2.5, 11.0):
        m.observe("rpc_seconds", v, OP_GET)
    snap = m.get_histogram("rpc_seconds", OP_GET)
    assert snap.count == 5
    assert snap.sum == pytest.approx(0.0005 + 0.0007 + 0.003 + 2.5 + 11.0)
    cum = dict(snap.buckets)
    assert cum[0.0005] == 1  # a value equal to a bound falls in that bucket
    assert cum[0.001] == 2
    assert cum[0.0025] == 2
    assert cum[0.005] == 3
    assert cum[2.5] == 4
    assert cum[10.0] == 4
    assert cum[math.inf] == 5
    counts = [n for _, n in snap.buckets]
    assert counts == sorted(counts)


def test_histogram_exposition() -> None:
    """A histogram renders _bucket lines with le (ending +Inf), then _sum and _count (RPC-7, OPS-10)."""
    m = Metrics()
    m.describe("rpc_seconds", "Time to handle one RPC.", "histogram")
    m.observe("rpc_seconds", 0.002, (("op", "get"),))
    text = m.render_prometheus()
    _check_exposition(text)
    lines = text.splitlines()
    assert lines[0] == "# HELP rpc_seconds Time to handle one RPC."
    assert lines[1] == "# TYPE rpc_seconds histogram"
    buckets = [ln for ln in lines if ln.startswith("rpc_seconds_bucket")]
    assert len(buckets) == len(BUCKETS) + 1
    assert buckets[0] == 'rpc_seconds_bucket{op="get",le="0.0005"} 0'
    assert 'rpc_seconds_bucket{op="get",le="0.0025"} 1' in buckets
    assert buckets[-1] == 'rpc_seconds_bucket{op="get",le="+Inf"} 1'
    assert 'rpc_seconds_sum{op="get"} 0.002' in lines
    assert 'rpc_seconds_count{op="get"} 1' in lines


def test_histogram_refuses_le_label() -> None:
    """``le`` is the bucket label, so a histogram cannot use it (RPC-7, OPS-10)."""
    with pytest.raises(ValueError):
        Metrics().observe("x_seconds", 1.0, (("le", "1"),))


def test_get_is_for_counters_and_gauges() -> None:
    """get on a histogram is a TypeError; get_histogram on a counter too (RPC-7, OPS-10)."""
    m = Metrics()
    m.observe("h_seconds", 0.1)
    m.inc("c_total")
    with pytest.raises(TypeError):
        m.get("h_seconds")
    with pytest.raises(TypeError):
        m.get_histogram("c_total")
    assert m.get_histogram("never_seen").count == 0


# -- exposition ---------------------------------------------------------------------------------


def test_exposition_has_help_type_and_samples() -> None:
    """render_prometheus writes HELP and TYPE lines and one sample per series, in text format
    0.0.4 (RPC-7)."""
    m = Metrics()
    m.describe("rpc_requests_total", "RPC requests handled.", "counter")
    m.inc("rpc_requests_total", OP_GET, 3)
    m.set_gauge("actors_open", 2)
    text = m.render_prometheus()
    _check_exposition(text)
    assert text == (
        "# TYPE actors_open gauge\n"
        "actors_open 2\n"
        "# HELP rpc_requests_total RPC requests handled.\n"
        "# TYPE rpc_requests_total counter\n"
        'rpc_requests_total{namespace="identity_mailbox",op="get"} 3\n'
    )
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def test_label_values_and_help_are_escaped() -> None:
    """Backslashes, quotes and newlines in label values, and in help text, are escaped (RPC-7, OPS-10)."""
    m = Metrics()
    m.describe("x_total", "Line one\nline two \\ end.", "counter")
    m.inc("x_total", (("path", 'C:\\dir "q"\nnext'),))
    text = m.render_prometheus()
    _check_exposition(text)
    assert "# HELP x_total Line one\\nline two \\\\ end." in text
    assert 'x_total{path="C:\\\\dir \\"q\\"\\nnext"} 1' in text


def test_values_are_formatted_for_prometheus() -> None:
    """Integral values print without a fraction; infinities and NaN use Prometheus spellings
    (RPC-7, OPS-10)."""
    m = Metrics()
    m.set_gauge("f", 12.0)
    m.set_gauge("a", 0.25)
    m.set_gauge("b", math.inf)
    m.set_gauge("c", -math.inf)
    m.set_gauge("d", math.nan)
    m.set_gauge("e", 1e20)
    lines = m.render_prometheus().splitlines()
    assert "a 0.25" in lines
    assert "b +Inf" in lines
    assert "c -Inf" in lines
    assert "d NaN" in lines
    assert "e 1e+20" in lines  # past 2**53 integers are not exact: keep float notation
    assert "f 12" in lines


def test_described_metric_without_samples_is_listed() -> None:
    """A described metric appears (HELP and TYPE) before it has any sample; a counter without
    labels exports 0 from the start (OPS-10), one with labels no sample until a series exists;
    the prefix is on every exported name, not on the names code records by."""
    m = Metrics()
    m.describe("alarms_fired_total", "Alarms fired.", "counter", ("namespace",))
    assert m.render_prometheus() == (
        "# HELP alarms_fired_total Alarms fired.\n# TYPE alarms_fired_total counter\n"
    )
    m = Metrics(prefix="mailbox_actors_")
    m.describe("forwarded_total", "Forwarded.", "counter")
    assert m.render_prometheus() == (
        "# HELP mailbox_actors_forwarded_total Forwarded.\n"
        "# TYPE mailbox_actors_forwarded_total counter\nmailbox_actors_forwarded_total 0\n"
    )
    m.inc("forwarded_total")
    assert m.get("forwarded_total") == 1
    assert "mailbox_actors_forwarded_total 1\n" in m.render_prometheus()


def test_empty_registry_renders_nothing() -> None:
    """An empty registry renders an empty document (RPC-7, OPS-10)."""
    assert Metrics().render_prometheus() == ""


# -- scrape-time gauges -------------------------------------------------------------------------


def test_gauge_fn_is_computed_at_scrape_time() -> None:
    """A registered gauge function is called at each scrape and by get (CL-3)."""
    m = Metrics()
    pending = [4]
    m.register_gauge_fn("alarms_pending", lambda: pending[0], "Alarms not yet fired.")
    assert "alarms_pending 4\n" in m.render_prometheus()
    pending[0] = 7
    assert "alarms_pending 7\n" in m.render_prometheus()
    assert m.get("alarms_pending") == 7


def test_gauge_fn_with_labels() -> None:
    """A gauge function may return one value per label set (RPC-7, OPS-10)."""
    m = Metrics()
    m.register_gauge_fn(
        "actors_open",
        lambda: {(("namespace", "identity_mailbox"),): 3, (("namespace", "tenant_quota"),): 1},
        "Open actors.",
    )
    text = m.render_prometheus()
    _check_exposition(text)
    assert 'actors_open{namespace="identity_mailbox"} 3' in text
    assert 'actors_open{namespace="tenant_quota"} 1' in text
    assert m.get("actors_open", (("namespace", "tenant_quota"),)) == 1
    assert m.get("actors_open", (("namespace", "other"),)) == 0


def test_failing_gauge_fn_does_not_break_the_scrape() -> None:
    """A gauge function that raises is left out and counted; the rest still renders (RPC-7, OPS-10)."""
    m = Metrics()

    def broken() -> float:
        raise RuntimeError("boom")

    m.register_gauge_fn("broken", broken, "Always fails.")
    m.inc("ok_total")
    text = m.render_prometheus()
    _check_exposition(text)
    assert "ok_total 1" in text
    assert 'metrics_gauge_fn_errors_total{metric="broken"} 1' in text
    assert "\nbroken " not in text


def test_gauge_fn_name_cannot_be_set() -> None:
    """A name computed at scrape time cannot also be set or incremented (RPC-7, OPS-10)."""
    m = Metrics()
    m.register_gauge_fn("g", lambda: 1.0, "G.")
    with pytest.raises(ValueError):
        m.set_gauge("g", 2)
    with pytest.raises(ValueError):
        m.inc("g")
