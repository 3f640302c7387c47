"""The canonical model: validation on construction, the live-count step function, statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings

from traces import Trace, TraceError, TraceEvent

import _traces_oracle as oracle
from _traces_strategies import valid_traces


def make(*rows, name="t"):
    return Trace.from_tuples(rows, name)


EXAMPLE = make(
    (0, "add", "a"),
    (0, "add", "b"),
    (0, "add", "c"),
    (10, "remove", "a"),
    (10, "add", "d"),
    (30, "remove", "b"),
    (30, "remove", "c"),
    (40, "add", "e"),
)


def test_event_validation() -> None:
    with pytest.raises(TraceError, match="unknown event kind 'fail'"):
        TraceEvent(0.0, "fail", "a")
    with pytest.raises(TraceError, match="finite and >= 0"):
        TraceEvent(-1.0, "add", "a")
    with pytest.raises(TraceError, match="finite and >= 0"):
        TraceEvent(math.inf, "add", "a")
    with pytest.raises(TraceError, match="must be a number"):
        TraceEvent("5", "add", "a")  # type: ignore[arg-type]
    with pytest.raises(TraceError, match="non-empty string"):
        TraceEvent(0.0, "add", "")
    assert TraceEvent(3, "add", "a").time_s == 3.0


def test_trace_validation_names_the_event() -> None:
    with pytest.raises(TraceError, match=r"event #1 time 1 s is earlier"):
        make((2, "add", "a"), (1, "add", "b"))
    with pytest.raises(TraceError, match=r"event #2 adds 'a', which is already present \(added at event #0\)"):
        make((0, "add", "a"), (1, "add", "b"), (2, "add", "a"))
    with pytest.raises(TraceError, match=r"event #0 removes 'z', which is not present \(it was never added\)"):
        make((0, "remove", "z"))
    with pytest.raises(TraceError, match="is a tuple, not a TraceEvent"):
        Trace(((0, "add", "a"),))  # type: ignore[arg-type]


def test_live_counts_take_all_events_of_a_timestamp():
    frame = EXAMPLE.live_counts()
    assert list(frame.columns) == ["time_s", "live_nodes"]
    assert frame.values.tolist() == [[0, 3], [10, 3], [30, 1], [40, 2]]
    assert frame.live_nodes.dtype == np.int64


def test_membership_queries():
    assert EXAMPLE.initial_nodes == ("a", "b", "c")
    assert EXAMPLE.nodes_at(9.99) == ("a", "b", "c")
    assert EXAMPLE.nodes_at(10) == ("b", "c", "d")
    assert EXAMPLE.nodes_at(35) == ("d",)
    assert EXAMPLE.nodes_at(-1) == ()
    assert EXAMPLE.final_nodes == ("d", "e")
    assert (EXAMPLE.start_s, EXAMPLE.end_s, EXAMPLE.duration_s) == (0.0, 40.0, 40.0)


def test_stats_by_hand():
    s = EXAMPLE.stats()
    # live 3 on [0, 30), 1 on [30, 40): mean (3*30 + 1*10) / 40 = 2.5
    assert s.mean_nodes == 2.5
    assert (s.min_nodes, s.max_nodes, s.initial_nodes, s.final_nodes) == (1, 3, 3, 2)
    assert (s.num_events, s.num_adds, s.num_removes, s.num_nodes) == (8, 5, 3, 5)
    assert s.removals_per_hour == 3 / (40 / 3600)
    assert (s.num_bursts, s.largest_burst) == (2, 2)
    assert s.median_lifetime_s == 30.0  # a: 10, b: 30, c: 30
    assert s.as_dict()["mean_nodes"] == 2.5


def test_degenerate_traces():
    single = make((5, "add", "a"), (5, "add", "b"))
    s = single.stats()
    assert (s.duration_s, s.mean_nodes, s.removals_per_hour) == (0.0, 2.0, 0.0)
    assert math.isnan(s.median_lifetime_s) and s.as_dict()["median_lifetime_s"] is None
    instant = make((5, "add", "a"), (5, "remove", "a"))
    assert math.isnan(instant.stats().removals_per_hour)
    empty = Trace((), "empty")
    assert empty.stats().num_events == 0 and empty.live_counts().empty
    assert empty.initial_nodes == () and empty.duration_s == 0.0


@settings(max_examples=150, deadline=None)
@given(valid_traces())
def test_live_count_matches_membership_and_is_never_negative(trace):
    frame = trace.live_counts()
    assert (frame.live_nodes >= 0).all()
    assert frame.time_s.is_monotonic_increasing and frame.time_s.is_unique
    for t, n in zip(frame.time_s, frame.live_nodes):
        assert len(trace.nodes_at(t)) == n
    s = trace.stats()
    assert s.min_nodes <= s.mean_nodes + 1e-9 and s.mean_nodes <= s.max_nodes + 1e-9
    assert s.num_adds - s.num_removes == s.final_nodes
    want = oracle.summary([(e.time_s, e.kind) for e in trace.events])
    for key, value in want.items():
        assert getattr(s, key) == pytest.approx(value, rel=1e-9, abs=1e-9, nan_ok=True)
    lifetimes = oracle.lifetimes([(e.time_s, e.kind, e.node) for e in trace.events])
    if lifetimes:
        assert s.median_lifetime_s == pytest.approx(float(np.median(lifetimes)))
