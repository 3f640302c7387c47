"""The core-seconds a sample cost a calibration job (`experiments.validation.core_cost`)."""

from __future__ import annotations

import json
import statistics

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from experiments.validation.calibrate import with_core_sweep
from experiments.validation.core_cost import MIN_ITERATIONS, core_line, measured_core_costs, sample_core_s
from experiments.validation.overheads import CORE_COST_KEY, CORE_SWEEP_KEY, Overheads


def summary(times, shares, recoveries=(), cores=2, startup_s=5.0):
    return {
        "cpu_cores": cores,
        "iteration_times_s": list(times),
        "cpu_busy_share": list(shares),
        "recoveries": [{"t_fail_s": t} for t in recoveries],
        "startup_s": startup_s,
    }


def test_a_hand_case():
    # iterations end at 6.0 (the first, left out), 6.5, 7.0, 7.6, 8.0; the failure at 7.8
    # leaves 6.5, 7.0 and 7.6: 0.9 x 2 x 0.5 / 16, 1.0 x 2 x 0.5 / 16, 0.95 x 2 x 0.6 / 16
    s = summary([1.0, 0.5, 0.5, 0.6, 0.4], [0.5, 0.9, 1.0, 0.95, 0.2], recoveries=[7.8])
    assert sample_core_s(s, 16) == pytest.approx(statistics.median([0.05625, 0.0625, 0.07125]))


@settings(max_examples=60, deadline=None)
@given(
    times=st.lists(st.floats(0.05, 2.0), min_size=1, max_size=30),
    shares=st.lists(st.one_of(st.none(), st.floats(0.0, 1.0)), min_size=30, max_size=30),
    fail_at=st.one_of(st.none(), st.floats(5.0, 40.0)),
    samples=st.integers(1, 64),
)
def test_against_a_brute_force_walk(times, shares, fail_at, samples):
    s = summary(times, shares[: len(times)], recoveries=[] if fail_at is None else [fail_at])
    picked, t = [], 5.0
    for k, seconds in enumerate(times):
        t += seconds
        if fail_at is not None and t >= fail_at:
            break
        if k >= 1 and shares[k] is not None:
            picked.append(shares[k] * 2 * seconds / samples)
    got = sample_core_s(s, samples)
    if len(picked) < MIN_ITERATIONS:
        assert got is None
    else:
        assert got == pytest.approx(statistics.median(picked))


def test_what_cannot_say_is_none():
    assert sample_core_s({**summary([0.5] * 6, [0.9] * 6), "cpu_cores": None}, 16) is None
    assert sample_core_s(summary([0.5] * 6, [None] * 6), 16) is None
    assert sample_core_s(summary([0.5] * 6, [0.9] * 6, recoveries=[6.0]), 16) is None  # failed first


def test_overheads_read_the_jobs_and_say_the_ceiling(tmp_path):
    for policy, share in (("oobleck", 0.95), ("varuna", 1.0)):
        (tmp_path / policy).mkdir()
        (tmp_path / policy / "summary.json").write_text(json.dumps(summary([0.5] * 8, [share] * 8)))
    details = {"oobleck": {"run_dir": str(tmp_path / "oobleck")}, "varuna": {"run_dir": str(tmp_path / "varuna")}}
    # 7 steady iterations each (8, the first left out): the pooled median of 14 is the
    # mean of the middle two, one from each job
    assert measured_core_costs(details, 16) == {
        "oobleck": pytest.approx(0.95 * 2 * 0.5 / 16),
        "varuna": pytest.approx(2 * 0.5 / 16),
        "all": pytest.approx((0.95 + 1.0) * 0.5 / 16),
        "cores": 2.0,
    }
    plain = Overheads(0.5, 5.0, 0.01, 2.0, details=details)
    measured = plain.with_core_costs(16)  # a calibration cached before: read from its jobs
    assert measured.core_options() == {"compute_cores": 2.0, "sample_core_s": pytest.approx(1.95 * 0.5 / 16)}
    assert measured.with_core_costs(16) is measured  # kept once measured
    assert plain.core_options() == {}  # not measured: no ceiling
    gone = Overheads(0.5, 5.0, 0.01, 2.0, details={"oobleck": {"run_dir": str(tmp_path / "gone")}})
    assert gone.with_core_costs(16).details[CORE_COST_KEY] == {}
    assert gone.with_core_costs(16).core_options() == {}


def test_only_real_compute_twins_get_the_ceiling(tmp_path):
    from experiments.validation.runs import sim_config
    from experiments.validation.spec import TINY_GPT, PreparedModel, ValidationSpec, synthetic_profile
    from planner.oobleck_format import write_oobleck_profile

    directory = write_oobleck_profile(synthetic_profile(), tmp_path / "profile")
    model = PreparedModel({"model": TINY_GPT}, directory, "")  # its run fields, a profile to simulate
    costs = {"oobleck": 0.04, "varuna": 0.05, "all": 0.045, "cores": 2.0}
    overheads = Overheads(0.5, 5.0, 0.01, 2.0, details={CORE_COST_KEY: costs})
    for policy in ("oobleck", "varuna"):  # one figure for both
        real = sim_config(ValidationSpec(compute="real", model=TINY_GPT), model, overheads, policy, 60.0)
        assert (real.costs.compute_cores, real.costs.sample_core_s) == (2.0, 0.045)
    emulated = sim_config(ValidationSpec(), model, overheads, "oobleck", 60.0)
    assert emulated.costs.compute_cores is None and emulated.costs.sample_core_s is None
    unmeasured = Overheads(0.5, 5.0, 0.01, 2.0, details={CORE_COST_KEY: {}})
    assert (
        sim_config(
            ValidationSpec(compute="real", model=TINY_GPT), model, unmeasured, "oobleck", 60.0
        ).costs.compute_cores
        is None
    )


@settings(max_examples=80, deadline=None)
@given(
    first=st.floats(1e-3, 1.0),
    slope=st.floats(0.0, 0.2),
    counts=st.lists(st.integers(1, 32), min_size=2, max_size=8, unique=True),
)
def test_the_line_goes_through_points_on_a_line(first, slope, counts):
    line = core_line({w: first + slope * (w - 1) for w in counts})
    assert line is not None
    assert line[0] == pytest.approx(first, rel=1e-6, abs=1e-9)
    assert line[1] == pytest.approx(slope, rel=1e-6, abs=1e-9)


@settings(max_examples=80, deadline=None)
@given(points=st.dictionaries(st.integers(1, 16), st.floats(1e-3, 1.0), min_size=2, max_size=8))
@example(points={8: 0.5, 1: 1.0, 15: 1.0})  # a least-squares slope of exactly 0
def test_the_line_is_least_squares_never_falling_nor_free(points):
    first, slope = core_line(points)
    assert first > 0 and slope >= 0
    residual = lambda a, k: sum((a + k * (w - 1) - c) ** 2 for w, c in points.items())  # noqa: E731
    optimal = all(  # no nudge of either lowers the squares
        residual(first, slope) <= residual(first + da, slope + dk) + 1e-12
        for da, dk in ((1e-4, 0), (-1e-4, 0), (0, 1e-5), (0, -1e-5))
    )
    if slope > 0:  # unconstrained: the least squares
        assert optimal
    else:  # a flat least-squares line, or one clamped flat through the median
        assert optimal or first == pytest.approx(statistics.median(points.values()))


def test_a_single_count_gives_no_line():
    assert core_line({4: 0.05}) is None and core_line({}) is None


def test_a_core_sweep_sets_the_line_and_the_calibration_jobs_stay_the_fallback(tmp_path):
    details = {}
    for policy in ("oobleck", "varuna"):
        (tmp_path / policy).mkdir()
        (tmp_path / policy / "summary.json").write_text(json.dumps(summary([0.5] * 8, [1.0] * 8)))
        details[policy] = {"run_dir": str(tmp_path / policy)}
    run_dirs = {}
    for count, seconds in ((2, 0.4), (3, 0.45), (4, 0.5)):  # 0.05, 0.05625, 0.0625 core-s a sample
        (tmp_path / f"cores{count}").mkdir()
        (tmp_path / f"cores{count}" / "summary.json").write_text(json.dumps(summary([seconds] * 8, [1.0] * 8)))
        run_dirs[str(count)] = str(tmp_path / f"cores{count}")
    (tmp_path / "cores5").mkdir()  # a job that cannot say: left out
    run_dirs["5"] = str(tmp_path / "cores5")
    swept = Overheads(0.5, 5.0, 0.01, 2.0, details={**details, CORE_SWEEP_KEY: {"run_dirs": run_dirs}})
    measured = swept.with_core_costs(16)
    assert list(measured.details[CORE_COST_KEY]["by_workers"]) == ["2", "3", "4"]
    options = measured.core_options()
    assert options["compute_cores"] == 2.0
    assert options["sample_core_s"] == pytest.approx(0.05 - 0.00625)
    assert options["sample_core_per_worker_s"] == pytest.approx(0.00625)
    assert measured.with_core_costs(16) is measured
    plain = Overheads(0.5, 5.0, 0.01, 2.0, details=details).with_core_costs(16)
    assert plain.core_options() == {"compute_cores": 2.0, "sample_core_s": pytest.approx(1.0 / 16)}


def test_a_sweep_already_run_is_not_run_again(tmp_path):
    kept = {CORE_SWEEP_KEY: {"run_dirs": {"2": "a", "3": "b"}}}
    overheads = Overheads(0.5, 5.0, 0.01, 2.0, details=kept)
    # base None: a sweep that ran would fail on it
    assert with_core_sweep(overheads, None, tmp_path, (3, 2), print) is overheads
    assert with_core_sweep(overheads, None, tmp_path, (), print) is overheads
