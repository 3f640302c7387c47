"""Replica groups (torchft's fault-tolerant HSDP): a group is the unit of failure.

The job's nodes form G = max_nodes // group_nodes data-parallel replica groups, each one
pipeline of `group_nodes` nodes on the planner's template for that size (the model
sharded inside the group, replicated across groups). Group i always trains on the same
slice of each step's batch: microbatches [first_i, first_i + m_i) of the M = global
batch / microbatch, m_i = M // G plus one for the first M % G groups (torchft: each
replica group has its own data shard).

- A step runs over the groups in the quorum (`live`); its batch is the union of their
  slices, so with groups out the effective batch shrinks, and the gradient is the mean
  over the live samples (torchft: SUM all-reduce, then divide by the participants; the
  learning rate is not rescaled). The plan is a `GroupsPlan` over part of the batch.
- A working node lost: its group leaves the quorum. The survivors first wait for the
  failure detector (`Detect`, priced by the design's detection timeout: the collective in
  flight blocks until it times out), then form a new quorum (`Reinstantiate`); the step
  in flight is redone by the live groups. No live group left: the live state is gone,
  back to the last checkpoint (`RestartFromCheckpoint`) once `min_groups` are complete.
  Fewer than `min_groups` live: the quorum waits (`WaitForNodes`, state kept in memory).
- A group whose lost node is replaced (a spare, or a node that arrives) restarts its
  processes and receives the live state from a peer group while the others train
  (`heal_s`: the busiest node's share of one replica, parameters and optimizer state,
  over its link); it joins at the first iteration end after that (`Admit`: the next
  quorum), without stopping anyone.
- Nodes beyond the groups' slots are spares; a slot that loses its node takes the first
  spare. Ready nodes fill the groups that miss the fewest nodes first, then empty ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from planner.allreduce import exposed_allreduce_s
from planner.errors import InfeasibleError
from planner.plan import ExecutionPlan, PipelinePlan
from planner.planner import Planner
from planner.policies.decisions import (
    Admit,
    CheckpointSchedule,
    ClusterView,
    Continue,
    CopyLayers,
    Decision,
    Detect,
    Event,
    IterationEnd,
    NodesReady,
    PauseEnded,
    Reinstantiate,
    RestartFromCheckpoint,
    Start,
    WaitForNodes,
)
from planner.reconfigure import LayerCopy, Reconfiguration
from planner.templates import PipelineTemplate


@dataclass(frozen=True)
class GroupsPlan(ExecutionPlan):
    """The live groups as pipelines (`groups[i]` is pipeline i's group), each on its own
    slice of the full batch; an iteration also pays the per-step quorum (`quorum_s`)."""

    groups: tuple[int, ...] = ()
    num_groups: int = 0
    quorum_s: float = 0.0

    @property
    def iteration_time_s(self) -> float:
        return self.compute_time_s + self.allreduce_exposed_s + self.quorum_s

    def describe(self) -> dict:
        return {
            "nodes": len(self.nodes),
            "groups": list(self.groups),
            "of_groups": self.num_groups,
            "pipelines": [len(p.nodes) for p in self.pipelines],
            "microbatches": [p.num_microbatches for p in self.pipelines],
            "samples_per_iteration": self.global_batch,
            "predicted_iteration_s": self.iteration_time_s,
        }

    def to_dict(self) -> dict:
        return {
            **super().to_dict(),
            "groups": list(self.groups),
            "num_groups": self.num_groups,
            "quorum_s": self.quorum_s,
        }


@dataclass(frozen=True)
class GroupsMemory:
    """`slots[i]`: group i's nodes in stage order (None: missing); `live`: the groups in the
    quorum (they hold the live state); `healing`: (group, time it holds the live state);
    `started`: a start completed (so the live state, or a checkpoint, exists);
    `launching`: a start or a restart from the checkpoint is under way, `live` being the
    groups it launches, which hold nothing until it ends."""

    slots: tuple[tuple[str | None, ...], ...]
    live: frozenset[int] = frozenset()
    healing: tuple[tuple[int, float], ...] = ()
    started: bool = False
    launching: bool = False

    def complete(self) -> list[int]:
        return [i for i, slot in enumerate(self.slots) if all(n is not None for n in slot)]


def group_microbatches(total: int, groups: int) -> tuple[int, ...]:
    """m_i: `total` microbatches over `groups` groups, the first `total % groups` one more."""
    return tuple(total // groups + (1 if i < total % groups else 0) for i in range(groups))


def fill_slots(
    slots: Sequence[Sequence[str | None]], ready: Sequence[str]
) -> tuple[tuple[tuple[str | None, ...], ...], set[int]]:
    """The slots after dropping nodes not in `ready` and placing the ready nodes that are in
    no slot (in order): groups missing the fewest nodes first, then empty groups, lowest
    index first; the rest stay spares. Returns the slots and the groups that lost a node."""
    alive = set(ready)
    hit = {i for i, slot in enumerate(slots) if any(n is not None and n not in alive for n in slot)}
    out = [[n if n is not None and n in alive else None for n in slot] for slot in slots]
    placed = {n for slot in out for n in slot if n is not None}
    free = [n for n in ready if n not in placed]
    order = sorted(
        range(len(out)),
        key=lambda i: (0 if any(n is not None for n in out[i]) else 1, sum(n is None for n in out[i]), i),
    )
    for i in order:
        for k, node in enumerate(out[i]):
            if node is None and free:
                out[i][k] = free.pop(0)
    return tuple(tuple(slot) for slot in out), hit


class ReplicaGroupsPolicy:
    """torchft-style replica groups on one pipeline template per group."""

    name = "replica_groups"

    def __init__(
        self,
        planner: Planner,
        *,
        group_nodes: int,
        num_groups: int,
        min_groups: int = 1,
        quorum_s: float = 0.0,
        checkpoints: CheckpointSchedule = CheckpointSchedule(),
    ):
        self.planner, self.group_nodes, self.num_groups = planner, group_nodes, num_groups
        self.min_groups, self.quorum_s, self.checkpoints = min_groups, quorum_s, checkpoints
        job = planner.job
        self.microbatches = group_microbatches(job.num_microbatches, max(1, num_groups))
        self.first = tuple(sum(self.microbatches[:i]) for i in range(len(self.microbatches)))
        self._reason: str | None = None
        self.template: PipelineTemplate | None = None
        try:
            self.template = planner.template(group_nodes)
        except InfeasibleError as exc:
            self._reason = f"out of memory: {exc}"
        if self._reason is None and self.template is None:
            self._reason = f"no pipeline of {group_nodes} node(s) holds the model (out of memory)"
        if num_groups < 1:
            self._reason = f"the cluster's nodes cannot form one group of {group_nodes}"
        elif job.num_microbatches < num_groups:
            self._reason = f"{job.num_microbatches} microbatches cannot feed {num_groups} groups"
        self.heal_s = self._heal_s() if self._reason is None else 0.0

    def infeasible_reason(self) -> str | None:
        return self._reason

    # -- plans and copies --------------------------------------------------------------
    def plan(self, groups: Sequence[int], slots: Sequence[Sequence[str | None]]) -> GroupsPlan:
        """The live `groups` (ascending) as pipelines on their slices of the batch."""
        t = self.template
        assert t is not None  # infeasible policies never plan
        groups = sorted(groups)
        counts = [self.microbatches[i] for i in groups]
        times = [t.iteration_time(m) for m in counts]
        exposed = exposed_allreduce_s([t] * len(groups), times, self.planner.layer_allreduce_s(len(groups)))
        whole = len(groups) == self.num_groups
        job = self.planner.job
        return GroupsPlan(
            pipelines=tuple(PipelinePlan(t, tuple(str(n) for n in slots[i]), m) for i, m in zip(groups, counts)),
            global_batch=sum(counts) * job.microbatch_size,
            microbatch_size=job.microbatch_size,
            num_layers=self.planner.profile.num_layers,
            allreduce_exposed_s=exposed,
            first_microbatches=None if whole else tuple(self.first[i] for i in groups),
            full_batch=None if whole else job.global_batch,
            groups=tuple(groups),
            num_groups=self.num_groups,
            quorum_s=self.quorum_s,
        )

    def copies(self, group: int, source: int, slots: Sequence[Sequence[str | None]]) -> tuple[LayerCopy, ...]:
        """Node k of `group` receives its layers' parameters and optimizer state from node k
        of `source` (the same template: the same layers)."""
        t = self.template
        assert t is not None
        layers = self.planner.profile.layers
        out = []
        for k in range(t.num_nodes):
            held = t.node_layers(k)
            out.append(
                LayerCopy(
                    str(slots[group][k]),
                    str(slots[source][k]),
                    held,
                    sum(layers[l].param_bytes for l in held),
                    sum(layers[l].optimizer_bytes for l in held),
                )
            )
        return tuple(out)

    def _heal_s(self) -> float:
        slots = [[f"dst{k}" for k in range(self.group_nodes)], [f"src{k}" for k in range(self.group_nodes)]]
        copies = self.copies(0, 1, slots)
        return Reconfiguration(None, copies).copy_time_s(self.planner.cluster.inter_node_bw_bytes_per_s)

    def _launch(
        self, slots: tuple[tuple[str | None, ...], ...], complete: list[int], *, restart: bool, why: str = ""
    ) -> Decision:
        """Start (or, once a start completed, restart from the last checkpoint) every
        complete group; wait for nodes while fewer than `min_groups` are complete."""
        if len(complete) >= self.min_groups:
            action = RestartFromCheckpoint(why) if restart else Start()
            mem = GroupsMemory(slots, frozenset(complete), (), restart, launching=True)
            return Decision(self.plan(complete, slots), (action,), mem)
        need = self.min_groups * self.group_nodes
        short = f"{len(complete)} complete group(s) of {self.group_nodes} node(s), the quorum needs {self.min_groups}"
        why = f"{why}; {short}" if why else short
        return Decision(None, (WaitForNodes(need, why, rollback=restart),), GroupsMemory(slots, started=restart))

    # -- entry point ---------------------------------------------------------------------
    def decide(self, view: ClusterView, event: Event, current: Decision | None) -> Decision:
        if self._reason is not None:
            return Decision(None, (WaitForNodes(0, self._reason),), None)
        memory = current.memory if current is not None and isinstance(current.memory, GroupsMemory) else None
        if memory is None:
            memory = GroupsMemory(tuple((None,) * self.group_nodes for _ in range(self.num_groups)))
        plan = current.plan if current is not None else None
        if isinstance(event, PauseEnded) and memory.launching:
            memory = replace(memory, launching=False, started=True)  # the launched groups hold the state now
        slots, hit = fill_slots(memory.slots, view.ready)
        complete = [i for i in range(self.num_groups) if all(n is not None for n in slots[i])]
        if memory.launching:
            lost = sorted(memory.live & hit)
            if not lost:  # the launch goes on; groups completed meanwhile heal once it is over
                return Decision(plan, (Continue(),), replace(memory, slots=slots))
            # no collective runs while processes start, so nothing waits for a detector: the
            # launch begins again on the groups complete now, and is charged again in full
            why = f"lost a node of group(s) {lost} while launching"
            return self._launch(slots, complete, restart=memory.started, why=why)
        if not memory.started:
            return self._launch(slots, complete, restart=False)
        lost_live = memory.live & hit
        live = memory.live - hit
        if not live:  # no group holds the live state: back to the last checkpoint
            why = f"lost group(s) {sorted(lost_live)}: no group holds the live state" if lost_live else "quorum reached"
            return self._launch(slots, complete, restart=True, why=why)
        need = self.min_groups * self.group_nodes
        # some groups hold the live state; complete groups outside the quorum heal from them
        healing = dict((g, t) for g, t in memory.healing if g in complete and g not in live and g not in hit)
        for g in complete:
            if g not in live and g not in healing:
                healing[g] = view.time_s + self.heal_s
        if lost_live:
            why = f"lost a node of group(s) {sorted(lost_live)}: {len(live)} group(s) go on"
            mem = GroupsMemory(slots, live, tuple(sorted(healing.items())), True)
            if len(live) >= self.min_groups:
                detected = (Detect(why), Reinstantiate(why))
                return Decision(self.plan(sorted(live), slots), detected, mem, check_at_iteration_end=bool(healing))
            return Decision(None, (Detect(why), WaitForNodes(need, f"{why}; the quorum needs {self.min_groups}")), mem)
        if plan is None:  # the quorum is waiting for groups: they heal during the wait
            joining = sorted(set(complete) - live)
            if len(live) + len(joining) < self.min_groups:
                mem = GroupsMemory(slots, live, tuple(sorted(healing.items())), True)
                why = f"{len(live) + len(joining)} group(s), the quorum needs {self.min_groups}"
                return Decision(None, (WaitForNodes(need, why),), mem)
            source = min(live)
            copies = tuple(c for g in joining for c in self.copies(g, source, slots))
            everyone = sorted(live | set(joining))
            actions = (Reinstantiate(f"quorum of {len(everyone)} group(s)"), CopyLayers(copies))
            return Decision(self.plan(everyone, slots), actions, GroupsMemory(slots, frozenset(everyone), (), True))
        admit = []
        if isinstance(event, (IterationEnd, NodesReady)) and view.job_state == "running":
            admit = sorted(g for g, t in healing.items() if t <= view.time_s)
        if admit:
            for g in admit:
                del healing[g]
            joined = live | set(admit)
            nodes = tuple(str(n) for g in admit for n in slots[g])
            mem = GroupsMemory(slots, frozenset(joined), tuple(sorted(healing.items())), True)
            return Decision(
                self.plan(sorted(joined), slots), (Admit(nodes),), mem, check_at_iteration_end=bool(healing)
            )
        mem = GroupsMemory(slots, live, tuple(sorted(healing.items())), True)
        return Decision(plan, (Continue(),), mem, check_at_iteration_end=bool(healing))
