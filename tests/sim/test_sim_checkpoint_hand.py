"""Checkpoints and loads written in parallel, in whole runs, by hand (tiny model, tiny.py).

Each of the 4 layers is given 1 GB of checkpoint state (the tiny profile's own copy bytes
are 0, so the timing is handed the bytes). Storage: 1 GB/s write and 2 GB/s read per node,
2 s fixed per checkpoint; start and restart overheads 10 s; the network is instant.
"""

from __future__ import annotations

import pytest

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
STORAGE = StorageSpec(node_write_bytes_per_s=1 * GB, node_read_bytes_per_s=2 * GB, fixed_s=2.0)


def simulate(trace, policy, system, storage=STORAGE):
    timing = tiny_timing(system, COSTS, layer_bytes=GB, storage=storage)
    return Simulation(trace, policy, Pricing(timing, node_startup_s=45.0, price_per_node_hour=1.0)).run()


def pauses(sim, kind):
    """(start, seconds) of each `kind` pause, from the timeline rows (to the microsecond:
    the tiny network's all-reduces take nanoseconds)."""
    rows = sim.timeline
    return [(round(a.time_s, 6), round(b.time_s - a.time_s, 6)) for a, b in zip(rows, rows[1:]) if a.state == kind]


def test_oobleck_checkpoints_and_restart_load_by_hand():
    planner = Planner(tiny_profile(), tiny_cluster(4), JobSpec(8, 1, 1))
    policy = OobleckPolicy(planner, checkpoints=CheckpointSchedule(every_iterations=5))
    trace = make_trace([(0, "add", nodes(4)), (500, "remove", ["n2", "n4"]), (1010, "add", "end")])
    sim = simulate(trace, policy, "oobleck")
    # [n1 n2] [n3 n4], 30 s iterations from 55; every layer has two holders, so each node
    # writes 2 x 1 GB / 2 = 1 GB: 2 + 1 = 3 s. Iterations 5 and 10 end at 205 and 358.
    assert pauses(sim, "checkpointing")[:2] == [(205.0, 3.0), (358.0, 3.0)]
    # n2 and n4 gone at 500: layers 2-3 lost, restart on [n1 n3] (one pipeline, 54 s
    # iterations): each layer has one holder, n1 and n3 each read 2 GB at 2 GB/s: 10 + 1 s
    restarts = pauses(sim, "restarting")
    assert restarts[0] == (0.0 + 45.0, 10.0)  # the first start loads nothing
    assert restarts[1] == (500.0, 11.0)
    # from 511: 11..15 by 781, checkpoint (n1, n3 write 2 GB each: 4 s) to 785
    assert pauses(sim, "checkpointing")[2] == (781.0, 4.0)
    assert sim.ledger.restart_s == pytest.approx(21.0)


def test_varuna_checkpoint_after_a_loss_is_written_by_the_survivors():
    search = VarunaSearch(lambda b: tiny_profile() if b == 1 else None, tiny_cluster(4), 8, max_microbatch=1)
    policy = VarunaPolicy(search, 1, max_nodes=4)
    trace = make_trace([(0, "add", nodes(4)), (500, "remove", "n4"), (1010, "add", "end")])
    sim = simulate(trace, policy, "varuna")
    # depth 2 x width 2: n1, n3 run stage 0 (layers 0-1), n2, n4 stage 1; 30 s from 55.
    # Iteration 10 at 355, checkpoint 2 + 1 s to 358; 11..14 by 478. n4 leaves at 500: n2
    # alone writes layers 2-3 (2 GB): 2 + 2 = 4 s to 504; restart as 2 x 1 on n1 n2 (n3
    # idle), each reading 2 GB at 2 GB/s: 10 + 1 s to 515; 54 s iterations: 15..20 by 839,
    # checkpoint (each node 2 GB) 4 s to 843, 21..23 by 1005.
    assert pauses(sim, "checkpointing") == [(355.0, 3.0), (500.0, 4.0), (839.0, 4.0)]
    assert pauses(sim, "restarting")[1] == (504.0, 11.0)
    assert sim.iterations == 23


def test_an_aggregate_cap_slows_every_checkpoint():
    planner = Planner(tiny_profile(), tiny_cluster(4), JobSpec(8, 1, 1))
    policy = OobleckPolicy(planner, checkpoints=CheckpointSchedule(every_iterations=5))
    capped = StorageSpec(
        node_write_bytes_per_s=1 * GB, node_read_bytes_per_s=2 * GB, aggregate_bytes_per_s=0.5 * GB, fixed_s=2.0
    )
    sim = simulate(make_trace([(0, "add", nodes(4)), (400, "add", "end")]), policy, "oobleck", capped)
    # 4 GB through 0.5 GB/s: 8 s, not the 1 s of the busiest node
    assert pauses(sim, "checkpointing") == [(205.0, 10.0), (365.0, 10.0)]


def test_varuna_under_removals_faster_than_a_restart_saves_nothing_twice():
    """The mechanism behind Varuna's 1,024-node spot day (docs/simulator.md): working
    nodes leave every 20 s, a restart takes 10 s plus its load and an iteration 18 s or
    more, so no iteration completes between two removals. The state never changes, and
    Varuna restarts from its last checkpoint (here: the start) without writing it again
    (it used to write one checkpoint per removal, all of the same zero iterations)."""
    search = VarunaSearch(lambda b: tiny_profile() if b == 1 else None, tiny_cluster(8), 8, max_microbatch=1)
    policy = VarunaPolicy(search, 1, max_nodes=8)
    # 2 x 4 on n1..n8 (18 s iterations from 55), then 2 x 3 (24 s), 2 x 2 (30 s), 2 x 1 (54 s)
    removals = [(70, "remove", ["n7", "n8"]), (90, "remove", ["n5", "n6"]), (110, "remove", ["n3", "n4"])]
    sim = simulate(make_trace([(0, "add", nodes(8)), *removals, (400, "add", "end")]), policy, "varuna")
    counts = sim.counts
    assert counts["restarts"] == 3 and counts["iterations_lost"] == 3
    assert pauses(sim, "checkpointing") == [] and counts["checkpoints"] == 0 and sim.ledger.checkpoint_s == 0.0
    early = [row.iterations_done for row in sim.timeline if row.time_s <= 110.0]
    assert early == [0] * len(early)  # nothing completes while removals come every 20 s
    # after the last removal: restart 10 s + 2 GB per node at 2 GB/s to 121, then 54 s each
    assert pauses(sim, "restarting")[-1] == (110.0, 11.0) and sim.iterations == 5
