"""Replica groups (designs/replica_groups/): hand-computed runs, the policy's invariants,
and a real job whose every step equals a single-process step over the live groups' samples.

The tiny model (tests/sim/tiny.py): 4 layers of 3 s, a node holds at most two, so one
replica needs n0 = 2 nodes and a group of 2 nodes is a 2-stage pipeline of 6 s stages;
m microbatches take (m + 1) x 6 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from designs import registry
from designs.replica_groups import ReplicaGroupsOptions
from designs.replica_groups.policy import GroupsMemory, ReplicaGroupsPolicy, fill_slots, group_microbatches
from planner.hardware import ClusterSpec, GpuSpec
from planner.plan import JobSpec
from planner.planner import Planner
from planner.policies import (
    Admit,
    ClusterView,
    Continue,
    CopyLayers,
    Detect,
    IterationEnd,
    NodesReady,
    NodesRemoved,
    PauseEnded,
    Reinstantiate,
    RestartFromCheckpoint,
    Start,
    WaitForNodes,
)
from planner.profile import LayerProfile, ModelProfile
from sim.engine import Simulation
from sim.pricing import Pricing
from sim.timing import PlannerCosts
from tests.sim.tiny import GB, make_trace, nodes, tiny_cluster, tiny_profile, tiny_timing

REPO = Path(__file__).resolve().parents[2]
COSTS = PlannerCosts(reconfigure_overhead_s=5.0, restart_overhead_s=10.0)


def policy_for(num_nodes: int, batch: int, *, min_groups: int = 1, quorum_s: float = 1.0, profile=None, cluster=None):
    planner = Planner(profile or tiny_profile(), cluster or tiny_cluster(num_nodes), JobSpec(batch, 1, 0))
    return ReplicaGroupsPolicy(
        planner, group_nodes=2, num_groups=num_nodes // 2, min_groups=min_groups, quorum_s=quorum_s
    )


def simulate(trace, policy, batch: int, detection_s: float = 60.0):
    timing = tiny_timing(
        "replica_groups",
        COSTS,
        batch,
        options=ReplicaGroupsOptions(group_nodes=2, detection_timeout_s=detection_s, quorum_s=policy.quorum_s),
    )
    return Simulation(trace, policy, Pricing(timing, node_startup_s=45.0, price_per_node_hour=1.0)).run()


def test_a_lost_node_takes_its_group_out_and_the_replacement_brings_it_back():
    policy = policy_for(6, 9)
    trace = make_trace([(0, "add", nodes(6)), (500, "remove", "n4"), (1000, "add", "n7"), (1500, "add", "end")])
    sim = simulate(trace, policy, 9)
    # 3 groups [n1 n2] [n3 n4] [n5 n6] of 3 microbatches each: (3 + 1) x 6 + 1 s quorum =
    # 25 s. Ready at 45, start 10 s: from 55, 17 iterations of 9 samples by 480, the 18th
    # lost at 500. Detection 60 s + the new quorum 5 s: from 565 groups 0 and 2, 6 samples
    # an iteration, still 25 s. n7 is ready at 1045 (45 s start-up) and fills n4's slot;
    # nothing to copy (the tiny model's state is all gradients), so group 1 joins at the
    # next boundary, 1065 (20 iterations after 565), where every group waits 5 s while the
    # quorum grows (the rejoin costs the leave's reconfiguration), and 17 more by 1495.
    assert sim.iterations == 17 + 20 + 17
    assert sim.samples == 17 * 9 + 20 * 6 + 17 * 9
    assert sim.counts["reconfigurations"] == 1 and sim.counts["restarts"] == 0
    assert sim.counts["failures_survived"] == 1
    assert sim.ledger.reconfiguration_s == pytest.approx(65.0 + 5.0)
    assert sim.ledger.lost_work_s == pytest.approx(20 + 5, abs=1e-6)  # at 500, and the 5 s unfinished at the end
    assert sim.last_iteration_t == pytest.approx(1495.0, abs=1e-6)
    plan = sim.decision.plan
    assert plan.groups == (0, 1, 2) and not plan.partial and plan.pipelines[1].nodes == ("n3", "n7")
    admitted = [e for e in sim.events if e.kind == "decision" and e.detail["actions"][0]["action"] == "Admit"]
    assert len(admitted) == 1 and admitted[0].time_s == pytest.approx(1065.0, abs=1e-6)


def test_a_spare_replaces_the_lost_node_at_once():
    policy = policy_for(4, 8)  # 2 groups of 2 nodes; n5 is a spare
    trace = make_trace([(0, "add", nodes(5)), (500, "remove", "n2"), (1000, "add", "end")])
    sim = simulate(trace, policy, 8, detection_s=30.0)
    # 4 microbatches per group: (4 + 1) x 6 + 1 = 31 s. From 55: 14 iterations of 8 by 489.
    # n2 lost at 500: group 0 out, n5 takes its slot at once; detection 30 s + 5 s, from
    # 535 group 1 alone (4 samples). Group 0 (n1, n5) gets the live state (nothing to copy)
    # and joins at the first boundary, 566, after a 5 s rebuild of the quorum; then 13 more
    # by 974 (the 14th would end at 1005, past the trace's end).
    assert sim.iterations == 14 + 1 + 13
    assert sim.samples == 14 * 8 + 1 * 4 + 13 * 8
    assert sim.ledger.reconfiguration_s == pytest.approx(30.0 + 5.0 + 5.0)
    assert sim.decision.plan.pipelines[0].nodes == ("n1", "n5")


def test_losing_every_group_restarts_from_the_checkpoint():
    policy = policy_for(4, 8)
    trace = make_trace(
        [(0, "add", nodes(4)), (500, "remove", ["n1", "n3"]), (600, "add", ["n5", "n6"]), (900, "add", "end")]
    )
    sim = simulate(trace, policy, 8)
    # both groups lose a node at 500: no group holds the live state; with no checkpoint
    # the job rolls back to its start and waits; n5, n6 ready at 645 complete both groups:
    # a restart from the (empty) checkpoint, then training again.
    assert sim.counts["restarts"] == 1 and sim.counts["rollbacks"] == 1
    actions = [[a["action"] for a in e.detail["actions"]] for e in sim.events if e.kind == "decision"]
    assert actions[-2:] == [["RestartFromCheckpoint"], ["Continue"]]  # the restart, then its pause ends
    assert sim.samples == sim.iterations * 8  # both groups trained every committed step


def view(t: float, ready, state: str = "running") -> ClusterView:
    return ClusterView(time_s=t, ready=tuple(ready), job_state=state)


def test_a_healing_group_joins_at_the_first_iteration_end_after_its_copy():
    # 0.5 GB of optimizer state per layer, 2 layers a node, 1e8 B/s links: the busiest node
    # of the healing group receives 1 GB, 10 s.
    layers = tuple(
        LayerProfile(f"l{i}", 1.0, 2.0, param_bytes=0, grad_bytes=GB // 2, optimizer_bytes=GB // 2,
                     activation_bytes=0, output_bytes=0)
        for i in range(4)
    )  # fmt: skip
    cluster = ClusterSpec(GpuSpec("slow-net", 1e12, 5 * GB // 2, 1e18, 1e8), 4, 1, reserved_bytes=0)
    policy = policy_for(4, 8, profile=ModelProfile("tiny", 1, layers, source="tests"), cluster=cluster)
    assert policy.heal_s == pytest.approx(10.0)
    d = policy.decide(view(0, nodes(4), "waiting"), NodesReady(tuple(nodes(4))), None)
    assert isinstance(d.actions[0], Start) and d.plan.groups == (0, 1)
    d = policy.decide(view(40, nodes(4), "restarting"), PauseEnded("restarting"), d)  # the start is over
    assert isinstance(d.actions[0], Continue) and d.memory.started and not d.memory.launching
    d = policy.decide(view(100, ["n1", "n2", "n3"]), NodesRemoved(("n4",)), d)
    assert [type(a) for a in d.actions] == [Detect, Reinstantiate] and d.plan.groups == (0,)
    assert d.plan.partial and d.plan.global_batch == 4 and d.plan.first_microbatches == (0,)
    d = policy.decide(view(200, ["n1", "n2", "n3", "n5"]), NodesReady(("n5",)), d)
    assert isinstance(d.actions[0], Continue) and d.check_at_iteration_end and d.plan.groups == (0,)
    d = policy.decide(view(209.9, ["n1", "n2", "n3", "n5"]), IterationEnd(7), d)
    assert isinstance(d.actions[0], Continue) and d.check_at_iteration_end
    d = policy.decide(view(210.5, ["n1", "n2", "n3", "n5"]), IterationEnd(8), d)
    assert d.actions == (Admit(("n3", "n5")),) and d.plan.groups == (0, 1) and not d.plan.partial
    assert not d.check_at_iteration_end


def test_a_loss_during_a_launch_launches_again_without_detection():
    policy = policy_for(6, 8)  # 3 groups of 2
    d = policy.decide(view(0, nodes(7), "waiting"), NodesReady(tuple(nodes(7))), None)
    assert isinstance(d.actions[0], Start) and d.plan.groups == (0, 1, 2) and d.memory.launching
    # a spare leaves: the start goes on
    d = policy.decide(view(3, nodes(6), "restarting"), NodesRemoved(("n7",)), d)
    assert d.actions == (Continue(),) and d.memory.launching and not d.memory.started
    # a launched group loses a node: no collective runs yet, so no detection; start again
    d = policy.decide(view(5, ["n1", "n2", "n3", "n5", "n6"]), NodesRemoved(("n4",)), d)
    assert [type(a) for a in d.actions] == [Start] and d.plan.groups == (0, 2) and d.memory.launching
    d = policy.decide(view(45, ["n1", "n2", "n3", "n5", "n6"], "restarting"), PauseEnded("restarting"), d)
    assert d.memory.started and not d.memory.launching and d.memory.live == frozenset({0, 2})
    # every live group loses a node, two come back: a restart from the checkpoint, and a
    # loss during it restarts it again (it holds no live state yet)
    d = policy.decide(view(100, ["n3"]), NodesRemoved(("n1", "n2", "n5", "n6")), d)
    assert d.plan is None and d.rolls_back
    d = policy.decide(view(150, ["n3", "n8", "n9"], "waiting"), NodesReady(("n8", "n9")), d)
    assert [type(a) for a in d.actions] == [RestartFromCheckpoint] and d.memory.launching
    d = policy.decide(view(155, ["n3", "n9"], "restarting"), NodesRemoved(("n8",)), d)
    assert d.plan is None and [type(a) for a in d.actions] == [WaitForNodes] and d.rolls_back


def test_below_min_groups_the_quorum_waits_with_the_state_in_memory():
    policy = policy_for(6, 9, min_groups=2)
    d = policy.decide(view(0, nodes(6), "waiting"), NodesReady(tuple(nodes(6))), None)
    d = policy.decide(view(5, nodes(6), "restarting"), PauseEnded("restarting"), d)
    d = policy.decide(view(10, ["n1", "n2", "n3", "n5"]), NodesRemoved(("n4", "n6")), d)
    assert d.plan is None and [type(a) for a in d.actions] == [Detect, WaitForNodes]
    assert not d.rolls_back and d.memory.live == frozenset({0})
    d = policy.decide(view(20, ["n1", "n2", "n3", "n5", "n7"]), NodesReady(("n7",)), d)
    # n7 completes group 1 ([n3 n7]); the copy is done during the wait: a new quorum of 2
    assert [type(a) for a in d.actions] == [Reinstantiate, CopyLayers] and d.plan.groups == (0, 1)
    assert {c.dst_node for c in d.actions[1].copies} == {"n3", "n7"}


def test_fill_slots_completes_the_most_complete_group_first():
    slots, hit = fill_slots([("a", "b", None), ("c", "d", "e"), ("f", None, None)], ["a", "c", "d", "f", "x", "y"])
    assert hit == {0, 1}  # b and e are gone
    # group 1 misses one node: first; groups 0 and 2 miss two each: the lower index next
    assert slots == (("a", "y", None), ("c", "d", "x"), ("f", None, None))
    slots, _ = fill_slots([(None, None), ("a", None)], ["a", "x", "y", "z"])
    assert slots == (("y", "z"), ("a", "x"))  # the started group first, then the empty one


@settings(max_examples=60, deadline=None)
@given(
    total=st.integers(1, 40),
    groups=st.integers(1, 12),
)
def test_group_microbatches_split_the_batch(total, groups):
    m = group_microbatches(total, groups)
    assert sum(m) == total and max(m) - min(m) <= 1 and list(m) == sorted(m, reverse=True)


POOL = [f"p{i}" for i in range(9)]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "remove", "tick"]), st.sampled_from(POOL)), max_size=30))
def test_every_plan_trains_complete_live_groups_on_their_own_slices(events):
    policy = policy_for(8, 11, min_groups=1, quorum_s=0.0)  # 4 groups: 3, 3, 3, 2 microbatches
    ready: list[str] = []
    d = None
    for t, (kind, node) in enumerate(events):
        if kind == "add" and node not in ready:
            ready.append(node)
            event = NodesReady((node,))
        elif kind == "remove" and node in ready:
            ready.remove(node)
            event = NodesRemoved((node,))
        else:
            event = IterationEnd(t)
        state = "running" if d is not None and d.plan is not None else "waiting"
        d = policy.decide(view(float(t), ready, state), event, d)
        memory: GroupsMemory = d.memory
        placed = [n for slot in memory.slots for n in slot if n is not None]
        assert len(placed) == len(set(placed)) and set(placed) <= set(ready)
        if d.plan is None:
            continue
        plan = d.plan
        assert set(plan.nodes) <= set(ready) and len(plan.nodes) == len(set(plan.nodes))
        assert set(plan.groups) <= memory.live | {g for g, _ in memory.healing} or any(
            isinstance(a, Admit) for a in d.actions
        )
        for g, pipe in zip(plan.groups, plan.pipelines):
            assert pipe.nodes == memory.slots[g]  # a complete group, in its slot order
            assert pipe.num_microbatches == policy.microbatches[g]
        assert plan.global_batch == sum(policy.microbatches[g] for g in plan.groups)
        assert plan.partial == (len(plan.groups) < 4)
        if plan.partial:
            assert plan.first_microbatches == tuple(policy.first[g] for g in plan.groups)
        assert sum(plan.gradient_weights) == pytest.approx(1.0)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.sampled_from(nodes(6))), min_size=1, max_size=8))
def test_simulated_samples_are_the_live_groups_samples(removals):
    policy = policy_for(6, 9)
    rows = [(0, "add", nodes(6))]
    present = set(nodes(6))
    for minute, node in sorted(removals):
        kind = "remove" if node in present else "add"
        present ^= {node}
        rows.append((minute * 60, kind, node))
    rows.append((3000, "add", "end"))
    sim = simulate(make_trace(rows), policy, 9)
    # every committed iteration trains 1, 2 or 3 groups of 3 microbatches
    assert 3 * sim.iterations <= sim.samples <= 9 * sim.iterations
    assert sim.samples % 3 == 0
    if sim.counts["working_removed"] == 0:
        assert sim.samples == 9 * sim.iterations


def ooblab(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ooblab.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s, start_new_session=True)  # fmt: skip


def test_the_simulator_runs_it_from_the_registry(tmp_path):
    assert "replica_groups" in registry.names()
    result = ooblab("simulate", "--design", "replica_groups", "--calibration", "planner", "--model", "gpt3-350m",
                    "--global-batch", "64", "--trace", "fixed:interval=1h,nodes=8,removals=3", "--set",
                    "detection_timeout_s=30", "--json", "--out", str(tmp_path / "run"))  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    options = config["effective_design_options"]
    assert options["detection_timeout_s"] == 30.0 and options["group_nodes"] >= 1
    assert summary["num_reconfigurations"] == 2 and summary["num_restarts"] == 0  # the third ends the trace
    groups = 8 // options["group_nodes"]
    # after the two removals, groups are out until their nodes come back: fewer samples
    assert summary["committed_samples"] < summary["num_iterations"] * 64 or groups == 1
    bad = ooblab("simulate", "--design", "replica_groups", "--calibration", "planner", "--set", "min_groups=99",
                 "--no-write")  # fmt: skip
    assert bad.returncode == 2 and "min_groups" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.timeout(300)
def test_on_the_real_backend_every_step_equals_a_step_over_the_live_groups_samples(tmp_path):
    """4 nodes as 2 groups of 2 (group 0: node0 node1 on microbatches 0-7, group 1: node2
    node3 on 8-15). node3 crashes in step 3's backward pass: group 0 goes on alone, redoing
    step 3 on its 8 samples; node3 is started again at step 4, registers, and group 1
    (node2, stale since step 3, and the fresh node3) gets the live state from group 0 and
    joins at a boundary. The reference trains each step on the samples of the groups the
    test expects live in it."""
    pytest.importorskip("torch")
    from real.config import RunConfig
    from real.models.reference import gather_params, max_relative_difference, train_reference

    from ..real.conftest import assert_no_leftovers

    params, steps = tmp_path / "params", 100
    process = subprocess.Popen(
        [sys.executable, "-m", "ooblab.cli", "run", "--design", "replica_groups", "--set", "group_nodes=2",
         "--nodes", "4", "--steps", str(steps), "--checkpoint-every", "0", "--global-batch", "16", "--dtype",
         "float64", "--timeout", "15", "--heartbeat-timeout", "3", "--heartbeat-interval", "0.25",
         "--inject", "3:node3:crash:backward,4:node3:join", "--save-params", str(params), "--out",
         str(tmp_path / "run"), "--json"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
        assert_no_leftovers(process.pid)
    assert process.returncode == 0, err[-4000:]
    summary = json.loads(out)
    assert summary["status"] == "finished" and summary["num_iterations"] == steps
    partial = {int(k): [tuple(r) for r in v] for k, v in summary.get("partial_steps", {}).items()}
    # group 0 alone from the failed step until group 1 is back, then both groups to the end
    assert partial, "group 1 was never out"
    joined = max(partial) + 1
    assert sorted(partial) == list(range(3, joined)) and joined < steps, "group 1 came back before the end"
    assert all(ranges == [(0, 8)] for ranges in partial.values())
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    ready = [e for e in events if e["kind"] == "node_ready" and e["node"] == "node3"]
    published = [e for e in events if e["kind"] == "generation_published"]
    assert ready and published[-1]["resume_step"] == joined and published[-1]["world_size"] == 4
    assert summary["committed_samples"] == 16 * (steps - len(partial)) + 8 * len(partial)
    assert summary["num_reconfigurations"] == 2 and summary["num_restarts"] == 0
    # the return is measured: one planned stop (the quorum grows), from the last commit
    # before it to the new generation's readiness
    stops = summary["planned_stops"]
    assert [(s["step"], s["actions"]) for s in stops] == [(joined, ["Admit"])]
    assert stops[0]["pause_s"] > 0 and stops[0]["t_ready_s"] == stops[0]["t_stop_s"] + stops[0]["pause_s"]
    config = RunConfig(nodes=4, fault_tolerance=0, steps=steps, global_batch=16, dtype="float64")
    expected = {step: [(0, 8)] for step in range(3, joined)}  # the test's own idea of who was live
    reference = train_reference(config, expected)
    replicas = gather_params(params)
    assert len(replicas) == 2, "both groups saved their replica"
    worst = max(max_relative_difference(p, reference.params) for p in replicas.values())
    assert worst <= 1e-5, f"parameters differ from the live-groups reference by {worst:.3e}"
    assert summary["losses"] == pytest.approx(reference.losses, rel=1e-9)
    full = train_reference(config)  # the test can fail: the full-batch run is far from it
    assert max(max_relative_difference(p, full.params) for p in replicas.values()) > 1e-3
    print(f"max relative difference {worst:.2e}; group 1 out for steps 3..{joined - 1}")


def test_a_plan_over_some_groups_becomes_a_layout_on_their_slices():
    from real.protocol.layout import Layout, LayoutError, layout_from_plan

    policy = policy_for(6, 9, quorum_s=0.0)
    slots = (("n1", "n2"), ("n3", "n4"), ("n5", "n6"))
    plan = policy.plan([0, 2], slots)
    layout = layout_from_plan(plan)
    assert [(p.first_microbatch, p.num_microbatches) for p in layout.pipelines] == [(0, 3), (6, 3)]
    assert layout.global_batch == 9 and layout.samples_per_step == layout.step_samples == 6
    assert [p.gradient_weight for p in layout.pipelines] == [0.5, 0.5]  # the mean over the live samples
    assert Layout.from_dict(layout.to_dict()) == layout
    whole = layout_from_plan(policy.plan([0, 1, 2], slots))
    assert whole.samples_per_step is None and whole.partial_ranges() is None
    overlapping = {
        **layout.to_dict(),
        "pipelines": [{**p, "first_microbatch": 0} for p in layout.to_dict()["pipelines"]],
    }
    with pytest.raises(LayoutError):
        Layout.from_dict(overlapping)


def test_a_groups_return_costs_every_group_the_quorum_rejoin():
    """The term `quorum_rejoin_s` prices a healed group's return (every group waits at that
    step boundary); unset, it is the leave's reconfiguration; 0 makes the return free."""
    from sim.config import SimConfig
    from sim.run import simulate as run

    rows = [(0, "add", nodes(6)), (3600, "remove", "n4"), (4000, "add", "n7"), (9000, "add", "end")]
    common = dict(policy="replica_groups", calibration="planner", model="gpt3-350m", global_batch=64)
    results = {
        given: run(
            SimConfig.of(**common, **({} if given is None else {"quorum_rejoin_s": given})), trace=make_trace(rows)
        )
        for given in (None, 0.0, 12.0)
    }
    admits = [
        e
        for e in results[12.0].events
        if e.kind == "decision" and any(a["action"] == "Admit" for a in e.detail["actions"])
    ]
    assert len(admits) == 1
    spent = {given: r.summary.breakdown.reconfiguration_s for given, r in results.items()}
    assert spent[12.0] - spent[0.0] == pytest.approx(12.0)
    assert spent[None] - spent[0.0] == pytest.approx(2.0)  # the paper's reconfigure_overhead_s
    assert results[0.0].summary.committed_samples >= results[12.0].summary.committed_samples
