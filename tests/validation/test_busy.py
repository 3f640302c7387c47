"""Each compared phase's busy share of the cores, from the real run's per-iteration shares."""

from __future__ import annotations

import pytest

from experiments.validation.busy import as_percents, phase_busy_shares
from experiments.validation.compare import RunTimeline, compare_run, steady_durations, steady_indices


def timeline(durations, recoveries=(), side="real"):
    ends, t = [], 0.0
    for d in durations:
        t += d
        ends.append(t)
    return RunTimeline(side, "oobleck", 8, tuple(ends), tuple(recoveries), ends[-1])


def test_each_phase_takes_the_median_share_of_the_iterations_its_throughput_is_timed_on():
    # iterations end at 1..12 s; a recovery over (6.5, 8); the trace's event at 6 s
    real = timeline([1.0] * 12, recoveries=((6.5, 8.0),))
    sim = timeline([1.0] * 12, side="sim")
    # per committed iteration, the first (ending at 1 s) included: 0.9 for it, then 0.1 .. 0.5
    # before the event, 0.99 for the two inside the recovery, 0.6, 0.7, 0.8, None after
    shares = [0.9, 0.1, 0.2, 0.3, 0.4, 0.5, 0.99, 0.99, 0.6, 0.7, 0.8, None]
    comparison = compare_run(real, sim, [6.0])
    first, second = comparison.phases
    assert [round(d, 9) for d in steady_durations(real, 0.0, 6.0)] == [1.0] * 5
    assert phase_busy_shares(real, shares, comparison.phases) == [pytest.approx(0.3), pytest.approx(0.7)]
    assert len(steady_indices(real, second.start_s, second.end_s)) == second.real_iterations == 4
    # without readings, or with fewer than the iterations, a phase has none
    assert phase_busy_shares(real, [], comparison.phases) == [None, None]
    assert phase_busy_shares(real, [None] * 12, comparison.phases) == [None, None]
    assert as_percents([0.254, None, 0.0]) == ["25%", "-", "0%"]
