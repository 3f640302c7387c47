"""The pace check between a validation's calibration and its trace runs (no processes)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from experiments.validation.compare import MIN_PHASE_ITERATIONS, RunTimeline
from experiments.validation.drift import DRIFT_WARN, PaceCheck, first_phase_pace, pace_check, plan_nodes


def timeline(durations, recoveries=()):
    ends, t = [], 0.0
    for d in durations:
        t += d
        ends.append(t)
    return RunTimeline("real", "oobleck", 8, tuple(ends), tuple(recoveries), ends[-1])


def test_the_first_phase_is_timed_before_the_first_event_without_the_first_iteration_or_recoveries():
    # first iteration 3 s (set-up), then 0.5 s ones to t = 8, one slow 2 s iteration inside a
    # recovery, then 1 s ones after the event at 12 s
    side = timeline([3.0] + [0.5] * 10 + [2.0] + [0.5] * 4 + [1.0] * 10, recoveries=((8.2, 10.0),))
    pace, n = first_phase_pace(side, 12.0, 0.4)
    assert n == 14 and pace == pytest.approx(0.5 / 0.4)
    # without events the whole run is the phase
    pace, n = first_phase_pace(side, None, 0.5)
    assert n == 24 and pace == pytest.approx(1.0)


def test_too_short_a_first_phase_or_no_prediction_gives_no_pace():
    side = timeline([1.0] * 10)
    assert first_phase_pace(side, MIN_PHASE_ITERATIONS + 0.5, 1.0) == (None, MIN_PHASE_ITERATIONS - 1)
    assert first_phase_pace(side, None, 0.0)[0] is None


def test_plan_nodes_reads_both_plan_forms():
    oobleck = {"iteration_time_s": 0.5, "pipelines": [{"num_nodes": 1}, {"num_nodes": 3}, {"num_nodes": 3}]}
    varuna = {"predicted_iteration_s": 0.5, "nodes": 6, "pipelines": [{"num_nodes": 3}, {"num_nodes": 3}]}
    assert plan_nodes(oobleck) == 7 and plan_nodes(varuna) == 6 and plan_nodes(None) == 0


def test_pace_check_reads_the_summary_plan_of_either_policy():
    side = timeline([2.0] + [0.6] * 20)
    events = [0.0, 9.0, 15.0]  # 0 is the trace's start, not an event
    for plan in (
        {"iteration_time_s": 0.5, "pipelines": [{"num_nodes": 2}]},
        {"predicted_iteration_s": 0.5, "nodes": 2},
    ):
        check = pace_check("oobleck", {"oobleck": 1.0}, 2, side, {"initial_plan": plan}, events)
        assert check.run_pace == pytest.approx(1.2) and check.run_iterations == 11 and check.run_nodes == 2
        assert check.drift == pytest.approx(0.2) and "20% slower" in (check.warning() or "")
    missing = pace_check("varuna", {"oobleck": 1.0}, 2, side, {"initial_plan": None}, events)
    assert missing.calibration_pace is None and missing.run_pace is None and missing.drift is None
    assert missing.warning() is None and missing.to_dict()["drift"] is None


@given(
    calibration=st.floats(0.5, 2.0),
    run=st.floats(0.5, 2.0),
    nodes=st.sampled_from([(8, 8), (8, 6)]),
)
def test_a_warning_exactly_when_the_drift_passes_the_bar_and_it_says_which_way(calibration, run, nodes):
    check = PaceCheck("varuna", calibration, run, 10, *nodes)
    drift = run / calibration - 1
    assert check.drift == pytest.approx(drift)
    warning = check.warning()
    assert (warning is not None) == (abs(check.drift) > DRIFT_WARN)
    if warning is not None:
        assert warning.startswith("Varuna: ") and ("slower" if drift > 0 else "faster") in warning
        assert ("plans of 8 and 6 nodes" in warning) == (nodes[1] == 6)
