"""Batch distribution is an exact integer min-makespan; gradient weights sum to one."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.batching import distribute_microbatches, makespan_s
from planner.costmodel import CostTables
from planner.templates import build_template

from .bruteforce import best_distribution
from .strategies import cluster, models


@st.composite
def pipeline_sets(draw):
    """A few random single-GPU-per-node templates of one random model."""
    model = draw(models(max_layers=6))
    tables = CostTables(model, cluster(100_000, 6, 1))
    templates = []
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(1, model.num_layers))
        cuts = sorted(draw(st.sets(st.integers(1, model.num_layers - 1), min_size=n - 1, max_size=n - 1))) if n > 1 else []
        bounds = [0, *cuts, model.num_layers]
        templates.append(build_template(tables, n, [(a, b, 1) for a, b in zip(bounds, bounds[1:])]))
    return templates


@settings(max_examples=200, deadline=None)
@given(templates=pipeline_sets(), extra=st.integers(0, 9))
def test_distribution_is_optimal(templates, extra):
    total = len(templates) + extra
    counts = distribute_microbatches(templates, total)
    assert sum(counts) == total and min(counts) >= 1
    costs = [t.iteration_time for t in templates]
    assert math.isclose(makespan_s(templates, counts), best_distribution(costs, total), rel_tol=1e-12)


@settings(max_examples=50, deadline=None)
@given(templates=pipeline_sets(), total=st.integers(50, 5000))
def test_large_batches_are_balanced(templates, total):
    """Moving one microbatch from the slowest pipeline to any other never helps."""
    if total < len(templates):
        return
    counts = list(distribute_microbatches(templates, total))
    worst = makespan_s(templates, counts)
    slowest = max(range(len(counts)), key=lambda i: templates[i].iteration_time(counts[i]))
    if counts[slowest] > 1:
        for j in range(len(counts)):
            if j != slowest:
                trial = list(counts)
                trial[slowest] -= 1
                trial[j] += 1
                assert makespan_s(templates, trial) >= worst - 1e-9 * worst
