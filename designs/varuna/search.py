"""Varuna's configuration search (EuroSys'22 "job morphing"), from a profile.

Varuna trains with D pipeline stages times W data-parallel replicas on single GPUs, cutting
the model only at its cut points (here: layer boundaries, so D divides the layer count L,
and every stage gets L / D consecutive layers). For each usable GPU count it tries every
such D, takes W = floor(GPUs / D), and for each (D, W) the largest microbatch b (powers of
two up to `max_microbatch`, with W b <= global batch) whose stages fit in memory; the
predicted iteration time is the planner's T1 + T2 + T3 for N_b = ceil(global batch / (W b))
microbatches plus the gradient all-reduce after the pipeline flush (each stage's ring
all-reduce over the W replicas, over the network, not overlapped: Varuna synchronises after
the last backward). Fastest predicted wins (ties: fewer GPUs, then fewer stages); GPUs left
over (GPUs - D W) idle. A larger b holds more activations but, in an analytic profile, is no
faster per sample: "largest that fits" is Varuna's rule, not the analytic optimum.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from planner.costmodel import CostTables, pipeline_time_s
from planner.hardware import ClusterSpec, ring_allreduce_s
from planner.policies.grid import Grid
from planner.profile import ModelProfile

DEFAULT_MAX_MICROBATCH = 8


class VarunaSearch:
    """Best configuration per usable GPU count, cached. `profile_for(b)` returns the model's
    profile at microbatch b, or None where it has none (a measured profile has one b)."""

    def __init__(
        self,
        profile_for: Callable[[int], ModelProfile | None],
        cluster: ClusterSpec,
        global_batch: int,
        *,
        max_microbatch: int = DEFAULT_MAX_MICROBATCH,
    ):
        self.profile_for = profile_for
        self.cluster = cluster
        self.global_batch = global_batch
        self.max_microbatch = max_microbatch
        base = profile_for(1) or profile_for(max_microbatch)
        if base is None:
            raise ValueError("Varuna's search needs the model's profile at some microbatch size")
        self.num_layers = base.num_layers
        self.depths = tuple(d for d in range(1, self.num_layers + 1) if self.num_layers % d == 0)
        self._tables: dict[int, CostTables | None] = {}
        self._best: dict[int, Grid | None] = {}

    def _tables_for(self, b: int) -> CostTables | None:
        if b not in self._tables:
            profile = self.profile_for(b)
            self._tables[b] = CostTables(profile, self.cluster.with_nodes(1)) if profile is not None else None
        return self._tables[b]

    def _config(self, depth: int, width: int) -> Grid | None:
        per = self.num_layers // depth
        stages = tuple((i * per, (i + 1) * per) for i in range(depth))
        b = 1
        while b * 2 <= self.max_microbatch:
            b *= 2
        while b >= 1:
            tables = self._tables_for(b)
            if tables is not None and width * b <= self.global_batch:
                n_b = math.ceil(self.global_batch / (width * b))
                usable = tables.usable_memory_bytes
                if all(tables.memory_bytes(a, e, 1, min(depth - i, n_b)) <= usable for i, (a, e) in enumerate(stages)):
                    weights = [tables.weight_s(a, e, 1) for a, e in stages]
                    layers = tables.profile.layers
                    bw = self.cluster.inter_node_bw_bytes_per_s
                    allreduce = max(
                        ring_allreduce_s(sum(l.grad_bytes for l in layers[a:e]), width, bw) for a, e in stages
                    )
                    return Grid(depth, width, b, n_b, stages, pipeline_time_s(weights, n_b), allreduce)
            b //= 2
        return None

    def tables(self, b: int) -> CostTables | None:
        """The cost tables at microbatch b (None: no profile there), as the search uses them."""
        return self._tables_for(b)

    def config(self, depth: int, width: int) -> Grid | None:
        """The (depth, width) configuration at the largest microbatch that fits, or None
        (depth must divide the layer count). Other designs that choose their own shape
        (Parcae's liveput) ask for one here."""
        if depth < 1 or width < 1 or self.num_layers % depth:
            return None
        key = (depth, width)
        cache = self.__dict__.setdefault("_shapes", {})
        if key not in cache:
            cache[key] = self._config(depth, width)
        return cache[key]

    def best(self, num_gpus: int) -> Grid | None:
        """The fastest configuration on `num_gpus` GPUs, or None if nothing fits."""
        if num_gpus not in self._best:
            found = []
            for depth in self.depths:
                if depth > num_gpus:
                    break
                config = self._config(depth, num_gpus // depth)
                if config is not None:
                    found.append(config)
            self._best[num_gpus] = (
                min(found, key=lambda c: (c.iteration_time_s, c.num_gpus, c.depth)) if found else None
            )
        return self._best[num_gpus]

    def min_gpus(self, up_to: int) -> int | None:
        """The fewest GPUs (<= up_to) on which some configuration fits."""
        for gpus in range(1, up_to + 1):
            if self.best(gpus) is not None:
                return gpus
        return None
