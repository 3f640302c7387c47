"""Brute-force references for the planner's exact searches (test-only, exponential)."""

from __future__ import annotations

import itertools
import math

from planner.costmodel import CostTables
from planner.templates import PipelineTemplate, build_template


def all_layouts(tables: CostTables, num_nodes: int):
    """Every layout of the model's layers on num_nodes nodes that uses each GPU once,
    never spans a node and fits memory (in-flight bound: 1 + GPUs after the stage)."""
    g, n_layers = tables.gpus_per_node, tables.num_layers
    total = num_nodes * g

    def extend(layer: int, offset: int, prefix: list):
        if layer == n_layers and offset == total:
            yield list(prefix)
            return
        if layer == n_layers or offset == total:
            return
        for end in range(layer + 1, n_layers + 1):
            for d in tables.widths:
                if (offset % g) + d > g or offset + d > total:
                    continue
                gpus_after = total - offset - d
                memory = tables.memory_bytes(layer, end, d, 1 + gpus_after)
                if memory > tables.usable_memory_bytes:
                    continue
                prefix.append((layer, end, d))
                yield from extend(end, offset + d, prefix)
                prefix.pop()

    yield from extend(0, 0, [])


def best_template_time(tables: CostTables, num_nodes: int) -> tuple[float, PipelineTemplate | None]:
    best_time, best = math.inf, None
    for layout in all_layouts(tables, num_nodes):
        template = build_template(tables, num_nodes, layout)
        if template.iteration_time_s < best_time:
            best_time, best = template.iteration_time_s, template
    return best_time, best


def best_distribution(costs, total: int):
    """Min over m_i >= 1, sum m_i = total of max_i cost_i(m_i), by enumeration."""
    k = len(costs)
    best = math.inf
    for split in itertools.combinations(range(1, total), k - 1):
        parts = [b - a for a, b in zip((0, *split), (*split, total))]
        best = min(best, max(cost(m) for cost, m in zip(costs, parts)))
    return best


# -- pipeline communication: an independent statement of the charge (f15 interface) ----------
def spec_charge(model, comm, g: int, layout, offsets, i: int) -> float:
    """Stage i's sends per microbatch: forward to stage i + 1, backward to stage i - 1, each
    hop + latency + (output bytes of the layer before the boundary) / bandwidth of the
    in-node link when both stages sit on one node (same node index), across-node otherwise."""
    a, b, _ = layout[i]
    node = offsets[i] // g
    total = 0.0
    for neighbour, boundary_layer in ((i + 1, b - 1), (i - 1, a - 1)):
        if 0 <= neighbour < len(layout):
            link = comm.in_node if offsets[neighbour] // g == node else comm.across_nodes
            total += comm.hop_overhead_s + link.latency_s + model.layers[boundary_layer].output_bytes / link.bytes_per_s
    return total


def reference_time(model, comm, g: int, layout, charge=spec_charge) -> float:
    """T (N_b = 4 S) of a layout from the raw layer numbers, without CostTables."""
    offsets = list(itertools.accumulate((d for _, _, d in layout), initial=0))[:-1]
    weights = []
    for i, (a, b, d) in enumerate(layout):
        layers = model.layers[a:b]
        compute = sum(l.forward_s + l.backward_s for l in layers) / d
        compute += 2 * sum(l.in_node_allreduce_s(d) or 0.0 for l in layers)
        weights.append(compute + (charge(model, comm, g, layout, offsets, i) if comm is not None else 0.0))
    s = len(weights)
    # the rightmost slowest stage; weights equal in exact arithmetic may differ in the last
    # bits here (no snapping), so near-equal ones count as ties
    kstar = max(i for i, w in enumerate(weights) if w >= max(weights) * (1 - 1e-12))
    return sum(weights) + (4 * s - s + kstar - 1) * weights[kstar] + sum(weights[kstar:])


def best_reference_time(tables: CostTables, comm, num_nodes: int, charge=spec_charge) -> float:
    """Min over every legal layout of `reference_time` (inf when none fits)."""
    best = math.inf
    for layout in all_layouts(tables, num_nodes):
        best = min(best, reference_time(tables.profile, comm, tables.gpus_per_node, layout, charge))
    return best
