"""GEMINI (designs/gemini/, designs/gemini/policy.py): placement, traffic, recovery.

Hand cases on the tiny model (tests/sim/tiny.py: layers of 3 s; with f = 0 four nodes run
two pipelines [n1 n2] [n3 n4] of 30 s iterations, two nodes one pipeline of 54 s), with
1 GB of state per layer for the copies and a 1 GB/s network: the busiest node holds two
layers, S = 2 GB. Start and restart overheads 10 s; nodes usable 45 s after they arrive.
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from designs import DesignError
from designs import registry as designs
from designs.gemini.policy import GROUP, RING, GeminiPolicy, SnapshotTraffic, placement
from designs.options import PLANNER
from planner.checkpoint_cost import StorageSpec
from planner.plan import JobSpec
from planner.planner import Planner
from planner.policies import CheckpointSchedule
from sim.engine import Simulation
from sim.pricing import Pricing
from sim.timing import PlannerCosts, PlannerTiming
from tests.sim.test_sim_properties import random_traces
from tests.sim.tiny import GB, make_trace, nodes, tiny_cluster, tiny_profile

REPO = Path(__file__).resolve().parents[2]
COSTS = PlannerCosts(reconfigure_overhead_s=5.0, restart_overhead_s=10.0)
BANDWIDTH = 1e9


NO_CHECKPOINTS = CheckpointSchedule()


def policy(every=5, replicas=1, kind=GROUP, share=0.5, bandwidth=BANDWIDTH, checkpoints=NO_CHECKPOINTS):
    planner = Planner(tiny_profile(), tiny_cluster(4), JobSpec(8, 1, 0))
    traffic = SnapshotTraffic(every, replicas, share, bandwidth, (GB,) * 4)
    return GeminiPolicy(planner, checkpoints, traffic, kind)


def simulate(trace, pol, bandwidth=BANDWIDTH):
    timing = PlannerTiming(
        "gemini",
        global_batch=8,
        layer_bytes=[GB] * 4,
        inter_node_bw_bytes_per_s=bandwidth,
        gpus_per_node=1,
        costs=COSTS,
        storage=StorageSpec(fixed_s=2.0),
        iteration_s=pol.iteration_s,
    )
    return Simulation(trace, pol, Pricing(timing, node_startup_s=45.0, price_per_node_hour=1.0)).run()


def actions(sim):
    return [a["action"] for e in sim.events if e.kind == "decision" for a in e.detail["actions"]]


# -- placement -----------------------------------------------------------------------------
def test_group_placement_by_hand():
    six = placement(["a", "b", "c", "d", "e", "f"], 1, GROUP)
    assert six["a"] == six["b"] == {"a", "b"} and six["e"] == {"e", "f"}
    # 5 nodes, groups of 2: [a b], then the last group [c d e] places ring-wise inside itself
    five = placement(["a", "b", "c", "d", "e"], 1, GROUP)
    assert five["a"] == {"a", "b"} and five["c"] == {"c", "d"} and five["d"] == {"d", "e"} and five["e"] == {"e", "c"}
    assert placement(["a", "b"], 3, GROUP) == {"a": {"a", "b"}, "b": {"a", "b"}}


def test_ring_placement_by_hand():
    ring = placement(["a", "b", "c", "d"], 2, RING)
    assert ring == {"a": {"a", "b", "c"}, "b": {"b", "c", "d"}, "c": {"c", "d", "a"}, "d": {"d", "a", "b"}}


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 4), st.sampled_from([GROUP, RING]))
def test_no_m_losses_lose_a_state_and_every_state_has_m_plus_1_holders(n, m, kind):
    names = [f"n{i}" for i in range(n)]
    where = placement(names, m, kind)
    assert set(where) == set(names)
    for node, holders in where.items():
        assert node in holders and len(holders) >= min(m + 1, n)
    for gone in itertools.chain.from_iterable(itertools.combinations(names, k) for k in range(min(m, n - 1) + 1)):
        assert all(holders - set(gone) for holders in where.values())  # brute force: at most m gone


def test_group_placement_survives_what_ring_placement_does_not():
    names = ["a", "b", "c", "d"]
    gone = {"b", "c"}
    assert all(h - gone for h in placement(names, 1, GROUP).values())  # [a b] keeps a, [c d] keeps d
    assert not all(h - gone for h in placement(names, 1, RING).values())  # b's copy went to c


# -- traffic -------------------------------------------------------------------------------
def test_a_copy_that_fits_its_share_costs_nothing_and_lags_by_hand():
    pol = policy(every=5)
    plan = pol.planner.instantiate(tuple(nodes(4)))
    # V = 1 peer x 2 GB; b = 0.5 x 1 GB/s x 30 s = 15 GB per iteration: complete after 1
    cost = pol.snapshot_cost(plan)
    assert (cost.node_bytes, cost.sent_bytes, cost.lag_iterations, cost.stall_s) == (2 * GB, 2 * GB, 1, 0.0)
    assert pol.iteration_s(plan, plan.iteration_time_s) == plan.iteration_time_s
    # at 10 MB/s: b = 0.15 GB, 2 GB take ceil(13.3) = 14 iterations, within K = 20
    slow = policy(every=20, bandwidth=1e7).snapshot_cost(plan)
    assert slow.lag_iterations == math.ceil(2 * GB / (0.5 * 1e7 * plan.iteration_time_s)) == 14 and slow.stall_s == 0


def test_a_copy_beyond_its_share_stalls_training_by_hand():
    pol = policy(every=1, bandwidth=1e8)  # b = 0.5 x 0.1 GB/s x 30 s = 1.5 GB < V = 2 GB
    trace = make_trace([(0, "add", nodes(4)), (1010, "add", "end")])
    sim = simulate(trace, pol, bandwidth=1e8)
    # the rest, 0.5 GB, at full bandwidth: 5 s per copy, one copy per iteration: 35 s
    plan = sim.decision.plan
    assert pol.snapshot_cost(plan).stall_s == pytest.approx(5.0)
    assert sim.stretch.tau == pytest.approx(35.0)
    assert sim.iterations == (1010 - 55) // 35 == 27


# -- recovery ------------------------------------------------------------------------------
def test_restart_from_peer_memory_by_hand():
    trace = make_trace([(0, "add", nodes(4)), (400, "remove", ["n2", "n3"]), (1000, "add", "end")])
    sim = simulate(trace, policy(every=5, kind=GROUP))
    # from 55, 30 s iterations: 11 committed by 385, the 12th in flight at 400. Copies at
    # 5 and 10, each complete one iteration later: the copy of 10 is held by [n1 n2] [n3 n4];
    # n1 and n4 survive, so back to 10 (one iteration undone), on [n1 n4] (54 s). Pause:
    # restart 10 s + n1's 2 GB over 1 GB/s = 12 s; from 412, 10 iterations by 952.
    assert "RestartFromSnapshot" in actions(sim) and "RestartFromCheckpoint" not in actions(sim)
    (rollback,) = [e for e in sim.events if e.kind == "rollback"]
    assert rollback.detail["to_iteration"] == 10 and rollback.detail["iterations_undone"] == 1
    assert rollback.detail["seconds"] == pytest.approx(30.0)
    assert sim.iterations == 20 and sim.counts["restarts"] == 1
    assert sim.ledger.restart_s == pytest.approx(10 + 12)
    assert sim.ledger.lost_work_s == pytest.approx(15 + 30 + (1000 - 952))
    assert sim.ledger.breakdown().total_s() == pytest.approx(1000)


def test_restart_from_storage_when_every_holder_of_a_state_is_gone():
    trace = make_trace([(0, "add", nodes(4)), (400, "remove", ["n2", "n3"]), (1000, "add", "end")])
    sim = simulate(trace, policy(every=5, kind=RING))
    # ring: n2's copy is on n3; both gone -> from the checkpoint, i.e. the start (none written)
    assert "RestartFromCheckpoint" in actions(sim) and "RestartFromSnapshot" not in actions(sim)
    (rollback,) = [e for e in sim.events if e.kind == "rollback"]
    assert rollback.detail["to_iteration"] == 0 and rollback.detail["iterations_undone"] == 11
    pause = sim.ledger.restart_s - 10
    assert sim.iterations == int((1000 - 400 - pause) // 54)
    assert sim.ledger.lost_work_s == pytest.approx(15 + 11 * 30 + (1000 - 400 - pause) % 54)


def test_a_newer_persistent_checkpoint_wins_over_an_older_copy():
    # copies every 20 iterations, checkpoints every 7: at 400 (11 done) the checkpoint of 7
    # is newer than any copy (none yet): from the checkpoint, back to 7
    pol = policy(every=20, checkpoints=CheckpointSchedule(every_iterations=7))
    trace = make_trace([(0, "add", nodes(4)), (400, "remove", ["n4"]), (1000, "add", "end")])
    sim = simulate(trace, pol)
    (rollback,) = [e for e in sim.events if e.kind == "rollback"]
    assert rollback.detail["to_iteration"] == 7
    assert "RestartFromCheckpoint" in actions(sim)


def test_waiting_keeps_the_copies_and_a_spare_loss_changes_nothing():
    # n2 n3 n4 go at 400: n1 alone cannot train (two nodes needed); it waits without
    # rolling back. n5 arrives (usable at 545): n1 holds the copy of 10 for [n1 n2] but
    # nobody holds [n3 n4]'s: from the start.
    trace = make_trace(
        [(0, "add", nodes(4)), (400, "remove", ["n2", "n3", "n4"]), (500, "add", "n5"), (2000, "add", "end")]
    )
    sim = simulate(trace, policy(every=5))
    assert actions(sim)[:4] == ["Start", "Continue", "WaitForNodes", "RestartFromCheckpoint"]
    (rollback,) = [e for e in sim.events if e.kind == "rollback"]
    assert rollback.time_s == 545 and rollback.detail["to_iteration"] == 0


class EveryIteration:
    """The same GEMINI policy asking to see every iteration end (one commit per iteration)."""

    restores_snapshots = True

    def __init__(self, inner):
        self.inner, self.name, self.checkpoints = inner, inner.name, inner.checkpoints
        self.iteration_s = inner.iteration_s

    def infeasible_reason(self):
        return None

    def decide(self, view, event, current):
        return replace(self.inner.decide(view, event, current), check_at_iteration_end=True)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_traces(pool_size=8, min_initial=2), st.integers(1, 6), st.sampled_from([GROUP, RING]))
def test_rollbacks_to_copies_take_back_exactly_the_later_iterations(trace, every, kind):
    pol = policy(every=every, kind=kind, checkpoints=CheckpointSchedule(every_iterations=9))
    sim = simulate(trace, pol)
    stepped = simulate(trace, EveryIteration(policy(every=every, kind=kind, checkpoints=pol.checkpoints)))
    b = sim.ledger.breakdown()
    assert all(v >= -1e-6 for v in vars(b).values())
    assert b.total_s() == pytest.approx(trace.duration_s, rel=1e-9, abs=1e-6)
    assert sim.iterations == stepped.iterations
    # samples roll back with the iterations (every iteration here commits the whole batch)
    for run in (sim, stepped):
        assert run.samples == run.iterations * run.timing.samples_per_iteration
    assert b.lost_work_s == pytest.approx(stepped.ledger.breakdown().lost_work_s, rel=1e-9, abs=1e-6)
    assert b.useful_compute_s == pytest.approx(stepped.ledger.breakdown().useful_compute_s, rel=1e-9, abs=1e-6)
    checkpoints = [0] + [e.detail["iterations"] for e in sim.events if e.kind == "checkpoint"]
    for e in (e for e in sim.events if e.kind == "rollback"):
        to = e.detail["to_iteration"]
        assert to % every == 0 or to in checkpoints


# -- the design ----------------------------------------------------------------------------
def test_options_are_checked():
    design, options = designs.resolve("gemini", {"every": 3, "replicas": 2, "placement": "ring"}, PLANNER)
    assert (options.every, options.replicas, options.placement) == (3, 2, "ring")
    for bad in ({"placement": "star"}, {"bandwidth_share": 1.5}, {"bandwidth_share": 0}, {"every": 0}):
        with pytest.raises(DesignError):
            designs.resolve("gemini", bad, PLANNER)


def test_the_simulator_runs_gemini_end_to_end(tmp_path):
    trace = tmp_path / "trace.csv"  # 8 nodes; n7 and n6 leave at 1 h, n5 at 2 h (ms)
    trace.write_text(
        "".join(f"0,add,n{i}\n" for i in range(8)) + "3600000,remove,n7\n3600000,remove,n6\n7200000,remove,n5\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "ooblab.cli", "simulate", "--design", "gemini", "--calibration", "planner",
         "--model", "gpt3-350m", "--global-batch", "64", "--trace", str(trace), "--duration-s", "10800",
         "--set", "replicas=2", "--json", "--out", str(tmp_path / "run")],
        cwd=REPO, capture_output=True, text=True, timeout=120, start_new_session=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["policy"] == "gemini" and summary["num_restarts"] == 2 and summary["num_reconfigurations"] == 0
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    restarts = [a for e in events if e["kind"] == "decision" for a in e["actions"] if a["action"].startswith("Restart")]
    assert [a["action"] for a in restarts] == ["RestartFromSnapshot"] * 2
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["effective_design_options"]["replicas"] == 2
    assert config["effective_checkpoint_every_s"] == 3 * 3600.0
