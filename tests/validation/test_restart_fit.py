"""The restart line's fit (`experiments.validation.restart_fit`) and the calibration's
use of it (`Overheads`): pure arithmetic, no processes started."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.validation.calibrate import slope_counts
from experiments.validation.overheads import Overheads
from experiments.validation.restart_fit import fit_line, fit_quadratic_gain


@settings(max_examples=60, deadline=None)
@given(
    intercept=st.floats(0.0, 60.0),
    slope=st.floats(0.0, 5.0),
    counts=st.sets(st.integers(1, 64), min_size=2, max_size=8),
    repeats=st.integers(1, 3),
    noise=st.floats(0.0, 2.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_fit_recovers_a_line_from_bounded_noise(intercept, slope, counts, repeats, noise, seed):
    rng = random.Random(seed)
    ns = sorted(counts) * repeats
    points = [(n, intercept + slope * n + rng.uniform(-noise, noise)) for n in ns]
    fit = fit_line(points)
    # least squares moves the slope by sum((n - mean) e) / sum((n - mean)^2) at most, for
    # errors |e| <= noise; the intercept by the mean error plus that times the mean count
    mean = sum(ns) / len(ns)
    spread = sum((n - mean) ** 2 for n in ns)
    slope_bound = noise * sum(abs(n - mean) for n in ns) / spread
    assert abs(fit.slope_s - slope) <= slope_bound + 1e-9
    assert abs(fit.intercept_s - intercept) <= noise + slope_bound * mean + 1e-9
    # the residuals are what is left of the points, and they sum to zero
    assert sum(fit.residuals_s) == pytest.approx(0.0, abs=1e-6 * (1 + noise) * len(ns))
    assert all(abs(r) <= 2 * noise + slope_bound * 64 + 1e-6 for r in fit.residuals_s)


def test_noise_free_points_give_the_line_exactly():
    fit = fit_line([(2, 5.0), (4, 9.0), (8, 17.0), (16, 33.0)])
    assert fit.intercept_s == pytest.approx(1.0) and fit.slope_s == pytest.approx(2.0)
    assert fit.rms_residual_s == pytest.approx(0.0, abs=1e-12)
    assert fit.at(32) == pytest.approx(65.0)


def test_one_count_fixes_no_slope():
    with pytest.raises(ValueError, match="two or more process counts"):
        fit_line([(4, 5.0), (4, 6.0)])
    with pytest.raises(ValueError, match="finite"):
        fit_line([(2, 1.0), (4, float("nan"))])


def test_the_quadratic_gain_tells_a_line_from_a_curve():
    line = [(n, 3.0 + 0.5 * n) for n in (2, 4, 8, 16, 32)]
    curve = [(n, 3.0 + 0.05 * n * n) for n in (2, 4, 8, 16, 32)]
    assert fit_quadratic_gain(line) == pytest.approx(0.0, abs=1e-6)
    gain = fit_quadratic_gain(curve)
    assert gain is not None and gain > 0.9
    assert fit_quadratic_gain(line[:3]) is None  # too few counts to tell


def overheads(**line):
    return Overheads(
        reconfigure_overhead_s=0.6,
        restart_overhead_s=20.0,
        checkpoint_fixed_s=0.1,
        node_startup_s=2.0,
        details={},
        **line,
    )


def test_the_calibration_line_goes_through_the_measured_restart():
    o = overheads(restart_processes=7, restart_per_process_s=1.5)
    assert o.relaunch_s(7) == pytest.approx(20.0)  # the restart measured, exactly
    assert o.relaunch_s(3) == pytest.approx(20.0 - 4 * 1.5)  # fewer processes after more removals
    assert o.relaunch_s(8) == pytest.approx(21.5)  # the start of all 8
    options = o.sim_options()
    assert "restart_overhead_s" not in options
    assert options["restart_fixed_s"] + 7 * options["restart_per_process_s"] == pytest.approx(20.0)


def test_a_calibration_cached_before_the_line_stays_a_constant():
    cached = overheads().to_dict()
    del cached["restart_processes"], cached["restart_per_process_s"]
    o = Overheads.from_dict(cached)
    assert o.relaunch_s(1) == o.relaunch_s(16) == 20.0


def test_a_steep_slope_never_makes_the_fixed_part_negative():
    o = overheads(restart_processes=7, restart_per_process_s=5.0)
    assert o.restart_fixed_s == 0.0 and o.relaunch_s(2) == pytest.approx(10.0)


def test_the_calibration_caps_a_parts_slope_steeper_than_its_measured_restart():
    from experiments.validation.calibrate import pinned_slope_s

    # the 8-node calibration: parts 2.24 s per process, the in-job restart of 7: 13.58 s
    slope = pinned_slope_s(2.243, 13.578, 7)
    assert slope == pytest.approx(13.578 / 7)
    o = Overheads(
        **{
            **overheads().to_dict(),
            "restart_overhead_s": 13.578,
            "restart_processes": 7,
            "restart_per_process_s": slope,
        }
    )
    assert o.relaunch_s(7) == pytest.approx(13.578)  # still the restart measured
    assert o.relaunch_s(5) == pytest.approx(13.578 * 5 / 7)  # proportional below it
    assert pinned_slope_s(0.8, 13.578, 7) == 0.8 and pinned_slope_s(-0.2, 5.0, 3) == 0.0


def test_slope_counts():
    assert slope_counts(16) == (8, 16) and slope_counts(3) == (1, 3) and slope_counts(2) == (1, 2)
    with pytest.raises(ValueError, match="two process counts"):
        slope_counts(1)


def test_pace_ratios_take_the_steady_iterations_before_the_crash():
    from experiments.validation.calibrate import pace_ratios
    from experiments.validation.crash_plan import CRASH_STEP

    steady = [0.5] * (CRASH_STEP - 1)
    details = {
        "predicted_iteration_s": 0.4,
        "oobleck": {"iteration_times_s": [3.0, *steady, 9.0, 0.6, 0.6]},  # warm-up, steady, the crash, after
        "varuna": {"iteration_times_s": [3.0, 0.2, 0.3, 0.4, 9.0, 9.0, 9.0, 9.0, 9.0]},
    }
    ratios = pace_ratios(details)
    assert ratios["oobleck"] == pytest.approx(0.5 / 0.4)
    assert ratios["varuna"] == pytest.approx(9.0 / 0.4)  # median of steps 1..CRASH_STEP - 1
    assert pace_ratios({"predicted_iteration_s": 0.4, "oobleck": {"iteration_times_s": [1.0]}}) == {}
    assert pace_ratios({"oobleck": {"iteration_times_s": steady}}) == {}
    # each job's own first plan where the calibration kept it (Varuna's plan need not be Oobleck's)
    details["varuna"]["predicted_iteration_s"] = 0.5
    assert pace_ratios(details) == {"oobleck": pytest.approx(0.5 / 0.4), "varuna": pytest.approx(9.0 / 0.5)}


def test_the_first_plans_prediction_is_read_from_either_policys_summary():
    from experiments.validation.calibrate import first_plan_s

    assert first_plan_s({"initial_plan": {"iteration_time_s": 0.49, "pipelines": []}}) == 0.49
    assert first_plan_s({"initial_plan": {"predicted_iteration_s": 0.51, "nodes": 4}}) == 0.51
    assert first_plan_s({"initial_plan": None}) is None and first_plan_s({}) is None
