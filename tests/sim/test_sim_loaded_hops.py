"""The simulator's loaded pipeline sends (`sim.loaded_hops`): each send of a plan costs
fixed + slope x (the plan's sends per second) + per_process x (its processes) more; plans
without sends are untouched.

Hand cases use the synthetic profile (8 layers of 10 + 20 ms). A pipeline of S stages and
m microbatches makes 2 (S - 1) m sends an iteration; on two stages every stage makes one
send per microbatch, so T1 + T2 + T3 grows by exactly h (m + 1) for a send h longer
(tests/sim/test_sim_contention.py derives it).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.validation.spec import synthetic_profile
from planner.oobleck_format import write_oobleck_profile
from planner.plan import JobSpec
from planner.planner import Planner
from planner.policies.grid import Grid, GridPlan
from planner.profile import CommProfile, LinkProfile
from sim.errors import SimError
from sim.loaded_hops import LoadedHops, plan_processes, plan_sends, send_rate_per_s
from sim.setup import build

from .profile_runs import profile_run_config


def _directory(tmp_path, hop_overhead_s: float | None = None):
    directory = tmp_path / "profile"
    profile = synthetic_profile()
    if hop_overhead_s is not None:
        link = LinkProfile(1e-4, 1e9)
        profile = replace(profile, communication=CommProfile(link, link, hop_overhead_s, "test"))
    write_oobleck_profile(profile, directory)
    return directory


def _timing(
    tmp_path, fixed_s: float, slope_s2: float, hop_overhead_s: float | None = None, per_process_s: float = 0.0
) -> LoadedHops:
    config = profile_run_config(_directory(tmp_path, hop_overhead_s)).with_(
        loaded_hop_fixed_s=fixed_s,
        loaded_hop_slope_s2=slope_s2,
        loaded_hop_per_process_s=per_process_s,
    )
    timing = build(config).timing
    while not isinstance(timing, LoadedHops):  # the sync-message term wraps it when the profile has a hop
        timing = timing.inner  # type: ignore[attr-defined]
    return timing


def _planner(timing: LoadedHops) -> Planner:
    return Planner(timing.scaler.profile, timing.scaler.cluster, JobSpec(16, 1, 1))


def test_without_the_options_there_is_no_term(tmp_path):
    timing = build(profile_run_config(_directory(tmp_path))).timing
    while hasattr(timing, "inner"):
        assert not isinstance(timing, LoadedHops)
        timing = timing.inner


@settings(max_examples=25, deadline=None)
@given(fixed_ms=st.floats(0.01, 5.0), slope_us=st.floats(0.0, 10.0))
def test_two_stage_sends_cost_the_line_at_the_plans_own_rate(tmp_path_factory, fixed_ms, slope_us):
    fixed, slope = fixed_ms / 1e3, slope_us / 1e6
    timing = _timing(tmp_path_factory.mktemp("p"), fixed, slope)
    planner = _planner(timing)
    two = planner.build_plan([["a", "b"], ["c", "d"]])
    m = [p.num_microbatches for p in two.pipelines]
    assert plan_sends(two) == 2 * sum(m)  # 2 (S - 1) m per pipeline
    rate = 2 * sum(m) / two.iteration_time_s
    assert send_rate_per_s(two) == pytest.approx(rate)
    h = fixed + slope * rate
    assert timing.hop_extra_s(two) == pytest.approx(h, abs=1e-15)
    # both pipelines take the same template and microbatches here: T grows by h (m + 1)
    assert timing.iteration(two).total_s - timing.inner.iteration(two).total_s == pytest.approx(
        h * (max(m) + 1), rel=1e-9, abs=1e-12
    )


@settings(max_examples=25, deadline=None)
@given(fixed_ms=st.floats(-0.5, 2.0), per_process_us=st.floats(1.0, 200.0))
def test_two_stage_sends_cost_the_line_at_the_plans_own_processes(tmp_path_factory, fixed_ms, per_process_us):
    fixed, per_process = fixed_ms / 1e3, per_process_us / 1e6
    timing = _timing(tmp_path_factory.mktemp("p"), fixed, 0.0, per_process_s=per_process)
    planner = _planner(timing)
    for groups in ([["a", "b"], ["c", "d"]], [["a", "b"], ["c", "d"], ["e", "f"]]):
        plan = planner.build_plan(groups)
        assert plan_processes(plan) == 2 * len(groups)
        h = max(0.0, fixed + per_process * 2 * len(groups))  # the profile has no hop: the floor is 0
        assert timing.hop_extra_s(plan) == pytest.approx(h, abs=1e-15)
        m = max(p.num_microbatches for p in plan.pipelines)
        assert timing.iteration(plan).total_s - timing.inner.iteration(plan).total_s == pytest.approx(
            h * (m + 1), rel=1e-9, abs=1e-12
        )


def test_single_stage_pipelines_send_nothing_and_are_untouched(tmp_path):
    timing = _timing(tmp_path, 0.004, 1e-5)
    plan = _planner(timing).build_plan([["a"], ["b"], ["c"], ["d"]])
    assert plan_sends(plan) == 0
    assert timing.iteration(plan).total_s == timing.inner.iteration(plan).total_s


def test_a_send_never_costs_less_than_nothing(tmp_path):
    """A fixed part below minus the profile's hop overhead is held there."""
    hop = 0.001
    timing = _timing(tmp_path, -0.05, 0.0, hop_overhead_s=hop)
    two = _planner(timing).build_plan([["a", "b"], ["c", "d"]])
    assert timing.hop_extra_s(two) == -hop
    m = max(p.num_microbatches for p in two.pipelines)
    assert timing.iteration(two).total_s - timing.inner.iteration(two).total_s == pytest.approx(
        -hop * (m + 1), rel=1e-9
    )


def test_varuna_counts_every_replica_of_its_pipeline():
    plan = GridPlan(Grid(3, 4, 1, 5, ((0, 3), (3, 6), (6, 8)), 1.0, 0.0), tuple("abcdefghijkl"), None, 1)
    assert plan_sends(plan) == 4 * 2 * 2 * 5
    assert send_rate_per_s(plan) == pytest.approx(80.0)
    assert plan_processes(plan) == 12


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("loaded_hop_fixed_s", float("nan"), "loaded_hop_fixed_s must be a finite number"),
        ("loaded_hop_slope_s2", -1e-6, "loaded_hop_slope_s2 must be a finite number >= 0"),
        ("loaded_hop_per_process_s", -1e-6, "loaded_hop_per_process_s must be a finite number >= 0"),
    ],
)
def test_bad_options_are_refused_by_name(tmp_path, field, value, message):
    with pytest.raises(SimError, match=message):
        profile_run_config(_directory(tmp_path)).with_(**{field: value})


def test_the_artifact_calibration_refuses_the_options(tmp_path):
    with pytest.raises(SimError, match="loaded_hop_fixed_s"):
        profile_run_config(_directory(tmp_path)).with_(calibration="artifact", loaded_hop_fixed_s=0.001)
