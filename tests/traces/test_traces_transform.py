"""Transformations: rescale (checked against the artifact's scaled traces), window, compress, cap,
and the canonical CSV round trip."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traces
from traces import TraceError, cap, compress, rescale, window

import _traces_oracle as oracle
from _traces_strategies import valid_traces


def step_value(steps, t):
    """Value of a (time, count) step function at time t (after events at t)."""
    value = 0
    for time, count in steps:
        if time > t:
            break
        value = count
    return value


def floor_minmax(counts, lo, hi):
    low, high = min(counts), max(counts)
    return [lo + (c - low) * (hi - lo) // (high - low) for c in counts]


@pytest.mark.parametrize(
    "original, scaled",
    [
        ("oobleck-artifact/p3-trace.csv", "oobleck-artifact/scaled/scale_p3-trace.csv"),
        # the file named scale_gcp-trace.csv is, on its timestamps and counts, g4dn rescaled
        ("oobleck-artifact/g4dn-trace.csv", "oobleck-artifact/scaled/scale_gcp-trace.csv"),
    ],
)
def test_rescale_reproduces_the_artifact_scaled_traces(shared_dir, original, scaled):
    root = shared_dir / "traces"
    steps = oracle.count_steps([(t, k) for t, k, _ in oracle.read_event_csv(root / original)])
    scaled_steps = oracle.count_steps([(t, k) for t, k, _ in oracle.read_event_csv(root / scaled)])
    # the published scaled file is the floor min-max map of the original, timestamp by timestamp
    expected = floor_minmax([c for _, c in steps], 15, 30)
    assert [t for t, _ in scaled_steps] == [t for t, _ in steps]
    assert [c for _, c in scaled_steps] == expected
    ours = rescale(traces.load(root / original), 15, 30, rng=np.random.default_rng(3))
    ours_steps = list(zip(ours.live_counts().time_s, ours.live_counts().live_nodes))
    assert [step_value(ours_steps, t) for t, _ in steps] == expected


@settings(max_examples=80, deadline=None)
@given(valid_traces(), st.integers(0, 20), st.integers(0, 20), st.integers(0, 2**32 - 1))
def test_rescale_keeps_timestamps_and_maps_min_max(trace, a, b, seed):
    lo, hi = min(a, b), max(a, b)
    out = rescale(trace, lo, hi, rng=np.random.default_rng(seed))
    steps = list(zip(trace.live_counts().time_s, trace.live_counts().live_nodes))
    counts = [c for _, c in steps]
    expected = [hi] * len(counts) if min(counts) == max(counts) else floor_minmax(counts, lo, hi)
    out_steps = list(zip(out.live_counts().time_s, out.live_counts().live_nodes))
    assert {t for t, _ in out_steps} <= {t for t, _ in steps}
    assert [step_value(out_steps, t) for t, _ in steps] == expected


@settings(max_examples=80, deadline=None)
@given(valid_traces(), st.floats(0.01, 1000))
def test_compress_divides_every_time(trace, factor):
    out = compress(trace, factor)
    assert [(e.kind, e.node) for e in out.events] == [(e.kind, e.node) for e in trace.events]
    assert [e.time_s for e in out.events] == [e.time_s / factor for e in trace.events]
    assert out.stats().mean_nodes == pytest.approx(trace.stats().mean_nodes)


@settings(max_examples=80, deadline=None)
@given(valid_traces(), st.data())
def test_window_starts_from_the_live_nodes_and_keeps_the_step_function(trace, data):
    times = sorted({e.time_s for e in trace.events})
    start = data.draw(st.sampled_from(times + [times[0] / 2, times[-1] + 1]))
    end = start + data.draw(st.sampled_from([0.0, 0.5, 10.0, 1e4, 1e7]))
    out = window(trace, start, end)
    assert out.nodes_at(0.0) == trace.nodes_at(start)
    steps = list(zip(trace.live_counts().time_s, trace.live_counts().live_nodes))
    out_steps = list(zip(out.live_counts().time_s, out.live_counts().live_nodes))
    for t in [start] + [t for t in times if start < t <= end]:
        assert step_value(out_steps, t - start) == step_value(steps, t)
    assert all(0 <= e.time_s <= end - start for e in out.events)
    kept = window(trace, start, end, rebase=False)
    assert [e.time_s - start for e in kept.events] == [e.time_s for e in out.events]


@settings(max_examples=80, deadline=None)
@given(valid_traces(), st.integers(0, 12))
def test_cap_with_backfill_is_exactly_min_of_live_and_cap(trace, limit):
    out = cap(trace, limit)
    out_steps = list(zip(out.live_counts().time_s, out.live_counts().live_nodes))
    for t, n in zip(trace.live_counts().time_s, trace.live_counts().live_nodes):
        assert step_value(out_steps, t) == min(n, limit)
    assert set(e.node for e in out.events) <= set(e.node for e in trace.events)
    refused = cap(trace, limit, backfill=False)
    refused_steps = list(zip(refused.live_counts().time_s, refused.live_counts().live_nodes))
    for t, n in zip(trace.live_counts().time_s, trace.live_counts().live_nodes):
        assert step_value(refused_steps, t) <= min(n, limit)


def test_cap_by_hand():
    trace = traces.Trace.from_tuples(
        [(0, "add", "a"), (0, "add", "b"), (0, "add", "c"), (5, "remove", "a"), (7, "remove", "c"), (9, "add", "d")]
    )
    waited = cap(trace, 2)
    assert [(e.time_s, e.kind, e.node) for e in waited.events] == [
        (0, "add", "a"),
        (0, "add", "b"),
        (5, "remove", "a"),
        (5, "add", "c"),
        (7, "remove", "c"),
        (9, "add", "d"),
    ]
    refused = cap(trace, 2, backfill=False)
    assert [(e.time_s, e.kind, e.node) for e in refused.events] == [
        (0, "add", "a"),
        (0, "add", "b"),
        (5, "remove", "a"),
        (9, "add", "d"),
    ]


@settings(max_examples=80, deadline=None)
@given(valid_traces(), st.sampled_from([1, 3, 7, 60, 0.3, 1e-3]))
def test_canonical_csv_round_trips_exactly(tmp_path_factory, trace, factor):
    trace = compress(trace, factor)  # times that are not whole milliseconds
    path = tmp_path_factory.mktemp("rt") / "t.csv"
    traces.save_events_csv(trace, path)
    back = traces.load(path)
    assert back.events == trace.events and back.horizon_s is None


@settings(max_examples=40, deadline=None)
@given(valid_traces(), st.floats(0.0, 1e6, allow_nan=False))
def test_a_horizon_round_trips_and_survives_the_transforms(tmp_path_factory, trace, past_s):
    """A trace observed past its last event keeps that end through the canonical CSV,
    a rename, a compression, a cap, a rescale and a window."""
    trace = traces.Trace(trace.events, trace.name, trace.end_s + past_s)
    path = tmp_path_factory.mktemp("rt") / "t.csv"
    traces.save_events_csv(trace, path)
    back = traces.load(path)
    assert back.events == trace.events and back.horizon_s == trace.horizon_s
    assert back.renamed("x").stop_s == compress(back, 1).stop_s == cap(back, 3).stop_s == trace.stop_s
    assert compress(back, 4).duration_s == pytest.approx(trace.duration_s / 4)
    if trace.events:
        assert traces.rescale(back, 1, 3).stop_s == trace.stop_s
    middle = trace.stop_s / 2
    assert window(back, middle, trace.stop_s + 10).stop_s == trace.stop_s - middle
    assert window(back, 0, middle).stop_s == middle


def test_a_horizon_before_the_last_event_is_refused(tmp_path):
    with pytest.raises(TraceError, match="horizon 5 s is before the last event at 9 s"):
        traces.Trace((traces.TraceEvent(0, "add", "a"), traces.TraceEvent(9, "remove", "a")), "t", 5.0)
    path = tmp_path / "t.csv"
    path.write_text("0,add,a\n9000,remove,a\n# horizon_ms=5000\n")
    with pytest.raises(TraceError, match="horizon 5 s is before the last event at 9 s"):
        traces.load(path)


def test_canonical_csv_text():
    trace = traces.Trace.from_tuples([(0, "add", "a"), (601.2, "remove", "a"), (0.1 + 0.2, "add", "b")][::2])
    out = io.StringIO()
    traces.write_events_csv(traces.Trace.from_tuples([(0, "add", "a"), (601.2, "remove", "a")]), out)
    assert out.getvalue() == "0,add,a\n601200,remove,a\n"
    out = io.StringIO()
    traces.write_events_csv(trace, out)
    assert out.getvalue() == "0,add,a\n300.00000000000004,add,b\n"
    with pytest.raises(TraceError, match="cannot be written"):
        traces.write_events_csv(traces.Trace.from_tuples([(0, "add", "a,b")]), io.StringIO())


def test_transformation_argument_errors():
    trace = traces.Trace.from_tuples([(0, "add", "a")])
    with pytest.raises(TraceError, match="lo=5 > hi=3"):
        rescale(trace, 5, 3)
    with pytest.raises(TraceError, match="whole number >= 0"):
        rescale(trace, -1, 3)
    for factor in (0, -2, math.nan, math.inf):
        with pytest.raises(TraceError, match="compression factor"):
            compress(trace, factor)
    with pytest.raises(TraceError, match="start_s <= end_s"):
        window(trace, 10, 5)
    with pytest.raises(TraceError, match="max_nodes must be"):
        cap(trace, -1)
