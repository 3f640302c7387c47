"""Where a new generation's ranks get their layers from (pure Python, the real planner)."""

from __future__ import annotations

import pytest

from planner.reconfigure import on_removal
from real.config import RunConfig, TinyGptSpec
from real.control.planning import make_plan, make_planner
from real.control.policies import varuna_layout
from real.protocol.layout import layout_from_plan
from real.protocol.sources import CHECKPOINT, LOCAL, PEER, Source, uniform_sources
from real.state.transfers import Holding, LostLayers, plan_sources, transfers

CONFIG = RunConfig(nodes=6, fault_tolerance=2, pipelines=(2, 2, 2), tiny=TinyGptSpec(blocks=6))


def setup():
    planner = make_planner(CONFIG)
    plan = make_plan(planner, CONFIG, CONFIG.node_names())
    return planner, plan, layout_from_plan(plan)


def holdings_of(layout, step=5, worker_of=lambda node: int(node[4:])):
    """Every rank's worker holds its stage's layers (worker id = node number)."""
    return {worker_of(s.node): Holding(worker_of(s.node), s.node, step, tuple(s.layers)) for s in layout.stages}


def test_an_unchanged_layout_restores_everything_locally():
    _, _, layout = setup()
    workers = [int(s.node[4:]) for s in layout.stages]
    sources = plan_sources(layout, workers, holdings_of(layout), 5)
    assert all(s.kind == LOCAL for per_rank in sources for s in per_rank)
    assert transfers(sources) == ()


def test_after_a_removal_the_copies_follow_the_planners_copy_plan():
    planner, plan, old = setup()
    result = on_removal(planner, plan, ["node1"])
    assert result.plan is not None and result.copies
    new = layout_from_plan(result.plan, 1)
    workers = [int(s.node[4:]) for s in new.stages]
    preferred = [(c.dst_node, c.src_node, c.layers) for c in result.copies]
    sources = plan_sources(new, workers, holdings_of(old), 5, preferred)
    wanted = {(c.dst_node, l): c.src_node for c in result.copies for l in c.layers}
    moved = 0
    for stage, per_rank in zip(new.stages, sources):
        assert [s.layer for s in per_rank] == list(stage.layers)
        for s in per_rank:
            if s.kind == PEER:
                moved += 1
                assert new.stages[s.rank].node == wanted[(stage.node, s.layer)]
                assert s.layer in old.stages[[o.node for o in old.stages].index(new.stages[s.rank].node)].layers
            else:
                assert (stage.node, s.layer) not in wanted
    assert moved == sum(len(c.layers) for c in result.copies)
    plan_t = transfers(sources)
    assert [t.tag for t in plan_t] == list(range(len(plan_t)))
    assert [(t.dst, t.layer) for t in plan_t] == sorted((t.dst, t.layer) for t in plan_t)


def test_a_replaced_worker_gets_all_its_layers_from_peers_and_stale_state_is_ignored():
    _, _, layout = setup()
    workers = [int(s.node[4:]) for s in layout.stages]
    held = holdings_of(layout)
    fresh = layout.stages[1]
    held[int(fresh.node[4:])] = Holding(int(fresh.node[4:]), fresh.node, -1, ())  # a fresh process holds nothing
    stale = layout.stages[2]
    held[int(stale.node[4:])] = Holding(int(stale.node[4:]), stale.node, 4, tuple(stale.layers))  # one step behind
    sources = plan_sources(layout, workers, held, 5)
    for rank in (1, 2):
        assert all(s.kind == PEER and s.rank not in (1, 2) for s in sources[rank])
    assert {s.rank for s in sources[1]} == {3, 5} and {s.rank for s in sources[2]} == {0, 4}, (
        "copies are spread over the holders"
    )


def test_a_layer_without_a_holder_makes_live_recovery_impossible():
    _, _, layout = setup()
    workers = [int(s.node[4:]) for s in layout.stages]
    first_half = set(layout.stages[0].layers)
    held = {w: h for w, h in holdings_of(layout).items() if not first_half & set(h.layers)}
    with pytest.raises(LostLayers) as info:
        plan_sources(layout, workers, held, 5)
    assert set(info.value.layers) == first_half


def test_uniform_sources_and_validation():
    _, _, layout = setup()
    sources = uniform_sources(layout, CHECKPOINT)
    assert [[s.layer for s in r] for r in sources] == [list(s.layers) for s in layout.stages]
    with pytest.raises(ValueError):
        Source(0, PEER)
    with pytest.raises(ValueError):
        Source(0, "teleport")


def test_a_varuna_configuration_runs_as_pipelines_with_the_job_microbatches():
    from planner.policies.grid import Grid, GridPlan

    config = RunConfig(nodes=4, gpus_per_node=2, global_batch=18, tiny=TinyGptSpec(blocks=4))
    vc = Grid(
        depth=3,
        width=2,
        microbatch_size=2,
        num_microbatches=5,
        stage_layers=((0, 2), (2, 4), (4, 6)),
        compute_s=1.0,
        allreduce_s=0.1,
    )
    plan = GridPlan(vc, ("n0", "n1", "n2"), (("n0", "n1"), ("n0", "n2"), ("n1", "n2")), 0)
    layout = varuna_layout(plan, 3, config)
    assert layout.generation == 3 and layout.world_size == 6
    assert [(s.node, s.gpu, s.pipeline, s.stage, s.first_layer) for s in layout.stages] == [
        ("n0", 0, 0, 0, 0), ("n0", 1, 0, 1, 2), ("n1", 0, 0, 2, 4), ("n1", 1, 1, 0, 0), ("n2", 0, 1, 1, 2), ("n2", 1, 1, 2, 4),
    ]  # fmt: skip
    assert [p.num_microbatches for p in layout.pipelines] == [9, 9] and sum(
        p.gradient_weight for p in layout.pipelines
    ) == 1.0
    assert [g.ranks for g in layout.sync_groups] == [(0, 3), (1, 4), (2, 5)]
