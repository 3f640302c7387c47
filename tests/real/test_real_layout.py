"""From a plan to ranks and process groups (pure Python, no processes)."""

from __future__ import annotations

import json

import pytest

from planner.analytic import analytic_profile
from planner.hardware import make_cluster
from planner.plan import ExecutionPlan, JobSpec, PipelinePlan
from planner.planner import Planner
from planner.templates import build_template
from real.config import RunConfig
from real.control.planning import make_plan, make_planner
from real.protocol.layout import Layout, LayoutError, layout_from_plan

NODES = [f"node{i}" for i in range(7)]


def plan_3_4() -> ExecutionPlan:
    config = RunConfig(nodes=7, fault_tolerance=1, global_batch=16, pipelines=(3, 4))
    return make_plan(make_planner(config), config, NODES)


def test_ranks_follow_pipelines_and_stages():
    plan = plan_3_4()
    layout = layout_from_plan(plan)
    assert layout.world_size == 7
    assert [p.ranks for p in layout.pipelines] == [(0, 1, 2), (3, 4, 5, 6)]
    for pipe, planned in zip(layout.pipelines, plan.pipelines):
        stages = [layout.stages[r] for r in pipe.ranks]
        assert [s.node for s in stages] == list(planned.nodes)
        assert [(s.first_layer, s.end_layer) for s in stages] == [
            (t.first_layer, t.end_layer) for t in planned.template.stages
        ]
        assert pipe.num_microbatches == planned.num_microbatches
    assert [p.gradient_weight for p in layout.pipelines] == pytest.approx(list(plan.gradient_weights))
    assert sum(p.gradient_weight for p in layout.pipelines) == pytest.approx(1.0)
    assert [p.first_microbatch for p in layout.pipelines] == [0, layout.pipelines[0].num_microbatches]
    assert layout.rank_of("node4", 0) == 4 and layout.rank_of("node4", 1) is None


def test_one_sync_group_per_distinct_owner_set():
    """Brute force: the owner set of every layer, deduplicated, is exactly the groups."""
    plan = plan_3_4()
    layout = layout_from_plan(plan)
    owners = {}
    for layer in range(plan.num_layers):
        ranks = tuple(sorted(s.rank for s in layout.stages if layer in s.layers))
        owners.setdefault(ranks, []).append(layer)
    assert {g.ranks: list(g.layers) for g in layout.sync_groups} == owners
    assert len(layout.sync_groups) == len(owners) >= 3  # different templates: more groups than stages of either
    firsts = [g.layers[0] for g in layout.sync_groups]
    assert firsts == sorted(firsts)
    for rank in range(layout.world_size):
        mine = layout.groups_of(rank)
        assert [g for g in layout.sync_groups if rank in g.ranks] == list(mine)
        assert {l for g in mine for l in g.layers} == set(layout.stages[rank].layers)


def test_single_pipeline_has_no_sync_groups():
    config = RunConfig(nodes=2, fault_tolerance=0, pipelines=(2,))
    layout = layout_from_plan(make_plan(make_planner(config), config, NODES[:2]))
    assert layout.sync_groups == () and layout.groups_of(0) == ()


def test_layout_round_trips_through_json():
    layout = layout_from_plan(plan_3_4(), generation=3, layer_allreduce_s=[0.1] * 6)
    again = Layout.from_dict(json.loads(json.dumps(layout.to_dict())))
    assert again == layout


def test_malformed_layouts_are_rejected_with_the_reason():
    data = layout_from_plan(plan_3_4()).to_dict()
    with pytest.raises(LayoutError, match="malformed"):
        Layout.from_dict({k: v for k, v in data.items() if k != "stages"})
    broken = json.loads(json.dumps(data))
    broken["pipelines"][1]["num_microbatches"] += 1
    with pytest.raises(LayoutError, match="global batch"):
        Layout.from_dict(broken)
    broken = json.loads(json.dumps(data))
    broken["stages"][4]["first_layer"] += 1
    with pytest.raises(LayoutError, match="exactly once"):
        Layout.from_dict(broken)


def test_multi_gpu_stages_are_refused():
    """A stage sharded over 2 GPUs of a node needs intra-stage parallelism the backend
    does not have: the error says so instead of running something else."""
    planner = Planner(analytic_profile("gpt3-350m", "v100-16gb"), make_cluster("v100-16gb", 1, 2), JobSpec(16, 1, 0))
    assert 2 in planner.tables.widths  # the analytic profile has in-node all-reduce times
    template = build_template(planner.tables, 1, [(0, 26, 2)])
    plan = ExecutionPlan((PipelinePlan(template, ("node0",), 16),), 16, 1, 26, 0.0)
    with pytest.raises(LayoutError, match="one-GPU stages only"):
        layout_from_plan(plan)


def test_two_gpus_per_node_give_each_gpu_a_stage():
    config = RunConfig(nodes=3, gpus_per_node=2, fault_tolerance=1, pipelines=(1, 2))
    layout = layout_from_plan(make_plan(make_planner(config), config, NODES[:3]))
    assert layout.world_size == 6
    assert sorted((s.node, s.gpu) for s in layout.stages) == [(n, g) for n in NODES[:3] for g in (0, 1)]
    first = [layout.stages[r] for r in layout.pipelines[0].ranks]
    assert [(s.node, s.gpu) for s in first] == [("node0", 0), ("node0", 1)]
