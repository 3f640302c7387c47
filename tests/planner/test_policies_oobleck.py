"""Oobleck's policy: decisions are the planner's instantiation and reconfiguration."""

from __future__ import annotations

import pytest

from designs.oobleck.policy import OobleckMemory, OobleckPolicy
from planner.hardware import ClusterSpec, GpuSpec
from planner.plan import JobSpec
from planner.planner import Planner
from planner.policies import (
    ClusterView,
    Continue,
    CopyLayers,
    Decision,
    NodesReady,
    NodesRemoved,
    PauseEnded,
    Reinstantiate,
    RestartFromCheckpoint,
    Start,
    WaitForNodes,
)
from planner.profile import LayerProfile, ModelProfile
from planner.reconfigure import copy_plan, on_addition, on_removal

GB = 10**9


def tiny_planner(num_nodes: int = 8, f: int = 1) -> Planner:
    """4 layers of 3 s and 1 GB each (params and optimizer state); 2 layers fit a node."""
    layers = tuple(LayerProfile(f"l{i}", 1.0, 2.0, GB // 4, GB // 4, GB // 2, 0, 0) for i in range(4))
    gpu = GpuSpec("tiny", 1e12, 5 * GB // 2, 1e12, 1e9)
    return Planner(ModelProfile("tiny", 1, layers), ClusterSpec(gpu, num_nodes, 1, reserved_bytes=0), JobSpec(8, 1, f))


def view(ready, state="running", starting=()):
    return ClusterView(0.0, tuple(ready), tuple(starting), state)


def started(policy, ready):
    """The decision after a completed start on `ready`."""
    first = policy.decide(view(ready, "waiting"), NodesReady(tuple(ready)), None)
    return policy.decide(view(ready, "restarting"), PauseEnded("restarting"), first)


NODES = [f"n{i}" for i in range(1, 7)]


def test_start_is_the_planners_instantiation_and_too_few_nodes_wait():
    planner = tiny_planner()
    policy = OobleckPolicy(planner)
    decision = policy.decide(view(NODES[:4], "waiting"), NodesReady(tuple(NODES[:4])), None)
    assert decision.actions == (Start(),)
    assert decision.plan == planner.instantiate(NODES[:4])
    assert decision.plan.num_pipelines == 2
    wait = policy.decide(view(["n1"], "waiting"), NodesReady(("n1",)), None)
    assert wait.plan is None and isinstance(wait.actions[0], WaitForNodes) and wait.actions[0].needed == 2


def test_losing_a_spare_or_a_starting_node_changes_nothing():
    policy = OobleckPolicy(tiny_planner())
    current = started(policy, NODES[:4])
    decision = policy.decide(view(NODES[:4], starting=()), NodesRemoved(("n9",)), current)
    assert decision.actions == (Continue(),) and decision.plan is current.plan


def test_losing_a_working_node_reconfigures_with_the_planners_copy_plan():
    planner = tiny_planner()
    policy = OobleckPolicy(planner)
    current = started(policy, NODES[:4])
    decision = policy.decide(view(["n1", "n2", "n3"]), NodesRemoved(("n4",)), current)
    expected = on_removal(planner, current.plan, ["n4"])
    assert decision.plan == expected.plan
    assert decision.actions == (Reinstantiate("lost ['n4']"), CopyLayers(expected.copies))
    assert decision.disruptive and not decision.rolls_back


def test_no_surviving_replica_restarts_from_the_checkpoint():
    policy = OobleckPolicy(tiny_planner())
    current = started(policy, NODES[:4])
    # pipelines [n1 n2] [n3 n4]: n2 and n4 both hold layers 2 and 3
    decision = policy.decide(view(["n1", "n3"]), NodesRemoved(("n2", "n4")), current)
    assert isinstance(decision.actions[0], RestartFromCheckpoint) and decision.rolls_back
    assert "layers [2, 3]" in decision.actions[0].reason
    assert set(decision.plan.nodes) == {"n1", "n3"}


def test_below_n0_it_waits_and_resumes_by_copies_only_if_the_survivors_hold_every_layer():
    planner = tiny_planner(f=0)
    policy = OobleckPolicy(planner)
    current = started(policy, NODES[:2])  # one pipeline: n1 holds layers 0-1, n2 holds 2-3
    waiting = policy.decide(view(["n1"]), NodesRemoved(("n2",)), current)
    assert waiting.plan is None and isinstance(waiting.actions[0], WaitForNodes) and waiting.rolls_back
    back = policy.decide(view(["n1", "n5"], "waiting"), NodesReady(("n5",)), waiting)
    assert isinstance(back.actions[0], RestartFromCheckpoint) and back.plan.nodes == ("n1", "n5")
    # survivors that still hold every layer resume with copies, no rollback
    base = planner.instantiate(NODES[:2])
    held = Decision(None, (WaitForNodes(2),), OobleckMemory(base=base, started=True))
    resume = policy.decide(view(["n1", "n2", "n5"], "waiting"), NodesReady(("n5",)), held)
    new = planner.instantiate(["n1", "n2", "n5"])
    assert resume.plan == new
    assert resume.actions == (Reinstantiate("resume over 3 nodes"), CopyLayers(copy_plan(planner, base, new)))


def test_spares_join_when_the_planner_says_the_gain_pays():
    planner = tiny_planner()
    policy = OobleckPolicy(planner, join_horizon_s=1e6)
    current = started(policy, NODES[:4])
    decision = policy.decide(view(NODES), NodesReady(("n5", "n6")), current)
    expected = on_addition(planner, current.plan, ["n5", "n6"], horizon_s=1e6)
    assert decision.plan == expected.plan and len(decision.plan.nodes) == 6
    assert isinstance(decision.actions[0], Reinstantiate) and decision.actions[1] == CopyLayers(expected.copies)
    # over a horizon too short to repay anything, they stay spares
    stingy = OobleckPolicy(planner, join_horizon_s=1e-9, reconfigure_pause_s=5.0)
    assert stingy.decide(view(NODES), NodesReady(("n5", "n6")), current).actions == (Continue(),)


def test_a_failure_during_a_reconfiguration_replans_from_the_completed_plan():
    planner = tiny_planner()
    policy = OobleckPolicy(planner, join_horizon_s=1e6)
    current = started(policy, NODES[:4])
    growing = policy.decide(view(NODES), NodesReady(("n5", "n6")), current)  # copies in flight
    decision = policy.decide(view(["n1", "n2", "n3", "n5", "n6"], "reconfiguring"), NodesRemoved(("n4",)), growing)
    # layers are still where the 4-node plan put them: replanned from it, without n4
    assert decision.plan == on_removal(planner, current.plan, ["n4"]).plan


def test_start_says_when_fewer_than_f_plus_one_pipelines_fit():
    """f = 3 asks for four replicas; when the nodes hold fewer, the job still starts and the
    decision says how many failures it really tolerates."""
    from designs.oobleck.policy import OobleckPolicy
    from planner.analytic import analytic_profile
    from planner.hardware import make_cluster
    from planner.plan import JobSpec
    from planner.planner import Planner
    from planner.policies.decisions import ClusterView, NodesReady

    planner = Planner(
        analytic_profile("gpt3-6.7b", "v100-16gb", 1), make_cluster("v100-16gb", 30, 1), JobSpec(1024, 1, 3)
    )
    n0 = planner.min_nodes
    assert 30 < 4 * n0
    nodes = tuple(f"n{i}" for i in range(30))
    decision = OobleckPolicy(planner).decide(ClusterView(0.0, nodes), NodesReady(nodes), None)
    assert decision.plan is not None and decision.plan.num_pipelines == 30 // n0
    assert any("not f = 3" in note for note in decision.notes)


def embedding_planner() -> Planner:
    """A light first layer, four equal blocks and a lighter head (GPT-3 175B's shape in
    miniature): 6 and 5 nodes run a block per node, 4 nodes put a block with the head and
    run 30 % slower per microbatch, so rule 1's 5 -> 4 switch is slow while a refill from
    the 6-node pipeline (6 -> 5) costs nothing in throughput."""
    weights = (0.02, 1.0, 1.0, 1.0, 1.0, 0.3)
    layers = tuple(LayerProfile(f"l{i}", w, 2 * w, GB // 4, GB // 4, GB // 2, 0, 0) for i, w in enumerate(weights))
    gpu = GpuSpec("tiny", 1e12, 5 * GB // 2, 1e12, 1e9)
    return Planner(ModelProfile("emb", 1, layers), ClusterSpec(gpu, 24, 1, reserved_bytes=0), JobSpec(96, 1, 1))


def best_iteration_s(planner: Planner, nodes: list[str], min_pipelines: int) -> float:
    """Brute force: the fastest plan over every multiset of template sizes using all nodes."""
    sizes = [n for n in planner.feasible_sizes(len(nodes)) if planner.template(n) is not None]

    def mixes(left: int, smallest: int):
        if left == 0:
            yield []
        for n in sizes:
            if n >= smallest and n <= left:
                for rest in mixes(left - n, n):
                    yield [n, *rest]

    best = float("inf")
    for mix in mixes(len(nodes), 0):
        if len(mix) >= min_pipelines:
            groups, start = [], 0
            for n in mix:
                groups.append(nodes[start : start + n])
                start += n
            best = min(best, planner.build_plan(groups).iteration_time_s)
    return best


def test_fastest_removal_matches_the_best_plan_where_the_papers_rule_is_slower():
    planner = embedding_planner()
    ready = [f"n{i}" for i in range(16)]
    plan = planner.build_plan([ready[:6], ready[6:11], ready[11:]])
    current = Decision(plan, (Continue(),), OobleckMemory(plan, True))
    slower = 0
    for gone in ready:
        survivors = [n for n in ready if n != gone]
        rules = OobleckPolicy(planner).decide(view(survivors), NodesRemoved((gone,)), current)
        fast = OobleckPolicy(planner, removal_tolerance=0.0).decide(view(survivors), NodesRemoved((gone,)), current)
        assert rules.plan == on_removal(planner, plan, [gone]).plan  # the default is the paper's rules
        best = best_iteration_s(planner, survivors, 2)
        assert fast.plan.iteration_time_s == pytest.approx(best, rel=1e-9)  # the exact best here
        assert fast.plan.iteration_time_s <= rules.plan.iteration_time_s * (1 + 1e-12)
        assert isinstance(fast.actions[1], CopyLayers)
        slower += rules.plan.iteration_time_s > 1.05 * best
    assert slower == 10  # every removal from a 5-node pipeline: rule 1 runs the 4-node template
