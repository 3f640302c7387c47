"""Checkpoint writes and loads in parallel (planner/checkpoint_cost.py, policies/holdings.py).

Hand cases on the tiny model of tests/sim/tiny.py (4 layers, at most 2 per node): with f = 1
on 4 nodes the plan is two pipelines [n1 n2] [n3 n4], n1 and n3 holding layers 0-1, n2 and
n4 layers 2-3. Layer bytes are given separately (1, 2, 3, 4 GB) so every share is distinct.
The shape-based holdings are checked against a node-by-node count for random Varuna and
Bamboo plans.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from designs.bamboo.policy import BambooPlan, form_grid
from planner.checkpoint_cost import (
    StorageSpec,
    as_ranges,
    load_cost,
    merge,
    owner_writes,
    storage_for,
    write_cost,
)
from planner.errors import PlannerError
from planner.plan import JobSpec
from planner.planner import Planner
from planner.policies.grid import Grid, place
from planner.policies.holdings import holdings, node_ranges
from tests.sim.tiny import GB, nodes, tiny_cluster, tiny_profile

BYTES = [1 * GB, 2 * GB, 3 * GB, 4 * GB]


def oobleck_plan():
    planner = Planner(tiny_profile(), tiny_cluster(4), JobSpec(8, 1, 1))
    plan = planner.instantiate(nodes(4))
    assert [list(p.nodes) for p in plan.pipelines] == [["n1", "n2"], ["n3", "n4"]]
    return plan


def test_each_holder_writes_its_share_of_every_layer_it_holds():
    plan = oobleck_plan()
    assert holdings(plan) == {((0, 2),): 2, ((2, 4),): 2}
    # n2 and n4 share layers 2 and 3: (3 + 4) / 2 = 3.5 GB each; n1 and n3 1.5 GB
    cost = write_cost(holdings(plan), BYTES, StorageSpec(node_write_bytes_per_s=1 * GB, fixed_s=1.0))
    assert cost.busiest_node_bytes == pytest.approx(3.5 * GB)
    assert cost.total_bytes == 10 * GB
    assert cost.seconds == pytest.approx(1.0 + 3.5)
    # an aggregate cap of 2 GB/s: all 10 GB take 5 s, longer than the busiest node's 3.5 s
    capped = write_cost(
        holdings(plan), BYTES, StorageSpec(node_write_bytes_per_s=1 * GB, aggregate_bytes_per_s=2 * GB, fixed_s=1.0)
    )
    assert capped.seconds == pytest.approx(1.0 + 5.0)


def test_survivors_write_the_shares_of_holders_that_are_gone():
    plan = oobleck_plan()
    alive = {"n1", "n2", "n3"}
    held = holdings(plan, alive=alive)
    assert held == {((0, 2),): 2, ((2, 4),): 1}
    # n2 alone holds layers 2-3 now: 7 GB at 1 GB/s
    assert write_cost(held, BYTES, StorageSpec(node_write_bytes_per_s=1 * GB, fixed_s=0.0)).seconds == pytest.approx(
        7.0
    )
    with pytest.raises(PlannerError, match="layer 2"):
        write_cost(holdings(plan, alive={"n1", "n3"}), BYTES, StorageSpec())


def test_a_load_reads_each_layer_once_then_all_gathers_it():
    plan = oobleck_plan()
    storage = StorageSpec(node_read_bytes_per_s=0.5 * GB, fixed_s=99.0)  # fixed_s is the writes'
    cost = load_cost(holdings(plan), BYTES, storage, network_bytes_per_s=1 * GB)
    # n2 reads its 3.5 GB share at 0.5 GB/s (7 s), then receives the other 3.5 GB of its
    # 7 GB from n4 at 1 GB/s (3.5 s)
    assert cost.seconds == pytest.approx(7.0 + 3.5)
    assert cost.total_bytes == 10 * GB


def test_one_pipeline_reads_everything_itself_with_no_exchange():
    held = Counter({((0, 2),): 1, ((2, 4),): 1})
    cost = load_cost(held, BYTES, StorageSpec(node_read_bytes_per_s=1 * GB), network_bytes_per_s=1e-9)
    assert cost.seconds == pytest.approx(7.0)  # nothing to all-gather: the tiny network is never used


def test_varuna_holdings_by_hand():
    # depth 2 x width 3 on nodes of 4 GPUs: workers 0..5 (stage = k mod 2) on n1 (0-3) and
    # n2 (4, 5; two GPUs idle): both nodes hold both stages
    config = Grid(2, 3, 1, 8, ((0, 2), (2, 4)), 1.0, 0.0)
    plan = place(config, nodes(3), 4)
    assert plan.nodes == ("n1", "n2") and plan.idle_gpus == 2
    assert holdings(plan) == {((0, 4),): 2}
    # every layer has two holders: each node writes half of the 10 GB
    assert write_cost(
        holdings(plan), BYTES, StorageSpec(node_write_bytes_per_s=1 * GB, fixed_s=0.0)
    ).seconds == pytest.approx(5.0)


def test_bamboo_holdings_by_hand():
    stages = ((0, 1), (1, 2), (2, 3), (3, 4))
    grid = form_grid(nodes(8), 4)
    assert holdings(grid, stages) == {((0, 2),): 2, ((1, 3),): 2, ((2, 4),): 2, ((0, 1), (3, 4)): 2}
    # n2 (pipeline 0, stage 1) fails over to n1, which now computes stages 0 and 1 and holds 0-2
    owners = (("n1", "n1", "n3", "n4"), grid.owners[1])
    failed = BambooPlan(4, owners, (), ((0, 1),))
    assert holdings(failed, stages) == {((0, 3),): 1, ((1, 3),): 1, ((2, 4),): 2, ((0, 1), (3, 4)): 2, ((0, 2),): 1}


def test_default_storage_by_gpu_type():
    assert storage_for("v100-16gb").node_read_bytes_per_s == 0.16e9
    assert storage_for("a100-80gb").node_write_bytes_per_s == 2.0e9
    assert storage_for("a100-80gb", aggregate_bytes_per_s=5e9, node_write_bytes_per_s=None).aggregate_bytes_per_s == 5e9
    with pytest.raises(PlannerError, match="aggregate"):
        StorageSpec(aggregate_bytes_per_s=0)


def test_ranges_helpers():
    assert as_ranges([3, 0, 1, 5, 4]) == ((0, 2), (3, 6))
    assert merge((2, 4), (0, 1), (1, 2), (6, 7)) == ((0, 4), (6, 7))


def brute(plan, stage_layers=None) -> Counter:
    return Counter(node_ranges(plan, n, stage_layers) for n in plan.nodes)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 9), st.sampled_from([1, 2, 3, 4, 8]), st.data())
def test_varuna_shape_holdings_match_node_by_node(depth, width, g, data):
    layers = depth * data.draw(st.integers(1, 3))
    per = layers // depth
    config = Grid(depth, width, 1, 4, tuple((i * per, (i + 1) * per) for i in range(depth)), 1.0, 0.0)
    plan = place(config, [f"n{i}" for i in range(depth * width)], g)
    # node by node, straight from the placement rule: node j runs workers j g .. j g + g - 1
    direct = Counter()
    for j in range(len(plan.nodes)):
        workers = range(j * g, min((j + 1) * g, depth * width))
        direct[as_ranges(l for k in workers for l in range(*config.stage_layers[k % depth]))] += 1
    assert holdings(plan) == direct == brute(plan)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 5), st.data())
def test_bamboo_shape_holdings_match_node_by_node(depth, pipelines, data):
    stages = tuple((s, s + 1) for s in range(depth))
    grid = form_grid([f"n{i}" for i in range(depth * pipelines)], depth)
    owners = [list(row) for row in grid.owners]
    covered = []
    if depth > 1:
        for p in data.draw(st.sets(st.integers(0, pipelines - 1))):
            s = data.draw(st.integers(0, depth - 1))
            owners[p][s] = owners[p][(s - 1) % depth]
            covered.append((p, s))
    plan = BambooPlan(depth, tuple(tuple(r) for r in owners), (), tuple(sorted(covered)))
    assert holdings(plan, stages) == brute(plan, stages)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 5 * GB), min_size=4, max_size=4), st.integers(1, 4), st.sampled_from([None, 1 * GB]))
def test_writes_are_bounded_by_the_even_split_and_the_single_stream(layer_bytes, alive_count, cap):
    plan = oobleck_plan()
    alive = set(["n1", "n2", "n3", "n4"][:alive_count]) | {"n1", "n2"}  # n1 n2 hold a whole replica
    held = holdings(plan, alive=alive)
    storage = StorageSpec(node_write_bytes_per_s=1 * GB, aggregate_bytes_per_s=cap, fixed_s=0.0)
    cost = write_cost(held, layer_bytes, storage)
    total = sum(layer_bytes)
    assert cost.seconds <= total / GB + 1e-9  # never slower than one node writing everything
    assert cost.seconds >= total / (len(alive) * GB) - 1e-9  # never faster than a perfect split
    if cap is not None:
        assert cost.seconds >= total / cap - 1e-9


@st.composite
def pipelines_and_bytes(draw):
    """1-4 pipelines over the same layers, each cut into contiguous stages grouped onto
    nodes (a node may hold several consecutive stages), and each layer's bytes."""
    num_layers = draw(st.integers(1, 9))
    pipelines = []
    for _ in range(draw(st.integers(1, 4))):
        cuts = sorted(draw(st.sets(st.integers(1, num_layers - 1), max_size=num_layers - 1))) if num_layers > 1 else []
        bounds = [0, *cuts, num_layers]
        stages = list(zip(bounds, bounds[1:]))
        groups = draw(st.integers(1, len(stages)))
        per_node = [stages[i::groups] for i in range(groups)]  # stages dealt round-robin onto nodes
        pipelines.append([merge(*held) for held in per_node])
    layer_bytes = draw(st.lists(st.integers(0, 5 * GB), min_size=num_layers, max_size=num_layers))
    return pipelines, layer_bytes


def layers_of(ranges):
    return [l for a, b in ranges for l in range(a, b)]


@settings(max_examples=150, deadline=None)
@given(pipelines_and_bytes(), st.sampled_from([None, 3 * GB]))
def test_the_owner_rule_priced_as_assigned_writes_matches_a_node_by_node_count(case, cap):
    """Brute force: node n of pipeline p writes, in full, every layer l it holds with
    l mod P == p; the busiest node's bytes and the total decide the seconds."""
    pipelines, layer_bytes = case
    num = len(pipelines)
    per_node = [
        sum(layer_bytes[l] for l in layers_of(ranges) if l % num == p)
        for p, node_ranges in enumerate(pipelines)
        for ranges in node_ranges
    ]
    storage = StorageSpec(node_write_bytes_per_s=1 * GB, aggregate_bytes_per_s=cap, fixed_s=0.5)
    cost = write_cost(owner_writes(pipelines), layer_bytes, storage, split="assigned")
    assert cost.busiest_node_bytes == max(per_node)
    assert cost.total_bytes == sum(per_node) == sum(layer_bytes)  # every layer written exactly once
    expected = 0.5 + max(max(per_node) / GB, sum(layer_bytes) / cap if cap else 0.0)
    assert cost.seconds == pytest.approx(expected)
    # the even split over the same holders moves the same total
    holders = Counter(ranges for node_ranges in pipelines for ranges in node_ranges)
    assert write_cost(holders, layer_bytes, storage).total_bytes == cost.total_bytes


@settings(max_examples=100, deadline=None)
@given(pipelines_and_bytes(), st.sampled_from([None, 3 * GB]))
def test_loads_where_every_holder_reads_its_own_layers_match_a_node_by_node_count(case, cap):
    pipelines, layer_bytes = case
    per_node = [sum(layer_bytes[l] for l in layers_of(r)) for node_ranges in pipelines for r in node_ranges]
    holders = Counter(r for node_ranges in pipelines for r in node_ranges)
    storage = StorageSpec(node_read_bytes_per_s=2 * GB, aggregate_bytes_per_s=cap)
    cost = load_cost(holders, layer_bytes, storage, network_bytes_per_s=1e-9, split="each")  # no exchange
    assert cost.busiest_node_bytes == max(per_node) and cost.total_bytes == sum(per_node)
    assert cost.seconds == pytest.approx(max(max(per_node) / (2 * GB), sum(per_node) / cap if cap else 0.0))


def test_assigned_writes_name_a_layer_written_twice_or_never():
    storage = StorageSpec()
    assert write_cost({((0, 2),): 1, ((2, 4),): 1}, BYTES, storage, split="assigned").busiest_node_bytes == 7 * GB
    with pytest.raises(PlannerError, match="layer 0 has 2 assigned writers"):
        write_cost({((0, 4),): 1, ((0, 1),): 1}, BYTES, storage, split="assigned")
    with pytest.raises(PlannerError, match="layer 3 has 0 assigned writers"):
        write_cost({((0, 3),): 1}, BYTES, storage, split="assigned")
    # the real rule on the tiny plan: layers 0, 2 by pipeline 0's n1, n2; 1, 3 by n3, n4
    assert owner_writes([[((0, 2),), ((2, 4),)], [((0, 2),), ((2, 4),)]]) == {
        ((0, 1),): 1,
        ((2, 3),): 1,
        ((1, 2),): 1,
        ((3, 4),): 1,
    }
