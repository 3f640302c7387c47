"""The relaunch line of the planner calibration: a relaunch of n processes pauses
`restart_fixed_s + restart_per_process_s * n`, n the GPUs of the plan's nodes; the old
constant `restart_overhead_s` still means what it did.

The hand case is `test_sim_planner_hand`'s Varuna run (tiny model, 4 nodes, n4 leaves at
500 s, Varuna checkpoints and restarts on the 3 survivors), with the line in place of the
10 s constant.
"""

from __future__ import annotations

import pytest

from sim.config import SimConfig
from sim.engine import Simulation
from sim.errors import SimError
from sim.pricing import Pricing
from sim.run import simulate
from sim.timing import PlannerCosts, PlannerTiming

from .tiny import make_trace, nodes, tiny_varuna

BATCH = 8


def varuna_run(costs: PlannerCosts):
    policy, timing = tiny_varuna(4, costs)
    trace = make_trace([(0, "add", nodes(4)), (500, "remove", "n4"), (1010, "add", "end")])
    return Simulation(trace, policy, Pricing(timing, node_startup_s=45.0, price_per_node_hour=1.0)).run()


def test_a_restart_pays_the_fixed_part_plus_its_processes():
    sim = varuna_run(PlannerCosts(reconfigure_overhead_s=5.0, restart_fixed_s=4.0, restart_per_process_s=2.0))
    # start on 4 processes: 4 + 2 x 4 = 12 s, training from 57 (30 s iterations, depth 2 x
    # width 2): 10 by 357, checkpoint to 359, 11..14 by 479. n4 leaves at 500: checkpoint
    # to 502, restart as depth 2 x width 1 on n1 n2: the processes of all three nodes up
    # (n3 idle, outside the plan, is relaunched too, as the real backend does), 4 + 2 x 3
    # = 10 s, to 512; 54 s iterations: 20 at 836, checkpoint to 838, 21..23 by 1000.
    assert sim.counts["restarts"] == 1
    assert sim.decision.plan.nodes == ("n1", "n2")
    assert sim.ledger.restart_s == pytest.approx((4 + 2 * 4) + (4 + 2 * 3))
    assert sim.iterations == 23
    assert sim.last_iteration_t == pytest.approx(512 + 9 * 54 + 2)


def test_gpus_per_node_multiply_the_processes():
    costs = PlannerCosts(restart_fixed_s=4.0, restart_per_process_s=2.0)
    plan = varuna_run(costs).decision.plan
    for g in (1, 4):
        timing = PlannerTiming(
            "varuna",
            global_batch=BATCH,
            layer_bytes=[0] * 4,
            inter_node_bw_bytes_per_s=1e18,
            gpus_per_node=g,
            costs=costs,
        )
        assert timing.processes(plan) == 2 * g
        assert timing.relaunch_s(plan) == pytest.approx(4.0 + 2.0 * 2 * g)


def test_the_constant_override_ignores_the_size():
    costs = PlannerCosts(restart_fixed_s=4.0, restart_per_process_s=2.0, restart_overhead_s=10.0)
    assert costs.relaunch_s(1) == costs.relaunch_s(1000) == 10.0
    sim = varuna_run(costs)
    assert sim.ledger.restart_s == pytest.approx(20.0)  # start and restart, 10 s each, as before the line


PLANNER_RUN = dict(policy="varuna", model="GPT-3-medium", calibration="planner", trace="hand")
ROWS = [(0, "add", nodes(8)), (2000, "remove", "n3"), (4000, "add", "end")]


def planner_run(**options):
    return simulate(SimConfig.of(**PLANNER_RUN, **options), trace=make_trace(ROWS)).summary.to_dict()


def test_an_old_config_with_the_constant_keeps_its_results():
    old = planner_run(restart_overhead_s=25.0)
    assert old == planner_run(restart_fixed_s=25.0, restart_per_process_s=0.0)
    assert old != planner_run(restart_fixed_s=25.0, restart_per_process_s=1.0)


def test_the_constant_and_the_line_are_alternatives():
    with pytest.raises(SimError, match="restart_overhead_s .* alternatives"):
        SimConfig.of(calibration="planner", restart_overhead_s=10.0, restart_per_process_s=0.1)
    with pytest.raises(SimError, match="restart_per_process_s must be a finite number >= 0"):
        SimConfig.of(calibration="planner", restart_per_process_s=-1.0)
    with pytest.raises(SimError, match="restart_fixed_s"):
        SimConfig.of(restart_fixed_s=1.0)  # artifact calibration: a planner-only option
