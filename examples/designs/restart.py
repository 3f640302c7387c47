"""Restart from the last checkpoint on every failure: the elastic-restart baseline.

What a job gets from a plain elastic launcher (torchrun's elastic agent, say): the job keeps
no replicas and never reconfigures live. Any loss of a working node stops everyone; once at
least `min_nodes` nodes are usable, every worker restarts on the planner's plan for all of
them from the last complete checkpoint, paying `rendezvous_s` on top (the agent's
rendezvous, simulator only: on the real backend it is measured). Nodes that arrive while
the job trains wait for the next restart.

This file is the worked example of docs/designs.md: it lives outside the package and is
loaded with `--design-module examples/designs/restart.py --design restart`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from designs import REAL, REAL_BACKEND, SIMULATOR, BuildContext, Design, PolicyBuild, option, standard_pause_s
from designs.options import PLANNER
from planner.errors import InfeasibleError
from planner.planner import Planner
from planner.policies import (
    Action,
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


@dataclass(frozen=True)
class RestartOptions:
    min_nodes: int = option(1, doc="wait for this many usable nodes before a restart", where=(PLANNER, REAL), minimum=1)
    rendezvous_s: float = option(
        0.0, unit="s", doc="extra seconds every start and restart takes to rendezvous", where=(PLANNER,), minimum=0
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


def build(ctx: BuildContext, options: RestartOptions) -> PolicyBuild:
    planner = ctx.planner_for(0)  # no replicas: a single pipeline is a valid plan
    return PolicyBuild(RestartPolicy(planner, ctx.checkpoints, options.min_nodes), options)


def pause_s(costs: Any, options: RestartOptions, action: Action, plan: Any, alive: Collection[str] | None) -> float:
    """The standard prices, plus the rendezvous before every start and restart."""
    seconds = standard_pause_s(costs, options, action, plan, alive)
    if isinstance(action, (Start, RestartFromCheckpoint)):
        seconds += options.rendezvous_s
    return seconds


RESTART = Design(
    name="restart",
    display="Elastic restart",
    summary="elastic restart: every failure restarts all workers from the last checkpoint",
    options=RestartOptions,
    build=build,
    runs_on=(SIMULATOR, REAL_BACKEND),
    pause_s=pause_s,
    default_checkpoints=CheckpointSchedule(every_s=1800.0),
)
