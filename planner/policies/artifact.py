"""What the published artifact's simulators know of a system, shared by its models of
Oobleck (`designs.oobleck.artifact`) and Varuna (`designs.varuna.artifact`).

The paper's figures come from simulators (SymbioticLab/Oobleck, sosp23-artifact,
tools/simulator/) that know a system only by a throughput per live node count and a few
fixed times (`../shared/calibration/README.md`). Their plans are therefore just the set of
usable nodes (`NodesPlan`); `ArtifactPolicy` holds what both models do (the start, the
wait below `min_nodes`, nodes joining at the next restart or reconfiguration), and each
design's model says what a removal does. They emit the same typed decisions as the
planner-backed policies so runs log the same records. Bamboo needs no separate model: it is
`BambooPolicy(depth=12, fatal_rollback=False)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .decisions import (
    Admit,
    CheckpointSchedule,
    ClusterView,
    Continue,
    Decision,
    Event,
    NodesRemoved,
    PauseEnded,
    Start,
    WaitForNodes,
)

ARTIFACT_MIN_NODES = 12  # the artifact's pipeline stage target: no training below it


@dataclass(frozen=True)
class NodesPlan:
    """Every usable node when the plan was formed; its throughput is a table lookup."""

    nodes: tuple[str, ...]

    def describe(self) -> dict:
        return {"nodes": len(self.nodes)}

    @property
    def artifact_nodes(self) -> int:
        """The node count whose row of the artifact's table prices this plan."""
        return len(self.nodes)

    @property
    def failed_over(self) -> bool:
        return False


def nodes_plan(ready: Sequence[str], min_nodes: int) -> NodesPlan | None:
    return NodesPlan(tuple(ready)) if len(ready) >= min_nodes else None


class ArtifactPolicy:
    name = ""
    checkpoints = CheckpointSchedule()

    def __init__(self, min_nodes: int = ARTIFACT_MIN_NODES):
        if min_nodes < 1:
            raise ValueError(f"min_nodes must be >= 1, got {min_nodes}")
        self.min_nodes = min_nodes

    def infeasible_reason(self) -> str | None:
        return None

    def _wait(self, view: ClusterView, started: bool, rollback: bool = False) -> Decision:
        why = f"{len(view.ready)} usable nodes, the artifact's model needs {self.min_nodes}"
        return Decision(None, (WaitForNodes(self.min_nodes, why, rollback=rollback),), started)

    def decide(self, view: ClusterView, event: Event, current: Decision | None) -> Decision:
        plan = current.plan if current is not None else None
        started = bool(current is not None and current.memory)
        if isinstance(event, NodesRemoved):
            if plan is None and view.job_state == "waiting":
                return Decision(None, (Continue(),), started)
            return self._on_removal(view, started, first=not started)
        if isinstance(event, PauseEnded) and plan is not None:
            present = set(plan.nodes)  # once, not per node
            joined = tuple(n for n in view.ready if n not in present)
            if joined and event.kind != "checkpointing":
                return Decision(NodesPlan(tuple(view.ready)), (Admit(joined),), True)
            return Decision(plan, (Continue(),), True)
        if plan is not None:
            return Decision(plan, (Continue(),), started)  # new nodes wait for the next pause
        new = nodes_plan(view.ready, self.min_nodes)
        if new is None:
            return self._wait(view, started)
        return Decision(new, (self._resume_action() if started else Start(),), started)

    def _on_removal(self, view: ClusterView, started: bool, first: bool) -> Decision:
        raise NotImplementedError

    def _resume_action(self):
        raise NotImplementedError
