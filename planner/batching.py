"""Exact integer batch distribution across heterogeneous pipelines (DESIGN 3.4).

Pipeline i running m microbatches takes T_i(m) = c_i + beta_i m (the cost model is linear in
N_b with slope its bottleneck weight). We want m_i >= 1 with sum m_i = M minimising
max_i T_i(m_i). Giving microbatches one at a time to whichever pipeline would finish its
next one earliest is optimal (the chosen values are the M smallest of the sequences
T_i(1), T_i(2), ... with every first term forced), so the answer is computed from a
fractional estimate and corrected to that set with a few heap steps: O(K log K) instead of
O(M log K). Ties go to the lower pipeline index. Identical pipelines are handled as one
group (`split_groups`), so the cost grows with the number of distinct templates, not the
thousands of pipelines of a 12,500-node plan.
"""

from __future__ import annotations

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
    members: dict[int, list[int]] = {}  # thousands of pipelines, few templates
    first: dict[int, PipelineTemplate] = {}
    for index, template in enumerate(templates):
        members.setdefault(id(template), []).append(index)
        first.setdefault(id(template), template)
    split = distribute_grouped(list(first.values()), list(members.values()), total)
    return counts_of(split, list(members.values()), k)


def distribute_grouped(
    templates: Sequence[PipelineTemplate], members: Sequence[Sequence[int]], total: int
) -> list[tuple[int, list[int]]]:
    """`distribute_microbatches` for pipelines given as distinct templates (in order of
    first appearance) and each one's increasing pipeline indices: per template (base,
    extra) as `split_groups` returns it (`counts_of` spreads it over the pipelines).
    InfeasibleError without pipelines, or with fewer microbatches than pipelines."""
    if not templates:
        raise InfeasibleError("no pipelines to give microbatches to")
    lines = [linear_cost(t) for t in templates]
    return split_groups([(line, len(ix)) for line, ix in zip(lines, members)], total, members)


def counts_of(split: Sequence[tuple[int, Sequence[int]]], members: Sequence[Sequence[int]], k: int) -> tuple[int, ...]:
    """Each of the k pipelines' microbatches from a grouped split."""
    counts = [0] * k
    for indices, (base, extra) in zip(members, split):
        for position, index in enumerate(indices):
            counts[index] = base + extra[position] if position < len(extra) else base
    return tuple(counts)


def split_groups(
    groups: Sequence[tuple[tuple[float, float], int]], total: int, indices: Sequence[Sequence[int]] | None = None
) -> list[tuple[int, list[int]]]:
    """The optimal split for groups of identical pipelines, O(groups^2 log) whatever their size.

    `groups`: ((c, beta), pipelines); `indices`: each group's pipeline indices, increasing
    (default: consecutive, groups in order). Returns per group (base, extra): its j-th pipeline runs base + extra[j]
    microbatches (extra shorter than the group: 0 for the rest). The chosen units are every
    pipeline's first plus the total - K smallest of the later units c + beta m (m >= 2) in
    the order (cost, pipeline index): the threshold cost is found by moving whole levels
    across the fractional optimum, and the units at exactly that cost go to the lowest
    indices."""
    pipelines = sum(x for _, x in groups)
    need = total - pipelines
    if need < 0:
        raise InfeasibleError(f"{total} microbatches cannot feed {pipelines} pipelines (each needs at least one)")
    if need == 0:
        return [(1, []) for _ in groups]

    def levels(line: tuple[float, float], theta: float, strict: bool) -> int:
        """How many m >= 2 have c + beta m <= theta (< theta when strict), exactly."""
        c, beta = line
        m = max(1, min(total, math.floor((theta - c) / beta)))
        below = (lambda v: v < theta) if strict else (lambda v: v <= theta)
        while m >= 2 and not below(c + beta * m):
            m -= 1
        while m < total and below(c + beta * (m + 1)):
            m += 1
        return m - 1

    # theta: the smallest unit cost with `need` units at or below it. Start from the
    # fractional optimum and move whole levels (a group's pipelines share each cost) across it.
    inverse = sum(x / beta for (_, beta), x in groups)
    estimate = (total + sum(x * c / beta for (c, beta), x in groups)) / inverse
    held = [levels(line, estimate, False) for line, _ in groups]
    count = sum(x * n for (_, x), n in zip(groups, held))
    if count >= need:
        while True:  # drop the dearest level until fewer than `need` remain: its cost is theta
            theta, g = max((c + beta * (1 + n), g) for g, (((c, beta), _), n) in enumerate(zip(groups, held)) if n)
            if count - groups[g][1] < need:
                break
            count -= groups[g][1]
            held[g] -= 1
    else:
        while count < need:  # take the cheapest next level until `need` are held
            theta, g = min((c + beta * (2 + n), g) for g, (((c, beta), _), n) in enumerate(zip(groups, held)))
            count += groups[g][1]
            held[g] += 1
    below = [levels(line, theta, True) for line, _ in groups]
    left = need - sum(x * n for (_, x), n in zip(groups, below))
    tied = [levels(line, theta, False) - n for (line, _), n in zip(groups, below)]  # levels at exactly theta
    # the tied units go to the lowest indices; a pipeline takes its tied levels in order
    extras: list[list[int]] = [[] for _ in groups]
    if indices is None:  # consecutive indices: group order is index order
        for g, (_, x) in enumerate(groups):
            if left and tied[g]:
                full = min(x, left // tied[g])
                extras[g] = [tied[g]] * full
                left -= full * tied[g]
                if left and full < x:
                    extras[g].append(left)
                    left = 0
    else:
        tied_pipes = sorted(
            (ix, g, position) for g in range(len(groups)) if tied[g] for position, ix in enumerate(indices[g])
        )
        for _, g, position in tied_pipes:
            if left == 0:
                break
            give = min(tied[g], left)
            extras[g].extend([0] * (position - len(extras[g])))
            extras[g].append(give)
            left -= give
    result = [(1 + n, extra) for n, extra in zip(below, extras)]
    if left != 0:  # pragma: no cover - would mean the bisection and the counts disagree
        raise InfeasibleError(f"internal error: microbatch split left {left} of {total} unassigned")
    return result


def makespan_s(templates: Sequence[PipelineTemplate], counts: Sequence[int]) -> float:
    return max(t.iteration_time(m) for t, m in zip(templates, counts))
