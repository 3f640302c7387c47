"""In-memory checkpoints: GEMINI (Wang et al., "GEMINI: Fast Failure Recovery in Distributed
Training with In-Memory Checkpoints", SOSP 2023).

The rules and where they come from (the paper's sections by title):

- checkpoints go to CPU memory, every K iterations, each node's to m peers besides itself
  (system overview; the paper counts replicas with the local copy, its m is our m + 1);
  checkpoints to persistent storage stay, at a low frequency;
- where the copies go: group placement (groups of m + 1 nodes holding each other's),
  ring placement (node i to i + 1 .. i + m), and the mixed placement for node counts m + 1
  does not divide (checkpoint placement section; it shows group placement loses a state
  least often);
- the copies travel with training, in the network's idle time (traffic interleaving
  section);
- recovery: restart from the copies in CPU memory; only when every holder of some state
  is gone, from the persistent checkpoint (failure recovery section).

What the paper leaves open and what was chosen here (`designs.gemini.policy` has the
formulas):

- the idle time is not measured (the paper profiles the training's traffic): the option
  `bandwidth_share` says which share of the network training leaves to the copies (default
  0.5, a guess); a copy that does not fit in K iterations at that share stalls training
  for the rest at full bandwidth, spread over the interval (iterations take longer);
- no spare machines: after a loss GEMINI restarts on the nodes that are left, and a node
  that arrives waits for the next restart (the paper replaces failed machines and has no
  rule for growing the job); the restart costs the relaunch plus the busiest node's state
  over the network (`RestartFromSnapshot`'s standard price);
- persistent checkpoints are the run's blocking checkpoints (default every 3 h of
  training, `persistent_every_s` or the run's `--checkpoint-every` to change), priced as
  every other design's.

On the real backend (`RealHooks.memory_copies`): after every K committed steps each
worker sends its layers' state to the workers of its m peers (`placement`), asynchronously
while training goes on, and every holder keeps it in its node's CPU memory (a per-node
directory, tmpfs by default: it survives a restart of the node's processes, not the loss of
the node); a copy counts once it is complete on every holder, and holders keep the newest
complete copy (and any newer one still in flight). A restart from memory stops every
process, starts fresh ones and loads each layer from a surviving holder; a copy that the
backend does not have complete on a surviving holder of every layer is replaced by the
newest one it has, or else by the persistent checkpoint. `bandwidth_share` stays a
simulator option there: the real copies go at whatever rate the network gives them.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.policies import CheckpointSchedule

from ..base import REAL_BACKEND, SIMULATOR, BuildContext, Design, MemoryCopies, PolicyBuild, RealHooks
from ..options import PLANNER, REAL, DesignError, option
from .policy import PLACEMENTS, GeminiPolicy, SnapshotTraffic, placement

PERSISTENT_EVERY_S = 3 * 3600.0


@dataclass(frozen=True)
class GeminiOptions:
    every: int = option(
        1,
        unit="iterations",
        doc="copy each node's state to peers' memory every K iterations",
        where=(PLANNER, REAL),
        minimum=1,
    )
    replicas: int = option(
        1,
        doc="m: peers holding a copy of each node's state (m + 1 holders with the node)",
        where=(PLANNER, REAL),
        minimum=1,
    )
    placement: str = option(
        "group", doc="where the copies go: group (groups of m + 1) or ring (the next m nodes)", where=(PLANNER, REAL)
    )
    bandwidth_share: float = option(
        0.5,
        doc="share of the network an iteration leaves to the copies, in (0, 1]",
        where=(PLANNER,),
        minimum=0,
        positive=True,
    )
    persistent_every_s: float = option(0.0, unit="s", doc="persistent checkpoint interval (0: the run's; default 3 h)",
                                       where=(PLANNER,), minimum=0)  # fmt: skip

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ValueError(f"gemini option placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}")
        if self.bandwidth_share > 1:
            raise ValueError(f"gemini option bandwidth_share must be <= 1, got {self.bandwidth_share!r}")


def build(ctx: BuildContext, options: GeminiOptions) -> PolicyBuild:
    planner = ctx.planner_for(0)  # no redundant stages: the copies live in CPU memory
    if options.replicas >= ctx.max_nodes:
        raise DesignError(
            f"gemini: replicas {options.replicas} copies each node's state to {options.replicas} peers, "
            f"but the cluster never has more than {ctx.max_nodes} nodes (replicas <= {max(ctx.max_nodes - 1, 0)})"
        )
    traffic = SnapshotTraffic(
        every=options.every,
        replicas=options.replicas,
        share=options.bandwidth_share,
        bandwidth_bytes_per_s=ctx.cluster.inter_node_bw_bytes_per_s,
        layer_bytes=tuple(layer.copy_bytes for layer in ctx.profile.layers),
    )
    schedule = ctx.checkpoints
    if options.persistent_every_s > 0:
        schedule = CheckpointSchedule(every_s=options.persistent_every_s)
    try:
        policy = GeminiPolicy(planner, schedule, traffic, options.placement)
    except ValueError as exc:
        raise DesignError(str(exc)) from None
    return PolicyBuild(policy, options, checkpoints=schedule, iteration_s=policy.iteration_s)


def memory_copies(options: GeminiOptions) -> MemoryCopies:
    """The real backend's copies: every K steps, each node's state to its placement's holders."""

    def holders(nodes):
        return placement(nodes, options.replicas, options.placement)

    return MemoryCopies(options.every, holders)


GEMINI = Design(
    name="gemini",
    display="GEMINI",
    summary="in-memory checkpoints in peers' CPU memory every K iterations, restart from them (SOSP'23)",
    options=GeminiOptions,
    build=build,
    runs_on=(SIMULATOR, REAL_BACKEND),
    default_checkpoints=CheckpointSchedule(every_s=PERSISTENT_EVERY_S),
    real=RealHooks(restarts_processes=True, memory_copies=memory_copies),
)
