"""The host's cores as a ceiling on throughput (`sim.core_bound`).

The synthetic profile (8 layers of 10 + 20 ms) on 4 nodes, batch 16 of microbatch 1, with
the contention profile of `test_sim_contention`, one phase each at 4, 3 and 2 workers: with
the bound, no phase commits more than compute_cores / sample_core_s samples a second, and
a phase under it keeps its own time.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.validation.spec import synthetic_profile
from planner.contention import ContentionProfile, write_contention
from planner.oobleck_format import write_oobleck_profile
from sim.config import SimConfig
from sim.core_bound import CoreBound
from sim.errors import SimError
from sim.run import simulate
from sim.setup import build
from sim.timing import IterationCost

from .profile_runs import profile_run_config
from .tiny import FixedTiming

FACTORS = ((0, 0.5), (1, 0.6), (2, 0.8), (3, 1.0))


@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    path = tmp_path_factory.mktemp("bound") / "profile"
    write_oobleck_profile(synthetic_profile(), path)
    write_contention(ContentionProfile(3, FACTORS, "test"), path)
    return path


def running_rates(config: SimConfig) -> dict[int, float]:
    result = simulate(config)
    return {row.live_nodes: row.throughput_samples_per_s for row in result.timeline if row.state == "running"}


def test_no_phase_commits_faster_than_the_cores_allow(directory):
    config = profile_run_config(directory, nodes=4, removals=2)
    free = running_rates(config)
    assert set(free) == {4, 3, 2} and len(set(free.values())) == 3
    ceiling = sorted(free.values())[1]  # the middle rate: one phase above it, one below
    bounded = running_rates(config.with_(compute_cores=2.0, sample_core_s=2.0 / ceiling))
    assert set(bounded) == set(free)
    for live, rate in free.items():  # under the ceiling a phase keeps its own time
        assert bounded[live] == pytest.approx(min(rate, ceiling))


@settings(max_examples=60, deadline=None)
@given(
    total=st.floats(0.01, 10.0),
    useful_share=st.floats(0.1, 1.0),
    samples=st.one_of(st.none(), st.integers(1, 64)),
    cores=st.floats(0.5, 16.0),
    sample_core_s=st.floats(1e-4, 1.0),
)
def test_the_floor_stretches_only_what_is_shorter_and_keeps_the_useful_share(
    total, useful_share, samples, cores, sample_core_s
):
    inner = FixedTiming(IterationCost(total, total * useful_share, samples), 0.0, 32, "planner")
    cost = CoreBound(inner, cores, sample_core_s).iteration(object())
    floor = (32 if samples is None else samples) * sample_core_s / cores
    assert cost.total_s == pytest.approx(max(total, floor))
    assert cost.useful_s / cost.total_s == pytest.approx(useful_share)
    assert cost.samples == samples


def test_the_options_go_together_and_are_checked_by_name(directory):
    base = profile_run_config(directory)
    with pytest.raises(SimError, match="set both or neither"):
        base.with_(compute_cores=2.0)
    with pytest.raises(SimError, match="set both or neither"):
        base.with_(sample_core_s=0.04)
    with pytest.raises(SimError, match="sample_core_s must be a finite number > 0"):
        base.with_(compute_cores=2.0, sample_core_s=0.0)
    with pytest.raises(SimError, match="compute_cores must be a finite number > 0, got -1.0"):
        base.with_(compute_cores=-1.0, sample_core_s=0.04)
    with pytest.raises(SimError, match="no effect in the artifact calibration"):
        SimConfig.of(compute_cores=2.0, sample_core_s=0.04)
    assert not isinstance(build(base).timing, CoreBound)
    built = build(base.with_(compute_cores=2.0, sample_core_s=0.04))
    assert isinstance(built.timing, CoreBound)
    assert built.resolved["compute_cores"] == 2.0 and built.resolved["sample_core_s"] == 0.04


def test_a_cost_per_worker_bounds_each_phase_by_its_own_count(directory):
    # a sample costs c1 + k (w - 1): the ceiling of the phase on w workers is 2 / that,
    # the phases' own rates are kept where they are under it
    config = profile_run_config(directory, nodes=4, removals=2)
    free = running_rates(config)
    c1, k = 0.1, 0.01  # ceilings 18.2, 16.7, 15.4 samples/s on 2, 3, 4 workers
    bounded = running_rates(config.with_(compute_cores=2.0, sample_core_s=c1, sample_core_per_worker_s=k))
    assert set(bounded) == set(free)
    for live, rate in free.items():  # the synthetic Oobleck plans compute on every live node
        assert bounded[live] == pytest.approx(min(rate, 2.0 / (c1 + k * (live - 1))))
    assert any(bounded[live] < free[live] for live in free) and any(bounded[live] == free[live] for live in free)
    built = build(config.with_(compute_cores=2.0, sample_core_s=c1, sample_core_per_worker_s=k))
    assert built.resolved["sample_core_per_worker_s"] == k
    with pytest.raises(SimError, match="set compute_cores and sample_core_s too"):
        config.with_(sample_core_per_worker_s=k)
    with pytest.raises(SimError, match="sample_core_per_worker_s must be a finite number >= 0"):
        config.with_(compute_cores=2.0, sample_core_s=c1, sample_core_per_worker_s=-0.01)
