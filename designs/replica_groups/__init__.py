"""Replica groups: torchft's fault-tolerant HSDP, where a data-parallel group fails alone.

Sources. torchft (github.com/pytorch/torchft, PyTorch, 2024-2025): its README and docs
(Lighthouse and per-group Manager, per-step quorum, ProcessGroup reconfiguration, live
recovery from a healthy peer), and `torchft/manager.py`: `Manager.allreduce` sums the
gradients of the participating replica groups and divides by their number (world-size
mode DYNAMIC: the world grows and shrinks with the live groups); a quorum needs
`min_replica_size` groups; a group that heals receives the state dict from a peer
(`recover_src`) and, with the default async quorum, takes part from the next step on; the
Manager's operation and quorum timeouts default to 60 s. The PyTorch blog's "Fault
Tolerant Llama" (Meta and Crusoe, 2025) trains HSDP this way, groups dropping out and coming
back while the others go on. The rules are in `designs.replica_groups.policy`.

What a run does:
- The global batch is the batch at full strength (all G groups live); each group owns a
  fixed slice. G is fixed when the job is launched: the nodes it has then (the trace's
  first instant; `--nodes` on the real backend) // group_nodes, or `groups` when set, as a
  torchft job is launched with its number of replica groups; nodes that come later fill
  groups still missing nodes, then wait as spares. Not the trace's peak by default: no
  decision may depend on a later event (a node added at the run's last instant would
  otherwise change every iteration); `groups` says how many the allocation was made for,
  and the groups missing nodes then train nothing until their nodes arrive. A step trains on the live groups' slices only: the
  effective batch shrinks while groups are out, the gradient is the mean over the live
  samples (the SUM all-reduce divided by the participants, each group's own loss being a
  mean over its samples), and the learning rate is unchanged, as in torchft.
- A working node lost: the others wait `detection_timeout_s` (a collective in flight
  blocks until it times out), then re-form the quorum (the planner calibration's
  reconfiguration overhead) and redo the interrupted step without that group.
- The group comes back when its lost node is replaced (a spare, or an arriving node):
  its processes restart and receive the live state from a peer group while the others
  train, then it joins at the next quorum (the first iteration end after the copy), where
  every group waits while the process groups are rebuilt for the larger quorum (the cost
  term `quorum_rejoin_s`; by default the leave's `reconfigure_overhead_s`: torchft's
  Manager reconfigures its process group on every quorum change, growing or shrinking).
- Every step pays `quorum_s` (the Lighthouse round trip).

Chosen where the sources leave it open:
- A group is one pipeline on the planner's template for `group_nodes` nodes (default: the
  fewest nodes that hold one replica); torchft shards inside a group with FSDP/TP, which
  the testbed's planner models as a pipeline of the group's nodes.
- `detection_timeout_s` defaults to 60 s, torchft's Manager timeout; a crashed process
  whose sockets close is noticed sooner, so set it lower for crash-only traces.
- `quorum_s` defaults to 10 ms: torchft publishes no figure; one RPC to the Lighthouse
  per step, not hidden behind the forward pass.
- The relaunch of the healing group's processes is taken to fit inside the replacement
  node's start-up delay; the copy itself is the busiest node's share of one replica
  (parameters + optimizer state) over its link, and costs the senders nothing.
- With fewer than `min_groups` live the quorum waits with the state in memory; groups
  completed meanwhile copy it during the wait (a pause: nobody trains then). With no live
  group the state is gone: the job restarts from the last checkpoint (torchft relies on
  periodic checkpoints for that; default every hour, as Oobleck's).

On the real backend (gloo, CPU) the same policy runs: the survivors are reconfigured live
(the per-step commit protocol plays the quorum), the step in flight is redone over the
live groups' samples, and a healed group joins at a step boundary (a planned stop, no
work lost) with its layers copied from a peer group.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any

from planner.errors import InfeasibleError
from planner.policies import Action, Admit, CheckpointSchedule, Detect
from planner.policies.decisions import DEFAULT_CHECKPOINT_EVERY_S

from ..base import REAL_BACKEND, SIMULATOR, ActionCosts, BuildContext, Design, PolicyBuild, standard_pause_s
from ..options import PLANNER, REAL, DesignError, option
from .policy import ReplicaGroupsPolicy

TORCHFT_TIMEOUT_S = 60.0  # torchft Manager(timeout=..., quorum_timeout=...) defaults
DEFAULT_QUORUM_S = 0.01


@dataclass(frozen=True)
class ReplicaGroupsOptions:
    group_nodes: int = option(
        0, doc="nodes per replica group (0: the fewest that hold one replica)", where=(PLANNER, REAL), minimum=0
    )
    detection_timeout_s: float = option(
        TORCHFT_TIMEOUT_S, unit="s", doc="a lost node's group leaves the quorum after this long", where=(PLANNER,),
        minimum=0,
    )  # fmt: skip
    quorum_s: float = option(DEFAULT_QUORUM_S, unit="s", doc="every step's quorum", where=(PLANNER,), minimum=0)
    min_groups: int = option(1, doc="the quorum waits for this many live groups", where=(PLANNER, REAL), minimum=1)
    groups: int = option(
        0,
        doc="replica groups the job is launched for (0: as many as the nodes at launch form); "
        "groups whose nodes are not there yet train nothing until they are",
        where=(PLANNER, REAL),
        minimum=0,
    )


def build(ctx: BuildContext, options: ReplicaGroupsOptions) -> PolicyBuild:
    planner = ctx.planner_for(0)  # groups are the replicas: any pipeline of a group is a valid plan
    used = options
    if options.group_nodes == 0:
        try:
            used = replace(options, group_nodes=planner.min_nodes)
        except InfeasibleError:
            used = replace(options, group_nodes=1)  # the policy reports out of memory
    groups = used.groups or ctx.launch_nodes // used.group_nodes
    if used.groups and used.groups * used.group_nodes > ctx.max_nodes:
        # a group whose nodes never all exist at once never trains: refused before any work
        raise DesignError(
            f"replica_groups: groups {used.groups} of {used.group_nodes} node(s) need {used.groups * used.group_nodes:,} "
            f"nodes, and the job has at most {ctx.max_nodes:,} at once: at most {ctx.max_nodes // used.group_nodes:,} "
            "groups can ever train"
        )
    if groups and used.min_groups > groups:
        raise DesignError(
            f"replica_groups: min_groups {used.min_groups} is more than the {groups} group(s) of "
            f"{used.group_nodes} node(s) "
            + ("set by groups" if used.groups else f"that the {ctx.launch_nodes} nodes at launch form")
        )
    policy = ReplicaGroupsPolicy(
        planner,
        group_nodes=used.group_nodes,
        num_groups=groups,
        min_groups=used.min_groups,
        quorum_s=used.quorum_s,
        checkpoints=ctx.checkpoints,
    )
    return PolicyBuild(policy, used)


def pause_s(costs: ActionCosts, options: Any, action: Action, plan: Any, alive: Collection[str] | None) -> float:
    """The standard prices; detecting a lost node costs the detection timeout; a healed
    group's return costs every group the rebuild of the process groups (`quorum_rejoin_s`,
    by default the leave's `reconfigure_overhead_s`)."""
    if isinstance(action, Detect):
        return float(options.detection_timeout_s)
    if isinstance(action, Admit):
        rejoin = costs.term("quorum_rejoin_s")
        return float(costs.reconfigure_overhead_s if rejoin is None else rejoin)
    return standard_pause_s(costs, options, action, plan, alive)


REPLICA_GROUPS = Design(
    name="replica_groups",
    display="Replica groups",
    summary="torchft / fault-tolerant HSDP: a replica group fails alone, the others train on a smaller batch",
    options=ReplicaGroupsOptions,
    build=build,
    runs_on=(SIMULATOR, REAL_BACKEND),
    pause_s=pause_s,
    default_checkpoints=CheckpointSchedule(every_s=DEFAULT_CHECKPOINT_EVERY_S),
    detector_option="detection_timeout_s",
)
