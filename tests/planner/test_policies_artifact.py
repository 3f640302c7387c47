"""The artifact's node-count models of Oobleck and Varuna, and the decision types."""

from __future__ import annotations

import json

import pytest

from designs.bamboo.policy import BambooPlan
from designs.oobleck.artifact import ArtifactOobleckPolicy
from designs.varuna.artifact import ArtifactVarunaPolicy
from planner.policies import (
    Admit,
    CheckpointSchedule,
    ClusterView,
    Continue,
    CopyLayers,
    Decision,
    FailOver,
    NodesPlan,
    NodesReady,
    NodesRemoved,
    PauseEnded,
    Reinstantiate,
    Restart,
    RestartFromCheckpoint,
    Start,
    WaitForNodes,
    describe_action,
    describe_event,
    describe_plan,
)
from planner.reconfigure import LayerCopy

NODES = tuple(f"n{i}" for i in range(1, 16))


def view(ready, state="running", starting=()):
    return ClusterView(0.0, tuple(ready), tuple(starting), state)


def running(policy, ready):
    return Decision(NodesPlan(tuple(ready)), (Continue(),), True)


def test_artifact_oobleck_reconfigures_on_every_removal_and_waits_below_the_minimum():
    policy = ArtifactOobleckPolicy(min_nodes=12)
    current = running(policy, NODES[:14])
    # even a node that was still starting: the artifact reconfigures on every removal
    d = policy.decide(view(NODES[:14]), NodesRemoved(("x",)), current)
    assert d.actions == (Reinstantiate("node removed"),) and d.plan.nodes == NODES[:14]
    d = policy.decide(view(NODES[:11]), NodesRemoved(NODES[11:14]), current)
    assert d.plan is None and d.actions[0] == WaitForNodes(12, d.actions[0].reason) and not d.rolls_back
    # new nodes wait while it trains, join at the end of a pause
    assert policy.decide(view(NODES), NodesReady(NODES[14:]), current).actions == (Continue(),)
    d = policy.decide(view(NODES), PauseEnded("reconfiguring", NODES[14:]), current)
    assert d.actions == (Admit(NODES[14:]),) and d.plan.nodes == NODES


def test_artifact_oobleck_first_start_and_resume_are_starts():
    policy = ArtifactOobleckPolicy(min_nodes=2)
    assert policy.decide(view(NODES[:1], "waiting"), NodesReady(NODES[:1]), None).plan is None
    first = policy.decide(view(NODES[:2], "waiting"), NodesReady(NODES[1:2]), None)
    assert first.actions == (Start(),)
    # a removal before the start completed starts it again
    again = policy.decide(view(NODES[:3], "restarting"), NodesRemoved(("n9",)), first)
    assert again.actions == (Start(),)


def test_artifact_varuna_restarts_on_every_removal():
    policy = ArtifactVarunaPolicy(min_nodes=12)
    assert policy.checkpoints == CheckpointSchedule(every_iterations=10, after_restart=True)
    current = running(policy, NODES[:14])
    d = policy.decide(view(NODES[:13]), NodesRemoved(("n14",)), current)
    assert isinstance(d.actions[0], RestartFromCheckpoint) and d.rolls_back
    keep = ArtifactVarunaPolicy(min_nodes=12, rollback=False).decide(view(NODES[:13]), NodesRemoved(("n14",)), current)
    assert isinstance(keep.actions[0], Restart) and not keep.rolls_back
    stop = policy.decide(view(NODES[:11]), NodesRemoved(NODES[11:14]), current)
    assert stop.plan is None and stop.rolls_back
    back = policy.decide(view(NODES[:12], "waiting"), NodesReady(("n12",)), stop)
    assert isinstance(back.actions[0], Restart)


def test_decision_properties_and_records_are_json():
    copy = LayerCopy("b", "a", (1, 2), 10, 20)
    decision = Decision(
        BambooPlan(2, (("a", "a"),), ("c",), ((0, 1),)),
        (FailOver("b", "a", (0, 1)), CopyLayers((copy,))),
    )
    assert decision.disruptive  # CopyLayers is not one of Continue / FailOver / Admit
    assert not Decision(None, (Continue(), Admit(("x",)))).disruptive
    records = [describe_action(a) for a in decision.actions] + [
        describe_plan(decision.plan),
        describe_event(NodesRemoved(("a",))),
    ]
    assert json.loads(json.dumps(records))[1] == {"action": "CopyLayers", "copies": 1, "bytes": 30}
    assert describe_plan(None) == {"nodes": 0}
    with pytest.raises(ValueError):
        CheckpointSchedule(every_iterations=0)
    with pytest.raises(ValueError):
        CheckpointSchedule(every_s=0.0)
