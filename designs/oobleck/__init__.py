"""Oobleck (SOSP'23): pipeline templates, live reconfiguration from in-memory replicas.

The policy is `planner.policies.OobleckPolicy` on the job's `Planner` (DESIGN 3.5): a
failure re-instantiates pipelines from the surviving nodes and copies the layers that moved;
a join is taken when the larger plan pays for itself within `join_horizon_s`. In the
planner calibration its actions cost the standard prices (a reconfiguration rebuilds the
process groups; layer copies move the busiest node's bytes). In the artifact calibration it
is the artifact's node-count model: every removal reconfigures, at the model's fixed
reconfiguration time. On the real backend it reconfigures live and accepts a forced
grouping (`--pipelines`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from planner.errors import InfeasibleError
from planner.policies import Action, CheckpointSchedule, Decision, Reinstantiate, Restart, RestartFromCheckpoint, Start
from planner.policies.artifact import ARTIFACT_MIN_NODES
from planner.policies.decisions import DEFAULT_CHECKPOINT_EVERY_S
from planner.reconfigure import DEFAULT_JOIN_HORIZON_S

from ..base import REAL_BACKEND, SIMULATOR, ArtifactContext, ArtifactHooks, BuildContext, Design, PolicyBuild, RealHooks
from ..options import ARTIFACT, PLANNER, REAL, DesignError, option
from .artifact import ArtifactOobleckPolicy
from .policy import OobleckMemory, OobleckPolicy


@dataclass(frozen=True)
class OobleckOptions:
    fault_tolerance: int = option(
        1,
        doc="failures survived without a restart (f; at least f + 1 pipelines)",
        where=(PLANNER, REAL),
        legacy="fault_tolerance",
        minimum=0,
    )
    join_horizon_s: float = option(
        DEFAULT_JOIN_HORIZON_S,
        unit="s",
        doc="a join is taken when the larger plan pays off within this long",
        where=(PLANNER, REAL),
        legacy="join_horizon_s",
        minimum=0,
        positive=True,
    )
    fastest_removal: bool = option(
        False,
        doc="on a removal, the fastest of the paper's rules and the one-donor refills (fewest bytes among equals); "
        "off: the paper's rules",
        where=(PLANNER,),
    )
    min_nodes: int = option(
        ARTIFACT_MIN_NODES, doc="the artifact's stage target: no training below this many usable nodes",
        where=(ARTIFACT,), legacy="min_nodes", minimum=1,
    )  # fmt: skip


def build(ctx: BuildContext, options: OobleckOptions) -> PolicyBuild:
    planner = ctx.planner_for(options.fault_tolerance)
    try:
        n0 = planner.min_nodes
    except InfeasibleError:
        n0 = 0  # the policy reports out of memory
    microbatches = planner.job.num_microbatches
    if microbatches < options.fault_tolerance + 1:
        raise DesignError(
            f"oobleck: global batch {ctx.global_batch} is {microbatches} microbatch(es) of {ctx.microbatch_size}, "
            f"which cannot feed f + 1 = {options.fault_tolerance + 1} pipelines (each needs at least one)"
        )
    most = ctx.max_nodes // n0 if n0 else 0
    if most and options.fault_tolerance + 1 > most:
        raise DesignError(
            f"oobleck: fault_tolerance {options.fault_tolerance} needs {options.fault_tolerance + 1} pipelines of at "
            f"least {n0} node(s); the {ctx.max_nodes} nodes the cluster ever has hold at most {most} "
            f"(fault_tolerance <= {most - 1})"
        )
    policy = OobleckPolicy(
        planner,
        checkpoints=ctx.checkpoints,
        join_horizon_s=options.join_horizon_s,
        reconfigure_pause_s=ctx.reconfigure_pause_s,
        removal_tolerance=0.0 if options.fastest_removal else None,
    )
    return PolicyBuild(policy, options)


def artifact_policy(ctx: ArtifactContext, options: OobleckOptions) -> PolicyBuild:
    if ctx.checkpoint_every_iterations is not None:
        raise DesignError("the artifact's Oobleck never checkpoints: checkpoint_every_iterations applies to varuna")
    used = replace(options, min_nodes=max(options.min_nodes, ctx.min_runnable_nodes or 0))
    return PolicyBuild(ArtifactOobleckPolicy(used.min_nodes), used)


def artifact_pause_s(ctx: ArtifactContext, options: Any, action: Action, plan: Any) -> float | None:
    """Every start, restart and reconfiguration: the model's reconfiguration time."""
    if isinstance(action, (Start, Reinstantiate, Restart, RestartFromCheckpoint)):
        return float(ctx.model.oobleck_reconfigure_s)
    return None


def forced_start(plan: Any) -> Decision:
    return Decision(plan, (Start(),), OobleckMemory())


OOBLECK = Design(
    name="oobleck",
    display="Oobleck",
    summary="pipeline templates; live reconfiguration from in-memory replicas (SOSP'23)",
    options=OobleckOptions,
    build=build,
    runs_on=(SIMULATOR, REAL_BACKEND),
    default_checkpoints=CheckpointSchedule(every_s=DEFAULT_CHECKPOINT_EVERY_S),
    artifact=ArtifactHooks("oobleck", artifact_policy, artifact_pause_s),
    real=RealHooks(forced_start=forced_start),
)
