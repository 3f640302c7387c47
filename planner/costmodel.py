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

Pipeline communication (on unless `ClusterSpec.pipeline_comm` is False). The
tensor at the boundary after layer l is its `output_bytes` (activations forward, their
gradient backward). Per microbatch, stage i of S adds to its forward time its outgoing
forward send (i < S - 1) and to its backward time its outgoing backward send (i > 0), each
`hop_overhead_s + latency_s + output_bytes / bytes_per_s` of the in-node link when the
neighbouring stage is on the same node, the across-nodes link otherwise. The links are the
profile's measured `communication` or, without one, the cluster's bandwidths with the
default latencies of `hardware` and no hop overhead. A stage's weight thus depends on its
layer range, its width and the two links at its ends: `weight_matrix(d, forward_in_node,
backward_in_node)`. With the term off every number is bit-identical to Eq. 1-4.

All sums over layer ranges go through one set of prefix sums (`CostTables`), so the
template search, the brute-force checker and the plans compute bit-identical weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import numpy as np

from .errors import PlannerError
from .hardware import DEFAULT_ACROSS_NODES_LATENCY_S, DEFAULT_IN_NODE_LATENCY_S, ClusterSpec
from .profile import CommProfile, LinkProfile, ModelProfile

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


def pipeline_comm(profile: ModelProfile, cluster: ClusterSpec) -> CommProfile | None:
    """The links the cost model charges stage-boundary sends on (None: the term is off)."""
    if not cluster.pipeline_comm:
        return None
    if profile.communication is not None:
        return profile.communication
    return CommProfile(
        LinkProfile(DEFAULT_IN_NODE_LATENCY_S, cluster.intra_node_bw_bytes_per_s),
        LinkProfile(DEFAULT_ACROSS_NODES_LATENCY_S, cluster.inter_node_bw_bytes_per_s),
        0.0,
        f"{cluster.gpu.name} cluster links, NCCL-model latencies (planner.hardware)",
    )


class CostTables:
    """Prefix sums of one profile on one cluster: O(1) stage times, weights and memory.

    Link arguments (`forward_in_node`, `backward_in_node`) say whether the next / previous
    stage shares the node; they default to across nodes (one stage per node) and change
    nothing when the communication term is off."""

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
        self.comm = pipeline_comm(profile, cluster)
        # send[in_node][b]: one outgoing send across boundary b (after layer b - 1); 0 at
        # b = 0 and b = L, where no stage has a neighbour
        self.send: dict[bool, np.ndarray] = {}
        if self.comm is not None:
            out = np.array([l.output_bytes for l in layers], dtype=np.float64)
            for in_node in (True, False):
                link = self.comm.link(in_node)
                send = np.zeros(n + 1)
                send[1:n] = self.comm.hop_overhead_s + (link.latency_s + out[: n - 1] / link.bytes_per_s)
                self.send[in_node] = send
        workspace = np.array([l.workspace_bytes for l in layers], dtype=np.float64)
        # max_ws[a, b] = largest workspace among layers [a, b) (0 on and below the diagonal)
        self.max_ws = np.zeros((n + 1, n + 1))
        for a in range(n):
            self.max_ws[a, a + 1 :] = np.maximum.accumulate(workspace[a:])

    # -- scalar accessors (one stage) -------------------------------------------------
    def send_s(self, boundary: int, in_node: bool) -> float:
        """One outgoing send across the boundary after layer `boundary - 1` (0 when off)."""
        return float(self.send[in_node][boundary]) if self.comm is not None else 0.0

    def forward_s(self, first: int, end: int, d: int, forward_in_node: bool = False) -> float:
        """Forward compute, in-node all-reduce and the send to the next stage."""
        compute = float((self.fwd[end] - self.fwd[first]) / d + (self.ar[d][end] - self.ar[d][first]))
        return compute if self.comm is None else compute + float(self.send[forward_in_node][end])

    def backward_s(self, first: int, end: int, d: int, backward_in_node: bool = False) -> float:
        """Backward compute, in-node all-reduce and the send to the previous stage."""
        compute = float((self.bwd[end] - self.bwd[first]) / d + (self.ar[d][end] - self.ar[d][first]))
        return compute if self.comm is None else compute + float(self.send[backward_in_node][first])

    def weight_s(
        self, first: int, end: int, d: int, forward_in_node: bool = False, backward_in_node: bool = False
    ) -> float:
        return float(self.weight_matrix(d, forward_in_node, backward_in_node)[first, end])

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
    def weight_matrix(self, d: int, forward_in_node: bool = False, backward_in_node: bool = False) -> np.ndarray:
        """w[a, b] for every layer range (a < b) on d GPUs, with the given links to the
        next and previous stage; inf where a >= b."""
        if self.comm is None:
            return self._weights(d, None)
        return self._weights(d, (forward_in_node, backward_in_node))

    def compute_weight_matrix(self, d: int) -> np.ndarray:
        """w[a, b] without the communication term (Eq. 1-4)."""
        return self._weights(d, None)

    def _weights(self, d: int, links: tuple[bool, bool] | None) -> np.ndarray:
        cache = self.__dict__.setdefault("_weights_cache", {})
        key = (d, links)
        if key not in cache:
            if d not in self.ar:
                raise PlannerError(f"no in-node all-reduce times for stages of {d} GPUs in {self.profile.name}")
            a = np.arange(self.num_layers + 1)[:, None]
            b = np.arange(self.num_layers + 1)[None, :]
            fwd, bwd, ar = self.fwd, self.bwd, self.ar[d]
            w = ((fwd[b] - fwd[a]) + (bwd[b] - bwd[a])) / d + 2 * (ar[b] - ar[a])
            if links is not None:
                w = w + self.send[links[0]][b] + self.send[links[1]][a]
            # Snap to a grid of 2^-40 s (about 1e-12 s): stages that are equal in exact
            # arithmetic (identical layers) get one identical float, whatever rounding the
            # prefix sums left, so the search tries each distinct bottleneck once.
            w = np.round(w * WEIGHT_GRID) / WEIGHT_GRID
            cache[key] = np.where(b > a, w, INF)
        return cache[key]

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
        cheapest width, without communication (which only adds)."""
        per_layer = []
        for layer in range(self.num_layers):
            per_layer.append(min(self.compute_weight_matrix(d)[layer, layer + 1] for d in self.widths))
        return float(sum(per_layer))
