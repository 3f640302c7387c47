"""The pause-cost factors (`reconfigure_cost_factor`, `restart_cost_factor`,
`checkpoint_cost_factor`), worked out by hand on small traces.

Artifact constants used (../shared/calibration/README.md): GPT-3-medium Oobleck
reconfiguration 3 s (also its start pause), Varuna restart 78.7 s including an 11.2 s
checkpoint, so a start pause of 67.5 s; nodes usable 45 s after their add event.
"""

from __future__ import annotations

import pytest

from sim.config import SimConfig
from sim.errors import SimError
from sim.run import simulate
from sim.timing import PlannerCosts

from .tiny import make_trace, nodes

GPT3M_VARUNA_15 = 20.91158092  # samples/s, Varuna's row for 15 (and fewer) nodes


def run(policy, rows, **options):
    return simulate(SimConfig.of(policy=policy, model="GPT-3-medium", trace="hand", **options), trace=make_trace(rows))


ONE_REMOVAL = [(0, "add", nodes(14)), (1000, "remove", "n3"), (2000, "add", "end")]


def test_reconfiguration_factor_scales_only_reconfigurations():
    plain = run("oobleck", ONE_REMOVAL).summary.breakdown
    doubled = run("oobleck", ONE_REMOVAL, reconfigure_cost_factor=2.0).summary.breakdown
    assert plain.reconfiguration_s == pytest.approx(3.0)
    assert doubled.reconfiguration_s == pytest.approx(6.0)
    assert doubled.restart_s == pytest.approx(3.0)  # the start is a restart, unscaled
    assert doubled.total_s() == pytest.approx(2000.0)


def test_restart_factor_zero_makes_the_start_free():
    result = run("oobleck", ONE_REMOVAL, restart_cost_factor=0.0)
    running = [r.time_s for r in result.timeline if r.state == "running"]
    assert running[0] == pytest.approx(45.0)  # ready at 45 s, no start pause
    assert result.summary.breakdown.restart_s == 0.0
    assert result.summary.breakdown.reconfiguration_s == pytest.approx(3.0)


def test_free_checkpoints_every_two_iterations():
    # Varuna on 14 nodes (the 15 row), no removal; start pause 67.5 s: training from 112.5 s.
    rows = [(0, "add", nodes(14)), (2000, "add", "end")]
    result = run("varuna", rows, checkpoint_cost_factor=0.0, checkpoint_every_iterations=2)
    tau = 819 / GPT3M_VARUNA_15
    s = result.summary
    assert s.num_iterations == int((2000 - 112.5) / tau)  # no time lost to checkpoints
    assert s.num_checkpoints >= s.num_iterations // 2
    assert s.breakdown.checkpoint_s == 0.0
    costly = run("varuna", rows, checkpoint_every_iterations=2).summary
    assert costly.breakdown.checkpoint_s == pytest.approx(11.2 * costly.num_checkpoints)
    assert costly.num_iterations < s.num_iterations


def test_planner_calibration_start_pause_scaled():
    # planner calibration: a start relaunches the 16 processes (40 s + 16 x the default
    # per-process slope), tripled
    rows = [(0, "add", nodes(16)), (3000, "add", "end")]
    result = simulate(
        SimConfig.of(
            policy="oobleck", model="GPT-3-medium", calibration="planner", trace="hand", restart_cost_factor=3.0
        ),
        trace=make_trace(rows),
    )
    start = PlannerCosts.restart_fixed_s + 16 * PlannerCosts.restart_per_process_s
    assert result.summary.breakdown.restart_s == pytest.approx(3.0 * start)
    assert result.config["effective_restart_cost_factor"] == 3.0
    assert result.config["effective_checkpoint_cost_factor"] == 1.0


def test_factors_are_validated():
    with pytest.raises(SimError, match="checkpoint_cost_factor must be a finite number >= 0"):
        SimConfig.of(checkpoint_cost_factor=-1.0)
    with pytest.raises(SimError, match="restart_cost_factor"):
        SimConfig.of(restart_cost_factor=float("inf"))
