"""Bamboo (NSDI'23): redundant stages; fail over to a predecessor, restart when fatal.

The policy is `planner.policies.BambooPolicy` at pipeline depth `depth` (DESIGN 3.6): each
node also holds its successor's stage, a removal fails over to the predecessor, two
adjacent losses restart from the checkpoint. In the planner calibration its plans are timed
on its `BambooLayout` (redundant computation, fail-over slowdown) and a reconfiguration
relaunches its workers (state kept), so it costs the restart overhead rather than the
group rebuild. In the artifact calibration: the artifact's Bamboo (the grid rebuilt on
every reconfiguration, a fatal loss a global rendezvous without rollback), with the
model's reconfiguration time and the artifact's restart time. Simulator only.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from planner.errors import PlannerError
from planner.policies import Action, CheckpointSchedule, Reinstantiate, Restart, RestartFromCheckpoint, Start
from planner.policies.decisions import DEFAULT_CHECKPOINT_EVERY_S

from ..base import (
    SIMULATOR,
    ActionCosts,
    ArtifactContext,
    ArtifactHooks,
    BuildContext,
    Design,
    PolicyBuild,
    standard_pause_s,
)
from ..options import ARTIFACT, PLANNER, DesignError, option
from .cost import bamboo_layout
from .policy import DEFAULT_DEPTH, BambooPolicy


@dataclass(frozen=True)
class BambooOptions:
    depth: int = option(
        DEFAULT_DEPTH, doc="pipeline depth D: floor(nodes / D) pipelines, the other nodes wait as spares",
        where=(ARTIFACT, PLANNER), legacy="bamboo_depth", minimum=1,
    )  # fmt: skip


def build(ctx: BuildContext, options: BambooOptions) -> PolicyBuild:
    microbatches = ctx.global_batch // ctx.microbatch_size
    try:
        layout = ctx.cached(
            ("bamboo_layout", options.depth),
            lambda: bamboo_layout(ctx.profile, ctx.cluster, options.depth, microbatches),
        )
    except PlannerError as exc:
        raise DesignError(str(exc)) from None
    policy = BambooPolicy(
        options.depth, layout=layout, profile=ctx.profile, fatal_rollback=True, checkpoints=ctx.checkpoints
    )
    return PolicyBuild(policy, options, layout=layout)


def pause_s(
    costs: ActionCosts, options: BambooOptions, action: Action, plan: Any, alive: Collection[str] | None = None
) -> float:
    """A reconfiguration relaunches Bamboo's workers (their state kept): the relaunch of the
    new plan's processes."""
    if isinstance(action, Reinstantiate):
        return costs.relaunch_s(plan)
    return standard_pause_s(costs, options, action, plan, alive)


def artifact_policy(ctx: ArtifactContext, options: BambooOptions) -> PolicyBuild:
    if ctx.checkpoint_every_iterations is not None:
        raise DesignError("the artifact's Bamboo never checkpoints: checkpoint_every_iterations applies to varuna")
    reason = None if ctx.runnable else f"out of memory: the artifact gives Bamboo no throughput on {ctx.model.name}"
    policy = BambooPolicy(
        options.depth,
        fatal_rollback=False,
        overload_threshold=ctx.constants["BAMBOO_OVERLOAD_THRESHOLD"],
        infeasible=reason,
        keep_in_place=False,  # the artifact rebuilds the grid
    )
    return PolicyBuild(policy, options)


def artifact_pause_s(ctx: ArtifactContext, options: Any, action: Action, plan: Any) -> float | None:
    if isinstance(action, (Start, Restart, RestartFromCheckpoint)):
        return float(ctx.constants["BAMBOO_RESTART_S"])
    if isinstance(action, Reinstantiate):
        return float(ctx.model.bamboo_reconfigure_s)
    return None


BAMBOO = Design(
    name="bamboo",
    display="Bamboo",
    summary="redundant stages: fail over to the predecessor, restart from checkpoint when fatal (NSDI'23)",
    options=BambooOptions,
    build=build,
    runs_on=(SIMULATOR,),
    pause_s=pause_s,
    default_checkpoints=CheckpointSchedule(every_s=DEFAULT_CHECKPOINT_EVERY_S),
    artifact=ArtifactHooks("bamboo", artifact_policy, artifact_pause_s),
)
