"""Varuna (EuroSys'22): checkpoint, stop everything, restart in the best configuration.

The policy is `planner.policies.VarunaPolicy` on a `VarunaSearch` over the job's profiles
(DESIGN 3.6): any membership change checkpoints where it can and restarts on the fastest
(depth, width) the live GPUs allow; periodic blocking checkpoints (every 10 iterations
unless the run sets an interval). Its actions cost the standard prices. In the artifact
calibration: the artifact's Varuna, restart time from the model (or the table by node
count) less the checkpoint it includes, checkpoints at the model's checkpoint time, idle
GPUs from the table. On the real backend a restart starts fresh worker processes, and the
workers keep a checkpoint store even without periodic checkpoints (it saves on demand).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from planner.policies import (
    Action,
    Checkpoint,
    CheckpointSchedule,
    Reinstantiate,
    Restart,
    RestartFromCheckpoint,
    Start,
)
from planner.policies.artifact import ARTIFACT_MIN_NODES

from ..base import REAL_BACKEND, SIMULATOR, ArtifactContext, ArtifactHooks, BuildContext, Design, PolicyBuild, RealHooks
from ..options import ARTIFACT, PLANNER, REAL, DesignError, option
from .artifact import ARTIFACT_VARUNA_CHECKPOINT_EVERY, ArtifactVarunaPolicy
from .policy import DEFAULT_CHECKPOINT_EVERY, VarunaPolicy
from .search import DEFAULT_MAX_MICROBATCH, VarunaSearch


@dataclass(frozen=True)
class VarunaOptions:
    max_microbatch: int = option(
        DEFAULT_MAX_MICROBATCH,
        doc="largest microbatch tried (powers of two up to it; a measured profile is searched at its own microbatch)",
        where=(PLANNER, REAL),
        legacy="varuna_max_microbatch",
        minimum=1,
    )
    rollback: bool = option(
        True,
        doc="a restart rolls back to the last checkpoint (off: the paper's spot figures, small models)",
        where=(ARTIFACT,),
        legacy="varuna_rollback",
    )
    min_nodes: int = option(
        ARTIFACT_MIN_NODES, doc="the artifact's stage target: no training below this many usable nodes",
        where=(ARTIFACT,), legacy="min_nodes", minimum=1,
    )  # fmt: skip


def build(ctx: BuildContext, options: VarunaOptions) -> PolicyBuild:
    cap = options.max_microbatch if ctx.profiled_microbatch is None else ctx.profiled_microbatch
    search = ctx.cached(
        ("varuna_search", cap),
        lambda: VarunaSearch(ctx.profile_for, ctx.cluster, ctx.global_batch, max_microbatch=cap),
    )
    policy = VarunaPolicy(search, ctx.gpus_per_node, checkpoints=ctx.checkpoints, max_nodes=ctx.max_nodes)
    return PolicyBuild(policy, options)


def artifact_policy(ctx: ArtifactContext, options: VarunaOptions) -> PolicyBuild:
    every = ctx.checkpoint_every_iterations
    every = ARTIFACT_VARUNA_CHECKPOINT_EVERY if every is None else every
    given = "rollback" in ctx.given
    rollback = options.rollback if given else ctx.paper_rollback
    used = replace(options, min_nodes=max(options.min_nodes, ctx.min_runnable_nodes or 0), rollback=rollback)
    policy = ArtifactVarunaPolicy(used.min_nodes, rollback=used.rollback, checkpoint_every=every)
    why = "given" if given else ctx.paper_rollback_why
    return PolicyBuild(
        policy, used, checkpoints=CheckpointSchedule(every_iterations=every), notes={"varuna_rollback_why": why}
    )


def artifact_pause_s(ctx: ArtifactContext, options: Any, action: Action, plan: Any) -> float | None:
    """Checkpoints at the model's checkpoint time; every start, restart and
    reconfiguration at its restart time less the checkpoint that includes."""
    m = ctx.model
    if isinstance(action, Checkpoint):
        return float(m.varuna_checkpoint_s)
    if isinstance(action, (Start, Restart, RestartFromCheckpoint, Reinstantiate)):
        restart = m.varuna_restart_s
        if restart is None:
            restart = ctx.row(len(plan.nodes)).varuna_restart_s
        if restart is None:
            raise DesignError(f"the artifact has no Varuna restart time for {m.name} on {len(plan.nodes)} nodes")
        return float(restart - m.varuna_checkpoint_s)
    return None


VARUNA = Design(
    name="varuna",
    display="Varuna",
    summary="checkpoint, stop everything, restart in the fastest configuration (EuroSys'22)",
    options=VarunaOptions,
    build=build,
    runs_on=(SIMULATOR, REAL_BACKEND),
    default_checkpoints=CheckpointSchedule(every_iterations=DEFAULT_CHECKPOINT_EVERY),
    artifact=ArtifactHooks("varuna", artifact_policy, artifact_pause_s),
    real=RealHooks(restarts_processes=True, saves_on_demand=True),
)
