"""The planner's front door: templates on demand and instantiation (DESIGN 3.3, 3.4).

`Planner(profile, cluster, job)` owns the template search for one model on one kind of
node. `instantiate(nodes)` picks the fastest set of pipeline templates whose node counts
add up to exactly the given nodes (no node idle) with at least f + 1 pipelines, gives
each its microbatches and puts it on concrete nodes. Reconfiguration (`reconfigure`) and
the policies build on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from .allreduce import exposed_allreduce_s, grouped_exposed_allreduce_s, layer_allreduce_s, layer_allreduce_table_s
from .batching import counts_of, distribute_grouped, distribute_microbatches, linear_cost, split_groups
from .costmodel import CostTables
from .errors import InfeasibleError, PlannerError
from .hardware import ClusterSpec
from .mix import MixSearch
from .mix_reference import MixSearch as ReferenceMixSearch
from .mix_reference import first_stage_allreduce_table
from .plan import ExecutionPlan, JobSpec, PipelinePlan
from .profile import ModelProfile
from .templates import PipelineTemplate, TemplateSearch, TemplateSet, template_node_range
from .units import size_text


def _split(nodes: Sequence[str], sizes: Sequence[int]) -> list[list[str]]:
    """Consecutive groups of `nodes` of the given sizes."""
    groups, start = [], 0
    for n in sizes:
        groups.append(list(nodes[start : start + n]))
        start += n
    return groups


@dataclass(frozen=True)
class GroupLayout:
    """A plan's numbers before its pipelines are built (`Planner.layout`)."""

    templates: tuple[PipelineTemplate, ...]
    counts: tuple[int, ...]
    allreduce_exposed_s: float
    iteration_time_s: float  # slowest pipeline + exposed all-reduce, as ExecutionPlan's


class Planner:
    """Templates, instantiation and the data every policy needs, for one job."""

    def __init__(self, profile: ModelProfile, cluster: ClusterSpec, job: JobSpec):
        if job.microbatch_size != profile.microbatch_size:
            raise PlannerError(
                f"the job's microbatch size {job.microbatch_size} differs from the profile's "
                f"{profile.microbatch_size} ({profile.source or profile.name})"
            )
        self.profile = profile
        self.cluster = cluster
        self.job = job
        self.tables = CostTables(profile, cluster)
        self._search = TemplateSearch(self.tables)
        self._floors: dict[int, float] = {}
        self._floor_limit = 0
        self._templates: dict[int, PipelineTemplate] = {}
        self._allreduce_cache: dict[int, object] = {}
        self._mix_rows_k = -1  # `_mix_rows`: rows built for K = 0 .. this many pipelines
        self._mix_rows_cache: dict[int, tuple] = {}
        self._mix_prefix = np.zeros((0, 0))
        # best (sizes, counts) per (node count, min pipelines): plans differ only in names
        self._shapes: dict[tuple[int, int], tuple[tuple[int, ...], tuple[int, ...]] | InfeasibleError] = {}
        self._last_pipelines: dict[tuple[str, ...], PipelinePlan] = {}  # `plan_of`'s reuse

    # -- templates -------------------------------------------------------------------
    def feasible_sizes(self, up_to: int) -> list[int]:
        if up_to > self._floor_limit:
            self._floors = self._search.min_bottlenecks(up_to)
            self._floor_limit = up_to
        return [n for n in sorted(self._floors) if n <= up_to]

    @property
    def min_nodes(self) -> int:
        """n0: the fewest nodes that hold one replica (searched up to the cluster size)."""
        sizes = self.feasible_sizes(max(self.cluster.num_nodes, self._floor_limit))
        if not sizes:
            c, p = self.cluster, self.profile
            usable = c.num_nodes * c.gpus_per_node * c.usable_memory_bytes
            where = f"{p.name} does not fit on {c.num_nodes} node(s) of {c.gpus_per_node} x {c.gpu.name}"
            if p.state_bytes <= usable:  # enough memory in all, but no layout of the layers over the GPUs
                why = (
                    f"model state is {size_text(p.state_bytes)} of the cluster's {size_text(usable)}, "
                    f"but the template search found no layout of its {p.num_layers} layers over "
                    f"{c.gpus_per_node} GPU(s) a node that fits each GPU's memory"
                )
            else:
                why = f"model state is {size_text(p.state_bytes)}, the cluster has {size_text(usable)} usable"
            raise InfeasibleError(f"{where}: {why}")
        return sizes[0]

    def template(self, num_nodes: int) -> PipelineTemplate | None:
        """The optimal template for `num_nodes` nodes, or None if no layout fits."""
        known = self._templates.get(num_nodes)
        if known is not None:  # searched before (so within the floors searched): nothing to extend
            return known
        self.ensure_templates([num_nodes])
        return self._templates.get(num_nodes)

    def ensure_templates(self, counts: Sequence[int]) -> None:
        feasible = set(self.feasible_sizes(max(counts, default=0)))
        missing = [n for n in counts if n in feasible and n not in self._templates]
        if missing:
            self._templates.update(self._search.best(missing))

    def template_sizes(self, num_nodes: int, min_pipelines: int) -> list[int]:
        """Template node counts an instantiation over `num_nodes` nodes may use (DESIGN 3.3,
        with f + 1 replaced by the pipelines actually required)."""
        n0 = self.min_nodes
        feasible = set(self.feasible_sizes(num_nodes))
        sizes = [n for n in template_node_range(n0, num_nodes, max(0, min_pipelines - 1)) if n in feasible]
        self.ensure_templates(sizes)
        return sizes

    def template_set(self) -> TemplateSet:
        """The job's templates for the whole cluster: [n0, max(2 n0 - 1, N - f n0)]."""
        n0 = self.min_nodes
        f = self.job.fault_tolerance
        if self.cluster.num_nodes < (f + 1) * n0:
            raise InfeasibleError(
                f"f = {f} needs at least (f + 1) x n0 = {(f + 1) * n0} nodes "
                f"(one replica needs n0 = {n0}), the cluster has {self.cluster.num_nodes}"
            )
        sizes = self.template_sizes(self.cluster.num_nodes, f + 1)
        return TemplateSet(
            model=self.profile.name,
            num_layers=self.profile.num_layers,
            gpus_per_node=self.cluster.gpus_per_node,
            min_nodes=n0,
            stage_gpu_counts=self.tables.widths,
            templates=tuple(self._templates[n] for n in sizes),
        )

    # -- instantiation -----------------------------------------------------------------
    def layer_allreduce_s(self, replicas: int):
        if replicas not in self._allreduce_cache:
            self._allreduce_cache[replicas] = layer_allreduce_s(self.profile, self.cluster, replicas)
        return self._allreduce_cache[replicas]

    def build_plan(self, groups: Sequence[Sequence[str]]) -> ExecutionPlan:
        """A plan running each node group (in stage order) as the template of its size,
        with the batch distributed optimally."""
        return self.plan_of(groups, self.layout(groups))

    def layout(self, groups: Sequence[Sequence[str]]) -> GroupLayout:
        """What `build_plan(groups)` would run, without building it: each group's template
        and microbatches, and the plan's exposed all-reduce and iteration time (the same
        floats). Comparing candidate groupings this way skips the per-pipeline objects of
        the ones that lose (hundreds per plan at 12,500 nodes)."""
        # grouped by size (one template object per size): per-pipeline work is an index
        # list and the counts, the rest is per distinct template (the same floats as
        # `_layout`: the latest of a template's pipelines is the max of its distinct counts');
        # `distribute_grouped` raises what `distribute_microbatches` does (no pipelines, too
        # few microbatches), after the templates are looked up, as `build_plan` always did
        members: dict[int, list[int]] = {}
        for index, group in enumerate(groups):
            members.setdefault(len(group), []).append(index)
        distinct = []
        for size in members:
            template = self.template(size)
            if template is None:
                raise InfeasibleError(f"no pipeline template for {size} nodes")
            distinct.append(template)
        indices = list(members.values())
        split = distribute_grouped(distinct, indices, self.job.num_microbatches)
        counts = counts_of(split, indices, len(groups))
        latest = []
        for template, ix, (base, extra) in zip(distinct, indices, split):
            values = set(extra) if len(extra) == len(ix) else {0, *extra}
            latest.append(max(template.iteration_time(base + e) for e in values))
        exposed = (
            grouped_exposed_allreduce_s(distinct, latest, self.layer_allreduce_s(len(groups)))
            if len(groups) > 1
            else 0.0
        )
        by_size = dict(zip(members, distinct))
        templates = tuple(by_size[len(g)] for g in groups)
        return GroupLayout(templates, counts, exposed, max(latest) + exposed)

    def _layout(self, templates: Sequence[PipelineTemplate], counts: Sequence[int]) -> GroupLayout:
        times = [t.iteration_time(m) for t, m in zip(templates, counts)]
        exposed = exposed_allreduce_s(templates, times, self.layer_allreduce_s(len(templates)))
        return GroupLayout(tuple(templates), tuple(counts), exposed, max(times) + exposed)

    def plan_of(self, groups: Sequence[Sequence[str]], layout: GroupLayout) -> ExecutionPlan:
        """The plan of `layout` (from `layout(groups)`) on `groups`. A pipeline equal to one
        of the last plan built here (same nodes in order, template and microbatches) is that
        same frozen object: a reconfiguration at 12,500 nodes changes a few of hundreds."""
        last = self._last_pipelines
        pipelines = []
        for t, g, m in zip(layout.templates, groups, layout.counts):
            nodes = tuple(g)
            known = last.get(nodes)
            if known is None or known.template is not t or known.num_microbatches != m:
                known = PipelinePlan(t, nodes, m)
            pipelines.append(known)
        self._last_pipelines = {p.nodes: p for p in pipelines}
        return ExecutionPlan(
            pipelines=tuple(pipelines),
            global_batch=self.job.global_batch,
            microbatch_size=self.job.microbatch_size,
            num_layers=self.profile.num_layers,
            allreduce_exposed_s=layout.allreduce_exposed_s,
        )

    def _plan(self, templates, counts, groups) -> ExecutionPlan:
        return self.plan_of(groups, self._layout(templates, counts))

    def instantiate(self, nodes: Sequence[str], min_pipelines: int | None = None) -> ExecutionPlan:
        """The fastest plan using every node in `nodes` with >= `min_pipelines` pipelines
        (default f + 1). Pipelines are ordered smallest first and take nodes in the given
        order. Ties: fewer seconds, then more pipelines, then the smaller sizes."""
        nodes = list(nodes)
        if len(set(nodes)) != len(nodes):
            raise PlannerError(f"duplicate node names in {nodes}")
        k = self.job.fault_tolerance + 1 if min_pipelines is None else min_pipelines
        n0 = self.min_nodes
        if len(nodes) < k * n0:
            raise InfeasibleError(
                f"{k} pipeline(s) need at least {k} x n0 = {k * n0} nodes (n0 = {n0}), got {len(nodes)}"
            )
        key = (len(nodes), k)
        if key not in self._shapes:
            try:
                self._shapes[key] = self._best_shape(len(nodes), k)
            except InfeasibleError as exc:
                self._shapes[key] = exc
        shape = self._shapes[key]
        if isinstance(shape, InfeasibleError):
            raise InfeasibleError(str(shape))
        sizes, counts = shape
        return self._plan([self._templates[n] for n in sizes], counts, _split(nodes, sizes))

    def _best_shape(
        self, num_nodes: int, k: int, *, reference: bool = False
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The winning template sizes and microbatch counts for `num_nodes` nodes (the exact
        search over counts per size of `planner.mix`; `reference=True`: the part-by-part
        search it replaced, `planner.mix_reference`, for tests and benchmarks)."""
        sizes = self.template_sizes(num_nodes, k)
        total = self.job.num_microbatches
        if reference:
            best = self._reference_mix(num_nodes, k, sizes) if sizes else None
        else:
            seeds = self._mix_seeds(num_nodes, k, sizes)
            result = self.mix_search(num_nodes, k, sizes).best(num_nodes, k, seeds) if sizes else None
            best = result.sizes if result is not None else None
        if best is None:
            raise InfeasibleError(
                f"no way to split {num_nodes} nodes into >= {k} pipelines of "
                + (f"{sizes[0]}..{sizes[-1]}" if sizes else "no feasible")
                + f" nodes with {total} microbatches"
            )
        return best, distribute_microbatches([self._templates[n] for n in best], total)

    def _mix_seeds(self, num_nodes: int, k: int, sizes: Sequence[int]) -> list[tuple[tuple[int, int], ...]]:
        """Incumbents for the search at `num_nodes` from the optima already found at the
        nearest node counts below and above (same k): each with one pipeline grown or
        shrunk by the difference, or a pipeline of the difference's size added or removed.
        A spot trace re-instantiates at neighbouring counts, where such a mix is near the
        optimum from the start; the search stays exact whatever it is given."""
        allowed = set(sizes)
        below = max((n for n, j in self._shapes if j == k and n < num_nodes), default=None)
        above = min((n for n, j in self._shapes if j == k and n > num_nodes), default=None)
        seeds: list[tuple[tuple[int, int], ...]] = []
        for other in (n for n in (below, above) if n is not None):
            shape = self._shapes[(other, k)]
            if isinstance(shape, InfeasibleError):
                continue
            counts: dict[int, int] = {}
            for n in shape[0]:
                counts[n] = counts.get(n, 0) + 1
            d = num_nodes - other
            changes = [(n, n + d) for n in counts if n + d in allowed]
            if d in allowed:
                changes.append((0, d))
            if -d in counts:
                changes.append((-d, 0))
            for old, new in changes:
                mix = dict(counts)
                if old:
                    mix[old] -= 1
                if new:
                    mix[new] = mix.get(new, 0) + 1
                seeds.append(tuple(sorted((n, x) for n, x in mix.items() if x)))
        return seeds

    def mix_seconds(self, counts: Sequence[tuple[int, int]]) -> float:
        """The exact iteration time of the mix ((size, pipelines), ...) in increasing size."""
        # one group per size (pipelines of a size are consecutive): O(distinct sizes), the
        # same numbers as the plan's per-pipeline split and exposure
        templates = [self._templates[n] for n, _ in counts]
        split = split_groups([(linear_cost(t), x) for t, (_, x) in zip(templates, counts)], self.job.num_microbatches)
        latest = [t.iteration_time(base + max(extra, default=0)) for t, (base, extra) in zip(templates, split)]
        pipelines = sum(x for _, x in counts)
        exposed = (
            grouped_exposed_allreduce_s(templates, latest, self.layer_allreduce_s(pipelines)) if pipelines > 1 else 0.0
        )
        return max(latest) + exposed

    def mix_search(self, num_nodes: int, k: int, sizes: Sequence[int] | None = None) -> MixSearch:
        """The instantiation search over `sizes` (default: the templates `num_nodes` allow)."""
        sizes = self.template_sizes(num_nodes, k) if sizes is None else list(sizes)
        max_replicas = num_nodes // min(sizes) if sizes else 0
        rows = self._mix_rows(max_replicas, sizes)
        first = {n: rows[n][0][: max_replicas + 1] for n in sizes}
        later = {n: rows[n][1][: max_replicas + 1] for n in sizes if rows[n][1] is not None}
        stage_times = {n: (rows[n][2][0], rows[n][2][1][: max_replicas + 1], rows[n][2][2]) for n in sizes}
        lines = {n: linear_cost(self._templates[n]) for n in sizes}
        return MixSearch(lines, first, self.job.num_microbatches, self.mix_seconds, later, stage_times)

    def _mix_rows(self, max_replicas: int, sizes: Sequence[int]) -> dict[int, tuple]:
        """Per template size, the search's all-reduce rows for K = 0 .. at least
        `max_replicas` pipelines: (first stage [K], later-stage floor [K] or None,
        (stage starts, [K, stage] all-reduce, backward before each layer's stage)).
        Row K depends on K alone (`layer_allreduce_table_s` and the prefix sums are row by
        row), so rows built for more pipelines serve fewer: a spot day's hundreds of
        re-instantiations at neighbouring node counts build them once."""
        if max_replicas > self._mix_rows_k:
            self._mix_rows_k, self._mix_rows_cache = max_replicas, {}
            table = layer_allreduce_table_s(self.profile, self.cluster, max_replicas)
            self._mix_prefix = np.concatenate([np.zeros((max_replicas + 1, 1)), np.cumsum(table, axis=1)], axis=1)
        prefix, cache = self._mix_prefix, self._mix_rows_cache
        for n in sizes:
            if n in cache:
                continue
            template = self._templates[n]
            starts = template.stage_starts
            ends = np.array([stage.end_layer for stage in template.stages])
            stages = (starts, prefix[:, ends] - prefix[:, starts], template.backward_before_s)
            later = None
            if template.num_stages > 1:
                # stage s starts its all-reduce no earlier than T - beta_n - (backward before s)
                spans = stages[1][:, 1:] - template.backward_before_s[starts[1:]][None, :]
                later = spans.max(axis=1) - linear_cost(template)[1]
            cache[n] = (prefix[:, template.stages[0].end_layer], later, stages)
        return cache

    def _reference_mix(self, num_nodes: int, k: int, sizes: Sequence[int]) -> tuple[int, ...] | None:
        nodes = [str(i) for i in range(num_nodes)]
        total = self.job.num_microbatches

        def solve(ordered: tuple[int, ...]) -> float:
            templates = [self._templates[n] for n in ordered]
            counts = distribute_microbatches(templates, total)
            return self._plan(templates, counts, _split(nodes, ordered)).iteration_time_s

        search = ReferenceMixSearch(
            {n: linear_cost(self._templates[n]) for n in sizes},
            first_stage_allreduce_table(
                {n: self._templates[n].stages[0].end_layer for n in sizes},
                lambda replicas: [0.0, *accumulate(self.layer_allreduce_s(replicas))],
            ),
            total,
            solve,
        )
        return search.best(num_nodes, k)[0]

    def instantiate_best_effort(self, nodes: Sequence[str], min_pipelines: int | None = None) -> ExecutionPlan:
        """`instantiate` over as many of `nodes` as can be used (in the given order),
        the rest left as spares; for when template gaps make some node counts unusable."""
        nodes = list(nodes)
        for count in range(len(nodes), 0, -1):
            try:
                return self.instantiate(nodes[:count], min_pipelines)
            except InfeasibleError:
                if count == 1:
                    raise
        raise InfeasibleError("no nodes to instantiate over")
