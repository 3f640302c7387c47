"""Policies: pure functions from (cluster view, event, current decision) to a typed decision.

The vocabulary the designs (`designs/<name>/`) and the engines share: events, the cluster
view, decisions and typed actions (`decisions`), and which layers a plan's nodes hold
(`holdings`). The same objects serve the simulator and the real backend (DESIGN 3.6).
"""

from .artifact import ArtifactPolicy, NodesPlan
from .decisions import (
    DEFAULT_CHECKPOINT_EVERY_S,
    Action,
    Admit,
    Checkpoint,
    CheckpointSchedule,
    ClusterView,
    Continue,
    CopyLayers,
    Decision,
    Detect,
    Event,
    FailOver,
    IterationEnd,
    NodesReady,
    NodesRemoved,
    PauseEnded,
    Policy,
    Reinstantiate,
    Restart,
    RestartFromCheckpoint,
    RestartFromSnapshot,
    Start,
    WaitForNodes,
    describe_action,
    describe_event,
    describe_plan,
    plan_nodes,
)

# Explicit, so that linters and type checkers see the re-exports (a computed list hides them).
__all__ = [
    "Action",
    "Admit",
    "ArtifactPolicy",
    "Checkpoint",
    "DEFAULT_CHECKPOINT_EVERY_S",
    "CheckpointSchedule",
    "ClusterView",
    "Continue",
    "CopyLayers",
    "Decision",
    "Detect",
    "describe_action",
    "describe_event",
    "describe_plan",
    "Event",
    "FailOver",
    "IterationEnd",
    "NodesPlan",
    "NodesReady",
    "NodesRemoved",
    "PauseEnded",
    "plan_nodes",
    "Policy",
    "Reinstantiate",
    "Restart",
    "RestartFromCheckpoint",
    "RestartFromSnapshot",
    "Start",
    "WaitForNodes",
]
