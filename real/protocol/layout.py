"""What every worker needs to know about one plan generation: ranks, stages, groups.

The planner's `ExecutionPlan` is node-level (pipelines of node names, stages placed on GPUs
of those nodes). The backend runs one process per GPU, so the coordinator turns a plan into
a `Layout`: rank r runs exactly one stage; ranks are numbered pipeline by pipeline, stage by
stage, so pipeline i owns a contiguous block of ranks and its group rank equals the stage
index (what `torch.distributed.pipelining` assumes). Gradient synchronisation needs one
process group per *distinct* set of owners of a layer: the owners of layer l are the ranks
holding l, one per pipeline; layers with the same owner set share a group (DESIGN 5).

Pure Python and JSON-serialisable: the coordinator publishes it through the store, workers
rebuild it with `Layout.from_dict`. Stages on d > 1 GPUs (a layer sharded over a node's
GPUs) are rejected: the backend executes one-GPU stages only (see `planning`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from planner.plan import ExecutionPlan


class LayoutError(ValueError):
    """A plan the backend cannot execute, or a malformed published layout."""


@dataclass(frozen=True)
class StageAssignment:
    """The stage rank `rank` runs: layers [first_layer, end_layer) of pipeline `pipeline`,
    on GPU `gpu` of node `node`."""

    rank: int
    pipeline: int
    stage: int
    num_stages: int
    first_layer: int
    end_layer: int
    node: str
    gpu: int

    @property
    def layers(self) -> range:
        return range(self.first_layer, self.end_layer)

    @property
    def is_first(self) -> bool:
        return self.stage == 0

    @property
    def is_last(self) -> bool:
        return self.stage == self.num_stages - 1


@dataclass(frozen=True)
class PipelineAssignment:
    """Pipeline `index`: its ranks in stage order, its microbatches and gradient weight.

    It consumes global microbatches [first_microbatch, first_microbatch + num_microbatches)
    of every iteration; `gradient_weight` = m_i / M (the plan's)."""

    index: int
    ranks: tuple[int, ...]
    num_microbatches: int
    first_microbatch: int
    gradient_weight: float
    predicted_time_s: float


@dataclass(frozen=True)
class SyncGroup:
    """Ranks that hold the same layers in different pipelines (one per pipeline), and the
    layers whose gradients they all-reduce together."""

    ranks: tuple[int, ...]
    layers: tuple[int, ...]


@dataclass(frozen=True)
class Layout:
    """One generation of the job: the plan as ranks and process groups."""

    generation: int
    num_layers: int
    global_batch: int
    microbatch_size: int
    stages: tuple[StageAssignment, ...]  # stages[r] is rank r's
    pipelines: tuple[PipelineAssignment, ...]
    sync_groups: tuple[SyncGroup, ...]  # the creation order, identical on every rank
    predicted_iteration_s: float
    layer_allreduce_s: tuple[float, ...] = ()  # planner's per-layer cross-pipeline all-reduce
    # the samples a step trains on when the pipelines take part of `global_batch` (a plan
    # over some replica groups: each pipeline its own slice, gaps where groups are out);
    # None: they cover the global batch exactly
    samples_per_step: int | None = None

    @property
    def step_samples(self) -> int:
        """The samples one step of this generation trains on."""
        return self.global_batch if self.samples_per_step is None else self.samples_per_step

    def partial_ranges(self) -> tuple[tuple[int, int], ...] | None:
        """(first microbatch, count) per pipeline when a step trains on part of the batch."""
        if self.samples_per_step is None:
            return None
        return tuple((p.first_microbatch, p.num_microbatches) for p in self.pipelines)

    @property
    def world_size(self) -> int:
        return len(self.stages)

    @property
    def num_microbatches(self) -> int:
        return sum(p.num_microbatches for p in self.pipelines)

    def rank_of(self, node: str, gpu: int) -> int | None:
        """The rank of GPU `gpu` of `node`, or None when the plan leaves it out (a spare)."""
        for stage in self.stages:
            if stage.node == node and stage.gpu == gpu:
                return stage.rank
        return None

    def checkpoint_layers(self, rank: int) -> tuple[int, ...]:
        """The layers `rank` writes in a periodic checkpoint: layer l is written whole by
        its holder in pipeline l mod P (every layer once; `planner.checkpoint_cost.owner_writes`)."""
        stage = self.stages[rank]
        return tuple(l for l in stage.layers if l % len(self.pipelines) == stage.pipeline)

    def groups_of(self, rank: int) -> tuple[SyncGroup, ...]:
        """The sync groups `rank` belongs to, in the global creation order (deadlock-free
        when every rank issues its collectives in this order)."""
        return tuple(group for group in self.sync_groups if rank in group.ranks)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Layout:
        try:
            layout = cls(
                generation=int(data["generation"]),
                num_layers=int(data["num_layers"]),
                global_batch=int(data["global_batch"]),
                microbatch_size=int(data["microbatch_size"]),
                stages=tuple(StageAssignment(**s) for s in data["stages"]),
                pipelines=tuple(PipelineAssignment(**{**p, "ranks": tuple(p["ranks"])}) for p in data["pipelines"]),
                sync_groups=tuple(SyncGroup(tuple(g["ranks"]), tuple(g["layers"])) for g in data["sync_groups"]),
                predicted_iteration_s=float(data["predicted_iteration_s"]),
                layer_allreduce_s=tuple(float(x) for x in data.get("layer_allreduce_s", ())),
                samples_per_step=None if data.get("samples_per_step") is None else int(data["samples_per_step"]),
            )
        except (KeyError, TypeError) as exc:
            raise LayoutError(f"malformed layout: {exc!r}") from None
        layout.validate()
        return layout

    def validate(self) -> None:
        """Check the invariants the workers rely on; raise LayoutError naming the problem."""
        for r, stage in enumerate(self.stages):
            if stage.rank != r:
                raise LayoutError(f"stage list out of order: position {r} holds rank {stage.rank}")
        seen = set()
        for stage in self.stages:
            key = (stage.node, stage.gpu)
            if key in seen:
                raise LayoutError(f"GPU {stage.gpu} of node {stage.node} runs two stages")
            seen.add(key)
        start = 0
        for pipe in self.pipelines:
            stages = [self.stages[r] for r in pipe.ranks]
            if [s.stage for s in stages] != list(range(len(stages))):
                raise LayoutError(f"pipeline {pipe.index}: ranks {pipe.ranks} are not in stage order")
            covered = [layer for s in stages for layer in s.layers]
            if covered != list(range(self.num_layers)):
                raise LayoutError(f"pipeline {pipe.index} does not hold layers 0..{self.num_layers - 1} exactly once")
            partial = self.samples_per_step is not None
            if pipe.num_microbatches < 1 or (
                pipe.first_microbatch < start if partial else pipe.first_microbatch != start
            ):
                raise LayoutError(f"pipeline {pipe.index}: microbatch range does not follow the previous one")
            start = pipe.first_microbatch + pipe.num_microbatches
        if self.samples_per_step is not None:
            if start * self.microbatch_size > self.global_batch:
                raise LayoutError(f"pipelines run microbatches beyond the global batch of {self.global_batch}")
            if self.num_microbatches * self.microbatch_size != self.samples_per_step:
                raise LayoutError(
                    f"pipelines run {self.num_microbatches} microbatches of {self.microbatch_size}, "
                    f"a step trains on {self.samples_per_step} samples"
                )
        elif start * self.microbatch_size != self.global_batch:
            raise LayoutError(
                f"pipelines run {start} microbatches of {self.microbatch_size}, the global batch is {self.global_batch}"
            )


def sync_groups(stages: Sequence[StageAssignment], num_pipelines: int, num_layers: int) -> tuple[SyncGroup, ...]:
    """One group per distinct owner set of a layer with two or more owners, ordered by
    first layer (owner sets of contiguous stages are contiguous layer ranges)."""
    owners: dict[tuple[int, ...], list[int]] = {}
    for layer in range(num_layers):
        ranks = tuple(sorted(s.rank for s in stages if s.first_layer <= layer < s.end_layer))
        if len(ranks) != num_pipelines:
            raise LayoutError(f"layer {layer} has {len(ranks)} owners, expected one per pipeline ({num_pipelines})")
        if len(ranks) > 1:
            owners.setdefault(ranks, []).append(layer)
    groups = [SyncGroup(ranks, tuple(layers)) for ranks, layers in owners.items()]
    return tuple(sorted(groups, key=lambda g: (g.layers[0], g.ranks)))


def layout_from_plan(
    plan: ExecutionPlan,
    generation: int = 0,
    layer_allreduce_s: Sequence[float] = (),
) -> Layout:
    """Number the plan's stages as ranks and derive its process groups. A plan over part of
    the batch (`plan.partial`) keeps each pipeline on its own slice of the full batch."""
    stages: list[StageAssignment] = []
    pipelines: list[PipelineAssignment] = []
    first_mb = 0
    for index, (pipe, weight) in enumerate(zip(plan.pipelines, plan.gradient_weights)):
        ranks = []
        num_stages = pipe.template.num_stages
        for s_index, stage in enumerate(pipe.template.stages):
            if stage.num_gpus != 1:
                raise LayoutError(
                    f"pipeline {index} stage {s_index} spans {stage.num_gpus} GPUs of node "
                    f"{pipe.nodes[stage.node_index]}; the real backend runs one-GPU stages only "
                    "(plan with a profile without in-node all-reduce times)"
                )
            rank = len(stages)
            stages.append(
                StageAssignment(
                    rank=rank,
                    pipeline=index,
                    stage=s_index,
                    num_stages=num_stages,
                    first_layer=stage.first_layer,
                    end_layer=stage.end_layer,
                    node=pipe.nodes[stage.node_index],
                    gpu=stage.gpu_offset,
                )
            )
            ranks.append(rank)
        if plan.first_microbatches is not None:
            first_mb = plan.first_microbatches[index]
        pipelines.append(
            PipelineAssignment(
                index=index,
                ranks=tuple(ranks),
                num_microbatches=pipe.num_microbatches,
                first_microbatch=first_mb,
                gradient_weight=float(weight),
                predicted_time_s=pipe.iteration_time_s,
            )
        )
        first_mb += pipe.num_microbatches
    layout = Layout(
        generation=generation,
        num_layers=plan.num_layers,
        global_batch=plan.global_batch if plan.full_batch is None else plan.full_batch,
        microbatch_size=plan.microbatch_size,
        stages=tuple(stages),
        pipelines=tuple(pipelines),
        sync_groups=sync_groups(stages, len(pipelines), plan.num_layers),
        predicted_iteration_s=plan.iteration_time_s,
        layer_allreduce_s=tuple(float(x) for x in layer_allreduce_s),
        samples_per_step=None if plan.full_batch is None else plan.global_batch,
    )
    layout.validate()
    return layout
