"""Execution plans: which pipelines run, on which nodes, with how many microbatches.

A plan's pipelines are instances of templates; pipeline i runs m_i microbatches and its
gradients count with weight m_i / M (M = global batch / microbatch size), so a plan with
unequal m_i computes exactly one data-parallel step over the global batch (DESIGN 3.4).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import chain

from .errors import PlannerError
from .templates import PipelineTemplate


@dataclass(frozen=True)
class JobSpec:
    """What is trained: samples per iteration, microbatch size, failures to survive."""

    global_batch: int
    microbatch_size: int
    fault_tolerance: int = 1

    def __post_init__(self) -> None:
        if self.microbatch_size < 1:
            raise PlannerError(f"microbatch size must be >= 1, got {self.microbatch_size}")
        if self.global_batch < 1:
            raise PlannerError(f"global batch must be >= 1, got {self.global_batch}")
        if self.global_batch % self.microbatch_size:
            raise PlannerError(
                f"global batch {self.global_batch} is not a multiple of the microbatch size {self.microbatch_size}"
            )
        if self.fault_tolerance < 0:
            raise PlannerError(f"fault tolerance f must be >= 0, got {self.fault_tolerance}")

    @property
    def num_microbatches(self) -> int:
        return self.global_batch // self.microbatch_size


@dataclass(frozen=True)
class PipelinePlan:
    """One pipeline: a template on concrete nodes (in stage order) with its microbatches."""

    template: PipelineTemplate
    nodes: tuple[str, ...]
    num_microbatches: int

    def __post_init__(self) -> None:
        if len(self.nodes) != self.template.num_nodes:
            raise PlannerError(
                f"a {self.template.num_nodes}-node template cannot run on {len(self.nodes)} nodes {list(self.nodes)}"
            )

    @property
    def iteration_time_s(self) -> float:
        return self.template.iteration_time(self.num_microbatches)

    def layers_of(self, node: str) -> tuple[int, ...]:
        return self.template.node_layers(self.nodes.index(node))


@dataclass(frozen=True)
class ExecutionPlan:
    """A whole plan. `iteration_time_s` = slowest pipeline + exposed gradient all-reduce.

    A plan may train on part of each step's batch (replica groups with groups out of the
    quorum): then `full_batch` is the job's samples per step, `global_batch` the part
    this plan trains on, and pipeline i takes microbatches from `first_microbatches[i]`
    of the full batch (the data of a step is a function of the step and the full batch).
    None, the default: pipelines take consecutive microbatches of `global_batch` from 0."""

    pipelines: tuple[PipelinePlan, ...]
    global_batch: int
    microbatch_size: int
    num_layers: int
    allreduce_exposed_s: float
    first_microbatches: tuple[int, ...] | None = None
    full_batch: int | None = None

    def __post_init__(self) -> None:
        if (self.first_microbatches is None) != (self.full_batch is None):
            raise PlannerError("internal: a plan over part of the batch needs both first_microbatches and full_batch")
        if self.first_microbatches is not None and self.full_batch is not None:
            if len(self.first_microbatches) != len(self.pipelines):
                raise PlannerError("internal: one first microbatch per pipeline")
            end = 0
            for first, p in zip(self.first_microbatches, self.pipelines):
                if first < end:
                    raise PlannerError("internal: pipelines' microbatch ranges overlap or are out of order")
                end = first + p.num_microbatches
            if end * self.microbatch_size > self.full_batch:
                raise PlannerError(f"internal: microbatches beyond the full batch of {self.full_batch}")
            if self.num_microbatches * self.microbatch_size != self.global_batch:
                raise PlannerError("internal: a partial plan's global batch is its pipelines' samples")

    @property
    def partial(self) -> bool:
        """True when the plan trains on part of each step's batch."""
        return self.full_batch is not None

    # The figures below are kept once computed (the plan is frozen): a 12,500-node plan has
    # hundreds of pipelines and policies ask for its pace at every event.
    @cached_property
    def num_microbatches(self) -> int:
        return sum(p.num_microbatches for p in self.pipelines)

    @cached_property
    def compute_time_s(self) -> float:
        """The slowest pipeline (kept: policies compare a plan's samples/s at every event)."""
        return max(p.iteration_time_s for p in self.pipelines)

    @cached_property
    def iteration_time_s(self) -> float:
        return self.compute_time_s + self.allreduce_exposed_s

    @cached_property
    def samples_per_s(self) -> float:
        return self.global_batch / self.iteration_time_s

    @property
    def gradient_weights(self) -> tuple[float, ...]:
        total = self.num_microbatches
        return tuple(p.num_microbatches / total for p in self.pipelines)

    @cached_property
    def nodes(self) -> tuple[str, ...]:
        """Every node, pipeline by pipeline (kept: simulators ask at every event)."""
        return tuple(chain.from_iterable(p.nodes for p in self.pipelines))

    @cached_property
    def node_set(self) -> frozenset[str]:
        """`nodes` as a set (kept, for membership tests at every event)."""
        return frozenset(self.nodes)

    @cached_property
    def pipeline_index(self) -> dict[str, int]:
        """node -> the index of its pipeline (kept; a node belongs to exactly one)."""
        return {node: i for i, p in enumerate(self.pipelines) for node in p.nodes}

    @cached_property
    def pipeline_nodes(self) -> frozenset[tuple[str, ...]]:
        """Each pipeline's nodes in stage order, as a set (kept: reconfigurations ask
        which pipelines of a new plan are old ones as they were)."""
        return frozenset(p.nodes for p in self.pipelines)

    @property
    def num_pipelines(self) -> int:
        return len(self.pipelines)

    @cached_property
    def node_layers(self) -> dict[str, tuple[int, ...]]:
        """Layers each node holds (a node belongs to exactly one pipeline)."""
        return {node: p.layers_of(node) for p in self.pipelines for node in p.nodes}

    def layer_owners(self, layer: int) -> tuple[str, ...]:
        """Nodes holding `layer`, one per pipeline (several when a stage spans GPUs of
        one node it is still one node)."""
        return tuple(node for node, layers in self.node_layers.items() if layer in layers)

    def to_dict(self) -> dict:
        return {
            "pipelines": [
                {
                    "num_nodes": p.template.num_nodes,
                    "nodes": list(p.nodes),
                    "microbatches": p.num_microbatches,
                    "iteration_time_s": p.iteration_time_s,
                    "stages": [
                        {
                            "layers": [s.first_layer, s.end_layer],
                            "num_gpus": s.num_gpus,
                            "node": p.nodes[s.node_index],
                            "gpu_offset": s.gpu_offset,
                        }
                        for s in p.template.stages
                    ],
                }
                for p in self.pipelines
            ],
            "global_batch": self.global_batch,
            "microbatch_size": self.microbatch_size,
            "gradient_weights": list(self.gradient_weights),
            "compute_time_s": self.compute_time_s,
            "allreduce_exposed_s": self.allreduce_exposed_s,
            "iteration_time_s": self.iteration_time_s,
            "samples_per_s": self.samples_per_s,
            **(
                {"first_microbatches": list(self.first_microbatches), "full_batch": self.full_batch}
                if self.first_microbatches is not None
                else {}
            ),
        }
