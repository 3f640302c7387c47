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
