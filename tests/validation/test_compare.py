"""The comparison's arithmetic on hand-made timelines (no processes)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.validation.compare import (
    MIN_PHASE_ITERATIONS,
    RunTimeline,
    compare_run,
    match_recoveries,
    phase_bounds,
    steady_durations,
    summarize,
)


def regular(side, pace_s, start_s, end_s, batch=8, recoveries=(), policy="oobleck"):
    ends, t = [], start_s
    while t + pace_s <= end_s + 1e-12:
        t += pace_s
        ends.append(t)
    return RunTimeline(side, policy, batch, tuple(ends), tuple(recoveries), end_s)


def test_phases_split_at_distinct_event_times_inside_the_window():
    assert phase_bounds([5.0, 5.0, 0.0, 12.0, 30.0], 20.0) == [(0.0, 5.0), (5.0, 12.0), (12.0, 20.0)]
    assert phase_bounds([], 3.0) == [(0.0, 3.0)]


def test_samples_at_counts_iterations_ended_by_then():
    side = regular("real", 1.0, 0.0, 10.0, batch=4)
    assert side.samples_at(0.5) == 0 and side.samples_at(3.0) == 12 and side.samples_at(100) == 40


def test_iterations_overlapping_a_recovery_and_the_first_are_not_steady():
    ends = (1.0, 2.0, 3.0, 6.0, 7.0, 8.0)
    side = RunTimeline("real", "oobleck", 1, ends, ((2.5, 6.0),), 8.0)
    # (1,2) and (2,3) are before the failure... (2,3) overlaps [2.5, 6]: out; (3,6) out
    assert steady_durations(side, 0.0, 8.0) == [1.0, 1.0, 1.0]


def test_a_simulator_faster_by_ten_percent_shows_as_plus_ten_percent():
    real = regular("real", 1.0, 0.0, 40.0)
    sim = regular("sim", 1.0 / 1.1, 0.0, 40.0)
    c = compare_run(real, sim, [20.0])
    assert [p.error for p in c.phases] == pytest.approx([0.1, 0.1])
    assert c.real_samples == 40 * 8 and c.sim_samples == 44 * 8
    assert c.samples_error == pytest.approx(0.1)


def test_phases_too_short_on_either_side_are_not_compared():
    real = regular("real", 1.0, 0.0, 20.0)
    sim = regular("sim", 1.0, 0.0, 20.0)
    c = compare_run(real, sim, [20.0 - MIN_PHASE_ITERATIONS + 0.5])
    assert len(c.phases) == 1  # the last phase holds too few iterations


def test_recoveries_pair_by_nearest_failure_within_tolerance():
    pairs, unmatched = match_recoveries([(10.0, 11.0), (30.0, 31.0)], [(10.2, 11.7), (50.0, 52.0)], tolerance_s=1.0)
    assert pairs[0].sim_s == pytest.approx(1.5) and pairs[0].error == pytest.approx(0.5)
    assert pairs[1].sim_s is None and pairs[1].error is None
    assert unmatched == [50.0]


def test_summary_takes_medians_of_absolute_errors():
    real = regular("real", 1.0, 0.0, 30.0, recoveries=[(10.0, 12.0)])
    sim_fast = regular("sim", 0.5, 0.0, 30.0, recoveries=[(10.0, 13.0)])
    sim_slow = regular("sim", 2.0, 0.0, 30.0, recoveries=[(10.0, 11.0)])
    s = summarize([compare_run(real, sim_fast, [10.0]), compare_run(real, sim_slow, [10.0])])
    assert s["samples_error"] == pytest.approx(0.75)  # |+1.0| and |-0.5|
    assert s["recovery_error"] == pytest.approx(0.5)
    assert s["throughput_error"] == pytest.approx(0.75)


def test_sides_with_different_batches_are_refused():
    with pytest.raises(ValueError, match="global batches"):
        compare_run(regular("real", 1.0, 0, 10, batch=8), regular("sim", 1.0, 0, 10, batch=16), [])


@settings(max_examples=60, deadline=None)
@given(
    durations=st.lists(st.floats(0.05, 3.0), min_size=1, max_size=60),
    events=st.lists(st.floats(0.0, 100.0), max_size=6),
    failures=st.lists(st.tuples(st.floats(0.0, 80.0), st.floats(0.01, 5.0)), max_size=3),
)
def test_a_run_compared_with_itself_has_no_error(durations, events, failures):
    ends, t = [], 0.0
    for d in durations:
        t += d
        ends.append(t)
    recoveries = tuple(sorted((a, a + b) for a, b in failures))
    real = RunTimeline("real", "oobleck", 4, tuple(ends), recoveries, ends[-1])
    sim = RunTimeline("sim", "oobleck", 4, tuple(ends), recoveries, ends[-1])
    c = compare_run(real, sim, events)
    assert c.samples_error == 0
    assert all(e == 0 for e in c.throughput_errors())
    assert all(r.error == 0 for r in c.recoveries) and not c.unmatched_sim_recoveries


def test_joins_pair_by_time_and_their_error_is_relative_to_the_measured_pause():
    real = RunTimeline("real", "replica_groups", 8, (1.0, 2.0, 5.0, 6.0), (), 6.0, ((2.0, 4.0), (9.0, 9.5)))
    sim = RunTimeline("sim", "replica_groups", 8, (1.0, 2.0, 4.0, 5.0), (), 6.0, ((2.5, 5.0),))
    c = compare_run(real, sim, [])
    assert [(j.real_fail_s, j.real_s, j.sim_fail_s, j.sim_s) for j in c.joins] == [(2.0, 2.0, 2.5, 2.5)]
    assert c.join_errors() == pytest.approx([0.25])  # the join after the window is not compared
    assert summarize([c])["join_error"] == pytest.approx(0.25) and summarize([c])["joins_compared"] == 1
    assert c.to_dict()["joins"][0]["sim_s"] == 2.5


def test_steps_over_part_of_the_batch_count_their_own_samples():
    """Replica groups with a group out train on the live groups' share: samples and phase
    rates count each iteration's own samples, not the full batch."""
    ends = tuple(float(t) for t in range(1, 11))
    half = (8, 8, 8, 8, 8, 4, 4, 4, 4, 4)  # a group out from the sixth iteration on
    real = RunTimeline("real", "replica_groups", 8, ends, (), 10.0, (), half)
    sim = RunTimeline("sim", "replica_groups", 8, ends, (), 10.0)
    assert real.samples_at(10.0) == 60 and real.samples_at(5.5) == 40 and sim.samples_at(10.0) == 80
    c = compare_run(real, sim, [5.0])
    assert [p.real_samples_per_s for p in c.phases] == pytest.approx([8.0, 4.0])
    assert [p.error for p in c.phases] == pytest.approx([0.0, 1.0])
    with pytest.raises(ValueError, match="3 iteration sample counts for 10 iterations"):
        RunTimeline("real", "replica_groups", 8, ends, (), 10.0, (), (8, 8, 8))
