"""The survivors' wait to notice a removal (`sim.notice`, `Pricing(sync_notice=True)`).

By hand on the tiny model (tests/sim/tiny.py) with room for all four layers on a node:
f = 1 on 4 nodes is four single-stage pipelines of 2 microbatches, 2 x 12 = 24 s an
iteration (the all-reduce takes nanoseconds); start 10 s after the 45 s boot, so
iterations end at 55 + 24 k. When n4 leaves, the other three meet the loss only at the
gradient sync after their compute: on average 24^2 / (2 x 24) = 12 s later, then the 5 s
reconfiguration; the new plan (3, 3 and 2 microbatches) takes 36 s.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from designs.oobleck.policy import OobleckPolicy
from planner.plan import JobSpec
from planner.planner import Planner
from sim.config import SimConfig
from sim.engine import Simulation
from sim.errors import SimError
from sim.notice import notice_s
from sim.pricing import Pricing
from sim.timing import PlannerCosts

from .tiny import GB, make_trace, nodes, tiny_cluster, tiny_profile, tiny_timing

COSTS = PlannerCosts(reconfigure_overhead_s=5.0, restart_overhead_s=10.0)


def simulate(remove_at_s: float, *, notice: bool, memory_bytes: int = 10 * GB) -> Simulation:
    planner = Planner(tiny_profile(), tiny_cluster(4, memory_bytes=memory_bytes), JobSpec(8, 1, 1))
    policy = OobleckPolicy(planner, reconfigure_pause_s=COSTS.reconfigure_overhead_s)
    timing = tiny_timing("oobleck", COSTS)
    trace = make_trace([(0, "add", nodes(4)), (remove_at_s, "remove", "n4"), (1010, "add", "end")])
    return Simulation(
        trace, policy, Pricing(timing, node_startup_s=45.0, price_per_node_hour=1.0, sync_notice=notice)
    ).run()


def test_single_stage_pipelines_notice_a_loss_at_the_end_of_their_compute_on_average():
    off, on = simulate(500, notice=False), simulate(500, notice=True)
    assert all(p.template.num_stages == 1 for p in on.decision.plan.pipelines)
    assert off.ledger.reconfiguration_s == pytest.approx(5)
    assert on.ledger.reconfiguration_s == pytest.approx(12 + 5)
    # 18 iterations by 487; off: training again at 505, 14 of 36 s by 1009; on: at 517, 13 by 985
    assert off.iterations == 18 + 14 and off.last_iteration_t == pytest.approx(505 + 14 * 36)
    assert on.iterations == 18 + 13 and on.last_iteration_t == pytest.approx(517 + 13 * 36)
    assert on.ledger.lost_work_s == pytest.approx(13 + (1010 - 985))


@settings(max_examples=40, deadline=None)
@given(st.floats(56.0, 975.0))  # the pause (17 s) ends before the trace does (1010 s)
def test_the_wait_is_its_mean_wherever_the_loss_falls(remove_at_s):
    assert simulate(remove_at_s, notice=True).ledger.reconfiguration_s == pytest.approx(12 + 5, abs=1e-4)


def test_no_wait_while_the_job_is_not_training():
    # n4 leaves during the start (45-55 s): no compute in flight, the pause is the policy's
    on = simulate(50, notice=True)
    off = simulate(50, notice=False)
    assert on.ledger.reconfiguration_s == pytest.approx(off.ledger.reconfiguration_s)
    assert on.iterations == off.iterations


def test_pipelines_of_several_stages_notice_at_once():
    # 2.5 GB a node: two layers at most, so pipelines of two stages (tests/sim/test_sim_planner_hand)
    small = 5 * GB // 2
    off, on = simulate(500, notice=False, memory_bytes=small), simulate(500, notice=True, memory_bytes=small)
    assert on.ledger.reconfiguration_s == pytest.approx(off.ledger.reconfiguration_s) == pytest.approx(5)
    assert on.iterations == off.iterations


def test_notice_s_takes_the_slowest_survivor_and_scales_to_the_simulated_iteration():
    plan = simulate(500, notice=False).decision.plan  # 3, 3 and 2 microbatches: 36, 36 and 24 s
    assert sorted(p.iteration_time_s for p in plan.pipelines) == pytest.approx([24, 36, 36])
    long_ones = {p.nodes[0] for p in plan.pipelines if p.num_microbatches == 3}
    t = plan.iteration_time_s
    assert notice_s(plan, set(), t) == pytest.approx(36 * 36 / (2 * t))
    assert notice_s(plan, long_ones, t) == pytest.approx(24 * 24 / (2 * t))  # only the short one is left
    assert notice_s(plan, set(), 2 * t) == pytest.approx(2 * 36 * 36 / (2 * t))  # every part twice as long
    assert notice_s(plan, {p.nodes[0] for p in plan.pipelines}, t) == 0.0
    assert notice_s(None, set(), 1.0) == 0.0


def test_sync_notice_is_a_planner_option_and_a_boolean():
    assert SimConfig.of(calibration="planner", sync_notice=True).costs.sync_notice is True
    with pytest.raises(SimError, match="sync_notice must be true or false"):
        SimConfig.of(calibration="planner", sync_notice=1)
    with pytest.raises(SimError, match="sync_notice has no effect in the artifact calibration"):
        SimConfig.of(calibration="artifact", sync_notice=True)
