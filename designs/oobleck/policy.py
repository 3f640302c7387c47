"""Oobleck's policy: the planner's instantiation and reconfiguration (DESIGN 3.5, 3.6).

- Start: instantiate over every usable node (at least f + 1 pipelines when there are
  (f + 1) n0 nodes, fewer otherwise) and launch.
- A working node lost: `reconfigure.on_removal` on the plan whose layers the nodes really
  hold (`OobleckMemory.base`: the last plan whose reconfiguration completed, so a failure in
  the middle of a reconfiguration is replanned from what survived, not from copies that
  never finished). The in-flight iteration is lost, the layer copies are the pause. By
  default the paper's rules 1-3, which keep a shortened pipeline on the template of its
  new size however slow; `removal_tolerance` t lets the one-donor refills compete (the
  fewest bytes within (1 - t) of the fastest option; 0: the fastest).
- Survivors hold no replica of some layer: restart from the last checkpoint on a fresh
  instantiation. Fewer than n0 nodes: wait; when enough come back, reinstantiate with copies
  from the survivors if they still hold every layer, else restart from the checkpoint.
- Spare nodes (usable but outside the plan: new arrivals, or ones a gain test declined) are
  offered to `reconfigure.on_addition` at iteration boundaries and at the end of every pause;
  they join when the larger plan pays for its copies within `join_horizon_s`. A cheap
  bound (`join_bound`) declines hopeless joins first; above `exact_join_max_nodes` the
  larger plan is the running one grown (`oobleck_join`), not a fresh instantiation.
- Removing a spare or a starting node changes nothing.
- Checkpoints are periodic (default every hour of training, blocking): Oobleck only needs
  them when more than f failures wipe out a layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import InfeasibleError, PlannerError
from planner.plan import ExecutionPlan
from planner.planner import Planner
from planner.policies.decisions import (
    DEFAULT_CHECKPOINT_EVERY_S,
    CheckpointSchedule,
    ClusterView,
    Continue,
    CopyLayers,
    Decision,
    Event,
    NodesRemoved,
    PauseEnded,
    Reinstantiate,
    RestartFromCheckpoint,
    Start,
    WaitForNodes,
)
from planner.reconfigure import DEFAULT_JOIN_HORIZON_S, finish, lost_layers, on_addition, on_removal

from .join import EXACT_JOIN_MAX_NODES, grow
from .join_bound import JoinBound


@dataclass(frozen=True)
class OobleckMemory:
    """`base`: the plan whose layers the nodes actually hold (None after a restart until it
    completes: state then comes from the checkpoint); `started`: the job has launched once."""

    base: ExecutionPlan | None = None
    started: bool = False


class OobleckPolicy:
    """Oobleck on a `Planner` (use one planner per model and cluster: it caches)."""

    name = "oobleck"

    def __init__(
        self,
        planner: Planner,
        *,
        checkpoints: CheckpointSchedule = CheckpointSchedule(every_s=DEFAULT_CHECKPOINT_EVERY_S),
        join_horizon_s: float = DEFAULT_JOIN_HORIZON_S,
        reconfigure_pause_s: float = 0.0,
        exact_join_max_nodes: int = EXACT_JOIN_MAX_NODES,
        removal_tolerance: float | None = None,
    ):
        self.planner = planner
        self.checkpoints = checkpoints
        self.join_horizon_s = join_horizon_s
        self.reconfigure_pause_s = reconfigure_pause_s
        self.exact_join_max_nodes = exact_join_max_nodes  # above: grow the plan (oobleck_join), no instantiation
        # None: the paper's rules 1-3 on a removal; a fraction: `on_removal`'s throughput tolerance
        self.removal_tolerance = removal_tolerance
        self._declined: tuple = (None, 0, ())  # (plan, spare count, notes) of the last join declined
        self._bound = JoinBound(planner)  # most joins are declined on it, without an instantiation

    def infeasible_reason(self) -> str | None:
        try:
            _ = self.planner.min_nodes  # computing it raises when no template fits
        except InfeasibleError as exc:
            return f"out of memory: {exc}"
        return None

    @property
    def min_nodes(self) -> int:
        return self.planner.min_nodes

    # -- entry point -------------------------------------------------------------------
    def decide(self, view: ClusterView, event: Event, current: Decision | None) -> Decision:
        reason = self.infeasible_reason()
        if reason is not None:
            return Decision(None, (WaitForNodes(0, reason),), OobleckMemory())
        plan = current.plan if current is not None else None
        memory = current.memory if current is not None and current.memory is not None else OobleckMemory()
        if isinstance(event, NodesRemoved):
            return self._on_removal(view, event, plan, memory)
        if isinstance(event, PauseEnded) and plan is not None:
            # the pause's layer copies (or checkpoint load) are done: the plan is real now
            memory = OobleckMemory(base=plan, started=True)
        if plan is None:
            return self._resume(view, memory)
        return self._offer_spares(view, plan, memory)

    # -- removals ----------------------------------------------------------------------
    def _nodes_of(self, plan: ExecutionPlan | None) -> frozenset[str]:
        """A plan's nodes as a set (the plan keeps it: asked at every event, and at 12,500
        nodes a per-event rebuild costs more than the decision)."""
        return frozenset() if plan is None else plan.node_set

    def _on_removal(self, view: ClusterView, event: NodesRemoved, plan, memory: OobleckMemory) -> Decision:
        in_plan, in_base = self._nodes_of(plan), self._nodes_of(memory.base)
        if not any(n in in_plan or n in in_base for n in event.nodes):
            return Decision(plan, (Continue(),), memory)  # a spare or a starting node left
        if memory.base is None:
            # nobody holds live state (a start or restart was in progress): launch again
            return self._launch(view, memory, restart=memory.started)
        base = memory.base
        n0 = self.min_nodes
        survivors = in_base.intersection(view.ready)
        gone = sorted(in_base - survivors)  # order is immaterial to on_removal: it is a set there
        lost = lost_layers(base, survivors)
        if lost:
            return self._launch(view, memory, restart=True, note=f"no surviving replica of layers {list(lost)}")
        if len(survivors) < n0:
            # the survivors keep their layers while the job waits for nodes
            why = f"{len(survivors)} nodes left, one pipeline needs n0 = {n0}"
            return Decision(None, (WaitForNodes(n0, why),), memory)
        try:
            result = on_removal(self.planner, base, gone, throughput_tolerance=self.removal_tolerance)
        except PlannerError:
            return self._resume(view, memory)
        if result.plan is None:
            return Decision(None, (WaitForNodes(n0, "; ".join(result.notes)),), memory)
        actions = (Reinstantiate(f"lost {gone}"), CopyLayers(result.copies))
        return Decision(result.plan, actions, memory, notes=result.notes)

    # -- arrivals, pause ends ------------------------------------------------------------
    def _offer_spares(self, view: ClusterView, plan: ExecutionPlan, memory: OobleckMemory) -> Decision:
        in_plan = self._nodes_of(plan)
        # the set test runs in C; the ordered list is built only when there are spares
        spares = [] if in_plan.issuperset(view.ready) else [n for n in view.ready if n not in in_plan]
        if not spares:
            return Decision(plan, (Continue(),), memory)
        if self._declined[0] is plan and self._declined[1] == len(spares):
            # spares hold no layers, so the gain test depends on the plan and their count only
            return Decision(plan, (Continue(),), memory, notes=self._declined[2])
        total = len(in_plan) + len(spares)
        want = max(1, min(self.planner.job.fault_tolerance + 1, total // self.min_nodes))
        most = self._bound.declines(plan.samples_per_s, total, want, self.join_horizon_s, self.reconfigure_pause_s)
        if most is not None:
            notes = (
                f"kept the current plan: at most {most:.3g} samples/s on {total} nodes, less its copies, does not "
                f"beat {plan.samples_per_s:.3g} samples/s over {self.join_horizon_s:.0f} s",
            )
            self._declined = (plan, len(spares), notes)
            return Decision(plan, (Continue(),), memory, notes=notes)
        try:
            if total > self.exact_join_max_nodes:
                result = grow(
                    self.planner, plan, spares, horizon_s=self.join_horizon_s, pause_s=self.reconfigure_pause_s
                )
            else:
                result = on_addition(
                    self.planner, plan, spares, horizon_s=self.join_horizon_s, pause_s=self.reconfigure_pause_s
                )
        except PlannerError:
            return Decision(plan, (Continue(),), memory)
        if result.plan is None or result.plan is plan:
            self._declined = (plan, len(spares), result.notes)
            return Decision(plan, (Continue(),), memory, notes=result.notes)
        actions = (Reinstantiate(f"{len(spares)} spare node(s) join"), CopyLayers(result.copies))
        return Decision(result.plan, actions, memory, notes=result.notes)

    def _resume(self, view: ClusterView, memory: OobleckMemory) -> Decision:
        """Start, or resume after waiting: copies from the survivors when they still hold
        every layer, else a restart from the checkpoint."""
        if not memory.started or memory.base is None:
            return self._launch(view, memory, restart=memory.started)
        base = memory.base
        if lost_layers(base, set(view.ready)):
            return self._launch(view, memory, restart=True, note="the survivors no longer hold every layer")
        new = self._instantiate(view.ready)
        if new is None:
            return Decision(None, (WaitForNodes(self.min_nodes, "waiting for nodes"),), memory)
        try:  # each pipeline's nodes in the order that copies least from what they hold
            result = finish(self.planner, base, new)
        except PlannerError:
            return self._launch(view, memory, restart=True, note="a layer's holders are not in the new plan")
        return Decision(
            result.plan, (Reinstantiate(f"resume over {len(new.nodes)} nodes"), CopyLayers(result.copies)), memory
        )

    def _launch(self, view: ClusterView, memory: OobleckMemory, *, restart: bool, note: str = "") -> Decision:
        """A fresh instantiation over every usable node, loaded from scratch (start) or
        from the last checkpoint (restart); waits when there are too few nodes."""
        after = OobleckMemory(None, memory.started)
        new = self._instantiate(view.ready)
        if new is None:
            needed = self.min_nodes
            why = note or f"{len(view.ready)} usable nodes, one pipeline needs n0 = {needed}"
            return Decision(None, (WaitForNodes(needed, why, rollback=restart),), after)
        action = RestartFromCheckpoint(note) if restart else Start()
        notes = [note] if note else []
        f = self.planner.job.fault_tolerance
        if new.num_pipelines < f + 1:
            notes.append(
                f"{len(new.nodes)} nodes hold only {new.num_pipelines} pipeline(s): the job tolerates "
                f"{new.num_pipelines - 1} simultaneous failure(s), not f = {f}"
            )
        return Decision(new, (action,), after, notes=tuple(notes))

    def _instantiate(self, nodes) -> ExecutionPlan | None:
        nodes = list(nodes)
        n0 = self.min_nodes
        if len(nodes) < n0:
            return None
        want = max(1, min(self.planner.job.fault_tolerance + 1, len(nodes) // n0))
        try:
            return self.planner.instantiate(nodes, min_pipelines=want)
        except InfeasibleError:
            try:
                return self.planner.instantiate_best_effort(nodes, min_pipelines=want)
            except InfeasibleError:
                return None
