"""Varuna's policy: checkpoint, restart, morph to the best configuration (DESIGN 3.6).

- The plan is the fastest configuration `VarunaSearch` finds for the usable GPUs, placed on
  the first nodes in arrival order; GPUs beyond D x W stay idle.
- A working node lost: if every stage still has a live replica, Varuna checkpoints first
  ("when it can") and restarts on the new configuration without losing committed work;
  otherwise it restarts from the last checkpoint and the work since then is lost. Either
  way the iteration in flight is lost. Below the smallest configuration it waits. A loss
  without notice (`NodesRemoved.notice`: a hardware fault, not a preemption) stops every
  rank with the failed collective, so nothing is saved: back to the last checkpoint, as the
  large published jobs (Llama 3, Kokolis et al.) recover.
- New nodes: when the best configuration for the larger set is predicted faster, Varuna
  checkpoints and restarts on it (job morphing); otherwise they idle.
- A save before a restart is skipped when the last complete checkpoint already holds
  every committed iteration (`ClusterView.checkpoint_iterations == iterations_done`):
  there is nothing new to write. Without this, a cluster whose removals come faster than
  a restart plus one iteration (Varuna on a 1,024-node spot trace) re-wrote the same
  state at every removal: a checkpoint each time, never an iteration.
- Periodic blocking checkpoints every `checkpoints.every_iterations` iterations (default
  10, the Oobleck artifact's).
- Losing an idle or starting node changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from planner.policies.decisions import (
    Checkpoint,
    CheckpointSchedule,
    ClusterView,
    Continue,
    Decision,
    Event,
    NodesRemoved,
    PauseEnded,
    Restart,
    RestartFromCheckpoint,
    Start,
    WaitForNodes,
)
from planner.policies.grid import GridPlan, place

from .search import VarunaSearch

DEFAULT_CHECKPOINT_EVERY = 10


@dataclass(frozen=True)
class VarunaMemory:
    """`base`: the configuration whose workers hold the model now; `started`: launched once."""

    base: GridPlan | None = None
    started: bool = False


def _save(view: ClusterView, why: str) -> tuple[Checkpoint, ...]:
    """The checkpoint before a restart, unless the last one already holds every committed
    iteration (nothing to write: the restart resumes from it as it is)."""
    return (Checkpoint(why),) if view.iterations_done > view.checkpoint_iterations else ()


class VarunaPolicy:
    """Varuna on a `VarunaSearch` for one model and GPU type."""

    name = "varuna"

    def __init__(
        self,
        search: VarunaSearch,
        gpus_per_node: int = 1,
        *,
        checkpoints: CheckpointSchedule = CheckpointSchedule(every_iterations=DEFAULT_CHECKPOINT_EVERY),
        max_nodes: int = 1024,
    ):
        self.search = search
        self.gpus_per_node = gpus_per_node
        self.checkpoints = checkpoints
        min_gpus = search.min_gpus(max_nodes * gpus_per_node)
        self.min_nodes = math.ceil(min_gpus / gpus_per_node) if min_gpus is not None else None

    def infeasible_reason(self) -> str | None:
        if self.min_nodes is None:
            return "out of memory: no Varuna configuration (depth dividing the layers, width, microbatch) fits"
        return None

    def plan_for(self, ready: Sequence[str]) -> GridPlan | None:
        config = self.search.best(len(ready) * self.gpus_per_node)
        return place(config, ready, self.gpus_per_node) if config is not None else None

    # -- entry point -------------------------------------------------------------------
    def decide(self, view: ClusterView, event: Event, current: Decision | None) -> Decision:
        reason = self.infeasible_reason()
        if reason is not None:
            return Decision(None, (WaitForNodes(0, reason),), VarunaMemory())
        plan: GridPlan | None = current.plan if current is not None else None
        memory = current.memory if current is not None and current.memory is not None else VarunaMemory()
        if isinstance(event, NodesRemoved):
            return self._on_removal(view, event, plan, memory)
        if isinstance(event, PauseEnded) and plan is not None:
            memory = VarunaMemory(plan, True)
        if plan is None:
            return self._launch(view, memory, restart=memory.started)
        better = self.plan_for(view.ready)
        if better is not None and better.iteration_time_s < plan.iteration_time_s * (1 - 1e-9):
            why = f"morph to {better.config.depth} x {better.config.width} on {len(better.nodes)} nodes"
            return Decision(better, (*_save(view, why), Restart(why)), memory)
        return Decision(plan, (Continue(),), memory)

    def _on_removal(self, view: ClusterView, event: NodesRemoved, plan, memory: VarunaMemory) -> Decision:
        involved = set(plan.nodes if plan is not None else ()) | set(memory.base.nodes if memory.base else ())
        if not involved & set(event.nodes):
            return Decision(plan, (Continue(),), memory)
        if plan is None and view.job_state == "waiting":
            return Decision(None, (Continue(),), memory)  # already stopped
        base = memory.base
        if base is None or view.job_state == "restarting":
            return self._launch(view, memory, restart=memory.started)
        ready = set(view.ready)
        can_save = event.notice and not base.stages_without_holder(ready)
        new = self.plan_for(view.ready)
        lost = sorted(set(event.nodes) & involved)
        if can_save:
            why = f"lost {lost}: checkpoint from the surviving replicas, then restart"
            if new is None:
                return Decision(
                    None, (*_save(view, why), WaitForNodes(self.min_nodes or 0, why)), VarunaMemory(base, True)
                )
            return Decision(new, (*_save(view, why), Restart(why)), VarunaMemory(base, True))
        why = (
            f"lost {lost}: some stage has no live replica, back to the last checkpoint"
            if event.notice
            else f"lost {lost} without notice: every rank stopped, back to the last checkpoint"
        )
        return self._launch(view, VarunaMemory(None, True), restart=True, note=why)

    def _launch(self, view: ClusterView, memory: VarunaMemory, *, restart: bool, note: str = "") -> Decision:
        new = self.plan_for(view.ready)
        after = VarunaMemory(None, memory.started)
        if new is None:
            why = note or f"{len(view.ready)} usable nodes, Varuna needs {self.min_nodes}"
            return Decision(None, (WaitForNodes(self.min_nodes or 0, why, rollback=restart),), after)
        return Decision(new, (RestartFromCheckpoint(note) if restart else Start(),), after)
