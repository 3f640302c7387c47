"""The simulator with a contention profile: each plan's compute x its worker count's factor.

Hand cases use single-stage pipelines (no pipeline hops) of the synthetic profile (8
layers of 10 + 20 ms): a pipeline of m microbatches takes m x 0.24 s of compute, which the
factor scales, plus the plan's exposed all-reduce, which it does not.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.validation.spec import synthetic_profile
from planner.contention import ContentionProfile, write_contention
from planner.costmodel import pipeline_time_s
from planner.oobleck_format import write_oobleck_profile
from planner.plan import JobSpec
from planner.planner import Planner
from planner.policies.grid import Grid, GridPlan
from sim.contention import ContendedCompute
from sim.errors import SimError
from sim.run import simulate
from sim.setup import build

from .profile_runs import profile_run_config

COMPUTE_S = 8 * 0.030  # one microbatch through every layer
FACTORS = ((0, 0.5), (1, 0.6), (2, 0.8), (3, 1.0))


def _directory(tmp_path, factors=FACTORS, reference=3):
    directory = tmp_path / "profile"
    write_oobleck_profile(synthetic_profile(), directory)
    if factors is not None:
        write_contention(ContentionProfile(reference, factors, "test"), directory)
    return directory


_config = profile_run_config


def _timing(tmp_path) -> ContendedCompute:
    timing = build(_config(_directory(tmp_path))).timing
    assert isinstance(timing, ContendedCompute)
    return timing


def test_single_stage_pipelines_take_the_factor_of_their_worker_count(tmp_path):
    timing = _timing(tmp_path)
    planner = Planner(timing.profile, timing.cluster, JobSpec(16, 1, 1))
    for groups, factor, most in (([["a"], ["b"]], 0.6, 8), ([["a"], ["b"], ["c"]], 0.8, 6)):
        plan = planner.build_plan(groups)
        assert plan.compute_time_s == pytest.approx(most * COMPUTE_S)  # the hand case holds
        cost = timing.iteration(plan)
        expected = factor * most * COMPUTE_S + plan.allreduce_exposed_s
        assert cost.total_s == pytest.approx(expected, rel=1e-9)
        assert cost.useful_s == pytest.approx(expected, rel=1e-9)
    four = planner.build_plan([["a"], ["b"], ["c"], ["d"]])  # the reference count: unchanged
    assert timing.iteration(four).total_s == four.iteration_time_s


def test_varuna_counts_the_gpus_it_computes_on_not_its_idle_ones(tmp_path):
    timing = _timing(tmp_path)
    config = Grid(1, 3, 1, 6, ((0, 8),), 6 * COMPUTE_S, 0.05)
    plan = GridPlan(config, ("a", "b", "c", "d"), None, 1)
    assert timing.iteration(plan).total_s == pytest.approx(0.8 * 6 * COMPUTE_S + 0.05, rel=1e-9)


def test_a_run_times_each_phase_by_its_live_count(tmp_path):
    def phases(directory):
        result = simulate(_config(directory, nodes=4, removals=2))
        return {row.live_nodes: row.throughput_samples_per_s for row in result.timeline if row.state == "running"}

    plain = phases(_directory(tmp_path / "plain", factors=None))
    contended = phases(_directory(tmp_path / "contended"))
    assert set(plain) == set(contended) == {4, 3, 2}
    assert contended[4] == plain[4]  # the reference count: the profile's own times
    for live in (3, 2):  # faster, but by less than the factor (the all-reduce is not scaled)
        factor = dict(FACTORS)[live - 1]
        assert plain[live] < contended[live] < plain[live] / factor


def test_without_the_file_nothing_changes(tmp_path):
    assert not isinstance(build(_config(_directory(tmp_path, factors=None))).timing, ContendedCompute)


def test_a_run_past_the_measured_counts_is_refused(tmp_path):
    directory = _directory(tmp_path, factors=((0, 0.5), (1, 1.0)), reference=1)
    with pytest.raises(SimError, match=r"no compute factor for 3, 4 workers computing"):
        build(_config(directory))


def test_bamboo_plans_are_refused(tmp_path):
    with pytest.raises(SimError, match="times Oobleck and Varuna plans only"):
        simulate(_config(_directory(tmp_path), policy="bamboo").with_(bamboo_depth=2))


@pytest.fixture(scope="module")
def contended(tmp_path_factory):
    timing = _timing(tmp_path_factory.mktemp("contended"))
    planner = Planner(timing.profile, timing.cluster, JobSpec(16, 1, 1))
    plans = [planner.build_plan(groups) for groups in ([["a", "b"], ["c", "d"]], [["a"], ["b", "c", "d"]])]
    return timing, plans


@settings(max_examples=40, deadline=None)
@given(st.floats(0.05, 8.0), st.floats(0.05, 8.0), st.integers(0, 1))
def test_scaling_is_monotone_and_bounded(contended, f1, f2, which):
    """Compute x f, the rest unscaled: T(1) is the plan's own time, T grows with f, and
    min(1, f) T <= T(f) <= max(1, f) T."""
    timing, plans = contended
    plan = plans[which]
    base = plan.iteration_time_s
    assert timing.scaled_plan_s(plan, 1.0) == pytest.approx(base, rel=1e-9)
    low, high = sorted((f1, f2))
    t_low, t_high = timing.scaled_plan_s(plan, low), timing.scaled_plan_s(plan, high)
    assert t_low <= t_high * (1 + 1e-9)
    for f, t in ((low, t_low), (high, t_high)):
        assert min(1.0, f) * base * (1 - 1e-9) <= t <= max(1.0, f) * base * (1 + 1e-9)
    assert math.isfinite(t_high)


HOPS = ((0, 0.001), (1, 0.0015), (2, 0.003), (3, 0.005))


def test_each_send_costs_the_loaded_hop_over_the_unloaded_one(tmp_path):
    """Two stages, m microbatches, every stage one send per microbatch (the first forward,
    the second backward): with k* the slowest stage's index from 0, T1 + T2 + T3 grow by
    h (S + (m - S + k* - 1) + (S - k*)), i.e. exactly h (m + 1) whichever stage is slowest."""
    directory = tmp_path / "profile"
    write_oobleck_profile(synthetic_profile(), directory)
    write_contention(ContentionProfile(3, FACTORS, "test", hop_overhead_s=HOPS), directory)
    timing = build(_config(directory)).timing
    assert isinstance(timing, ContendedCompute)
    planner = Planner(timing.profile, timing.cluster, JobSpec(16, 1, 1))
    two = planner.build_plan([["a", "b"]])
    assert [len(p.template.stages) for p in two.pipelines] == [2]
    m = two.pipelines[0].num_microbatches
    h = 0.002
    assert timing.scaled_plan_s(two, 1.0, h) - two.iteration_time_s == pytest.approx(h * (m + 1), rel=1e-9)
    # 2 workers: the factor of 1 busy neighbour and its hop reading over the unloaded one
    assert timing.iteration(two).total_s == pytest.approx(timing.scaled_plan_s(two, 0.6, 0.0015 - 0.001), rel=1e-12)
    varuna = GridPlan(Grid(2, 1, 1, 6, ((0, 4), (4, 8)), 0.0, 0.0), ("a", "b"), None, 1)
    weights = [timing.scaler.tables.weight_s(a, e, 1) for a, e in varuna.config.stage_layers]
    varuna = replace(varuna, config=replace(varuna.config, compute_s=pipeline_time_s(weights, 6)))
    assert timing.scaled_plan_s(varuna, 1.0, h) - varuna.iteration_time_s == pytest.approx(h * (6 + 1), rel=1e-9)
    # one stage sends nothing: the reference count's plan of single-stage pipelines is unchanged
    four = planner.build_plan([["a"], ["b"], ["c"], ["d"]])
    assert timing.iteration(four).total_s == pytest.approx(four.iteration_time_s, rel=1e-12)
