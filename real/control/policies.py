"""The coordinator's bridge to the policies: the simulator's policy objects, real plans.

The real backend decides with exactly the objects the simulator uses
(`planner.policies.OobleckPolicy` on the job's `Planner`, `VarunaPolicy` on a
`VarunaSearch` over the same profile and cluster), fed the same events (`NodesRemoved`,
`NodesReady`, `PauseEnded`) and a `ClusterView` of the registered, live nodes. What
differs is only how a decision is carried out (`coordinator`). This module turns any
policy's plan into the backend's `Layout`:

- an Oobleck `ExecutionPlan` directly (`layout.layout_from_plan`);
- a `GridPlan` (D stages x W replicas, worker w D + s on node (w D + s) // g) as W
  pipelines of D one-GPU stages with Varuna's layer split; the global batch is cut into
  the job's microbatches, spread as evenly as possible over the W replicas, so the
  trained model is the same as any other plan's (Varuna's own microbatch size only
  changes how it predicts time, not what the backend computes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from designs import BuildContext, Design, DesignError, PolicyBuild
from designs import registry as designs
from designs.options import REAL
from planner.plan import ExecutionPlan
from planner.planner import Planner
from planner.policies import CheckpointSchedule, ClusterView, Decision, describe_action, describe_event, describe_plan
from planner.policies.grid import GridPlan
from planner.profile import ModelProfile

from ..config import ConfigError, RunConfig
from ..protocol.layout import (
    Layout,
    LayoutError,
    PipelineAssignment,
    StageAssignment,
    layout_from_plan,
    sync_groups,
)


def resolve_design(config: RunConfig) -> tuple[Design, Any]:
    """The design `config.policy` names and its options: the config's own fields that carry
    one (`fault_tolerance`, `join_horizon_s`) and `design_options`."""
    try:
        design = designs.get(config.policy)
        mine = {s.legacy for s in design.option_specs if s.legacy} & {f.name for f in fields(RunConfig)}
        settings = {key: getattr(config, key) for key in sorted(mine)} | dict(config.design_options)
        return designs.resolve(config.policy, settings, REAL)
    except DesignError as exc:
        raise ConfigError(str(exc)) from None


def build_design(config: RunConfig, planner: Planner, profile: ModelProfile) -> tuple[Design, PolicyBuild]:
    """The design and the policy the simulator would build for this job, on its planner."""
    design, options = resolve_design(config)
    mb = config.microbatch_size

    def planner_for(f: int) -> Planner:
        if f == planner.job.fault_tolerance:
            return planner
        return Planner(profile, planner.cluster, replace(planner.job, fault_tolerance=f))

    ctx = BuildContext(
        profile=profile,
        cluster=planner.cluster,
        global_batch=config.global_batch,
        microbatch_size=mb,
        gpus_per_node=config.gpus_per_node,
        max_nodes=config.nodes,
        checkpoints=CheckpointSchedule(every_iterations=config.checkpoint_every or None),
        reconfigure_pause_s=0.0,
        profile_for=lambda b: profile if b == mb else None,  # measured at the job's microbatch only
        profiled_microbatch=mb,
        planner_for=planner_for,
        cached=lambda key, make: make(),
    )
    try:
        return design, design.build(ctx, options)
    except DesignError as exc:
        raise ConfigError(str(exc)) from None


def make_policy(config: RunConfig, planner: Planner, profile: ModelProfile):
    """The policy object the simulator would use for this job."""
    return build_design(config, planner, profile)[1].policy


def varuna_layout(
    plan: GridPlan, generation: int, config: RunConfig, layer_allreduce_s: Sequence[float] = ()
) -> Layout:
    """W pipelines of D one-GPU stages, the job's microbatches spread evenly."""
    c, g = plan.config, config.gpus_per_node
    total = config.global_batch // config.microbatch_size
    if total < c.width:
        raise LayoutError(f"{total} microbatches cannot feed Varuna's {c.width} replicas")
    stages: list[StageAssignment] = []
    pipelines: list[PipelineAssignment] = []
    first = 0
    for w in range(c.width):
        ranks: list[int] = []
        for s, (lo, hi) in enumerate(c.stage_layers):
            k = w * c.depth + s
            rank = len(stages)
            stages.append(StageAssignment(rank, w, s, c.depth, lo, hi, plan.nodes[k // g], k % g))
            ranks.append(rank)
        count = total // c.width + (1 if w < total % c.width else 0)
        pipelines.append(PipelineAssignment(w, tuple(ranks), count, first, count / total, c.iteration_time_s))
        first += count
    num_layers = c.stage_layers[-1][1]
    layout = Layout(
        generation=generation,
        num_layers=num_layers,
        global_batch=config.global_batch,
        microbatch_size=config.microbatch_size,
        stages=tuple(stages),
        pipelines=tuple(pipelines),
        sync_groups=sync_groups(stages, c.width, num_layers),
        predicted_iteration_s=c.iteration_time_s,
        layer_allreduce_s=tuple(float(x) for x in layer_allreduce_s),
    )
    layout.validate()
    return layout


def plan_layout(plan: Any, generation: int, config: RunConfig, planner: Planner) -> Layout:
    if isinstance(plan, ExecutionPlan):
        return layout_from_plan(plan, generation, [float(x) for x in planner.layer_allreduce_s(plan.num_pipelines)])
    if isinstance(plan, GridPlan):
        return varuna_layout(plan, generation, config, [float(x) for x in planner.layer_allreduce_s(plan.config.width)])
    raise LayoutError(f"the real backend cannot run a {type(plan).__name__}")


def plan_dict(plan: Any, gpus_per_node: int = 1) -> dict | None:
    """A plan as JSON: an Oobleck plan's own form; a Varuna plan's description plus its
    replicas as pipelines (nodes in stage order), like an Oobleck plan's."""
    if plan is None:
        return None
    if isinstance(plan, ExecutionPlan):
        return plan.to_dict()
    info = describe_plan(plan)
    if isinstance(plan, GridPlan):
        c = plan.config
        info["pipelines"] = [
            {"nodes": list(dict.fromkeys(plan.nodes[(w * c.depth + s) // gpus_per_node] for s in range(c.depth))),
             "stages": [list(range(lo, hi)) for lo, hi in c.stage_layers]}
            for w in range(c.width)
        ]  # fmt: skip
        for pipe in info["pipelines"]:
            pipe["num_nodes"] = len(pipe["nodes"])
    return info


def plan_samples_per_s(plan: Any, global_batch: int) -> float | None:
    if plan is None:
        return None
    return global_batch / plan.iteration_time_s if plan.iteration_time_s > 0 else None


@dataclass(frozen=True)
class DecisionRecord:
    """A decision as logged (the same fields as the simulator's decision events)."""

    event: dict
    actions: list
    plan: dict
    notes: list

    @classmethod
    def of(cls, event, decision: Decision) -> DecisionRecord:
        return cls(
            describe_event(event),
            [describe_action(a) for a in decision.actions],
            describe_plan(decision.plan),
            list(decision.notes),
        )

    def to_dict(self) -> dict:
        # PauseEnded's `kind` (the state the pause was in) would clash with the event
        # record's own kind: logged as `pause_kind`
        event = {("pause_kind" if k == "kind" else k): v for k, v in self.event.items()}
        return {**event, "actions": self.actions, "plan": self.plan, **({"notes": self.notes} if self.notes else {})}


def view(ready: Sequence[str], job_state: str, iterations: int, checkpoint_step: int, now_s: float) -> ClusterView:
    return ClusterView(
        time_s=now_s,
        ready=tuple(ready),
        job_state=job_state,
        iterations_done=iterations,
        checkpoint_iterations=checkpoint_step,
    )
