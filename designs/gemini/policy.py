"""In-memory checkpoints (GEMINI, SOSP'23): placement of the copies, their traffic, recovery.

Every `every` iterations each node's state (its layers' parameters and optimizer state)
is copied to the CPU memory of `replicas` (m) peers, so m + 1 nodes hold it: the node
itself (its own CPU copy) and the peers. Where the copies go (`placement`):

- group: the plan's nodes, in order, form groups of m + 1; every node of a group holds the
  state of every other. When m + 1 does not divide the node count, the last group takes
  the remainder (m + 2 .. 2m + 1 nodes) and places ring-wise inside itself (GEMINI's mixed
  placement); with m + 1 nodes or fewer, every node holds every state.
- ring: node i's state goes to nodes i + 1 .. i + m (mod n).

A node's state is lost when all its holders are gone; group placement loses one only when
a whole group is gone, which is why GEMINI prefers it.

The copies travel over the network while training goes on (`SnapshotTraffic`): each node
sends its state to each of its e = min(m, n - 1) peers and receives as much (full duplex),
V = e x S bytes with S the busiest node's state. Training leaves a `share` of each
iteration's network time to the copies: b = share x bandwidth x T bytes per iteration of
T seconds. If V <= every x b the copy is complete ceil(V / b) iterations after the one it
captures (taken to a local buffer first, so the state may change meanwhile) and costs no
training time; otherwise it uses the whole interval and the rest goes at full bandwidth
while training waits, (V - every x b) / bandwidth seconds per copy, spread evenly over the
interval's iterations (`iteration_s`).

`GeminiPolicy` trains the planner's plan on every usable node. When a working node is
lost it restarts every worker: from the last complete copy in peers' memory
(`RestartFromSnapshot`) when every state of it still has a live holder and it is no older
than the last persistent checkpoint, else from that checkpoint (`RestartFromCheckpoint`).
It waits (without rolling back: the copies survive in memory) when too few nodes are left.
Nodes that arrive while it trains wait for the next restart. Pure: no torch, no simpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from planner.errors import InfeasibleError, PlannerError
from planner.planner import Planner
from planner.policies.decisions import (
    CheckpointSchedule,
    ClusterView,
    Continue,
    Decision,
    Event,
    NodesRemoved,
    PauseEnded,
    RestartFromCheckpoint,
    RestartFromSnapshot,
    Start,
    WaitForNodes,
)
from planner.policies.holdings import holdings

GROUP, RING = "group", "ring"
PLACEMENTS = (GROUP, RING)


def placement(nodes: Sequence[str], replicas: int, kind: str = GROUP) -> dict[str, frozenset[str]]:
    """Each node's holders (itself and the peers keeping a copy of its state)."""
    if kind not in PLACEMENTS:
        raise PlannerError(f"unknown placement {kind!r}; known: {', '.join(PLACEMENTS)}")
    if replicas < 0:
        raise PlannerError(f"replicas must be >= 0, got {replicas}")
    n = len(nodes)
    if kind == RING:
        return _ring(list(nodes), replicas)
    size = replicas + 1
    if n <= size:
        return {node: frozenset(nodes) for node in nodes}
    groups = n // size
    out: dict[str, frozenset[str]] = {}
    plain = groups if n % size == 0 else groups - 1
    for g in range(plain):
        members = frozenset(nodes[g * size : (g + 1) * size])
        out.update({node: members for node in members})
    out.update(_ring(list(nodes[plain * size :]), replicas))  # the last, larger group: ring inside it
    return out


def _ring(nodes: list[str], replicas: int) -> dict[str, frozenset[str]]:
    n = len(nodes)
    k = min(replicas, n - 1)
    return {node: frozenset(nodes[(i + j) % n] for j in range(k + 1)) for i, node in enumerate(nodes)}


@dataclass(frozen=True)
class SnapshotCost:
    """One in-memory copy of a plan: complete `lag_iterations` after the iteration it
    captures; `stall_s` of training time per copy beyond the overlapped share."""

    lag_iterations: int
    stall_s: float
    node_bytes: int  # S: the busiest node's state
    sent_bytes: int  # V = e x S, per node


@dataclass(frozen=True)
class SnapshotTraffic:
    """The copies' network model (module docstring); `layer_bytes`: each layer's
    parameters and optimizer state."""

    every: int
    replicas: int
    share: float
    bandwidth_bytes_per_s: float
    layer_bytes: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.every < 1 or self.replicas < 1:
            raise PlannerError(f"every and replicas must be >= 1, got {self.every}, {self.replicas}")
        if not 0 < self.share <= 1 or not self.bandwidth_bytes_per_s > 0:
            raise PlannerError(
                f"share must be in (0, 1] and bandwidth > 0, got {self.share}, {self.bandwidth_bytes_per_s}"
            )

    def node_bytes(self, plan: Any) -> int:
        held = holdings(plan)
        return max((sum(sum(self.layer_bytes[a:b]) for a, b in ranges) for ranges in held), default=0)

    def cost(self, plan: Any, plan_s: float) -> SnapshotCost:
        """The copy of `plan`'s state when an iteration of it takes `plan_s` alone."""
        s = self.node_bytes(plan)
        v = min(self.replicas, len(plan.nodes) - 1) * s
        if v <= 0:
            return SnapshotCost(0, 0.0, s, 0)
        per_iteration = self.share * self.bandwidth_bytes_per_s * plan_s
        if v <= self.every * per_iteration:
            return SnapshotCost(max(1, math.ceil(v / per_iteration)), 0.0, s, v)
        return SnapshotCost(self.every, (v - self.every * per_iteration) / self.bandwidth_bytes_per_s, s, v)


@dataclass(frozen=True)
class GeminiMemory:
    """What the policy keeps between calls: whether the job's first start completed, the iteration the
    plan now running started from, and the last complete in-memory copy (its iteration and
    each state's live holders, by the node that had it)."""

    started: bool = False
    since: int = 0
    snapshot: int | None = None
    holders: tuple[tuple[str, frozenset[str]], ...] = ()

    def without(self, gone: Sequence[str]) -> GeminiMemory:
        lost = set(gone)
        if not self.holders or not lost:
            return self
        return replace(self, holders=tuple((n, h - lost) for n, h in self.holders))

    def lost_states(self) -> tuple[str, ...]:
        """The nodes whose state in the copy has no live holder left."""
        return tuple(n for n, h in self.holders if not h)


class GeminiPolicy:
    """Restart from peers' memory on every loss of a working node (module docstring)."""

    name = "gemini"
    restores_snapshots = True  # the engines roll back to our `RestartFromSnapshot` iterations

    def __init__(
        self,
        planner: Planner,
        checkpoints: CheckpointSchedule,
        traffic: SnapshotTraffic,
        placement_kind: str = GROUP,
    ):
        if placement_kind not in PLACEMENTS:
            raise PlannerError(f"unknown placement {placement_kind!r}; known: {', '.join(PLACEMENTS)}")
        self.planner, self.checkpoints, self.traffic, self.placement = planner, checkpoints, traffic, placement_kind
        self._costs: dict[int, tuple[Any, SnapshotCost]] = {}

    def infeasible_reason(self) -> str | None:
        try:
            _ = self.planner.min_nodes
        except InfeasibleError as exc:
            return f"out of memory: {exc}"
        return None

    def snapshot_cost(self, plan: Any) -> SnapshotCost:
        hit = self._costs.get(id(plan))
        if hit is None or hit[0] is not plan:
            if len(self._costs) > 8:
                self._costs.clear()
            hit = self._costs[id(plan)] = (plan, self.traffic.cost(plan, plan.iteration_time_s))
        return hit[1]

    def iteration_s(self, plan: Any, plan_s: float) -> float:
        """An iteration of `plan` (`plan_s` alone) with its copies' stall spread over the
        interval's iterations."""
        cost = self.snapshot_cost(plan) if plan_s == plan.iteration_time_s else self.traffic.cost(plan, plan_s)
        return plan_s + cost.stall_s / self.traffic.every

    def latest_copy(self, plan: Any, since: int, done: int) -> int | None:
        """The newest copy of `plan`'s run complete after `done` iterations: a multiple of
        `every` after `since` (where the plan started) at least its lag before `done`."""
        c = (done - self.snapshot_cost(plan).lag_iterations) // self.traffic.every * self.traffic.every
        return c if c > since else None

    def caught_up(self, memory: GeminiMemory, plan: Any, done: int) -> GeminiMemory:
        """`memory` with the copies the running plan completed since the last call."""
        if plan is None or not memory.started:
            return memory
        c = self.latest_copy(plan, memory.since, done)
        if c is None or (memory.snapshot is not None and c <= memory.snapshot):
            return memory
        where = placement(plan.nodes, self.traffic.replicas, self.placement)
        return replace(memory, snapshot=c, holders=tuple(where.items()))

    def decide(self, view: ClusterView, event: Event, current: Decision | None) -> Decision:
        reason = self.infeasible_reason()
        if reason is not None:
            return Decision(None, (WaitForNodes(0, reason),), GeminiMemory())
        plan = current.plan if current is not None else None
        memory = current.memory if current is not None and current.memory is not None else GeminiMemory()
        if isinstance(event, PauseEnded) and plan is not None and not memory.started:
            memory = replace(memory, started=True)  # the first start is over: from now on there is state to restore
        if isinstance(event, NodesRemoved):
            memory = self.caught_up(memory, plan, view.iterations_done).without(event.nodes)
            hit = sorted(set(event.nodes) & set(plan.nodes)) if plan is not None else []
            if hit:
                return self._launch(view, memory, f"lost {hit}")
            return Decision(plan, (Continue(),), memory)
        if plan is None:
            return self._launch(view, memory, "nodes arrived")
        return Decision(plan, (Continue(),), memory)  # joins wait for the next restart

    def _launch(self, view: ClusterView, memory: GeminiMemory, why: str) -> Decision:
        need = self.planner.min_nodes
        if len(view.ready) < need:
            note = f"{len(view.ready)} usable nodes, the plan needs {need}"
            return Decision(None, (WaitForNodes(need, note),), memory)
        plan = self.planner.instantiate(view.ready)
        if not memory.started:  # (again, when a loss interrupts the first start: nothing to restore yet)
            return Decision(plan, (Start(),), GeminiMemory(False, view.iterations_done))
        lost = memory.lost_states()
        if memory.snapshot is not None and not lost and memory.snapshot >= view.checkpoint_iterations:
            note = f"{why}: from peers' memory at iteration {memory.snapshot}"
            return Decision(plan, (RestartFromSnapshot(memory.snapshot, note),), replace(memory, since=memory.snapshot))
        if memory.snapshot is None:
            reason = "no copy in memory yet"
        elif lost:
            reason = f"every holder of {sorted(lost)}'s state is gone"  # sorted: the same run files in every process
        else:
            reason = f"the checkpoint at {view.checkpoint_iterations} is newer than the copy at {memory.snapshot}"
        note = f"{why}: from the checkpoint ({reason})"
        return Decision(plan, (RestartFromCheckpoint(note),), GeminiMemory(True, view.checkpoint_iterations))
