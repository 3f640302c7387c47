"""A grid plan: W identical pipelines of D one-GPU stages, worker k = w D + s on node k // g.

The shape that Varuna chooses by its configuration search (EuroSys'22) and that Parcae and
ReCycle plan with too: D stages of consecutive layers, each replicated W times, every
replica running the same microbatches. Engines time, place and checkpoint such a plan from
its shape alone (`Grid`), as they do the planner's own `ExecutionPlan`, so the simulator and
the real backend need no design's module to run one.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Container, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from math import gcd

from ..checkpoint_cost import Holdings, Ranges, merge
from ..errors import PlannerError


@dataclass(frozen=True)
class Grid:
    """D stages x W replicas at microbatch b, N_b microbatches per replica per iteration, and
    the predicted pipeline time and gradient all-reduce of one iteration."""

    depth: int
    width: int
    microbatch_size: int
    num_microbatches: int
    stage_layers: tuple[tuple[int, int], ...]
    compute_s: float  # pipeline T
    allreduce_s: float

    @property
    def num_gpus(self) -> int:
        return self.depth * self.width

    @property
    def iteration_time_s(self) -> float:
        return self.compute_s + self.allreduce_s


@dataclass(frozen=True)
class GridPlan:
    """A configuration on concrete nodes, worker k = w D + s (replica w, stage s) on node
    k // gpus_per_node. `stage_nodes[s]`, the nodes holding a replica of stage s, is worked
    out when first asked for (a placement on 12,500 nodes would list 100,000 workers)."""

    config: Grid
    nodes: tuple[str, ...]
    given_stage_nodes: tuple[tuple[str, ...], ...] | None
    idle_gpus: int

    @property
    def iteration_time_s(self) -> float:
        return self.config.iteration_time_s

    @property
    def gpus_per_node(self) -> int:
        return (self.config.num_gpus + self.idle_gpus) // len(self.nodes)

    @cached_property
    def stage_nodes(self) -> tuple[tuple[str, ...], ...]:
        if self.given_stage_nodes is not None:
            return self.given_stage_nodes
        c, g, nodes = self.config, self.gpus_per_node, self.nodes
        return tuple(
            tuple(dict.fromkeys(nodes[(w * c.depth + s) // g] for w in range(c.width))) for s in range(c.depth)
        )

    def layer_holdings(self, stage_layers: Sequence[tuple[int, int]] | None = None) -> Holdings:
        """Which layers its nodes hold (`planner.policies.holdings`): node j runs workers
        j g .. j g + g - 1 (worker k = w D + s is stage s), so it holds the union of those
        workers' stages; the pattern repeats every D / gcd(D, g) nodes."""
        if self.given_stage_nodes is not None:
            return Counter(self._node_ranges(j) for j in range(len(self.nodes)))
        return _holdings_shape(self.config, len(self.nodes), self._gpus_per_node())

    def node_layer_ranges(self, node: str, stage_layers: Sequence[tuple[int, int]] | None = None) -> Ranges:
        return self._node_ranges(self.nodes.index(node))

    def _node_ranges(self, j: int) -> Ranges:
        c = self.config
        if self.given_stage_nodes is not None:  # a placement other than `place`'s
            node = self.nodes[j]
            return merge(*(c.stage_layers[s] for s, holders in enumerate(self.given_stage_nodes) if node in holders))
        g = self._gpus_per_node()
        workers = range(j * g, min((j + 1) * g, c.depth * c.width))
        return merge(*(c.stage_layers[k % c.depth] for k in workers))

    def _gpus_per_node(self) -> int:
        g, rest = divmod(self.config.depth * self.config.width + self.idle_gpus, len(self.nodes))
        if rest:
            raise PlannerError("internal: a grid plan whose GPUs do not divide among its nodes")
        return g

    def stages_without_holder(self, alive: Container[str]) -> list[int]:
        """Stages none of whose replicas is on a node in `alive`; O(nodes + dead nodes' stages
        x replicas scanned until a live one)."""
        dead = {j for j, n in enumerate(self.nodes) if n not in alive}
        if not dead:
            return []
        if self.given_stage_nodes is not None:
            return [s for s, holders in enumerate(self.given_stage_nodes) if not any(n in alive for n in holders)]
        c, g = self.config, self.gpus_per_node
        stages = sorted({k % c.depth for j in dead for k in range(j * g, min((j + 1) * g, c.num_gpus))})
        return [s for s in stages if all((w * c.depth + s) // g in dead for w in range(c.width))]

    def describe(self) -> dict:
        c = self.config
        return {
            "nodes": len(self.nodes),
            "depth": c.depth,
            "width": c.width,
            "microbatch_size": c.microbatch_size,
            "microbatches": c.num_microbatches,
            "idle_gpus": self.idle_gpus,
            "predicted_iteration_s": c.iteration_time_s,
        }


def place(config: Grid, ready: Sequence[str], gpus_per_node: int) -> GridPlan:
    """Worker k = w D + s (replica w, stage s) runs on node k // gpus_per_node."""
    workers = config.depth * config.width
    used = math.ceil(workers / gpus_per_node)
    return GridPlan(config, tuple(ready[:used]), None, used * gpus_per_node - workers)


@lru_cache(maxsize=256)
def _holdings_shape(c: Grid, used: int, g: int) -> Holdings:
    """Depends on the grid and node count only: the designs that plan grids re-place them at
    every event."""
    plan = GridPlan(c, tuple(str(j) for j in range(used)), None, used * g - c.num_gpus)
    full = c.depth * c.width // g  # nodes whose g GPUs all run a worker
    period = c.depth // gcd(c.depth, g)
    out: Counter = Counter()
    for j in range(min(period, full)):
        out[plan._node_ranges(j)] += len(range(j, full, period))
    for j in range(full, used):
        out[plan._node_ranges(j)] += 1
    return out
