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
        cuts = (
            sorted(draw(st.sets(st.integers(1, model.num_layers - 1), min_size=n - 1, max_size=n - 1))) if n > 1 else []
        )
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


@settings(max_examples=300, deadline=None)
@given(
    templates=pipeline_sets(),
    picks=st.lists(st.integers(0, 3), min_size=1, max_size=9),
    extra=st.integers(0, 30),
)
def test_split_is_the_smallest_units_in_cost_then_index_order(templates, picks, extra):
    """Brute force over units: every pipeline's first microbatch plus the M - K cheapest
    later ones, ties to the lower pipeline index, with the same template repeated and
    interleaved (the grouped split must not depend on how pipelines are grouped)."""
    from planner.batching import linear_cost

    pipes = [templates[i % len(templates)] for i in picks]
    total = len(pipes) + extra
    units = []
    for index, template in enumerate(pipes):
        c, beta = linear_cost(template)
        units += [(c + beta * m, index) for m in range(2, extra + 2)]
    expected = [1] * len(pipes)
    for _, index in sorted(units)[:extra]:
        expected[index] += 1
    assert list(distribute_microbatches(pipes, total)) == expected
    # the consecutive-groups path (what instantiation's mix_seconds uses) agrees as well
    from planner.batching import split_groups

    ordered = sorted(picks, key=lambda i: i % len(templates))
    pipes = [templates[i % len(templates)] for i in ordered]
    sizes = [sum(1 for i in ordered if i % len(templates) == j) for j in range(len(templates))]
    groups = [(linear_cost(templates[j]), x) for j, x in enumerate(sizes) if x]
    expanded = []
    for (_, x), (base, extra) in zip(groups, split_groups(groups, total)):
        expanded += [base + (extra[j] if j < len(extra) else 0) for j in range(x)]
    assert expanded == list(distribute_microbatches(pipes, total))
