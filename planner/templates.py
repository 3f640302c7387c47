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
tried in increasing order (a few at once, vectorised), and a node count stops once a lower
bound on T at that beta (`_lower_bound_s`, from the sum of cheapest layer weights and
S >= n stages) exceeds its best T. The Oobleck paper's
divide-and-conquer keeps one best sub-plan per sub-problem and is not always optimal; this
search is checked against brute force in tests/planner.

With pipeline communication charged (`costmodel`), a stage's weight also depends on whether
its neighbours share its node. That is fixed by the transition that places it (see
`_transitions`), so each transition block uses the weights of its own link pair and the
search stays exact; the candidate betas are the weights of every reachable link pair.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from .costmodel import INF, CostTables, bottleneck_index, pipeline_time_s
from .errors import InfeasibleError, PlannerError

# Relative slack on pruning bounds: they are proven for exact arithmetic; the slack keeps a
# rounding error in the last bits from pruning an optimal beta.
_BOUND_SLACK = 1e-9
# Betas per vectorised DP pass: numpy's per-call cost is shared by the betas of a batch,
# and a batch stays small enough that betas its first ones would have pruned cost little
# (GPT-3 175B on 8 GPUs per node: 56 betas needed, 54 with perfect pruning).
_BATCH = 8


@dataclass(frozen=True)
class Stage:
    """One stage of a template: layers [first_layer, end_layer) on `num_gpus` GPUs
    starting at GPU `gpu_offset` of the template's node `node_index`. `forward_s` and
    `backward_s` include the stage's outgoing sends when the cost model charges them."""

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
        return tuple(layer for stage in self.stages if stage.node_index == node_index for layer in stage.layers)

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


def _by_gpus(states: np.ndarray) -> np.ndarray:
    """[beta, a, q, c] as `_run` stores states -> [beta, a, u], u = g (c - 1) + q + 1."""
    count, rows, g, columns = states.shape
    flat = np.empty((count, rows, g * (columns - 1) + 1))
    flat[:, :, 0] = states[:, :, g - 1, 0]
    flat[:, :, 1:] = states[:, :, :, 1:].transpose(0, 1, 3, 2).reshape(count, rows, -1)
    return flat


def _lower_bound_s(w_min_s: float, num_nodes: int, beta: float) -> float:
    """No n-node layout with bottleneck weight beta has T below this (exact arithmetic).

    T = sum_{i<k} w_i + 2 sum_{i>k} w_i + (3S + k + 1) beta (k the 0-based bottleneck,
    N_b = 4S) with S >= n stages and sum w >= w_min. Bounding sum_{i<k} w_i by k beta
    (each w_i <= beta) gives T >= 2 sum w + (3S - 1) beta; dropping the sums, T >=
    (3S + 1) beta; keeping them as they are, T >= sum w + 3S beta."""
    return max(2 * w_min_s + (3 * num_nodes - 1) * beta, w_min_s + 3 * num_nodes * beta, (3 * num_nodes + 1) * beta)


def template_node_range(n0: int, num_nodes: int, fault_tolerance: int) -> range:
    """DESIGN 3.3: [n0, max(2 n0 - 1, N - f n0)], capped at N."""
    upper = min(num_nodes, max(2 * n0 - 1, num_nodes - fault_tolerance * n0))
    return range(n0, upper + 1)


Links = tuple[bool, bool] | None  # (next stage in the node, previous stage in the node); None: no comm term


def stage_links(offset: int, d: int, g: int) -> tuple[bool, bool]:
    """Whether the stage on GPUs [offset, offset + d) of a pipeline (g GPUs per node) shares
    its node with the next and with the previous stage (at the ends: no neighbour, False)."""
    return (offset + d) % g != 0, offset % g != 0


class TemplateSearch:
    """The exact search of the module docstring, over one profile and GPU count per node."""

    def __init__(self, tables: CostTables):
        self.tables = tables
        self.g = tables.gpus_per_node
        self.num_layers = tables.num_layers
        self.widths = tables.widths
        self._comm = tables.comm is not None
        # For every stage end b and width d: the feasible starts a (contiguous: memory grows
        # with the range), their weights per link pair (`_links_of`) and in-flight capacities.
        self._columns: dict[tuple[int, int], tuple[int, dict[Links, np.ndarray], np.ndarray]] = {}
        for d in self.widths:
            k = tables.max_inflight_matrix(d)
            matrices = {links: tables.weight_matrix(d, *(links or (False, False))) for links in self._links_of(d)}
            for b in range(1, self.num_layers + 1):
                fits = np.nonzero(k[:b, b] >= 1)[0]
                if fits.size:
                    lo = int(fits[0])
                    columns = {links: w[lo:b, b].copy() for links, w in matrices.items()}
                    self._columns[(b, d)] = (lo, columns, k[lo:b, b].copy())
        # For every stage start a: the stages that may begin there, as (end, d, weights per
        # link pair, in-flight capacity) in the order the trace-back tries them.
        self._from: list[list[tuple[int, int, dict[Links, float], float]]] = [[] for _ in range(self.num_layers)]
        for end in range(1, self.num_layers + 1):
            for d in self.widths:
                column = self._columns.get((end, d))
                if column is not None:
                    lo, w_cols, k_col = column
                    for a in range(lo, end):
                        weights = {links: float(w[a - lo]) for links, w in w_cols.items()}
                        self._from[a].append((end, d, weights, float(k_col[a - lo])))
        self._least_inflight = {key: float(column[2].min()) for key, column in self._columns.items()}
        # every stage weight of one link pair, one flat vector per pair
        self._weight_offsets: dict[Links, dict[tuple[int, int], int]] = {}
        flat: dict[Links, list[np.ndarray]] = {}
        for key, (_, w_cols, _) in self._columns.items():
            for links, w in w_cols.items():
                parts = flat.setdefault(links, [])
                offsets = self._weight_offsets.setdefault(links, {})
                offsets[key] = sum(len(v) for v in parts)
                parts.append(w)
        self._all_weights = {links: np.concatenate(parts) for links, parts in flat.items()}
        self._memory_masks: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._floor_cache: tuple[int, dict[int, float]] = (0, {})

    def _links_of(self, d: int) -> tuple[Links, ...]:
        """The link pairs a stage of d GPUs can have (`_transitions`); (None,) without the
        communication term."""
        if not self._comm:
            return (None,)
        if d == self.g:
            return ((False, False),)
        return ((True, True), (True, False), (False, True)) if d < self.g - 1 else ((True, False), (False, True))

    def _transitions(self, d: int, nodes: int) -> list[tuple[Any, Any, Any, Links, Any]]:
        """(to slot, from slot, from node, link pair, memory mask part) of a stage on d GPUs.

        Block 1 (slots q >= d, from slot q - d of the same node) has the next stage in the
        node; its stage starts a node exactly at q = g - 1 (previous stage across nodes).
        Block 2 (slot d - 1, from the previous node's last slot) has the next stage on the
        next node (or none), the previous one in the node unless d = g."""
        g = self.g
        out: list[tuple[Any, Any, Any, Links, Any]] = []
        if d < g:
            if not self._comm:
                out.append((np.s_[d:g], np.s_[0 : g - d], np.s_[1:], None, (0, np.s_[:])))
            else:
                if d < g - 1:
                    out.append(
                        (np.s_[d : g - 1], np.s_[0 : g - 1 - d], np.s_[1:], (True, True), (0, np.s_[: g - 1 - d]))
                    )
                out.append((g - 1, g - 1 - d, np.s_[1:], (True, False), (0, g - 1 - d)))
        links: Links = None if not self._comm else (False, d < g)
        out.append((d - 1, g - 1, np.s_[:nodes], links, (1, None)))
        return out

    def _memory_masks_for(self, b: int, d: int, nodes: int) -> tuple[np.ndarray, np.ndarray] | None:
        """inf where a stage [a, b) on d GPUs cannot hold 1 + u' in-flight microbatches (u'
        the GPUs after it), 0 elsewhere, for the two transition blocks of `_run`; None when
        every start holds every u' the search can reach."""
        if self._least_inflight[(b, d)] > self.g * nodes:
            return None
        key = (b, d)
        if key not in self._memory_masks or self._memory_masks[key][1].shape[-1] < nodes:
            g, widest = self.g, max(self.num_layers, nodes)  # built for the most nodes a template has, sliced
            _, _, kmax = self._columns[key]
            column = np.arange(1, widest + 1)
            within = g * (column[None, :] - 1) + np.arange(g - d)[:, None] + 1  # u' of block 1
            across = g * (column - 1)  # u' of block 2
            self._memory_masks[key] = (
                np.where(within[None] < kmax[:, None, None], 0.0, INF),
                np.where(across[None, :] < kmax[:, None], 0.0, INF),
            )
        within, across = self._memory_masks[key]
        return within[..., :nodes], across[..., :nodes]

    # -- the dynamic programme ----------------------------------------------------------
    def _run(self, betas: np.ndarray | None, max_gpus: int) -> tuple[np.ndarray, np.ndarray]:
        """Shortest paths for each beta in `betas` at once (None: the smallest possible
        bottleneck instead).

        Returns (after, done), indexed [beta, a, u]: the cost of covering layers [a, L)
        with the last u GPUs, before and after the bottleneck has been placed. With betas
        None there is one row, `after` holds the least achievable largest stage weight of
        such a cover (a min-max path) and `done` is empty.

        Inside, GPUs are counted from the pipeline's end, u = g (c - 1) + q + 1 stored at
        [q, c] (q the slot in the node, c - 1 the node; u = 0 at [g - 1, 0]). A stage on d
        GPUs stays in one node exactly when it ends on a slot q >= d - 1; it leaves slot
        q - d of the same node (q >= d) or the previous node's last slot (q = d - 1). Both
        are plain slices with the nodes innermost, so no transition straddles a node and
        numpy runs long contiguous loops. Both phases sit in one array, [beta, phase, a,
        q, c] with phase 0 "after" and 1 "done", so the two phase-keeping transitions are
        one operation; the bottleneck's own transition (w = beta exactly) is rare.
        """
        g, n_layers = self.g, self.num_layers
        nodes = -(-max_gpus // g)
        minmax = betas is None
        count = 1 if betas is None else len(betas)
        states = np.full((count, 1 if minmax else 2, n_layers + 1, g, nodes + 1), INF)
        states[:, 0, n_layers, g - 1, 0] = 0.0  # u = 0; stage weights are > 0, so max(0, w) = w in min-max mode
        keep: dict[Links, np.ndarray] = {}
        neck: dict[Links, np.ndarray] = {}
        has_neck: dict[Links, np.ndarray] = {}
        if not minmax:
            beta = np.asarray(betas, dtype=float)[:, None]
            for links, weights in self._all_weights.items():
                w_all = weights[None, :]
                keep[links] = np.stack(  # [beta, phase, stage]: after -> after, done -> done
                    [
                        np.where(w_all < beta, 2 * w_all + 3 * beta, INF),
                        np.where(w_all <= beta, w_all + 4 * beta, INF),
                    ],
                    axis=1,
                )
                neck[links] = np.where(w_all == beta, 4 * beta, INF)
                has_neck[links] = np.asarray(np.isfinite(neck[links]).any(axis=0))
        for b in range(n_layers, 0, -1):
            if not np.isfinite(states[:, :, b]).any():
                continue
            for d in self.widths:
                column = self._columns.get((b, d))
                if column is None:
                    continue
                lo, w_cols, _ = column
                rows = b - lo
                masks = self._memory_masks_for(b, d, nodes)
                for to_slot, from_slot, from_node, links, (block, part) in self._transitions(d, nodes):
                    source = states[:, :, b, from_slot, from_node][:, :, None]  # [beta, phase, 1, (slot,) node]
                    if masks is not None:
                        mask = masks[block] if part is None else masks[block][:, part]
                        source = source + mask
                    extra = (1,) * (source.ndim - 3)
                    target = states[:, :, lo:b, to_slot, 1:]
                    if minmax:
                        w = w_cols[links]
                        np.minimum(target, np.maximum(source, w.reshape((1, 1, rows) + extra)), out=target)
                        continue
                    offset = self._weight_offsets[links][(b, d)]
                    cost = keep[links][:, :, offset : offset + rows].reshape((count, 2, rows) + extra)
                    np.minimum(target, source + cost, out=target)
                    hit = np.nonzero(has_neck[links][offset : offset + rows])[0]
                    if hit.size:
                        first, last = int(hit[0]), int(hit[-1]) + 1
                        target = states[:, 1, lo + first : lo + last, to_slot, 1:]
                        part_source = source[:, 0] if masks is None else source[:, 0, first:last]
                        cost = neck[links][:, offset + first : offset + last].reshape((count, last - first) + extra)
                        np.minimum(target, part_source + cost, out=target)
        if minmax:
            return _by_gpus(states[:, 0]), np.empty(0)
        return _by_gpus(states[:, 0]), _by_gpus(states[:, 1])

    def min_bottlenecks(self, max_nodes: int) -> dict[int, float]:
        """For each feasible n <= max_nodes (a layout uses every GPU and fits memory): the
        smallest largest-stage weight any layout can have. No template on n nodes has a
        bottleneck below it, so smaller betas need not be tried for n.

        Every node holds at least one stage and every stage at least one layer, so no
        layout has more nodes than the model has layers: the search stops there, whatever
        `max_nodes` (12,500 nodes cost what 96 do)."""
        max_nodes = min(max_nodes, self.num_layers)
        computed, values = self._floor_cache  # a state with u GPUs depends only on fewer GPUs
        if max_nodes > computed:
            after, _ = self._run(None, max_nodes * self.g)
            values = {n: float(after[0, 0, n * self.g]) for n in range(1, max_nodes + 1)}
            self._floor_cache = (max_nodes, values)
        return {n: v for n, v in values.items() if n <= max_nodes and v < INF}

    def feasible_node_counts(self, max_nodes: int) -> list[int]:
        """Node counts n <= max_nodes for which some layout uses every GPU and fits memory."""
        return sorted(self.min_bottlenecks(max_nodes))

    def _candidates(self) -> np.ndarray:
        values = [w for column in self._columns.values() for w in column[1].values()]
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
        kept: dict[float, tuple[np.ndarray, np.ndarray]] = {}  # the DP of every beta some n still uses
        active = [n for n in counts if n in floor]
        candidates = [float(beta) for beta in self._candidates()]
        position = 0
        while position < len(candidates) and active:
            # A batch of betas, each with the node counts still open at the batch's start;
            # later results can only close more, so running a few extra betas changes nothing.
            batch: list[tuple[float, list[int]]] = []
            while position < len(candidates) and len(batch) < _BATCH:
                beta = candidates[position]
                position += 1
                if prune:
                    active = [n for n in active if _lower_bound_s(w_min, n, beta) * (1 - _BOUND_SLACK) < best_t[n]]
                if not active:
                    break
                useful = [n for n in active if beta >= floor[n] or not prune]
                if useful:
                    batch.append((beta, useful))
            if not batch:
                continue
            after, done = self._run(np.array([beta for beta, _ in batch]), max(max(u) for _, u in batch) * self.g)
            for row, (beta, useful) in enumerate(batch):
                improved = False
                for n in useful:
                    value = done[row, 0, n * self.g]
                    if value < best_t[n]:
                        best_t[n] = float(value)
                        best_beta[n] = beta
                        improved = True
                if improved:
                    kept[beta] = (after[row].copy(), done[row].copy())
            in_use = set(best_beta.values())
            kept = {beta: tables for beta, tables in kept.items() if beta in in_use}
        missing = [n for n in counts if n not in best_beta]
        if missing:
            raise InfeasibleError(f"no feasible pipeline on {missing} nodes")
        return {n: self._trace_back(best_beta[n], *kept[best_beta[n]], n) for n in counts}

    def _trace_back(self, beta: float, after: np.ndarray, done: np.ndarray, num_nodes: int) -> PipelineTemplate:
        """Follow exact-cost transitions from (layer 0, all GPUs) back to the end."""
        g, tables = self.g, self.tables
        layer, gpus, phase = 0, num_nodes * g, "done"
        picks: list[tuple[int, int, int, int]] = []  # (first, end, d, gpus left after stage)
        while layer < self.num_layers:
            here = (done if phase == "done" else after)[layer, gpus]
            step = None
            for end, d, weights, kmax in self._from[layer]:
                rest = gpus - d
                if d > gpus or (rest % g) + d > g or not rest < kmax:
                    continue
                w = weights[(rest % g != 0, gpus % g != 0) if self._comm else None]
                if phase == "done":
                    if w <= beta and done[end, rest] + (w + 4 * beta) == here:
                        step = (end, d, "done", rest)
                    elif w == beta and after[end, rest] + 4 * beta == here:
                        step = (end, d, "after", rest)
                elif w < beta and after[end, rest] + (2 * w + 3 * beta) == here:
                    step = (end, d, "after", rest)
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
        forward_in_node, backward_in_node = stage_links(offset, d, g)
        stages.append(
            Stage(
                first_layer=first,
                end_layer=end,
                num_gpus=d,
                node_index=offset // g,
                gpu_offset=offset % g,
                forward_s=tables.forward_s(first, end, d, forward_in_node),
                backward_s=tables.backward_s(first, end, d, backward_in_node),
                weight_s=tables.weight_s(first, end, d, forward_in_node, backward_in_node),
                memory_bytes=tables.memory_bytes(first, end, d, 1 + gpus_after),
            )
        )
        offset += d
    if offset != total:
        raise PlannerError(f"layout uses {offset} GPUs, the template has {total}")
    weights = [s.weight_s for s in stages]
    return PipelineTemplate(num_nodes, g, tuple(stages), pipeline_time_s(weights, 4 * len(stages)))
