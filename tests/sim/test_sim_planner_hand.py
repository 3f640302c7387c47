"""The planner calibration against hand computations on the tiny model (tests/sim/tiny.py).

Layers weigh 3 s each (1 s forward + 2 s backward), a node holds at most two of the four
layers, the global batch is 8 microbatches of 1. Pause constants: start 10 s, restart 10 s
(no checkpoint bytes to load), reconfiguration 5 s, checkpoint 2 s; copies move 0 bytes.
A pipeline of S stages of weight w on m microbatches takes (m + S - 1) w when balanced
(T1 + T2 + T3 of DESIGN 3.2).
"""

from __future__ import annotations

import pytest

from designs.bamboo.cost import bamboo_layout
from designs.bamboo.policy import BambooPolicy
from designs.oobleck.policy import OobleckPolicy
from designs.varuna.policy import VarunaPolicy
from designs.varuna.search import VarunaSearch
from planner.checkpoint_cost import StorageSpec
from planner.plan import JobSpec
from planner.planner import Planner
from planner.policies import CheckpointSchedule
from sim.engine import Simulation
from sim.pricing import Pricing
from sim.timing import PlannerCosts

from .tiny import GB, make_trace, nodes, tiny_cluster, tiny_profile, tiny_timing

COSTS = PlannerCosts(reconfigure_overhead_s=5.0, restart_overhead_s=10.0)
STORAGE = StorageSpec(fixed_s=2.0)
BATCH = 8


def simulate(trace, policy, system, layout=None):
    timing = tiny_timing(system, COSTS, BATCH, storage=STORAGE, layout=layout)
    return Simulation(trace, policy, Pricing(timing, node_startup_s=45.0, price_per_node_hour=1.0)).run()


def kinds(sim, kind):
    return [e for e in sim.events if e.kind == kind]


def test_oobleck_reconfigures_by_hand():
    planner = Planner(tiny_profile(), tiny_cluster(4), JobSpec(BATCH, 1, 1))
    assert planner.min_nodes == 2
    policy = OobleckPolicy(planner, reconfigure_pause_s=COSTS.reconfigure_overhead_s)
    trace = make_trace([(0, "add", nodes(4)), (500, "remove", "n4"), (1010, "add", "end")])
    sim = simulate(trace, policy, "oobleck")
    # f = 1 on 4 nodes: two pipelines [n1 n2] [n3 n4] of two 6 s stages, 4 microbatches each:
    # (4 + 1) x 6 = 30 s. Start 10 s: training from 55; 14 iterations by 475, the 15th lost.
    # n4 gone: n3 alone is under n0 = 2 and nobody can lend, so n3 merges with [n1 n2]: one
    # pipeline of three nodes, best split 2 + 1 + 1 layers (weights 6, 3, 3): with 8
    # microbatches T1 12 + T2 (8 - 3 + 0 - 1) x 6 + T3 12 = 48 s. 5 s pause: from 505,
    # 10 iterations by 1010 (985).
    assert sim.iterations == 14 + 10
    assert sim.counts["reconfigurations"] == 1 and sim.counts["failures_survived"] == 1
    assert sim.decision.plan.num_pipelines == 1 and len(sim.decision.plan.nodes) == 3
    assert sim.last_iteration_t == pytest.approx(505 + 10 * 48)
    assert sim.ledger.lost_work_s == pytest.approx(25 + (1010 - 985))
    assert sim.ledger.reconfiguration_s == pytest.approx(5)
    assert sim.ledger.restart_s == pytest.approx(10)


def test_oobleck_restarts_from_its_checkpoint_when_every_replica_of_a_layer_is_gone():
    planner = Planner(tiny_profile(), tiny_cluster(4), JobSpec(BATCH, 1, 1))
    policy = OobleckPolicy(planner, checkpoints=CheckpointSchedule(every_iterations=5))
    # n2 and n4 both hold layers 2 and 3: losing them together wipes those layers out.
    trace = make_trace([(0, "add", nodes(4)), (500, "remove", ["n2", "n4"]), (1010, "add", "end")])
    sim = simulate(trace, policy, "oobleck")
    # from 55: iterations 5 and 10 end at 205 and 357 (+2 s checkpoints: ..207, ..359);
    # 14 at 479: rolled back to 10. Restart (10 s) on n1 n3: one pipeline of 2 stages, 8
    # microbatches: (8 + 1) x 6 = 54 s, from 510: 11..15 by 780, checkpoint to 782, then
    # 16..19 by 998.
    rollback = kinds(sim, "rollback")
    assert rollback and rollback[0].detail["iterations_undone"] == 4
    assert sim.counts["restarts"] == 1
    assert sim.iterations == 19


def test_varuna_checkpoints_before_restarting_when_it_can():
    search = VarunaSearch(lambda b: tiny_profile() if b == 1 else None, tiny_cluster(4), BATCH, max_microbatch=1)
    policy = VarunaPolicy(search, 1, max_nodes=4)
    trace = make_trace([(0, "add", nodes(4)), (500, "remove", "n4"), (1010, "add", "end")])
    sim = simulate(trace, policy, "varuna")
    # 4 GPUs: depth 2 x width 2 (depth 4 on one replica takes 33 s, depth 1 does not fit):
    # 4 microbatches per replica, 30 s. From 55: 10 iterations by 355, checkpoint to 357,
    # 11..14 by 477. n4 (stage 1 of replica 1) leaves at 500: stage 1 lives on in n2, so
    # Varuna checkpoints (2 s, keeping 14) and restarts (10 s) as depth 2 x width 1 on 3 GPUs
    # (n3 idle): 8 microbatches, (8 + 1) x 6 = 54 s. From 512: 20 at 836, checkpoint to 838,
    # 21..23 by 1000.
    assert sim.iterations == 23
    assert not kinds(sim, "rollback")
    assert sim.counts["checkpoints"] == 3 and sim.counts["restarts"] == 1
    assert sim.decision.plan.config.depth == 2 and sim.decision.plan.config.width == 1
    assert sim.ledger.idle_gpu_s == pytest.approx(4 * 45 + 1 * (1010 - 500))  # booting, then n3


def test_varuna_rolls_back_when_a_stage_loses_every_replica():
    search = VarunaSearch(lambda b: tiny_profile() if b == 1 else None, tiny_cluster(4), BATCH, max_microbatch=1)
    policy = VarunaPolicy(search, 1, max_nodes=4)
    trace = make_trace([(0, "add", nodes(4)), (500, "remove", ["n2", "n4"]), (1010, "add", "end")])
    sim = simulate(trace, policy, "varuna")
    # stage 1 ran on n2 and n4: no checkpoint possible, back to iteration 10; restart on
    # n1 n3 (depth 2, 54 s) from 510: 11..19 by 996 (the checkpoint at 20 is not reached)
    assert kinds(sim, "rollback")[0].detail["iterations_undone"] == 4
    assert sim.iterations == 19


def test_bamboo_redundancy_fail_over_and_reconfiguration_by_hand():
    cluster = tiny_cluster(4, memory_bytes=5 * GB)  # room for a stage and its successor's copy
    layout = bamboo_layout(tiny_profile(), cluster, 2, BATCH)
    assert layout.stage_layers == ((0, 2), (2, 4))
    policy = BambooPolicy(2, layout=layout, profile=tiny_profile(), checkpoints=CheckpointSchedule())
    trace = make_trace([(0, "add", nodes(4)), (500, "remove", "n4"), (1010, "add", "end")])
    sim = simulate(trace, policy, "bamboo", layout)
    # Two pipelines of depth 2, 4 microbatches each: plain (4 + 1) x 6 = 30 s; each stage
    # idles 30 - 4 x 6 = 6 s and owes 4 x 2 s of its successor's forward: 2 s spill, 32 s.
    # From 55: 13 iterations by 471. n4 goes 29 s into the 14th: n3 covers its stage, the
    # pipeline becomes one 12 s stage: 12 + 2 x 12 + 12 = 48 s + 2 s spill = 50 s; the last
    # 3/32 of the iteration take 3/32 x 50 = 4.6875 s. At its end (504.6875) 1 of 3 active
    # nodes is overloaded: reconfigure (relaunch, 10 s) into one pipeline [n1 n2] with n3
    # spare: 8 microbatches, plain 54 s, bubbles 6 s for 16 s of redundant forward: 64 s.
    # From 514.6875: 7 iterations by 1010.
    assert sim.iterations == 14 + 7
    assert sim.counts["reconfigurations"] == 1 and sim.counts["restarts"] == 0
    redundant = 13 * 2 + 29 * 2 / 32 + 4.6875 * 20 / 50 + 7 * 10
    assert sim.ledger.breakdown().redundant_compute_s == pytest.approx(redundant)
    assert sim.ledger.reconfiguration_s == pytest.approx(10)


def test_bamboo_out_of_memory_when_the_doubled_state_does_not_fit():
    layout = bamboo_layout(tiny_profile(), tiny_cluster(4), 2, BATCH)  # 4 GB needed, 2.5 usable
    policy = BambooPolicy(2, layout=layout, profile=tiny_profile())
    assert "out of memory" in policy.infeasible_reason()
    sim = simulate(make_trace([(0, "add", nodes(4)), (1000, "add", "end")]), policy, "bamboo", layout)
    assert sim.iterations == 0 and sim.infeasible is not None
    assert sim.ledger.waiting_s == pytest.approx(1000)
