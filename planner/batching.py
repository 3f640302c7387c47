"""Exact integer batch distribution across heterogeneous pipelines (DESIGN 3.4).

Pipeline i running m microbatches takes T_i(m) = c_i + beta_i m (the cost model is linear in
N_b with slope its bottleneck weight). We want m_i >= 1 with sum m_i = M minimising
max_i T_i(m_i). Giving microbatches one at a time to whichever pipeline would finish its
next one earliest is optimal (the chosen values are the M smallest of the sequences
T_i(1), T_i(2), ... with every first term forced), so the answer is computed from a
fractional estimate and corrected to that set with a few heap steps: O(K log K) instead of
O(M log K). Ties go to the lower pipeline index.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from .errors import InfeasibleError
from .templates import PipelineTemplate


def linear_cost(template: PipelineTemplate) -> tuple[float, float]:
    """(c, beta) with T(m) = c + beta m."""
    weights = template.weights
    kstar = template.kstar
    beta = weights[kstar]
    const = sum(weights) + sum(weights[kstar:]) + (kstar - len(weights) - 1) * beta
    return const, beta


def distribute_microbatches(templates: Sequence[PipelineTemplate], total: int) -> tuple[int, ...]:
    """m_i for each pipeline: all >= 1, summing to `total`, minimising the slowest T_i(m_i)."""
    k = len(templates)
    if k == 0:
        raise InfeasibleError("no pipelines to give microbatches to")
    if total < k:
        raise InfeasibleError(f"{total} microbatches cannot feed {k} pipelines (each needs at least one)")
    unique = {id(t): t for t in templates}  # thousands of pipelines, few templates
    distinct = {key: linear_cost(t) for key, t in unique.items()}
    lines = [distinct[id(t)] for t in templates]
    inverse = sum(1.0 / beta for _, beta in lines)
    tau = (total + sum(c / beta for c, beta in lines)) / inverse
    counts = [max(1, math.floor((tau - c) / beta)) for c, beta in lines]
    excess = sum(counts) - total
    if excess > 0:
        # Drop the most expensive chosen units (never a pipeline's first).
        heap = [(-(c + beta * m), -i) for i, ((c, beta), m) in enumerate(zip(lines, counts)) if m > 1]
        heapq.heapify(heap)
        while excess > 0:
            _, neg_i = heapq.heappop(heap)
            i = -neg_i
            counts[i] -= 1
            excess -= 1
            if counts[i] > 1:
                c, beta = lines[i]
                heapq.heappush(heap, (-(c + beta * counts[i]), -i))
    elif excess < 0:
        # Add the cheapest next units.
        heap = [(c + beta * (m + 1), i) for i, ((c, beta), m) in enumerate(zip(lines, counts))]
        heapq.heapify(heap)
        while excess < 0:
            _, i = heapq.heappop(heap)
            counts[i] += 1
            excess += 1
            c, beta = lines[i]
            heapq.heappush(heap, (c + beta * (counts[i] + 1), i))
    return tuple(counts)


def makespan_s(templates: Sequence[PipelineTemplate], counts: Sequence[int]) -> float:
    return max(t.iteration_time(m) for t, m in zip(templates, counts))

