"""A restart's start-up runs to its end: a removal during it holds the next restart until
the processes already starting have all started (`restart_startup_share` of the relaunch),
as the real backend lets them finish before it re-plans; after it, the restart is
abandoned at once, as before.

Hand case: Varuna on the tiny model, 6 nodes (start-up 45 s), relaunch 40 s whatever its
size, half of it start-up; n6 leaves at 500 s: a 2 s checkpoint, then a restart on 4
nodes from 502 s whose processes have started by 522 s and which ends at 542 s.
"""

from __future__ import annotations

import pytest

from planner.policies import Restart
from sim.config import SimConfig
from sim.engine import Simulation
from sim.errors import SimError
from sim.pricing import Pricing
from sim.timing import PlannerCosts, ScaledPauses

from .tiny import make_trace, nodes, resumed_at, tiny_varuna


def run(share: float, removals, scale: float | None = None) -> Simulation:
    policy, timing = tiny_varuna(
        6, PlannerCosts(restart_fixed_s=40.0, restart_per_process_s=0.0, restart_startup_share=share)
    )
    timed = timing if scale is None else ScaledPauses(timing, restart=scale)
    rows = [(0, "add", nodes(6)), *[(t, "remove", n) for t, n in removals], (1500, "add", "end")]
    return Simulation(make_trace(rows), policy, Pricing(timed, node_startup_s=45.0, price_per_node_hour=1.0)).run()


def test_a_removal_during_the_start_up_waits_for_its_end():
    held, cut = run(0.5, [(500, "n6"), (510, "n5")]), run(0.0, [(500, "n6"), (510, "n5")])
    # start 45 + 40 = 85; restart 502 .. 542, started by 522; n5 at 510: 12 s left of it
    assert resumed_at(cut) == [85.0, 550.0]
    assert resumed_at(held) == [85.0, 562.0]
    assert held.ledger.restart_s == pytest.approx(40 + 8 + 12 + 40)
    assert held.counts["restarts"] == cut.counts["restarts"] == 2


def test_a_removal_after_the_start_up_abandons_the_restart_at_once():
    for share in (0.0, 0.5):
        assert resumed_at(run(share, [(500, "n6"), (530, "n5")])) == [85.0, 570.0]


def test_chained_removals_hold_each_restart_for_the_one_starting():
    # n5 at 510: held to 522, restart 522 .. 562 (started by 542); n4 at 525: held to 542
    sim = run(0.5, [(500, "n6"), (510, "n5"), (525, "n4")])
    assert resumed_at(sim) == [85.0, 582.0]
    # a removal during the hold itself: the hold keeps its end
    assert resumed_at(run(0.5, [(500, "n6"), (510, "n5"), (515, "n4")])) == [85.0, 562.0]


def test_the_start_up_scales_with_the_restart_factor():
    # restart pauses x 0.5: 20 s relaunch, start-up 10 s: restart 502 .. 522, started by
    # 512; n5 at 510: held to 512, then 20 s
    assert resumed_at(run(0.5, [(500, "n6"), (510, "n5")], scale=0.5)) == [65.0, 532.0]


def test_only_restarts_have_a_start_up():
    _, timing = tiny_varuna(6, PlannerCosts(restart_fixed_s=40.0, restart_per_process_s=0.0, restart_startup_share=0.5))
    plan = run(0.0, []).decision.plan
    assert timing.restart_startup_s(Restart("x"), plan) == pytest.approx(20.0)
    assert timing.restart_startup_s(object(), plan) == 0.0


def test_the_share_is_a_fraction():
    with pytest.raises(SimError, match=r"restart_startup_share must be in \[0, 1\]"):
        PlannerCosts(restart_startup_share=1.5)
    with pytest.raises(SimError, match=r"restart_startup_share must be a finite number in \[0, 1\], got 2.0"):
        SimConfig.of(calibration="planner", restart_startup_share=2.0)
    with pytest.raises(SimError, match=r"restart_startup_share must be a finite number in \[0, 1\], got -0.1"):
        SimConfig.of(calibration="planner", restart_startup_share=-0.1)
    with pytest.raises(SimError, match="restart_startup_share"):
        SimConfig.of(restart_startup_share=0.5)  # artifact calibration: a planner-only option
