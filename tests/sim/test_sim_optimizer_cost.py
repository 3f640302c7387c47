"""The optimizer step: the slowest rank's step added to every iteration (`optimizer.json`).

Hand cases on the synthetic profile (8 layers of 10 + 20 ms), whose layers get step times
that differ per layer, so the slowest stage is the one with the largest sum, not the most
layers; a hypothesis test checks the term against a rank-by-rank brute force over plans
the planner builds.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.validation.spec import synthetic_profile
from planner.contention import ContentionProfile, write_contention
from planner.errors import ProfileError
from planner.hardware import make_cluster
from planner.oobleck_format import load_oobleck_profile, write_oobleck_profile
from planner.optimizer_step import FILE_NAME, OptimizerProfile, load_optimizer, parse_optimizer, write_optimizer
from planner.plan import JobSpec
from planner.planner import Planner
from planner.policies.grid import Grid, GridPlan
from sim.optimizer_cost import OptimizerStep, slowest_step_s
from sim.run import simulate
from sim.setup import build

from .profile_runs import profile_run_config

STEPS = (0.001, 0.004, 0.002, 0.002, 0.003, 0.001, 0.005, 0.0005)
FACTORS = ((0, 0.5), (1, 0.6), (2, 0.8), (3, 1.0))


def _directory(tmp_path, steps=STEPS, factors=None):
    directory = tmp_path / "profile"
    write_oobleck_profile(synthetic_profile(), directory)
    if steps is not None:
        write_optimizer(OptimizerProfile(steps, "test"), directory)
    if factors is not None:
        write_contention(ContentionProfile(3, factors, "test"), directory)
    return directory


_config = profile_run_config


def _outer(directory) -> OptimizerStep:
    timing = build(_config(directory)).timing
    assert isinstance(timing, OptimizerStep)
    return timing


def _brute_force_s(plan, steps) -> float:
    """Every rank of every pipeline: its layers' steps over its stage's GPUs."""
    worst = 0.0
    for pipeline in plan.pipelines:
        for stage in pipeline.template.stages:
            for _ in range(stage.num_gpus):
                worst = max(worst, sum(steps[stage.first_layer : stage.end_layer]) / stage.num_gpus)
    return worst


def test_each_iteration_pays_the_slowest_stage(tmp_path):
    timing = _outer(_directory(tmp_path))
    planner = Planner(synthetic_profile(), make_cluster("v100-16gb", 8), JobSpec(16, 1, 1))
    for groups in ([["a"], ["b"]], [["a", "b"], ["c", "d"]], [["a", "b", "c"]]):
        plan = planner.build_plan(groups)
        inner = timing.inner.iteration(plan)
        cost = timing.iteration(plan)
        step = _brute_force_s(plan, STEPS)
        assert step > 0
        assert cost.total_s == pytest.approx(inner.total_s + step, rel=1e-12)
        assert cost.useful_s == pytest.approx(inner.useful_s + step, rel=1e-12)
        assert cost.samples == inner.samples
    two_stage = planner.build_plan([["a", "b"]])
    split = two_stage.pipelines[0].template.stages[0].end_layer
    assert slowest_step_s(two_stage, timing.optimizer) == max(sum(STEPS[:split]), sum(STEPS[split:]))


def test_varuna_pays_its_slowest_stage(tmp_path):
    timing = _outer(_directory(tmp_path))
    config = Grid(2, 2, 1, 8, ((0, 3), (3, 8)), 1.0, 0.05)
    plan = GridPlan(config, ("a", "b", "c", "d"), None, 1)
    assert timing.extra_s(plan) == pytest.approx(sum(STEPS[3:]), rel=1e-12)


def test_contention_scales_the_step_by_the_plans_factor(tmp_path):
    timing = _outer(_directory(tmp_path, factors=FACTORS))
    config = Grid(1, 2, 1, 8, ((0, 8),), 1.0, 0.05)
    plan = GridPlan(config, ("a", "b"), None, 1)
    assert timing.extra_s(plan) == pytest.approx(0.6 * sum(STEPS), rel=1e-12)  # 2 workers: 1 neighbour


def test_a_run_is_slower_by_the_step_and_only_with_the_file(tmp_path):
    def throughput(directory):
        result = simulate(_config(directory, nodes=2, removals=0))
        return [row.throughput_samples_per_s for row in result.timeline if row.state == "running"][-1]

    plain = build(_config(_directory(tmp_path / "plain", steps=None))).timing
    assert not isinstance(plain, OptimizerStep)
    assert "optimizer_step_s" not in build(_config(_directory(tmp_path / "p2", steps=None))).resolved
    with_file = build(_config(_directory(tmp_path / "with")))
    assert with_file.resolved["optimizer_step_s"] == pytest.approx(sum(STEPS))
    assert throughput(_directory(tmp_path / "run_with")) < throughput(_directory(tmp_path / "run_plain", steps=None))


PLANNERS = {g: Planner(synthetic_profile(), make_cluster("v100-16gb", 8, g), JobSpec(16, 1, 0)) for g in (1, 2)}


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(st.floats(0.0, 0.05), min_size=8, max_size=8),
    nodes=st.integers(1, 8),
    gpus_per_node=st.sampled_from((1, 2)),
)
def test_the_term_is_the_brute_force_maximum(steps, nodes, gpus_per_node):
    plan = PLANNERS[gpus_per_node].instantiate([f"n{i}" for i in range(nodes)])
    got = slowest_step_s(plan, OptimizerProfile(tuple(steps)))
    assert got == pytest.approx(_brute_force_s(plan, steps), rel=1e-12, abs=1e-15)


def test_the_file_round_trips_and_bad_ones_are_named(tmp_path):
    profile = OptimizerProfile((0.001, 0.0, 2.5), "here")
    write_optimizer(profile, tmp_path)
    assert load_optimizer(tmp_path) == profile
    assert load_optimizer(tmp_path / "none") is None
    for data, message in (
        ([], "expected an object"),
        ({"step_s": [0.1], "steps": 1}, "unknown field 'steps'"),
        ({"source": "x"}, "missing field 'step_s'"),
        ({"step_s": 0.1}, "must be a list"),
        ({"step_s": [0.1, "a"]}, r"step_s\[1\] must be a number"),
        ({"step_s": [0.1, True]}, r"step_s\[1\] must be a number"),
        ({"step_s": [-1.0]}, r"step_s\[0\] = -1.0 is not a finite number >= 0"),
        ({"step_s": []}, "lists no layer"),
        ({"step_s": [0.1], "source": 3}, "'source' must be a string"),
    ):
        with pytest.raises(ProfileError, match=message):
            parse_optimizer(data, "f.json")
    (tmp_path / FILE_NAME).write_text("{")
    with pytest.raises(ProfileError, match="not a readable JSON file"):
        load_optimizer(tmp_path)
    directory = _directory(tmp_path / "short", steps=(0.1, 0.2))
    with pytest.raises(ProfileError, match="optimizer step_s lists 2 layers, the model has 8"):
        load_oobleck_profile(directory, 1)
    (directory / FILE_NAME).write_text(json.dumps({"step_s": list(STEPS)}))
    assert load_oobleck_profile(directory, 1).optimizer == OptimizerProfile(STEPS, str(directory / FILE_NAME))
