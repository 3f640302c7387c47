"""The template search stays exact with pipeline communication charged.

The reference (`bruteforce.spec_charge`) states the charge from the raw layers and the
stages' node indices, without CostTables; the search must reach its optimum on every small
instance, on one and several GPUs per node (where stages share nodes and in-node links
appear), and a reference with a deliberately wrong charge must disagree somewhere.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.costmodel import CostTables
from planner.hardware import DEFAULT_ACROSS_NODES_LATENCY_S, DEFAULT_IN_NODE_LATENCY_S, ClusterSpec, GpuSpec
from planner.profile import CommProfile, LayerProfile, LinkProfile, ModelProfile
from planner.templates import TemplateSearch

from .bruteforce import all_layouts, best_reference_time, reference_time, spec_charge
from .strategies import MIB, cluster, comm_cluster, comm_profiles, models

TOL = 1e-9


def layout_of(template):
    return [(s.first_layer, s.end_layer, s.num_gpus) for s in template.stages]


def check_exact(tables: CostTables, comm, max_nodes: int, charge=spec_charge) -> list[str]:
    """Mismatches between the search and the brute-force reference (empty: exact)."""
    search = TemplateSearch(tables)
    feasible = search.feasible_node_counts(max_nodes)
    problems = []
    for n in range(1, max_nodes + 1):
        brute = best_reference_time(tables, comm, n, charge)
        if (n in feasible) != math.isfinite(brute):
            problems.append(f"{n} nodes: feasibility differs")
            continue
        if not math.isfinite(brute):
            continue
        found = search.best([n])[n]
        if not math.isclose(found.iteration_time_s, brute, rel_tol=TOL):
            problems.append(f"{n} nodes: search {found.iteration_time_s} vs brute force {brute}")
    return problems


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=models(max_layers=7, varied_outputs=True, max_allreduce_s=4.0),
    comm=comm_profiles(),
    gpus_per_node=st.sampled_from([1, 2, 4]),
    memory_mib=st.sampled_from([96, 200, 100_000]),
)
def test_search_with_communication_matches_brute_force(model, comm, gpus_per_node, memory_mib):
    profile = replace(model, communication=comm)
    tables = CostTables(profile, comm_cluster(memory_mib, 4, gpus_per_node))
    assert check_exact(tables, comm, 4) == []
    search = TemplateSearch(tables)
    for n in search.feasible_node_counts(4):
        found = search.best([n])[n]
        layout = layout_of(found)
        assert layout in list(all_layouts(tables, n))  # a real layout
        # its stage weights are the reference's (the charge it was ranked by)
        assert math.isclose(found.iteration_time_s, reference_time(profile, comm, gpus_per_node, layout), rel_tol=TOL)
        for stage in found.stages:
            assert math.isclose(stage.forward_s + stage.backward_s, stage.weight_s, rel_tol=1e-9, abs_tol=1e-11)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=models(max_layers=6, varied_outputs=True), gpus_per_node=st.sampled_from([1, 2, 4]))
def test_without_a_measured_profile_the_cluster_links_are_charged(model, gpus_per_node):
    """No `communication`: the ClusterSpec bandwidths and the documented default latencies
    (slow links here, so the sends matter)."""
    gpu = GpuSpec("slow-links", 1e12, 100_000 * MIB, 4 * MIB, 1 * MIB)
    tables = CostTables(model, ClusterSpec(gpu, 3, gpus_per_node, reserved_bytes=0, pipeline_comm=True))
    expected = CommProfile(
        LinkProfile(DEFAULT_IN_NODE_LATENCY_S, 4 * MIB), LinkProfile(DEFAULT_ACROSS_NODES_LATENCY_S, 1 * MIB), 0.0
    )
    assert check_exact(tables, expected, 3) == []


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=models(max_layers=6), gpus_per_node=st.sampled_from([1, 2, 4]), memory_mib=st.sampled_from([96, 100_000]))
def test_a_free_link_changes_nothing(model, gpus_per_node, memory_mib):
    """Zero latency, hop overhead and bytes: the term is exactly additive, so every weight
    and template is bit-identical to the switch off."""
    free = CommProfile(LinkProfile(0.0, 1.0), LinkProfile(0.0, 1.0), 0.0)
    silent = replace(model, layers=tuple(replace(l, output_bytes=0) for l in model.layers), communication=free)
    on = TemplateSearch(CostTables(silent, comm_cluster(memory_mib, 3, gpus_per_node)))
    off = TemplateSearch(CostTables(silent, cluster(memory_mib, 3, gpus_per_node)))
    counts = off.feasible_node_counts(3)
    assert on.feasible_node_counts(3) == counts
    assert on.best(counts) == off.best(counts)


def _random_instance(rng: random.Random) -> tuple[CostTables, CommProfile]:
    layers = tuple(
        LayerProfile(
            f"l{i}",
            rng.randint(1, 40) / 10,
            rng.randint(1, 80) / 10,
            MIB,
            MIB,
            2 * MIB,
            0,
            rng.randint(0, 8) * MIB,
            allreduce_in_node_s=tuple((d, rng.randint(0, 40) / 10) for d in (2, 4)),  # often dear: nodes split
        )
        for i in range(rng.randint(2, 6))
    )
    comm = CommProfile(  # a fast in-node link, a slow network: where stages sit matters
        LinkProfile(rng.choice([0.0, 0.05]), rng.choice([4, 8]) * MIB),
        LinkProfile(rng.choice([0.1, 0.3]), rng.choice([1, 2]) * MIB),
        rng.choice([0.0, 0.1, 0.5]),
    )
    profile = ModelProfile("random", 1, layers, communication=comm)
    return CostTables(profile, comm_cluster(100_000, 3, rng.choice([1, 2, 2, 4]))), comm


def _always_across(model, comm, g, layout, offsets, i):
    return spec_charge(model, replace(comm, in_node=comm.across_nodes), g, layout, offsets, i)


def _forward_only(model, comm, g, layout, offsets, i):
    """Charges the forward send only (drops the gradient sent back)."""
    if i + 1 == len(layout):
        return 0.0
    link = comm.in_node if offsets[i + 1] // g == offsets[i] // g else comm.across_nodes
    return comm.hop_overhead_s + link.latency_s + model.layers[layout[i][1] - 1].output_bytes / link.bytes_per_s


def _own_output(model, comm, g, layout, offsets, i):
    """Sizes the backward send by the stage's own first layer instead of the boundary's."""
    a = layout[i][0]
    shifted = list(model.layers)
    if a > 0:
        shifted[a - 1] = model.layers[a]
    return spec_charge(replace(model, layers=tuple(shifted)), comm, g, layout, offsets, i)


def _no_hop(model, comm, g, layout, offsets, i):
    return spec_charge(model, replace(comm, hop_overhead_s=0.0), g, layout, offsets, i)


def test_a_wrong_charge_is_caught():
    """The exactness check has teeth: on the same seeded instances where the search agrees
    with the right charge, each wrong charge disagrees on some instance."""
    instances = [_random_instance(random.Random(seed)) for seed in range(40)]
    for tables, comm in instances:
        assert check_exact(tables, comm, 3) == []
    for wrong in (_always_across, _forward_only, _own_output, _no_hop):
        caught = sum(bool(check_exact(tables, comm, 3, wrong)) for tables, comm in instances)
        assert caught > 0, wrong.__name__


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=models(max_layers=6, varied_outputs=True, max_allreduce_s=4.0),
    comm=comm_profiles(),
    gpus_per_node=st.sampled_from([1, 2, 4]),
)
def test_pruning_bound_holds_with_communication(model, comm, gpus_per_node):
    """The sweep's lower bound (sum of cheapest compute-only layer weights) stays below T of
    every real layout once sends are charged."""
    from planner.templates import _lower_bound_s, build_template

    tables = CostTables(replace(model, communication=comm), comm_cluster(100_000, 3, gpus_per_node))
    w_min = tables.min_total_weight_s()
    for n in range(1, 4):
        for layout in all_layouts(tables, n):
            template = build_template(tables, n, layout)
            assert _lower_bound_s(w_min, n, template.bottleneck_s) <= template.iteration_time_s * (1 + 1e-9)
