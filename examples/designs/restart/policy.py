"""The elastic-restart policy: start on every usable node; any working node lost, restart
every worker from the last checkpoint once enough nodes are usable (`__init__.py` has the
rules in words, the options and the record)."""

from __future__ import annotations

from planner.errors import InfeasibleError
from planner.planner import Planner
from planner.policies import (
    CheckpointSchedule,
    ClusterView,
    Continue,
    Decision,
    Event,
    NodesRemoved,
    RestartFromCheckpoint,
    Start,
    WaitForNodes,
)


class RestartPolicy:
    """Start on every usable node; any working node lost: restart from the checkpoint."""

    name = "restart"

    def __init__(self, planner: Planner, checkpoints: CheckpointSchedule, min_nodes: int):
        self.planner, self.checkpoints, self.min_nodes = planner, checkpoints, min_nodes

    def infeasible_reason(self) -> str | None:
        try:
            _ = self.planner.min_nodes  # raises when no pipeline fits in memory
        except InfeasibleError as exc:
            return f"out of memory: {exc}"
        return None

    def decide(self, view: ClusterView, event: Event, current: Decision | None) -> Decision:
        plan = current.plan if current is not None else None
        started = bool(current is not None and current.memory)
        if isinstance(event, NodesRemoved) and plan is not None:
            if not set(event.nodes) & set(plan.nodes):
                return Decision(plan, (Continue(),), started)  # a spare or a starting node left
            return self._launch(view, started, why=f"lost {sorted(set(event.nodes) & set(plan.nodes))}")
        if plan is None:
            return self._launch(view, started, why="nodes arrived")
        return Decision(plan, (Continue(),), True)  # joins wait for the next restart

    def _launch(self, view: ClusterView, started: bool, why: str) -> Decision:
        need = max(self.min_nodes, self.planner.min_nodes)
        if len(view.ready) < need:
            note = f"{len(view.ready)} usable nodes, a restart needs {need}"
            return Decision(None, (WaitForNodes(need, note, rollback=started),), started)
        plan = self.planner.instantiate(view.ready)
        return Decision(plan, (RestartFromCheckpoint(why) if started else Start(),), True)
