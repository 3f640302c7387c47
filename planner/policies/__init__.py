"""Policies: pure functions from (cluster view, event, current decision) to a typed decision.

The same objects serve the simulator and the real backend (DESIGN 3.6): `OobleckPolicy`
(the planner's instantiation and reconfiguration), `BambooPolicy` (redundant stages),
`VarunaPolicy` (checkpoint, restart, morph), and `ArtifactOobleckPolicy` /
`ArtifactVarunaPolicy`, the published artifact's node-count models of Oobleck and Varuna.
"""

from .artifact import ArtifactOobleckPolicy, ArtifactVarunaPolicy, NodesPlan
from .bamboo import BambooPlan, BambooPolicy, form_grid, regrid
from .bamboo_cost import BambooLayout, bamboo_layout
from .decisions import (
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
from .oobleck import OobleckMemory, OobleckPolicy

# Explicit, so that linters and type checkers see the re-exports (a computed list hides them).
__all__ = [
    "Action",
    "Admit",
    "ArtifactOobleckPolicy",
    "ArtifactVarunaPolicy",
    "bamboo_layout",
    "BambooLayout",
    "BambooPlan",
    "BambooPolicy",
    "Checkpoint",
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
    "form_grid",
    "IterationEnd",
    "NodesPlan",
    "NodesReady",
    "NodesRemoved",
    "OobleckMemory",
    "OobleckPolicy",
    "PauseEnded",
    "plan_nodes",
    "Policy",
    "regrid",
    "Reinstantiate",
    "Restart",
    "RestartFromCheckpoint",
    "RestartFromSnapshot",
    "Start",
    "WaitForNodes",
]
