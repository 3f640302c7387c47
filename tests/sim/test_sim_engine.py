"""Engine edge cases with round numbers: 10 s iterations, 5 s pauses, 45 s start-up."""

from __future__ import annotations

from dataclasses import replace

import pytest

from designs.oobleck.artifact import ArtifactOobleckPolicy
from designs.oobleck.policy import OobleckPolicy
from designs.varuna.artifact import ArtifactVarunaPolicy
from planner.plan import JobSpec
from planner.planner import Planner
from planner.policies import CheckpointSchedule
from sim.engine import Simulation
from sim.pricing import Pricing
from sim.timing import IterationCost, PlannerCosts

from .tiny import FixedTiming, make_trace, nodes, tiny_cluster, tiny_profile, tiny_timing


def run(rows, policy=None, **kw):
    return Simulation(
        make_trace(rows),
        policy or ArtifactOobleckPolicy(min_nodes=1),
        # every plan 10 s (4 samples), every action 5 s
        Pricing(FixedTiming(IterationCost(10.0, 10.0), 5.0, 4), node_startup_s=45.0, price_per_node_hour=1.0),
        **kw,
    ).run()


def test_an_iteration_ending_exactly_at_a_removal_is_lost():
    # start pause 45..50; iterations end at 60, 70, ...; n2 leaves at exactly 100
    sim = run([(0, "add", nodes(2)), (100, "remove", "n2"), (200, "add", "end")])
    # 4 iterations (60..90), the one ending at 100 lost; 5 s pause; 105 + 10 k < 200: 9 more
    assert sim.iterations == 4 + 9
    assert sim.ledger.lost_work_s == pytest.approx(10 + 5)


def test_the_run_ends_at_the_last_event_and_an_iteration_ending_there_does_not_count():
    sim = run([(0, "add", "n1"), (100, "add", "end")])
    assert sim.iterations == 4  # 60, 70, 80, 90; the one ending at 100 does not count
    assert sim.ledger.unfinished_s == pytest.approx(10)
    assert sim.timeline[-1].state == "finished" and sim.timeline[-1].time_s == 100


def test_a_node_readded_under_its_name_starts_again():
    # n2 added at 0, removed at 20, back at 30: usable at 75, not 45
    rows = [(0, "add", nodes(2)), (20, "remove", "n2"), (30, "add", "n2"), (300, "add", "end")]
    sim = run(rows)
    ready = [e for e in sim.events if e.kind == "ready"]
    assert [(e.time_s, e.detail["nodes"]) for e in ready] == [(45.0, ["n1"]), (75.0, ["n2"])]


def test_a_node_removed_while_starting_never_becomes_usable():
    sim = run([(0, "add", nodes(2)), (20, "remove", "n2"), (300, "add", "end")])
    assert [e.detail["nodes"] for e in sim.events if e.kind == "ready"] == [["n1"]]
    assert max(r.working_nodes for r in sim.timeline) == 1


def test_timeline_per_iteration_rows_match_the_summary():
    rows = [(0, "add", nodes(2)), (100, "remove", "n2"), (200, "add", "end")]
    coarse = run(rows)
    fine = run(rows, iteration_rows=True)
    assert fine.iterations == coarse.iterations
    steps = [r for prev, r in zip(fine.timeline, fine.timeline[1:]) if r.iterations_done == prev.iterations_done + 1]
    assert [r.time_s for r in steps] == [60, 70, 80, 90] + [105 + 10 * k for k in range(1, 10)]
    assert [r.iterations_done for r in steps] == list(range(1, 14))
    assert all(r.throughput_samples_per_s == 0.4 for r in steps)


def test_varuna_checkpoint_schedule_counts_from_committed_iterations():
    # every 10 iterations (5 s each) and after the first iteration following a restart
    policy = ArtifactVarunaPolicy(min_nodes=1, rollback=True, checkpoint_every=10)
    sim = run([(0, "add", nodes(2)), (240, "remove", "n2"), (400, "add", "end")], policy=policy)
    checkpoints = [(e.time_s, e.detail["iterations"]) for e in sim.events if e.kind == "checkpoint"]
    # 50 + 100 = 150: iteration 10, checkpoint to 155; 11..18 by 235; removal at 240:
    # back to 10, restart to 245; 11 at 255 and its checkpoint to 260; 12..20 by 350,
    # checkpoint to 355; 21..24 by 395
    assert checkpoints == [(155.0, 10), (260.0, 11), (355.0, 20)]
    assert sim.iterations == 24


def test_a_failure_during_an_oobleck_reconfiguration_is_replanned_from_what_survived():
    planner = Planner(tiny_profile(), tiny_cluster(6), JobSpec(8, 1, 1))
    costs = PlannerCosts(reconfigure_overhead_s=5.0, restart_overhead_s=10.0)
    policy = OobleckPolicy(planner, reconfigure_pause_s=5.0)
    timing = tiny_timing("oobleck", costs)
    # n6 leaves at 500 (a 5 s reconfiguration), n5 at 502 in the middle of it
    rows = [(0, "add", nodes(6)), (500, "remove", "n6"), (502, "remove", "n5"), (1000, "add", "end")]
    sim = Simulation(make_trace(rows), policy, Pricing(timing, node_startup_s=45.0, price_per_node_hour=1.0)).run()
    decisions = [e for e in sim.events if e.kind == "decision" and e.detail["event"] == "NodesRemoved"]
    assert [d.time_s for d in decisions] == [500.0, 502.0]
    assert decisions[1].detail["actions"][0]["action"] == "Reinstantiate"
    assert sim.counts["reconfigurations"] == 2 and sim.counts["restarts"] == 0
    assert set(sim.decision.plan.nodes) == {"n1", "n2", "n3", "n4"}
    running = [r.time_s for r in sim.timeline if r.state == "running"]
    assert 507.0 in running  # the second pause runs 502..507


def test_an_iteration_end_asked_for_is_seen_right_after_a_checkpoint_due_there():
    class Watching(ArtifactVarunaPolicy):
        """Asks to see every iteration end; records when it does."""

        seen: list = []

        def decide(self, view, event, current):
            if type(event).__name__ == "IterationEnd":
                self.seen.append(view.time_s)
            return replace(super().decide(view, event, current), check_at_iteration_end=True)

    policy = Watching(min_nodes=1, checkpoint_every=2)
    policy.checkpoints = CheckpointSchedule(every_iterations=2)
    run([(0, "add", "n1"), (130, "add", "end")], policy=policy)
    # iterations end at 60, 70 (checkpoint to 75), 85, 95 (checkpoint to 100), 110, 120 (to 125)
    assert policy.seen == [60.0, 75.0, 85.0, 100.0, 110.0, 125.0]
