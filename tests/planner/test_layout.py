"""`Planner.layout` (the grouped numbers of a grouping, used to compare join candidates
without building their plans) gives the per-pipeline route's counts and floats bit for
bit: `distribute_microbatches` + each pipeline's time + `exposed_allreduce_s`, and the
built plan's own `iteration_time_s`."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.batching import distribute_microbatches
from planner.errors import InfeasibleError

from .test_spread_screen import sizes_of, toy


def per_pipeline(p, groups):
    templates = [p.template(len(g)) for g in groups]
    counts = distribute_microbatches(templates, p.job.num_microbatches)
    return counts, p._layout(templates, counts)


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2), st.sampled_from([2, 5, 16, 37, 64, 300]), st.data())
def test_layout_is_the_per_pipeline_route_bit_for_bit(kind, batch, data):
    p = toy(kind, batch)
    sizes = data.draw(st.lists(st.sampled_from(sizes_of(p)), min_size=1, max_size=9))  # any order, repeats
    groups, start = [], 0
    for n in sizes:
        groups.append(tuple(f"n{start + i}" for i in range(n)))
        start += n
    try:
        counts, expected = per_pipeline(p, groups)
    except InfeasibleError:
        with pytest.raises(InfeasibleError):
            p.layout(groups)
        return
    got = p.layout(groups)
    assert got.counts == counts
    assert [t.num_nodes for t in got.templates] == sizes
    assert (got.allreduce_exposed_s, got.iteration_time_s) == (expected.allreduce_exposed_s, expected.iteration_time_s)
    plan = p.plan_of(groups, got)
    assert plan.iteration_time_s == got.iteration_time_s and plan == p.build_plan(groups)


def test_layout_errors_name_the_problem():
    p = toy(0, 2)
    size = sizes_of(p)[0]
    with pytest.raises(InfeasibleError, match="no pipelines"):
        p.layout([])
    with pytest.raises(InfeasibleError, match="2 microbatches cannot feed 3 pipelines"):
        p.layout([tuple(f"{k}-{i}" for i in range(size)) for k in range(3)])
    with pytest.raises(InfeasibleError, match="no pipeline template for 1 nodes"):
        p.layout([("a",)])
