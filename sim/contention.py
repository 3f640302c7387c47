"""Compute that slows with the number of workers computing at once (`contention.json`).

When the profile directory holds a `planner.contention.ContentionProfile` (measured on a
testbed whose workers share CPU cores), each iteration's compute is scaled by the factor
of the number of workers the plan computes on: k + 1 workers computing, factor of k busy
neighbours. Every stage's forward and backward time (its layers' profiled times / its GPUs)
is multiplied by the factor; what the plan pays on top of compute (pipeline
communication in the stage weights, in-node and cross-pipeline all-reduce) is not, except
that where the file holds per-count hop readings (`hop_overhead_s`) each pipeline send
of a stage per microbatch costs the reading at the plan's count over the unloaded one
more (on 2 cores a 1F1B hop cost 0.94 ms alone and 4.16 ms beside 3 busy processes:
a peer waits for the sender to be scheduled). The pipeline time is then T of
`planner.costmodel` on the scaled weights and the exposed all-reduce is recomputed from
the scaled pipelines (`planner.allreduce`).

Where it applies, and why here: the plan is chosen as the backend chooses it, from the
profile's own layer times, and only its time is scaled. The real backend plans from
`mb*.json` alone; a simulator that planned with contended weights could pick another
template split or Varuna shape (a Varuna shape with idle GPUs is faster under
contention) than the run it is compared with, and Oobleck's templates, built once for
every node count, would need a planner per live count. Contention is a property of the
testbed, not of the model the planner reasons about (on real GPUs, one per worker, there
is none).

Workers computing: an Oobleck plan's GPUs (every node of every pipeline), a Varuna plan's
D x W (its idle GPUs' workers wait as spares). Other plan kinds (Bamboo's) are refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from planner.allreduce import exposed_allreduce_s, layer_allreduce_s
from planner.contention import ContentionProfile
from planner.costmodel import CostTables, pipeline_time_s
from planner.errors import PlannerError
from planner.hardware import ClusterSpec
from planner.plan import ExecutionPlan
from planner.policies.grid import GridPlan
from planner.profile import ModelProfile
from planner.templates import PipelineTemplate

from .errors import SimError
from .timing import AddedIterationTime, Timing


def computing_workers(plan: Any) -> int:
    """Workers (GPUs) that compute in each iteration of `plan`."""
    if isinstance(plan, ExecutionPlan):
        return sum(p.template.num_nodes * p.template.gpus_per_node for p in plan.pipelines)
    if isinstance(plan, GridPlan):
        return plan.config.num_gpus
    raise SimError(f"a profile with contention.json times Oobleck and Varuna plans only, not a {type(plan).__name__}")


def plan_factor(contention: ContentionProfile, plan: Any) -> float:
    """The compute factor of the workers `plan` computes on; SimError if unmeasured."""
    try:
        return contention.factor(computing_workers(plan) - 1)
    except PlannerError as exc:
        raise SimError(str(exc)) from None


def plan_hop_extra_s(contention: ContentionProfile, plan: Any) -> float:
    """What a pipeline send costs beside the plan's busy workers over the unloaded reading
    (0 when the profile has no hop readings); SimError if its count is unmeasured."""
    try:
        return contention.hop_extra_s(computing_workers(plan) - 1)
    except PlannerError as exc:
        raise SimError(str(exc)) from None


def stage_sends(index: int, num_stages: int) -> tuple[int, int]:
    """Sends stage `index` of `num_stages` makes per microbatch: (forward to the next stage,
    backward to the one before), as `planner.costmodel` charges them."""
    return int(index < num_stages - 1), int(index > 0)


def scaled_template(
    template: PipelineTemplate, compute_s: Sequence[tuple[float, float]], factor: float, hop_extra_s: float = 0.0
) -> PipelineTemplate:
    """`template` with each stage's compute (`compute_s[i]`: its forward and backward, without
    any all-reduce) x factor, and `hop_extra_s` added to each send a stage makes per
    microbatch (forward to the next stage, backward to the one before); the rest of each
    stage's times and weight unchanged."""
    stages = []
    count = len(template.stages)
    for i, (stage, (forward, backward)) in enumerate(zip(template.stages, compute_s, strict=True)):
        sends_f, sends_b = stage_sends(i, count)
        extra_f = (factor - 1.0) * forward + sends_f * hop_extra_s
        extra_b = (factor - 1.0) * backward + sends_b * hop_extra_s
        stages.append(
            replace(
                stage,
                forward_s=stage.forward_s + extra_f,
                backward_s=stage.backward_s + extra_b,
                weight_s=stage.weight_s + extra_f + extra_b,
            )
        )
    return replace(template, stages=tuple(stages))


class PlanScaler:
    """A plan's iteration time re-timed with its compute scaled and its pipeline sends
    longer, the plan itself unchanged (shared by `ContendedCompute` and
    `sim.loaded_hops`)."""

    def __init__(self, profile: ModelProfile, cluster: ClusterSpec):
        self.profile = profile
        self.cluster = cluster
        self.tables = CostTables(profile, cluster.with_nodes(1))

    def _stage_compute_s(self, first: int, end: int, gpus: int) -> tuple[float, float]:
        """Forward and backward compute of layers [first, end) on `gpus` GPUs."""
        t = self.tables
        return float((t.fwd[end] - t.fwd[first]) / gpus), float((t.bwd[end] - t.bwd[first]) / gpus)

    def scaled_plan_s(self, plan: Any, factor: float, hop_extra_s: float = 0.0) -> float:
        """The plan's iteration time with its compute x factor and each pipeline send
        `hop_extra_s` longer (its own time at factor 1 and no extra)."""
        if isinstance(plan, ExecutionPlan):
            return self._oobleck_s(plan, factor, hop_extra_s)
        if isinstance(plan, GridPlan):
            return self._grid_s(plan, factor, hop_extra_s)
        raise SimError(f"internal: no contended time for a {type(plan).__name__}")

    def _oobleck_s(self, plan: ExecutionPlan, factor: float, hop_extra_s: float = 0.0) -> float:
        templates, base, scaled = [], [], []
        cache: dict[int, PipelineTemplate] = {}
        for p in plan.pipelines:
            t = p.template
            if id(t) not in cache:
                compute = [self._stage_compute_s(s.first_layer, s.end_layer, s.num_gpus) for s in t.stages]
                cache[id(t)] = scaled_template(t, compute, factor, hop_extra_s)
            templates.append(cache[id(t)])
            base.append(t.iteration_time(p.num_microbatches))
            scaled.append(pipeline_time_s(cache[id(t)].weights, p.num_microbatches))
        exposed_delta = 0.0
        if len(plan.pipelines) > 1:
            try:
                layer_s = layer_allreduce_s(self.profile, self.cluster, len(plan.pipelines))
            except PlannerError as exc:
                raise SimError(str(exc)) from None
            originals = [p.template for p in plan.pipelines]
            exposed_delta = exposed_allreduce_s(templates, scaled, layer_s) - exposed_allreduce_s(
                originals, base, layer_s
            )
        return plan.iteration_time_s + (max(scaled) - max(base)) + exposed_delta

    def _grid_s(self, plan: GridPlan, factor: float, hop_extra_s: float = 0.0) -> float:
        c = plan.config
        if c.microbatch_size != self.profile.microbatch_size:
            raise SimError(
                f"contention: Varuna's microbatch {c.microbatch_size} is not the profile's {self.profile.microbatch_size}"
            )
        weights = [self.tables.weight_s(a, e, 1) for a, e in c.stage_layers]
        compute = [sum(self._stage_compute_s(a, e, 1)) for a, e in c.stage_layers]
        sends = [sum(stage_sends(i, len(weights))) for i in range(len(weights))]
        scaled = [w + (factor - 1.0) * x + n * hop_extra_s for w, x, n in zip(weights, compute, sends, strict=True)]
        delta = pipeline_time_s(scaled, c.num_microbatches) - pipeline_time_s(weights, c.num_microbatches)
        return plan.iteration_time_s + delta


class ContendedCompute(AddedIterationTime):
    """A planner-calibration `Timing` whose iterations' compute follows the contention factor
    of the plan's worker count; pauses are the inner timing's."""

    def __init__(self, inner: Timing, profile: ModelProfile, cluster: ClusterSpec, contention: ContentionProfile):
        super().__init__(inner)
        self.profile = profile
        self.cluster = cluster
        self.contention = contention
        self.scaler = PlanScaler(profile, cluster)

    def scaled_plan_s(self, plan: Any, factor: float, hop_extra_s: float = 0.0) -> float:
        return self.scaler.scaled_plan_s(plan, factor, hop_extra_s)

    def extra_s(self, plan: Any) -> float:
        """What the plan's worker-count factor adds to its compute, and its worker count's
        loaded hop to its sends (0 at the reference count without hop readings)."""
        factor = plan_factor(self.contention, plan)
        hop = plan_hop_extra_s(self.contention, plan)
        if factor == 1.0 and hop == 0.0:
            return 0.0
        return self.scaled_plan_s(plan, factor, hop) - plan.iteration_time_s


def check_coverage(contention: ContentionProfile, max_workers: int) -> None:
    """Every worker count 1..max_workers a run can reach must have a measured factor."""
    missing = contention.missing(max_workers)
    if missing:
        counts = [k + 1 for k in missing]
        raise SimError(
            f"{contention.source or 'contention.json'}: no compute factor for {', '.join(map(str, counts))} "
            f"workers computing (busy neighbours {', '.join(map(str, missing))}); the run reaches {max_workers}"
        )
