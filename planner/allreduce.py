"""How much of the cross-pipeline gradient all-reduce an iteration cannot hide (DESIGN 3.4).

Model: every replica of layer l must finish its last backward before the layer's gradients
can be all-reduced across the K pipelines. In a pipeline that finishes at T_p, the stage at
depth i finishes its last backward sum_{j < i} b_j earlier (b_j: one microbatch's backward
on stage j, as the last microbatch's gradient flows back to stage 0). A stage's node then
all-reduces its layers one after another over its network link: ring all-reduce of the
layer's gradient bytes across K replicas (or the profile's measured time for K, when it
has one). What ends after the slowest pipeline is exposed. Contention between stages that
share a node (g > 1 split nodes) is ignored.

`stage_latency_s` (default 0, what the planner charges) adds a fixed time to each stage's
synchronisation, whatever its bytes: the messages of the ring itself (the simulator
charges them where the profile measured a per-message runtime cost, `sim.sync_cost`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .hardware import ClusterSpec, ring_allreduce_s
from .profile import ModelProfile
from .templates import PipelineTemplate


def layer_allreduce_s(profile: ModelProfile, cluster: ClusterSpec, replicas: int) -> np.ndarray:
    """Gradient all-reduce time of each layer across `replicas` pipelines."""
    times = []
    for layer in profile.layers:
        measured = layer.across_nodes_allreduce_s(replicas)
        if measured is not None and replicas > 1:
            times.append(measured)
        else:
            times.append(ring_allreduce_s(layer.grad_bytes, replicas, cluster.inter_node_bw_bytes_per_s))
    return np.array(times)


def exposed_allreduce_s(
    templates: Sequence[PipelineTemplate],
    pipeline_times_s: Sequence[float],
    layer_times_s: np.ndarray,
    stage_latency_s: float = 0.0,
) -> float:
    """Seconds the gradient synchronisation adds after the slowest pipeline finishes."""
    if len(templates) <= 1:
        return 0.0
    # Pipelines of one template differ only in when they finish, and the latest of them sets
    # every ready time that template contributes (max is exact): one pass per distinct
    # template, vectorised over its layers and stages.
    distinct: dict[int, PipelineTemplate] = {}
    latest: dict[int, float] = {}
    for template, finish in zip(templates, pipeline_times_s):
        key = id(template)
        distinct[key] = template
        latest[key] = max(latest.get(key, -np.inf), finish)
    return grouped_exposed_allreduce_s(list(distinct.values()), list(latest.values()), layer_times_s, stage_latency_s)


def grouped_exposed_allreduce_s(
    templates: Sequence[PipelineTemplate],
    latest_s: Sequence[float],
    layer_times_s: np.ndarray,
    stage_latency_s: float = 0.0,
) -> float:
    """`exposed_allreduce_s` from each distinct template and its latest pipeline's finish
    (of two or more pipelines in all; layer_times_s for their total count)."""
    ready = np.full(len(layer_times_s), -np.inf)
    for template, finish in zip(templates, latest_s):
        np.maximum(ready, finish - template.backward_before_s, out=ready)
    end = -np.inf
    for template in templates:
        starts = template.stage_starts
        spans = np.maximum.reduceat(ready, starts) + np.add.reduceat(layer_times_s, starts)
        end = max(end, float(spans.max()) + stage_latency_s)
    return max(0.0, end - max(latest_s))


def layer_allreduce_table_s(profile: ModelProfile, cluster: ClusterSpec, max_replicas: int) -> np.ndarray:
    """Row K (0 <= K <= max_replicas) is `layer_allreduce_s(profile, cluster, K)`, all rows
    built at once with the same arithmetic (instantiation at 12,500 nodes needs thousands)."""
    replicas = np.arange(max_replicas + 1, dtype=float)
    grad = np.array([float(layer.grad_bytes) for layer in profile.layers])
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = 2.0 * (replicas - 1) / replicas
    table = factor[:, None] * grad[None, :] / cluster.inter_node_bw_bytes_per_s
    table[replicas <= 1, :] = 0.0
    table[:, grad <= 0] = 0.0
    for index, layer in enumerate(profile.layers):
        for count, seconds in reversed(layer.allreduce_across_nodes_s):  # the first listed wins
            if 1 < count <= max_replicas:
                table[count, index] = seconds
    return table
