"""Instantiation: f + 1 pipelines, every node used, the fastest combination, exact weights."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from planner.errors import InfeasibleError, PlannerError
from planner.plan import JobSpec
from planner.planner import Planner

from .bruteforce import best_distribution
from .strategies import cluster, models


def names(n):
    return [f"n{i}" for i in range(n)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=models(max_layers=8),
    f=st.integers(0, 2),
    total_nodes=st.integers(1, 10),
    memory_mib=st.sampled_from([64, 160, 100_000]),
    extra_microbatches=st.integers(0, 8),
)
def test_every_node_count_gets_a_plan_with_no_idle_node(model, f, total_nodes, memory_mib, extra_microbatches):
    """With at least one microbatch per node (so even one-node pipelines can all be fed)."""
    microbatches = total_nodes + extra_microbatches
    planner = Planner(model, cluster(memory_mib, total_nodes, 1), JobSpec(microbatches, 1, f))
    try:
        n0 = planner.min_nodes
    except InfeasibleError:
        return  # the model does not fit on this cluster at all
    # The coin-problem argument needs templates for n0 .. 2 n0 - 1 (a model with fewer
    # layers than that cannot have them; test_gap_in_templates_is_a_clear_error covers it).
    assume(all(planner.template(n) is not None for n in range(n0, 2 * n0)))
    for n in range((f + 1) * n0, total_nodes + 1):
        plan = planner.instantiate(names(n))
        assert sorted(plan.nodes) == sorted(names(n))  # every node, once
        assert plan.num_pipelines >= f + 1
        assert plan.num_microbatches == microbatches
        assert math.isclose(sum(plan.gradient_weights), 1.0)
        for pipeline, weight in zip(plan.pipelines, plan.gradient_weights):
            assert weight == pipeline.num_microbatches / microbatches


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=models(max_layers=6), f=st.integers(0, 1), total_nodes=st.integers(2, 7), microbatches=st.integers(2, 8))
def test_instantiation_is_the_fastest_combination(model, f, total_nodes, microbatches):
    planner = Planner(model, cluster(100_000, total_nodes, 1), JobSpec(microbatches, 1, f))
    n0 = planner.min_nodes
    # Independent enumeration: every multiset of feasible template sizes with >= f + 1
    # members summing to the node count, every distribution of the microbatches.
    sizes = [n for n in range(n0, total_nodes + 1) if planner.template(n) is not None]
    best = math.inf
    for k in range(f + 1, min(total_nodes, microbatches) + 1):
        for combo in itertools.combinations_with_replacement(sizes, k):
            if sum(combo) != total_nodes:
                continue
            templates = [planner.template(n) for n in combo]
            makespan = best_distribution([t.iteration_time for t in templates], microbatches)
            groups, start = [], 0
            for n in combo:
                groups.append(names(total_nodes)[start : start + n])
                start += n
            exposed = planner.build_plan(groups).allreduce_exposed_s
            best = min(best, makespan + exposed)
    if best == math.inf:
        with pytest.raises(InfeasibleError):
            planner.instantiate(names(total_nodes))
        return
    plan = planner.instantiate(names(total_nodes))
    assert math.isclose(plan.iteration_time_s, best, rel_tol=1e-9)


def test_bad_jobs_are_clear_errors(gpt2_profile):
    with pytest.raises(PlannerError, match="not a multiple of the microbatch"):
        JobSpec(1000, 3, 1)
    planner = Planner(gpt2_profile, cluster(15 * 1024, 8, 1), JobSpec(64, 1, 3))
    with pytest.raises(InfeasibleError, match="need at least"):
        planner.instantiate(names(5))
    with pytest.raises(PlannerError, match="microbatch size 2 differs"):
        Planner(gpt2_profile, cluster(15 * 1024, 8, 1), JobSpec(64, 2, 1))


def test_heterogeneous_plan_for_seven_nodes(gpt2_profile):
    """7 nodes, f = 1 with n0 = 3: two different templates side by side (3 + 4)."""
    planner = Planner(gpt2_profile, cluster(10 * 1024, 7, 1), JobSpec(512, 1, 1))
    assert planner.min_nodes == 3
    plan = planner.instantiate(names(7))
    assert sorted(len(p.nodes) for p in plan.pipelines) == [3, 4]
    counts = [p.num_microbatches for p in plan.pipelines]
    assert counts[0] != counts[1]  # unequal pipelines get unequal shares


def test_gap_in_templates_is_a_clear_error():
    """Two layers, n0 = 2: no 3-node pipeline exists, so 3 nodes cannot all be used; the
    best-effort variant leaves one spare instead."""
    from planner.profile import LayerProfile, ModelProfile

    layer = LayerProfile("l", 1.0, 2.0, 16 << 20, 16 << 20, 32 << 20, 0, 0)
    model = ModelProfile("two", 1, (layer, layer))
    planner = Planner(model, cluster(100, 3, 1), JobSpec(8, 1, 0))
    assert planner.min_nodes == 2
    with pytest.raises(InfeasibleError, match="no way to split 3 nodes"):
        planner.instantiate(names(3))
    plan = planner.instantiate_best_effort(names(3))
    assert plan.nodes == ("n0", "n1")


def test_same_node_count_reuses_the_shape_with_new_names(gpt2_profile):
    planner = Planner(gpt2_profile, cluster(15 * 1024, 9, 1), JobSpec(128, 1, 1))
    first = planner.instantiate(names(9))
    other = [f"x{i}" for i in range(9)]
    second = planner.instantiate(other)
    assert [len(p.nodes) for p in first.pipelines] == [len(p.nodes) for p in second.pipelines]
    assert [p.num_microbatches for p in first.pipelines] == [p.num_microbatches for p in second.pipelines]
    assert sorted(second.nodes) == sorted(other)
    assert second.iteration_time_s == first.iteration_time_s


def all_mixes(total, sizes, min_parts):
    """Every multiset of `sizes` summing to `total` with >= min_parts members (plain recursion)."""
    out = []

    def walk(remaining, allowed, prefix):
        if remaining == 0:
            if len(prefix) >= min_parts:
                out.append(tuple(sorted(prefix)))
            return
        for size in [s for s in allowed if s <= remaining]:
            walk(remaining - size, [s for s in allowed if s <= size], prefix + [size])

    walk(total, sorted(sizes, reverse=True), [])
    return out


@pytest.mark.parametrize("num_nodes, f", [(14, 1), (16, 0), (13, 3)])
def test_branch_and_bound_matches_exhaustive_search_on_many_mixes(num_nodes, f):
    """n0 = 1 and a dozen or more nodes: hundreds of mixes; the pruned search must find the
    same iteration time as solving every one of them."""
    from planner.analytic import analytic_profile
    from planner.hardware import make_cluster

    planner = Planner(
        analytic_profile("gpt3-350m", "a100-40gb", 1),
        make_cluster("a100-40gb", num_nodes, 1, inter_node_gbps=5),
        JobSpec(96, 1, f),
    )
    assert planner.min_nodes == 1
    plan = planner.instantiate(names(num_nodes))
    sizes = planner.template_sizes(num_nodes, f + 1)
    mixes = all_mixes(num_nodes, sizes, f + 1)
    assert len(mixes) > 50
    best = min(
        planner.build_plan([names(num_nodes)[sum(m[:i]) : sum(m[: i + 1])] for i in range(len(m))]).iteration_time_s
        for m in mixes
    )
    assert math.isclose(plan.iteration_time_s, best, rel_tol=1e-12)
