"""Pipeline templates: the exact fastest pipeline for each node count (DESIGN 3.3).

A template for n nodes of g GPUs is a sequence of stages, each a contiguous layer range on
d GPUs (d a power of two) of one node; a node may hold several consecutive stages by
splitting its GPUs, and every GPU serves exactly one stage. Templates are ranked by T of
`costmodel` with N_b = 4 S microbatches.

The search is exact. With N_b = 4S and the bottleneck weight beta = w_k*, T splits into a
sum over stages: w_i + 4 beta for each stage before k* (which must have w_i <= beta),
4 beta for the bottleneck itself (w = beta), 2 w_i + 3 beta for each stage after it (which
must be strictly faster, k* being the rightmost maximum). For a fixed beta the best layout
is therefore a shortest path over states (first uncovered layer, GPUs left), built from the
last layer backwards so that one pass serves every node count at once (the answer for n
nodes is the state (layer 0, n g GPUs)). Every candidate beta is a stage weight; they are
tried in increasing order, and a node count stops once the lower bound
T >= sum of cheapest layer weights + 3 n beta exceeds its best T. The Oobleck paper's
divide-and-conquer keeps one best sub-plan per sub-problem and is not always optimal; this
search is checked against brute force in tests/planner.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .costmodel import INF, CostTables, bottleneck_index, pipeline_time_s
from .errors import InfeasibleError, PlannerError

# Relative slack on pruning bounds: they are proven for exact arithmetic; the slack keeps a
# rounding error in the last bits from pruning an optimal beta.
_BOUND_SLACK = 1e-9


@dataclass(frozen=True)
class Stage:
    """One stage of a template: layers [first_layer, end_layer) on `num_gpus` GPUs
    starting at GPU `gpu_offset` of the template's node `node_index`."""

    first_layer: int
    end_layer: int
    num_gpus: int
    node_index: int
    gpu_offset: int
    forward_s: float
    backward_s: float
    weight_s: float
    memory_bytes: float  # per GPU, with the planner's in-flight bound

    @property
    def layers(self) -> range:
        return range(self.first_layer, self.end_layer)


@dataclass(frozen=True)
class PipelineTemplate:
    """The fastest pipeline the planner found for `num_nodes` nodes."""

    num_nodes: int
    gpus_per_node: int
    stages: tuple[Stage, ...]
    iteration_time_s: float  # T with N_b = 4 S (the ranking value)

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    # Derived values are cached: a plan at 12,500 nodes evaluates thousands of pipelines
    # of a few templates (cached_property writes the instance dict, frozen or not).
    @cached_property
    def weights(self) -> tuple[float, ...]:
        return tuple(stage.weight_s for stage in self.stages)

    @cached_property
    def kstar(self) -> int:
        return bottleneck_index(self.weights)

    @property
    def bottleneck_s(self) -> float:
        return self.stages[self.kstar].weight_s

    @cached_property
    def _time_terms(self) -> tuple[float, int, float, float]:
        """(T1, S - k* + 1, w_k*, T3) of `pipeline_time_s`, summed in the same order."""
        weights, kstar = self.weights, self.kstar
        return sum(weights), len(weights) - kstar + 1, weights[kstar], sum(weights[kstar:])

    @cached_property
    def backward_before_s(self) -> np.ndarray:
        """Per layer: backward seconds of the stages before its stage (its last backward
        ends that long before the pipeline does)."""
        before, offsets = 0.0, []
        for stage in self.stages:
            offsets.extend([before] * (stage.end_layer - stage.first_layer))
            before += stage.backward_s
        return np.array(offsets)

    @cached_property
    def stage_starts(self) -> np.ndarray:
        return np.array([stage.first_layer for stage in self.stages])

    def iteration_time(self, num_microbatches: int) -> float:
        """T for this pipeline running `num_microbatches` microbatches (bit-identical to
        `pipeline_time_s(self.weights, num_microbatches)`)."""
        if num_microbatches < 1:
            return pipeline_time_s(self.weights, num_microbatches)  # raises its error
        t1, shift, bottleneck, t3 = self._time_terms
        return t1 + (num_microbatches - shift) * bottleneck + t3

    def node_layers(self, node_index: int) -> tuple[int, ...]:
        """The layers node `node_index` of the pipeline holds (a shard of each when d > 1)."""
        return tuple(
            layer for stage in self.stages if stage.node_index == node_index for layer in stage.layers
        )

    def to_dict(self) -> dict:
        return {
            "num_nodes": self.num_nodes,
            "num_stages": self.num_stages,
            "iteration_time_s": self.iteration_time_s,
            "stages": [
                {
                    "layers": [s.first_layer, s.end_layer],
                    "num_gpus": s.num_gpus,
                    "node_index": s.node_index,
                    "gpu_offset": s.gpu_offset,
                    "weight_s": s.weight_s,
                    "memory_bytes": s.memory_bytes,
                }
                for s in self.stages
            ],
        }


@dataclass(frozen=True)
class TemplateSet:
    """All templates of a job: one per node count in [n0, max(2 n0 - 1, N - f n0)]."""

    model: str
    num_layers: int
    gpus_per_node: int
    min_nodes: int  # n0
    stage_gpu_counts: tuple[int, ...]
    templates: tuple[PipelineTemplate, ...]

    def node_counts(self) -> tuple[int, ...]:
        return tuple(t.num_nodes for t in self.templates)

    def for_nodes(self, num_nodes: int) -> PipelineTemplate | None:
        for template in self.templates:
            if template.num_nodes == num_nodes:
                return template
        return None

    @property
    def max_nodes(self) -> int:
        return max(t.num_nodes for t in self.templates)


def template_node_range(n0: int, num_nodes: int, fault_tolerance: int) -> range:
    """DESIGN 3.3: [n0, max(2 n0 - 1, N - f n0)], capped at N."""
    upper = min(num_nodes, max(2 * n0 - 1, num_nodes - fault_tolerance * n0))
    return range(n0, upper + 1)


class TemplateSearch:
    """The exact search of the module docstring, over one profile and GPU count per node."""

    def __init__(self, tables: CostTables):
        self.tables = tables
        self.g = tables.gpus_per_node
        self.num_layers = tables.num_layers
        self.widths = tables.widths
        # For every stage end b and width d: the feasible starts a (contiguous: memory grows
        # with the range), their weights and in-flight capacities.
        self._columns: dict[tuple[int, int], tuple[int, np.ndarray, np.ndarray]] = {}
        for d in self.widths:
            w = tables.weight_matrix(d)
            k = tables.max_inflight_matrix(d)
            for b in range(1, self.num_layers + 1):
                fits = np.nonzero(k[:b, b] >= 1)[0]
                if fits.size:
                    lo = int(fits[0])
                    self._columns[(b, d)] = (lo, w[lo:b, b].copy(), k[lo:b, b].copy())
        self._penalties: dict[tuple[int, int], np.ndarray] = {}
        self._penalty_width = 0

    def _penalty(self, b: int, d: int, size: int) -> np.ndarray:
        """0 where a stage ending at b on d GPUs may sit with u GPUs after it (same node,
        memory for 1 + u in-flight microbatches), inf elsewhere; rows are its starts."""
        if size > self._penalty_width:
            self._penalties.clear()
            self._penalty_width = size
        key = (b, d)
        if key not in self._penalties:
            _, _, kmax = self._columns[key]
            u = np.arange(self._penalty_width)
            ok = (((u % self.g) + d) <= self.g)[None, :] & (u[None, :] < kmax[:, None])
            self._penalties[key] = np.where(ok, 0.0, INF)
        return self._penalties[key][:, :size]

    # -- the dynamic programme ----------------------------------------------------------
    def _run(self, beta: float | None, max_gpus: int) -> tuple[np.ndarray, np.ndarray]:
        """Shortest paths for one beta (None: the smallest possible bottleneck instead).

        Returns (after, done): cost of covering layers [a, L) with the last u GPUs, before
        and after the bottleneck has been placed. With beta None, `after` holds the least
        achievable largest stage weight of such a cover (a min-max path) and `done` is unused.
        """
        n_layers, width = self.num_layers, max_gpus + 1
        after = np.full((n_layers + 1, width), INF)
        done = np.full((n_layers + 1, width), INF)
        after[n_layers, 0] = 0.0  # stage weights are > 0, so max(0, w) = w in min-max mode
        for b in range(n_layers, 0, -1):
            src_after, src_done = after[b], done[b]
            has_after = np.isfinite(src_after).any()
            has_done = np.isfinite(src_done).any()
            if not (has_after or has_done):
                continue
            for d in self.widths:
                column = self._columns.get((b, d))
                if column is None or d > max_gpus:
                    continue
                lo, w, _ = column
                size = width - d
                penalty = self._penalty(b, d, size)
                rows = slice(lo, b)
                if beta is None:
                    worst = np.maximum(src_after[None, :size], w[:, None]) + penalty
                    np.minimum(after[rows, d:], worst, out=after[rows, d:])
                    continue
                if has_after:
                    base = src_after[None, :size] + penalty
                    cost_after = np.where(w < beta, 2 * w + 3 * beta, INF)
                    np.minimum(after[rows, d:], base + cost_after[:, None], out=after[rows, d:])
                    cost_neck = np.where(w == beta, 4 * beta, INF)
                    np.minimum(done[rows, d:], base + cost_neck[:, None], out=done[rows, d:])
                if has_done:
                    cost_before = np.where(w <= beta, w + 4 * beta, INF)
                    np.minimum(done[rows, d:], (src_done[None, :size] + penalty) + cost_before[:, None], out=done[rows, d:])
        return after, done

    def min_bottlenecks(self, max_nodes: int) -> dict[int, float]:
        """For each feasible n <= max_nodes (a layout uses every GPU and fits memory): the
        smallest largest-stage weight any layout can have. No template on n nodes has a
        bottleneck below it, so smaller betas need not be tried for n.

        Every node holds at least one stage and every stage at least one layer, so no
        layout has more nodes than the model has layers: the search stops there, whatever
        `max_nodes` (12,500 nodes cost what 96 do)."""
        max_nodes = min(max_nodes, self.num_layers)
        after, _ = self._run(None, max_nodes * self.g)
        values = {n: float(after[0, n * self.g]) for n in range(1, max_nodes + 1)}
        return {n: v for n, v in values.items() if v < INF}

    def feasible_node_counts(self, max_nodes: int) -> list[int]:
        """Node counts n <= max_nodes for which some layout uses every GPU and fits memory."""
        return sorted(self.min_bottlenecks(max_nodes))

    def _candidates(self) -> np.ndarray:
        values = [column[1] for column in self._columns.values()]
        return np.unique(np.concatenate(values)) if values else np.array([])

    def best(self, node_counts: Iterable[int], *, prune: bool = True) -> dict[int, PipelineTemplate]:
        """The optimal template for each of `node_counts` (all must be feasible).

        `prune=False` tries every candidate beta for every node count (the benchmark's
        baseline; same answers, slower)."""
        counts = sorted(set(node_counts))
        if not counts:
            return {}
        w_min = self.tables.min_total_weight_s() * (1 - _BOUND_SLACK)
        floor = self.min_bottlenecks(max(counts))
        best_t = {n: INF for n in counts}
        best_beta: dict[int, float] = {}
        active = [n for n in counts if n in floor]
        for beta in self._candidates():
            lower = {n: max(w_min + 3 * n * beta, (3 * n + 1) * beta) * (1 - _BOUND_SLACK) for n in active}
            if prune:
                active = [n for n in active if lower[n] < best_t[n]]
            if not active:
                break
            useful = [n for n in active if beta >= floor[n] or not prune]
            if not useful:
                continue
            _, done = self._run(float(beta), max(useful) * self.g)
            for n in useful:
                value = done[0, n * self.g]
                if value < best_t[n]:
                    best_t[n] = float(value)
                    best_beta[n] = float(beta)
        missing = [n for n in counts if n not in best_beta]
        if missing:
            raise InfeasibleError(f"no feasible pipeline on {missing} nodes")
        templates = {}
        by_beta: dict[float, list[int]] = {}
        for n in counts:
            by_beta.setdefault(best_beta[n], []).append(n)
        for beta, ns in by_beta.items():
            after, done = self._run(beta, max(ns) * self.g)
            for n in ns:
                templates[n] = self._trace_back(beta, after, done, n)
        return templates

    def _trace_back(self, beta: float, after: np.ndarray, done: np.ndarray, num_nodes: int) -> PipelineTemplate:
        """Follow exact-cost transitions from (layer 0, all GPUs) back to the end."""
        g, tables = self.g, self.tables
        layer, gpus, phase = 0, num_nodes * g, "done"
        picks: list[tuple[int, int, int, int]] = []  # (first, end, d, gpus left after stage)
        while layer < self.num_layers:
            here = (done if phase == "done" else after)[layer, gpus]
            step = None
            for end in range(layer + 1, self.num_layers + 1):
                for d in self.widths:
                    column = self._columns.get((end, d))
                    if column is None or d > gpus or layer < column[0]:
                        continue
                    lo, w_col, k_col = column
                    w, kmax = w_col[layer - lo], k_col[layer - lo]
                    rest = gpus - d
                    if (rest % g) + d > g or not rest < kmax:
                        continue
                    options = []
                    if phase == "done":
                        if w <= beta:
                            options.append(("done", done[end, rest] + (w + 4 * beta)))
                        if w == beta:
                            options.append(("after", after[end, rest] + 4 * beta))
                    elif w < beta:
                        options.append(("after", after[end, rest] + (2 * w + 3 * beta)))
                    for previous, value in options:
                        if value == here:
                            step = (end, d, previous, rest)
                            break
                    if step:
                        break
                if step:
                    break
            if step is None:  # pragma: no cover - would mean the DP and this walk disagree
                raise PlannerError(f"internal error: cannot trace the template for {num_nodes} nodes")
            end, d, phase, rest = step
            picks.append((layer, end, d, rest))
            layer, gpus = end, rest
        return build_template(tables, num_nodes, [(a, b, d) for a, b, d, _ in picks])


def build_template(tables: CostTables, num_nodes: int, layout: list[tuple[int, int, int]]) -> PipelineTemplate:
    """A template from a layout [(first, end, d), ...] in pipeline order (also used by the
    brute-force checker, so both score layouts identically)."""
    g = tables.gpus_per_node
    stages = []
    offset = 0
    total = num_nodes * g
    for first, end, d in layout:
        gpus_after = total - offset - d
        stages.append(
            Stage(
                first_layer=first,
                end_layer=end,
                num_gpus=d,
                node_index=offset // g,
                gpu_offset=offset % g,
                forward_s=tables.forward_s(first, end, d),
                backward_s=tables.backward_s(first, end, d),
                weight_s=tables.weight_s(first, end, d),
                memory_bytes=tables.memory_bytes(first, end, d, 1 + gpus_after),
            )
        )
        offset += d
    if offset != total:
        raise PlannerError(f"layout uses {offset} GPUs, the template has {total}")
    weights = [s.weight_s for s in stages]
    return PipelineTemplate(num_nodes, g, tuple(stages), pipeline_time_s(weights, 4 * len(stages)))
