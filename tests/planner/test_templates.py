"""The template search is exact: it matches brute force on every small instance."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.costmodel import CostTables, pipeline_time_s
from planner.errors import InfeasibleError
from planner.plan import JobSpec
from planner.planner import Planner
from planner.templates import TemplateSearch, template_node_range

from .bruteforce import all_layouts, best_template_time
from .strategies import cluster, models


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=models(max_layers=8),
    gpus_per_node=st.sampled_from([1, 2, 4]),
    memory_mib=st.sampled_from([48, 96, 200, 100_000]),
)
def test_search_matches_brute_force(model, gpus_per_node, memory_mib):
    tables = CostTables(model, cluster(memory_mib, 4, gpus_per_node))
    search = TemplateSearch(tables)
    feasible = search.feasible_node_counts(4)
    for n in range(1, 5):
        brute_time, brute = best_template_time(tables, n)
        assert (n in feasible) == (brute is not None), f"feasibility differs for {n} nodes"
        if brute is None:
            continue
        found = search.best([n])[n]
        assert math.isclose(found.iteration_time_s, brute_time, rel_tol=1e-9), (
            n,
            found.iteration_time_s,
            brute_time,
            [(s.first_layer, s.end_layer, s.num_gpus) for s in brute.stages],
            [(s.first_layer, s.end_layer, s.num_gpus) for s in found.stages],
        )
        # The returned layout is a real layout: contiguous, covering, within nodes, fits.
        layout = [(s.first_layer, s.end_layer, s.num_gpus) for s in found.stages]
        assert layout in list(all_layouts(tables, n))
        assert math.isclose(found.iteration_time_s, pipeline_time_s(found.weights, 4 * found.num_stages))


def test_brute_force_is_not_trivially_agreeing():
    """On a known instance the optimum is not the naive even split: the check has teeth."""
    from planner.profile import LayerProfile, ModelProfile

    def layer(f):
        return LayerProfile("l", f, 2 * f, 1, 1, 1, 0, 0)

    model = ModelProfile("m", 1, tuple(layer(f) for f in (1.0, 1.0, 1.0, 5.0)))
    tables = CostTables(model, cluster(100_000, 2, 1))
    best_time, best = best_template_time(tables, 2)
    # [0,3) + [3,4) has weights 9, 15 -> T = 24 + (8 - 2 + 1 - 1) * 15 + 15 = 129
    assert [(s.first_layer, s.end_layer) for s in best.stages] == [(0, 3), (3, 4)]
    assert best_time == pytest.approx(129.0)
    assert TemplateSearch(tables).best([2])[2].iteration_time_s == pytest.approx(129.0)


def test_node_range_follows_design():
    assert list(template_node_range(3, 20, 1)) == list(range(3, 18))
    assert list(template_node_range(3, 8, 2)) == [3, 4, 5]  # max(2*3-1, 8-6) = 5
    assert list(template_node_range(4, 5, 1)) == [4, 5]  # capped at N


def test_too_few_nodes_for_f_is_a_clear_error(gpt2_profile):
    from planner.hardware import make_cluster

    with pytest.raises(InfeasibleError, match=r"f = 3 needs at least"):
        Planner(gpt2_profile, make_cluster("v100-16gb", 6, 1), JobSpec(64, 1, 3)).template_set()


def test_model_that_does_not_fit_is_a_clear_error(gpt2_profile):
    from planner.hardware import make_cluster

    with pytest.raises(InfeasibleError, match="does not fit"):
        Planner(gpt2_profile, make_cluster("v100-16gb", 1, 1), JobSpec(64, 1, 0)).template_set()


def test_gpt2_templates_cover_consecutive_sizes(gpt2_profile):
    from planner.hardware import make_cluster

    templates = Planner(gpt2_profile, make_cluster("v100-16gb", 16, 1), JobSpec(64, 1, 1)).template_set()
    counts = templates.node_counts()
    n0 = templates.min_nodes
    assert counts == tuple(range(n0, max(2 * n0 - 1, 16 - n0) + 1))
    for template in templates.templates:
        assert template.num_stages == template.num_nodes  # one GPU per node
        covered = [layer for stage in template.stages for layer in stage.layers]
        assert covered == list(range(50))
    # n0 is the smallest count that fits: one fewer node cannot hold the model state.
    tables = CostTables(gpt2_profile, make_cluster("v100-16gb", 16, 1))
    assert n0 > 1 and not list(all_layouts(tables, n0 - 1))


def test_a_stage_never_spans_two_nodes():
    """[l0 on 1 GPU][l1 on GPUs 1-2][l2 on 1 GPU] would be far fastest, but GPUs 1 and 2 are
    on different nodes; every legal layout shards l0 or l2, whose all-reduce is slow."""
    from planner.profile import LayerProfile, ModelProfile

    def layer(f, ar):
        return LayerProfile("l", f, 0.0, 1, 1, 1, 0, 0, allreduce_in_node_s={2: ar, 4: ar})

    model = ModelProfile("m", 1, (layer(1.0, 100.0), layer(10.0, 0.0), layer(1.0, 100.0)))
    tables = CostTables(model, cluster(100_000, 2, 2))
    found = TemplateSearch(tables).best([2])[2]
    for stage in found.stages:
        assert stage.gpu_offset + stage.num_gpus <= 2
    assert found.bottleneck_s > 100


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=models(max_layers=7),
    gpus_per_node=st.sampled_from([1, 2, 4]),
    memory_mib=st.sampled_from([96, 100_000]),
)
def test_pruning_bound_holds_for_every_layout(model, gpus_per_node, memory_mib):
    """The sweep's lower bound on T at a bottleneck weight is below every real layout with
    that bottleneck (brute force over all layouts), and tight for one-stage layouts."""
    from planner.templates import _lower_bound_s

    tables = CostTables(model, cluster(memory_mib, 3, gpus_per_node))
    w_min = tables.min_total_weight_s()
    for n in range(1, 4):
        for layout in all_layouts(tables, n):
            weights = [tables.weight_s(a, b, d) for a, b, d in layout]
            t = pipeline_time_s(weights, 4 * len(weights))
            assert _lower_bound_s(w_min, n, max(weights)) <= t * (1 + 1e-9), (layout, t)
            if len(layout) == 1:
                assert math.isclose(_lower_bound_s(w_min, n, max(weights)), t, rel_tol=1e-9)


def test_batched_search_equals_one_beta_at_a_time():
    """Several betas per DP pass give the same templates as one per pass (GPT-3 6.7B, 2 GPUs
    per node, memory binding on some stages)."""
    import planner.templates as templates_module
    from planner.analytic import analytic_profile
    from planner.hardware import make_cluster

    def layouts(batch):
        old = templates_module._BATCH
        templates_module._BATCH = batch
        try:
            tables = CostTables(analytic_profile("gpt3-6.7b", "a100-40gb", 1), make_cluster("a100-40gb", 40, 2))
            search = TemplateSearch(tables)
            found = search.best(search.feasible_node_counts(40))
        finally:
            templates_module._BATCH = old
        return {
            n: (t.iteration_time_s, [(s.first_layer, s.end_layer, s.num_gpus) for s in t.stages])
            for n, t in found.items()
        }

    one, many = layouts(1), layouts(16)
    assert len(one) > 10
    assert one == many
    unpruned = TemplateSearch(
        CostTables(analytic_profile("gpt3-6.7b", "a100-40gb", 1), make_cluster("a100-40gb", 40, 2))
    )
    full = unpruned.best(sorted(one), prune=False)
    assert {n: t.iteration_time_s for n, t in full.items()} == {n: v[0] for n, v in one.items()}
