"""Oobleck's join at scale: the gain-test bound is sound (brute force over node counts and
plans) and the growth rule (spread, new pipelines) against plans built for every choice,
by hand and against its gain test."""

from __future__ import annotations

import pytest

from designs.oobleck.join import grow
from designs.oobleck.join_bound import JoinBound
from designs.oobleck.policy import OobleckMemory, OobleckPolicy
from planner.hardware import ClusterSpec, GpuSpec
from planner.plan import JobSpec
from planner.planner import Planner
from planner.policies import ClusterView, Continue, CopyLayers, IterationEnd, Reinstantiate
from planner.profile import LayerProfile, ModelProfile
from planner.reconfigure import on_addition, on_removal

GB = 10**9


def planner(num_nodes: int = 24, batch: int = 32, f: int = 1) -> Planner:
    """8 layers of uneven weight, 1 GB of state each; 3 layers fit a node (n0 = 3)."""
    layers = tuple(LayerProfile(f"l{i}", 1.0 + (i % 3), 2.0 + i % 2, GB // 4, GB // 4, GB // 2, 0, 0) for i in range(8))
    gpu = GpuSpec("toy", 1e12, 7 * GB // 2, 1e12, 1e9)
    return Planner(
        ModelProfile("toy", 1, layers), ClusterSpec(gpu, num_nodes, 1, reserved_bytes=0), JobSpec(batch, 1, f)
    )


def names(count: int, prefix: str = "n") -> list[str]:
    return [f"{prefix}{i}" for i in range(count)]


def test_the_bound_is_above_every_instantiation_and_below_every_join_copy():
    p = planner()
    bound = JoinBound(p)
    n0 = p.min_nodes
    for total in range(n0, 25):
        want = max(1, min(2, total // n0))
        found = bound.bounds(total, want)
        try:
            fresh = p.instantiate(names(total), min_pipelines=want)
        except Exception:
            continue
        assert found is not None and found[0] >= fresh.samples_per_s
        for start in range(max(n0, total - 4), total):  # joins of 1-4 spares
            try:
                plan = p.instantiate(names(start), min_pipelines=max(1, min(2, start // n0)))
            except Exception:
                continue
            result = on_addition(p, plan, names(total - start, "s"), horizon_s=1e9)
            if result.plan is not plan:
                assert result.copy_time_s(p.cluster.inter_node_bw_bytes_per_s) >= found[1]


def test_a_declined_bound_means_the_real_gain_test_declines_too():
    p = planner()
    bound = JoinBound(p)
    n0 = p.min_nodes
    checked = declined = 0
    for start in range(n0, 22):
        plan = p.instantiate(names(start), min_pipelines=max(1, min(2, start // n0)))
        for lost in ([], [plan.nodes[0]], plan.nodes[:2]):  # running plans of every quality
            try:
                current = on_removal(p, plan, lost).plan if lost else plan
            except Exception:
                continue
            if current is None:
                continue
            for spares in range(1, 4):
                total = len(current.nodes) + spares
                for horizon in (5.0, 60.0, 1800.0):
                    want = max(1, min(2, total // n0))
                    if bound.declines(current.samples_per_s, total, want, horizon, 1.0) is not None:
                        declined += 1
                        real = on_addition(p, current, names(spares, "s"), horizon_s=horizon, pause_s=1.0)
                        assert real.plan is current
                    checked += 1
    assert declined > 0 and checked > declined  # the bound decides some, not all


def greedy_by_plans(p: Planner, groups: list[list[str]], spares: list[str]) -> list[list[str]]:
    """The spread rebuilt from whole plans: each spare to the one-node growth whose built
    plan is fastest (ties: the smaller, then the later pipeline), while one is faster."""
    groups = [list(g) for g in groups]
    for spare in spares:
        current = p.build_plan(groups).iteration_time_s
        options = []
        for i, g in enumerate(groups):
            if p.template(len(g) + 1) is None or len(g) + 1 > max(p.feasible_sizes(24)):
                continue
            trial = [list(h) + ([spare] if j == i else []) for j, h in enumerate(groups)]
            options.append((p.build_plan(trial).iteration_time_s, len(g), -i, trial))
        options = [o for o in options if o[0] < current]
        if not options:
            break
        groups = min(options, key=lambda o: o[:3])[3]
    return groups


def test_growth_gives_each_spare_where_the_plan_gains_most_or_forms_new_pipelines():
    p = planner()
    plan = p.build_plan([names(3, "a"), names(4, "b"), names(3, "c")])
    result = grow(p, plan, ["s1"], horizon_s=1e9, pause_s=0.0)
    best = greedy_by_plans(p, [list(q.nodes) for q in plan.pipelines], ["s1"])
    assert result.plan.samples_per_s == pytest.approx(p.build_plan(best).samples_per_s) and "s1" in result.plan.nodes
    assert result.plan.samples_per_s > plan.samples_per_s
    three = grow(p, plan, ["s1", "s2", "s3"], horizon_s=1e9, pause_s=0.0)
    spread = p.build_plan(greedy_by_plans(p, [list(q.nodes) for q in plan.pipelines], ["s1", "s2", "s3"]))
    fresh = p.build_plan([names(3, "a"), names(4, "b"), names(3, "c"), ["s1", "s2", "s3"]])
    assert three.plan.samples_per_s == pytest.approx(max(spread.samples_per_s, fresh.samples_per_s))
    assert len(three.plan.nodes) == 13
    # a short horizon cannot pay for the copies: the plan is kept
    kept = grow(p, plan, ["s1"], horizon_s=1e-3, pause_s=0.0)
    assert kept.plan is plan and "kept the current plan" in kept.notes[0]


def uniform(num_nodes: int = 24, batch: int = 64) -> Planner:
    """6 equal layers, 2 fit a node: templates of 3, 4 and 5 nodes share the 2-layer
    bottleneck, 6 nodes run twice as fast per microbatch (the 98-layer GPT-3 175B on
    96-98 nodes in miniature)."""
    layers = tuple(LayerProfile(f"l{i}", 1.0, 2.0, GB // 4, GB // 4, GB // 2, 0, 0) for i in range(6))
    gpu = GpuSpec("toy", 1e12, 5 * GB // 2, 1e12, 1e9)
    return Planner(ModelProfile("u", 1, layers), ClusterSpec(gpu, num_nodes, 1, reserved_bytes=0), JobSpec(batch, 1, 1))


def test_a_spare_restores_the_pipeline_whose_template_is_slow_not_the_smallest():
    p = uniform()
    assert p.template(5).weights[p.template(5).kstar] == 2 * p.template(6).weights[p.template(6).kstar]
    plan = p.build_plan([names(3, "a"), names(5, "b"), names(6, "c")])
    result = grow(p, plan, ["s1"], horizon_s=1e9, pause_s=0.0)
    assert sorted(len(q.nodes) for q in result.plan.pipelines) == [3, 6, 6]
    smallest_first = p.build_plan([names(3, "a") + ["s1"], names(5, "b"), names(6, "c")])  # the old rule
    every = [
        p.build_plan([list(q.nodes) + (["s1"] if j == i else []) for j, q in enumerate(plan.pipelines)])
        for i, q in enumerate(plan.pipelines)
        if p.template(len(q.nodes) + 1) is not None
    ]
    assert result.plan.iteration_time_s == pytest.approx(min(e.iteration_time_s for e in every))
    assert result.plan.iteration_time_s < 0.9 * smallest_first.iteration_time_s  # 93.7 s against 108.7 s


def test_a_returning_node_heals_the_plan_a_removal_slowed():
    """Removal (the paper's rule 1: a 6-node pipeline runs the slow 5-node template), then
    the node comes back through the policy's growth: it goes to the 5-node pipeline, not
    the smaller 3-node one, and the original iteration time is back."""
    p = uniform()
    ready = names(15)
    plan = p.build_plan([ready[:3], ready[3:9], ready[9:]])
    policy = OobleckPolicy(p, exact_join_max_nodes=0)
    shrunk = on_removal(p, plan, [ready[7]]).planned
    assert sorted(len(q.nodes) for q in shrunk.pipelines) == [3, 5, 6]
    assert shrunk.iteration_time_s > 1.1 * plan.iteration_time_s
    current = type(policy.decide(ClusterView(0.0, tuple(ready), (), "running"), IterationEnd(1), None))(
        shrunk, (Continue(),), OobleckMemory(shrunk, True)
    )
    d = policy.decide(ClusterView(0.0, tuple(ready), (), "running"), IterationEnd(2), current)
    assert isinstance(d.actions[0], Reinstantiate) and ready[7] in d.plan.nodes
    assert d.plan.iteration_time_s == pytest.approx(plan.iteration_time_s)


def test_the_policy_grows_above_its_exact_limit_and_instantiates_below():
    p = planner()
    ready = names(10)
    for limit in (0, 10**6):
        policy = OobleckPolicy(p, exact_join_max_nodes=limit)
        plan = p.build_plan([ready[:3], ready[3:7], ready[7:10]])
        current = policy.decide(ClusterView(0.0, tuple(ready), (), "running"), IterationEnd(1), None)
        current = type(current)(plan, (Continue(),), OobleckMemory(plan, True))
        view = ClusterView(0.0, tuple(ready + ["s1"]), (), "running")
        d = policy.decide(view, IterationEnd(2), current)
        expected = (
            grow(p, plan, ["s1"], horizon_s=policy.join_horizon_s, pause_s=0.0)
            if limit == 0
            else on_addition(p, plan, ["s1"], horizon_s=policy.join_horizon_s)
        )
        assert expected.plan is not plan  # one more node pays here, both ways
        assert isinstance(d.actions[0], Reinstantiate) and isinstance(d.actions[1], CopyLayers)
        assert d.plan == expected.plan
