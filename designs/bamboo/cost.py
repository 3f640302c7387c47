"""Bamboo's pipeline from a profile: layer split, memory with redundancy, iteration times.

Bamboo (NSDI'23) runs pipelines of a fixed depth D, one node per stage (its GPUs shard the
stage, as a planner stage of width g). Node i also holds stage i + 1's layers (the last
stage holds stage 0's) and, in eager mode, runs their forward pass on every microbatch so it
can take over at once.

- Split: D contiguous stages minimising the slowest stage's forward + backward (the least
  bottleneck, found by a search over candidate bottlenecks with greedy packing).
- Memory per GPU of stage i: the planner's stage memory (state + in-flight activations +
  workspace, with min(D - i, M) microbatches in flight, 1F1B) + the successor's model state
  + one microbatch of the successor's activations. Doubling the state is what makes large
  models run out of memory.
- Redundant compute: over an iteration of m microbatches the pipeline takes T(m) (the
  planner's T1 + T2 + T3) and stage i is busy m (F_i + B_i); its bubbles, T(m) - m (F_i + B_i),
  absorb the m F_{i+1} of redundant forward work, and what does not fit spills:
  T_bamboo = T(m) + max_i max(0, m F_{i+1} - bubble_i).
- Fail-over: a stage whose node is gone is computed by its predecessor, whose weight becomes
  the sum of both; the pipeline's T is recomputed on the merged weights (plus the same spill).
- Gradient all-reduce across the P pipelines: per stage, a ring all-reduce over the network,
  hidden behind the backward passes still running in earlier stages (as in the planner).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.costmodel import CostTables, pipeline_time_s
from planner.errors import PlannerError
from planner.hardware import ClusterSpec, ring_allreduce_s
from planner.profile import ModelProfile
from planner.units import size_text


@dataclass(frozen=True)
class BambooLayout:
    """One Bamboo pipeline of `depth` stages for a job of `num_microbatches` microbatches."""

    depth: int
    num_microbatches: int
    stage_layers: tuple[tuple[int, int], ...]  # [first, end) per stage
    forward_s: tuple[float, ...]
    weight_s: tuple[float, ...]  # forward + backward per stage (one microbatch)
    backward_s: tuple[float, ...]
    grad_bytes: tuple[int, ...]
    memory_bytes: tuple[float, ...]  # per GPU, with the successor's state
    usable_bytes: float
    inter_node_bw_bytes_per_s: float

    @property
    def oom_reason(self) -> str | None:
        for index, need in enumerate(self.memory_bytes):
            if need > self.usable_bytes:
                return (
                    f"Bamboo stage {index} of {self.depth} needs {size_text(need)} per GPU with its successor's "
                    f"redundant copy, {size_text(self.usable_bytes)} usable: out of memory"
                )
        return None

    def stage_of_layer(self) -> tuple[int, ...]:
        owner = []
        for stage, (first, end) in enumerate(self.stage_layers):
            owner.extend([stage] * (end - first))
        return tuple(owner)

    # -- times -------------------------------------------------------------------------
    def _spill_s(self, plain_s: float, m: int) -> float:
        d = self.depth
        spill = 0.0
        for i in range(d):
            bubble = plain_s - m * self.weight_s[i]
            spill = max(spill, m * self.forward_s[(i + 1) % d] - bubble)
        return spill

    def pipeline_s(self, m: int, covered: Sequence[int] = ()) -> tuple[float, float]:
        """(seconds with redundancy, seconds of the same work without it) for one pipeline
        of m microbatches whose stages in `covered` run on their predecessors."""
        plain = pipeline_time_s(self.weight_s, m)
        spill = self._spill_s(plain, m) if self.depth > 1 else 0.0
        if not covered:
            return plain + spill, plain
        merged = list(self.weight_s)
        gone = set(covered)
        if len(gone) >= self.depth:
            raise PlannerError(f"a pipeline of {self.depth} stages cannot fail over {len(gone)} of them")
        for stage in sorted(gone):
            target = (stage - 1) % self.depth
            while target in gone:  # not a legal fail-over (a covering node cannot cover again)
                target = (target - 1) % self.depth
            merged[target] += merged[stage]
        weights = [w for i, w in enumerate(merged) if i not in gone]
        return pipeline_time_s(weights, m) + spill, plain

    def allreduce_exposed_s(self, replicas: int) -> float:
        if replicas <= 1:
            return 0.0
        exposed, hidden = 0.0, 0.0
        for i in range(self.depth):
            ring = ring_allreduce_s(self.grad_bytes[i], replicas, self.inter_node_bw_bytes_per_s)
            exposed = max(exposed, ring - hidden)
            hidden += self.backward_s[i]
        return exposed

    def microbatches(self, num_pipelines: int) -> tuple[int, ...]:
        base, extra = divmod(self.num_microbatches, num_pipelines)
        return tuple(base + (1 if p < extra else 0) for p in range(num_pipelines))

    def iteration_s(self, num_pipelines: int, covered: Sequence[tuple[int, int]] = ()) -> tuple[float, float]:
        """(iteration seconds, the seconds a plain pipeline of the same layout would take)
        for `num_pipelines` pipelines with the given failed-over (pipeline, stage) pairs."""
        if num_pipelines < 1:
            raise PlannerError("Bamboo needs at least one pipeline")
        per_pipe: dict[int, list[int]] = {}
        for p, s in covered:
            per_pipe.setdefault(p, []).append(s)
        total, useful = 0.0, 0.0
        seen: dict[tuple[int, tuple[int, ...]], tuple[float, float]] = {}  # thousands of pipelines, few shapes
        for p, m in enumerate(self.microbatches(num_pipelines)):
            key = (m, tuple(per_pipe.get(p, ())))
            if key not in seen:
                seen[key] = self.pipeline_s(m, key[1])
            t, plain = seen[key]
            total, useful = max(total, t), max(useful, plain)
        exposed = self.allreduce_exposed_s(num_pipelines)
        return total + exposed, useful + exposed


def _split(weights: np.ndarray, depth: int) -> list[tuple[int, int]]:
    """D contiguous non-empty stages of prefix-summed `weights` with the least bottleneck."""
    n = len(weights) - 1
    candidates = np.unique(np.array([weights[b] - weights[a] for a in range(n) for b in range(a + 1, n + 1)]))

    def pack(limit: float) -> list[tuple[int, int]] | None:
        stages, first = [], 0
        while first < n:
            end = first + 1
            if weights[end] - weights[first] > limit:
                return None
            while end < n and weights[end + 1] - weights[first] <= limit:
                end += 1
            stages.append((first, end))
            first = end
        return stages if len(stages) <= depth else None

    lo, hi = 0, len(candidates) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if pack(float(candidates[mid])) is None:
            lo = mid + 1
        else:
            hi = mid
    stages = pack(float(candidates[lo]))
    assert stages is not None  # the search keeps a limit that packs: the largest, one stage of the whole model, does
    while len(stages) < depth:  # split the widest stage: the bottleneck cannot grow
        widest = max(range(len(stages)), key=lambda i: (stages[i][1] - stages[i][0], -i))
        first, end = stages[widest]
        stages[widest : widest + 1] = [(first, end - 1), (end - 1, end)]
    return stages


def bamboo_layout(profile: ModelProfile, cluster: ClusterSpec, depth: int, num_microbatches: int) -> BambooLayout:
    """Bamboo's pipeline of `depth` stages (one node each) for this profile and cluster."""
    if depth < 1:
        raise PlannerError(f"Bamboo's pipeline depth must be >= 1, got {depth}")
    if depth > profile.num_layers:
        raise PlannerError(f"Bamboo's depth {depth} exceeds the {profile.num_layers} layers of {profile.name}")
    tables = CostTables(profile, cluster)
    g = cluster.gpus_per_node
    if g not in tables.widths:
        raise PlannerError(f"{profile.name} has no in-node all-reduce times for stages of {g} GPUs")
    weights = np.array([0.0] + [tables.weight_s(0, end, g) for end in range(1, profile.num_layers + 1)])
    stages = _split(weights, depth)
    layers = profile.layers
    memory = []
    for i, (first, end) in enumerate(stages):
        succ_first, succ_end = stages[(i + 1) % depth]
        inflight = min(depth - i, num_microbatches)
        own = tables.memory_bytes(first, end, g, inflight)
        successor_state = sum(l.state_bytes for l in layers[succ_first:succ_end])
        successor_act = sum(l.activation_bytes for l in layers[succ_first:succ_end])
        memory.append(own + (successor_state + successor_act) / g if depth > 1 else own)
    return BambooLayout(
        depth=depth,
        num_microbatches=num_microbatches,
        stage_layers=tuple(stages),
        forward_s=tuple(tables.forward_s(a, b, g) for a, b in stages),
        weight_s=tuple(tables.weight_s(a, b, g) for a, b in stages),
        backward_s=tuple(tables.backward_s(a, b, g) for a, b in stages),
        grad_bytes=tuple(sum(l.grad_bytes for l in layers[a:b]) for a, b in stages),
        memory_bytes=tuple(memory),
        usable_bytes=float(cluster.usable_memory_bytes),
        inter_node_bw_bytes_per_s=cluster.inter_node_bw_bytes_per_s,
    )
