"""ReCycle (SOSP'24): no spares; a failed worker's microbatches fill its peers' 1F1B bubbles.

Source: Gandhi, Swapnil et al., "ReCycle: Resilient Training of Large DNNs using Pipeline
Adaptation", SOSP 2024: adaptive pipelining (a failed stage's microbatches rerouted to the
same stage of the other data-parallel pipelines), decoupled back-propagation (input and
weight gradients split, the latter deferred into bubbles) and the staggered optimizer
(sections 3-4), with a full re-plan when failures accumulate.

The policy is `planner.policies.RecyclePolicy` on the job's `VarunaSearch` grids; the
iteration time of a degraded grid comes from the adapted schedule itself
(`designs.recycle.schedule`, list scheduling of every op of the grid). What the
paper leaves open, and what was chosen:

- rerouting spreads a failed slot's microbatches round robin over its stage's live peers
  (the paper's planner solves for a placement; even spreading is its balanced case);
- peers run rerouted work in priority order B > F > W, lowest microbatch first, own
  pipeline first on ties, each pipeline within 1F1B's in-flight bound; a host that cannot
  hold the extra in-flight activations makes the failure a re-plan;
- `weight_share`, the weight-gradient part of a backward, defaults to 0.5 (the two halves of
  a linear layer's backward are equal matmuls);
- the staggered optimizer is taken as hiding the skew of the optimizer steps: the gradient
  all-reduce is charged as in the healthy grid;
- the re-plan (checkpoint if needed, restart on the fastest grid for the usable nodes)
  happens at the next periodic checkpoint, or at once when the slowdown until then costs
  more samples than a re-plan costing `replan_s`; arrivals wait for a re-plan (no spares).

Its actions cost the standard prices. Simulator only.
"""

from __future__ import annotations

from dataclasses import dataclass

from designs.varuna.search import DEFAULT_MAX_MICROBATCH, VarunaSearch
from planner.policies import CheckpointSchedule
from planner.policies.decisions import DEFAULT_CHECKPOINT_EVERY_S

from ..base import SIMULATOR, BuildContext, Design, PolicyBuild
from ..options import PLANNER, option
from .policy import RecyclePolicy


@dataclass(frozen=True)
class RecycleOptions:
    weight_share: float = option(
        0.5, doc="share of a backward that is the weight gradient, deferrable into bubbles (0: no decoupling)",
        where=(PLANNER,), minimum=0,
    )  # fmt: skip
    replan_s: float = option(
        120.0, unit="s", doc="what the policy expects a re-plan to cost (checkpoint, relaunch, load)",
        where=(PLANNER,), minimum=0,
    )  # fmt: skip
    max_microbatch: int = option(
        DEFAULT_MAX_MICROBATCH, doc="largest microbatch tried per grid (a measured profile: its own)",
        where=(PLANNER,), minimum=1,
    )  # fmt: skip

    def __post_init__(self) -> None:
        if not self.weight_share < 1:
            raise ValueError(f"recycle option weight_share must be below 1, got {self.weight_share}")


def build(ctx: BuildContext, options: RecycleOptions) -> PolicyBuild:
    cap = options.max_microbatch if ctx.profiled_microbatch is None else ctx.profiled_microbatch
    search = ctx.cached(
        ("varuna_search", cap),
        lambda: VarunaSearch(ctx.profile_for, ctx.cluster, ctx.global_batch, max_microbatch=cap),
    )
    policy = RecyclePolicy(
        search,
        ctx.gpus_per_node,
        checkpoints=ctx.checkpoints,
        max_nodes=ctx.max_nodes,
        replan_s=options.replan_s,
        weight_share=options.weight_share,
        cache=ctx.cached(("recycle_cache", cap), dict),
    )
    return PolicyBuild(policy, options)


RECYCLE = Design(
    name="recycle",
    display="ReCycle",
    summary="no spares: peers run a failed worker's microbatches in their 1F1B bubbles; re-plan at checkpoints (SOSP'24)",
    options=RecycleOptions,
    build=build,
    runs_on=(SIMULATOR,),
    default_checkpoints=CheckpointSchedule(every_s=DEFAULT_CHECKPOINT_EVERY_S),
)
