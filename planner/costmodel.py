"""The cost model of a pipeline (DESIGN 3.2; Oobleck, SOSP'23, Eq. 1-4).

A stage is a contiguous layer range [first, end) on d GPUs of one node, its layers sharded
over the d GPUs: per layer, forward F_l / d + AR_l(d) and backward B_l / d + AR_l(d), where
AR_l(d) is the layer's intra-node all-reduce (0 when d = 1). A stage's weight is
w = forward + backward. With S stages, k* the rightmost slowest stage and N_b microbatches:

    T1 = sum_i w_i,  T2 = (N_b - S + k* - 1) w_k*,  T3 = sum_{i >= k*} w_i,  T = T1 + T2 + T3.

Memory of a stage, per GPU: (parameters + gradients + optimizer state + k x the activations
kept per in-flight microbatch + the largest layer workspace) / d. In 1F1B, stage i of S
holds k = S - i microbatches. The planner bounds k by 1 + (number of GPUs after the
stage in the pipeline), which is exactly S - i whenever the later stages use one GPU each
(always when nodes have one GPU) and an over-estimate otherwise: a conservative check that
keeps the template search a shortest-path problem.

All sums over layer ranges go through one set of prefix sums (`CostTables`), so the
template search, the brute-force checker and the plans compute bit-identical weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import numpy as np

from .errors import PlannerError
from .hardware import ClusterSpec
from .profile import ModelProfile

INF = float("inf")
WEIGHT_GRID = float(2**40)  # stage weights are multiples of 1 / WEIGHT_GRID seconds


def pipeline_time_s(weights: Sequence[float], num_microbatches: int) -> float:
    """T1 + T2 + T3 of DESIGN 3.2 for stage weights `weights` and N_b microbatches."""
    if not weights:
        raise PlannerError("a pipeline needs at least one stage")
    if num_microbatches < 1:
        raise PlannerError(f"a pipeline needs at least one microbatch, got {num_microbatches}")
    num_stages = len(weights)
    kstar = bottleneck_index(weights)
    t1 = sum(weights)
    t2 = (num_microbatches - num_stages + kstar - 1) * weights[kstar]
    t3 = sum(weights[kstar:])
    return t1 + t2 + t3


def bottleneck_index(weights: Sequence[float]) -> int:
    """Index of the slowest stage, the rightmost one on ties."""
    best = 0
    for index, weight in enumerate(weights):
        if weight >= weights[best]:
            best = index
    return best


class CostTables:
    """Prefix sums of one profile on one cluster: O(1) stage times, weights and memory."""

    def __init__(self, profile: ModelProfile, cluster: ClusterSpec):
        self.profile = profile
        self.cluster = cluster
        self.num_layers = profile.num_layers
        self.gpus_per_node = cluster.gpus_per_node
        self.usable_memory_bytes = cluster.usable_memory_bytes
        self.widths = profile.stage_gpu_counts(cluster.gpus_per_node)
        layers = profile.layers
        self.fwd = np.array([0.0, *accumulate(l.forward_s for l in layers)])
        self.bwd = np.array([0.0, *accumulate(l.backward_s for l in layers)])
        self.state = np.array([0, *accumulate(l.state_bytes for l in layers)], dtype=np.float64)
        self.act = np.array([0, *accumulate(l.activation_bytes for l in layers)], dtype=np.float64)
        self.ar = {d: np.array([0.0, *accumulate(l.in_node_allreduce_s(d) for l in layers)]) for d in self.widths}
        n = self.num_layers
        workspace = np.array([l.workspace_bytes for l in layers], dtype=np.float64)
        # max_ws[a, b] = largest workspace among layers [a, b) (0 on and below the diagonal)
        self.max_ws = np.zeros((n + 1, n + 1))
        for a in range(n):
            self.max_ws[a, a + 1 :] = np.maximum.accumulate(workspace[a:])

    # -- scalar accessors (one stage) -------------------------------------------------
    def forward_s(self, first: int, end: int, d: int) -> float:
        return float((self.fwd[end] - self.fwd[first]) / d + (self.ar[d][end] - self.ar[d][first]))

    def backward_s(self, first: int, end: int, d: int) -> float:
        return float((self.bwd[end] - self.bwd[first]) / d + (self.ar[d][end] - self.ar[d][first]))

    def weight_s(self, first: int, end: int, d: int) -> float:
        return float(self.weight_matrix(d)[first, end])

    def memory_bytes(self, first: int, end: int, d: int, inflight: int) -> float:
        """Per-GPU bytes of a stage holding `inflight` microbatches of activations."""
        return float(
            (
                self.state[end]
                - self.state[first]
                + inflight * (self.act[end] - self.act[first])
                + self.max_ws[first, end]
            )
            / d
        )

    def max_inflight(self, first: int, end: int, d: int) -> float:
        return float(self.max_inflight_matrix(d)[first, end])

    # -- whole matrices, indexed [first, end] -----------------------------------------
    def weight_matrix(self, d: int) -> np.ndarray:
        """w[a, b] for every layer range (a < b) on d GPUs; inf where a >= b."""
        cache = self.__dict__.setdefault("_weights", {})
        if d not in cache:
            if d not in self.ar:
                raise PlannerError(f"no in-node all-reduce times for stages of {d} GPUs in {self.profile.name}")
            a = np.arange(self.num_layers + 1)[:, None]
            b = np.arange(self.num_layers + 1)[None, :]
            fwd, bwd, ar = self.fwd, self.bwd, self.ar[d]
            w = ((fwd[b] - fwd[a]) + (bwd[b] - bwd[a])) / d + 2 * (ar[b] - ar[a])
            # Snap to a grid of 2^-40 s (about 1e-12 s): stages that are equal in exact
            # arithmetic (identical layers) get one identical float, whatever rounding the
            # prefix sums left, so the search tries each distinct bottleneck once.
            w = np.round(w * WEIGHT_GRID) / WEIGHT_GRID
            cache[d] = np.where(b > a, w, INF)
        return cache[d]

    def max_inflight_matrix(self, d: int) -> np.ndarray:
        """Largest in-flight microbatch count a stage [a, b) on d GPUs can hold (inf when
        activations are free; < 1 when even its model state does not fit)."""
        cache = self.__dict__.setdefault("_inflight", {})
        if d not in cache:
            a = np.arange(self.num_layers + 1)[:, None]
            b = np.arange(self.num_layers + 1)[None, :]
            room = d * float(self.usable_memory_bytes) - (self.state[b] - self.state[a]) - self.max_ws
            act = self.act[b] - self.act[a]
            with np.errstate(divide="ignore", invalid="ignore"):
                k = np.where(act > 0, np.floor(room / np.where(act > 0, act, 1)), np.where(room >= 0, INF, -1))
            cache[d] = np.where(b > a, k, -1)
        return cache[d]

    def min_total_weight_s(self) -> float:
        """A lower bound on the sum of stage weights of any layout: each layer at its
        cheapest width."""
        per_layer = []
        for layer in range(self.num_layers):
            per_layer.append(min(self.weight_matrix(d)[layer, layer + 1] for d in self.widths))
        return float(sum(per_layer))
