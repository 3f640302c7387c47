"""A cheap bound for Oobleck's join gain test, so most declined joins skip instantiation.

`on_addition` accepts spares when the fresh plan over every node, after its copies and
the pause, beats the running plan over the horizon: sps' (H - copy - pause) > sps H. The
instantiation behind sps' costs a full template-mix search per distinct node count
(hundreds of counts on a spot trace, each up to seconds at 1,024+ nodes). Two bounds
decide most joins without it:

- Throughput. A pipeline of template n runs m microbatches in T_n(m) = c_n + beta_n m
  (exactly linear, `batching.linear_cost`). A mix finishing its M_b microbatches by T on
  exactly N nodes has sum_i (T - c_i) / beta_i >= M_b, and each pipeline's term is at most
  its n_i nodes times the best per-node rate max_n (T - c_n) / (beta_n n); so
  T >= min_n (c_n + beta_n n M_b / N) over the sizes instantiation may use, and the
  exposed all-reduce only adds to it: sps' <= global batch / that.
- Copies. Every spare holds nothing and joins the plan (instantiation leaves no node
  idle), so some node receives at least the fewest bytes any node of an allowed template
  holds: copy >= that / the inter-node bandwidth.

If sps'_max (H - copy_min - pause) <= sps H the real test fails too, and the join is
declined without instantiating; otherwise `on_addition` decides as before. Decisions are
the same as without the bound (tests/planner/test_policies_oobleck.py checks that);
only the declining note differs.
"""

from __future__ import annotations

from planner.assignment import positions_of
from planner.batching import linear_cost
from planner.errors import InfeasibleError
from planner.planner import Planner
from planner.templates import PipelineTemplate

_SLACK = 1 - 1e-9  # floating rounding in T_n(m) must not make the bound cut a passing join


class JoinBound:
    """Per node count: an upper bound on the fresh plan's samples/s and a lower bound on
    its join copy seconds (both cached by count; templates cached by the planner)."""

    def __init__(self, planner: Planner):
        self.planner = planner
        self._by_count: dict[tuple[int, int], tuple[float, float] | None] = {}
        self._fewest_bytes: dict[int, int] = {}  # per template size
        self._layer_bytes: list[int] | None = None  # read from the profile when first needed

    def bounds(self, num_nodes: int, min_pipelines: int) -> tuple[float, float] | None:
        """(most samples/s, fewest copy seconds) of joining to `num_nodes` nodes, or None
        when no template fits (let the real test say why)."""
        key = (num_nodes, min_pipelines)
        if key not in self._by_count:
            self._by_count[key] = self._compute(num_nodes, min_pipelines)
        return self._by_count[key]

    def _compute(self, num_nodes: int, min_pipelines: int) -> tuple[float, float] | None:
        planner = self.planner
        try:
            sizes = planner.template_sizes(num_nodes, min_pipelines)
        except InfeasibleError:
            return None
        found = [planner.template(n) for n in sizes]
        templates = [t for t in found if t is not None]
        if not templates or len(templates) < len(found):
            return None
        total = planner.job.num_microbatches
        fastest = min(c + beta * t.num_nodes * total / num_nodes for t in templates for c, beta in [linear_cost(t)])
        if not fastest > 0:
            return None
        most_sps = planner.job.global_batch / (fastest * _SLACK)
        fewest_bytes = min(self._fewest(t) for t in templates)
        return most_sps, fewest_bytes * _SLACK / planner.cluster.inter_node_bw_bytes_per_s

    def _fewest(self, template: PipelineTemplate) -> int:
        """The fewest bytes a node position of `template` holds (what `copy_plan` sends it)."""
        n = template.num_nodes
        if self._layer_bytes is None:
            self._layer_bytes = [layer.param_bytes + layer.optimizer_bytes for layer in self.planner.profile.layers]
        if n not in self._fewest_bytes:
            self._fewest_bytes[n] = min(sum(self._layer_bytes[l] for l in held) for held in positions_of(template))
        return self._fewest_bytes[n]

    def declines(
        self, current_sps: float, num_nodes: int, min_pipelines: int, horizon_s: float, pause_s: float
    ) -> float | None:
        """The bound on samples/s when it proves the join cannot pay (None: it may)."""
        found = self.bounds(num_nodes, min_pipelines)
        if found is None:
            return None
        most_sps, copy_s = found
        if most_sps * max(0.0, horizon_s - copy_s - pause_s) <= current_sps * horizon_s:
            return most_sps
        return None
