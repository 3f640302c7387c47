"""Exact min-copy ordering of nodes onto new stage positions, against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.assignment import arrange, cost_matrix
from planner.errors import PlannerError
from planner.lsa import min_cost_matching


@st.composite
def square_costs(draw, max_n: int = 6):
    n = draw(st.integers(1, max_n))
    top = draw(st.sampled_from([1, 3, 50, 10**12]))  # small ranges force many ties
    return np.array(draw(st.lists(st.integers(0, top), min_size=n * n, max_size=n * n)), np.int64).reshape(n, n)


@settings(max_examples=150, deadline=None)
@given(costs=square_costs())
def test_matching_is_the_brute_force_minimum_with_valid_duals(costs):
    n = len(costs)
    best = min(sum(int(costs[i, p[i]]) for i in range(n)) for p in itertools.permutations(range(n)))
    result = min_cost_matching(costs)
    assert sorted(result.column) == list(range(n))
    assert result.cost == best == sum(int(costs[i, j]) for i, j in enumerate(result.column))
    reduced = costs - result.row_potential[:, None] - result.column_potential[None, :]
    assert reduced.min() >= 0  # dual feasible ...
    assert all(reduced[i, j] == 0 for i, j in enumerate(result.column))  # ... and tight on the matching


def test_matching_rejects_negative_and_oversized_costs():
    with pytest.raises(PlannerError, match="internal error"):
        min_cost_matching(np.array([[-1]]))
    with pytest.raises(PlannerError, match="internal error"):
        min_cost_matching(np.zeros((2, 3), np.int64))


@st.composite
def partitions(draw, num_layers: int, parts: int):
    """`parts` contiguous, non-empty ranges covering 0..num_layers-1 in order."""
    cuts = sorted(draw(st.sets(st.integers(1, num_layers - 1), min_size=parts - 1, max_size=parts - 1)))
    bounds = [0, *cuts, num_layers]
    return [tuple(range(a, b)) for a, b in zip(bounds, bounds[1:])]


@st.composite
def reorder_cases(draw):
    """New positions (one template's node shares) and nodes that hold layers from one or
    two old layouts (a pipeline, plus borrowed nodes), or nothing (new nodes)."""
    num_layers = draw(st.integers(2, 9))
    n = draw(st.integers(1, min(6, num_layers)))
    needs = draw(partitions(num_layers, n))
    held: dict[str, tuple[int, ...]] = {}
    nodes = []
    for k in range(n):
        kind = draw(st.sampled_from(["old", "old", "other", "new", "arbitrary"]))
        name = f"n{k}"
        if kind in ("old", "other"):
            parts = draw(st.integers(1, num_layers))
            layout = draw(partitions(num_layers, parts))
            held[name] = draw(st.sampled_from(layout))
        elif kind == "arbitrary":
            held[name] = tuple(sorted(draw(st.sets(st.integers(0, num_layers - 1), max_size=num_layers))))
        nodes.append(name)
    layer_bytes = np.array(
        draw(st.lists(st.sampled_from([1, 2, 3, 7, 1000]), min_size=num_layers, max_size=num_layers)), np.int64
    )
    return needs, nodes, held, layer_bytes


def objective(needs, order, nodes, held, layer_bytes):
    """(bytes copied, moved nodes, displacement) of putting order[j] on position j."""
    index = {node: i for i, node in enumerate(nodes)}
    copied = sum(
        int(layer_bytes[l]) for j, node in enumerate(order) for l in needs[j] if l not in set(held.get(node, ()))
    )
    moved = sum(1 for j, node in enumerate(order) if index[node] != j)
    shift = sum(abs(index[node] - j) for j, node in enumerate(order))
    return copied, moved, shift


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=reorder_cases())
def test_arrangement_is_the_lexicographic_brute_force_optimum(case):
    needs, nodes, held, layer_bytes = case
    best = min(objective(needs, p, nodes, held, layer_bytes) for p in itertools.permutations(nodes))
    result = arrange(needs, nodes, held, layer_bytes)
    assert sorted(result.nodes) == sorted(nodes)
    got = objective(needs, result.nodes, nodes, held, layer_bytes)
    assert got == best
    assert (result.copied_bytes, result.moved, result.displacement) == got
    assert result.keep_order_bytes == objective(needs, tuple(nodes), nodes, held, layer_bytes)[0]
    assert result.lower_bound_bytes <= result.copied_bytes <= result.keep_order_bytes


def test_the_check_has_teeth_keeping_the_order_is_not_optimal():
    """Survivors a (held [0,1]) and b (held [2,3]) of a 3-node layout whose last node is
    lost; the 2-node template splits [0,1,2] [3,4,5]. Given as (b, a), keeping that order
    copies 5 layers; the optimum puts a first and copies 3."""
    needs = [(0, 1, 2), (3, 4, 5)]
    held = {"a": (0, 1), "b": (2, 3)}
    bytes_ = np.ones(6, np.int64)
    swapped = arrange(needs, ["b", "a"], held, bytes_)
    assert swapped.keep_order_bytes == 6 - 1  # b on [0,1,2] keeps 2; a on [3,4,5] keeps nothing
    assert swapped.nodes == ("a", "b") and swapped.copied_bytes == 3 and swapped.moved == 2
    assert cost_matrix(needs, ["a", "b"], held, bytes_).tolist() == [[1, 3], [2, 2]]


def test_an_order_already_at_the_bound_is_kept():
    needs = [(0,), (1,), (2,)]
    held = {"a": (0,), "b": (1,)}
    result = arrange(needs, ["a", "b", "c"], held, np.array([5, 6, 7], np.int64))
    assert result.nodes == ("a", "b", "c") and result.copied_bytes == 7 == result.lower_bound_bytes


def lexicographic(costs, column):
    """(bytes, moved, displacement) of matching row i to column[i]."""
    return (
        sum(int(costs[i, j]) for i, j in enumerate(column)),
        sum(1 for i, j in enumerate(column) if i != j),
        sum(abs(i - j) for i, j in enumerate(column)),
    )


@settings(max_examples=150, deadline=None)
@given(costs=square_costs())
def test_one_round_and_two_rounds_both_reach_the_brute_force_optimum(costs):
    from planner.assignment import _one_round, _two_rounds

    n = len(costs)
    best = min(lexicographic(costs, p) for p in itertools.permutations(range(n)))
    assert lexicographic(costs, _two_rounds(costs, n)) == best
    one = _one_round(costs, n)
    if one is not None:  # it declines only costs doubles cannot hold exactly
        assert lexicographic(costs, one) == best
    else:
        assert int(costs.max()) >= 10**12 // 2


def test_one_round_declines_costs_beyond_doubles_and_two_rounds_take_them():
    from planner.assignment import _one_round

    costs = np.array([[10**15 + 1, 3], [2, 10**15 + 7]], np.int64)  # gcd 1: no scaling helps
    assert _one_round(costs, 2) is None
    needs = [(0,), (1,)]
    held = {"a": (1,), "b": (0,)}
    result = arrange(needs, ["a", "b"], held, np.array([10**15 + 1, 10**15 + 3], np.int64))
    assert result.nodes == ("b", "a") and result.copied_bytes == 0


def test_remembered_orderings_follow_the_holdings_not_the_names():
    from planner.assignment import clear_memo, memo_stats

    clear_memo()
    needs = [(0, 1, 2), (3, 4, 5)]
    bytes_ = np.ones(6, np.int64)
    first = arrange(needs, ["b", "a"], {"a": (0, 1), "b": (2, 3)}, bytes_)
    renamed = arrange(needs, ["y", "x"], {"x": (0, 1), "y": (2, 3)}, bytes_)
    assert memo_stats()["hits"] == 1
    assert first.nodes == ("a", "b") and renamed.nodes == ("x", "y")
    assert (renamed.copied_bytes, renamed.moved, renamed.displacement) == (
        first.copied_bytes,
        first.moved,
        first.displacement,
    )
    # same names, other holdings: a different ordering, not the remembered one
    other = arrange(needs, ["b", "a"], {"b": (0, 1), "a": (2, 3)}, bytes_)
    assert other.nodes == ("b", "a") and other.copied_bytes == 3 and memo_stats()["misses"] == 2


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=reorder_cases())
def test_a_remembered_ordering_equals_a_fresh_solve(case):
    from planner.assignment import clear_memo

    needs, nodes, held, layer_bytes = case
    fresh = [arrange(needs, nodes, held, layer_bytes) for _ in range(2)]  # the second one is a hit
    clear_memo()
    again = arrange(needs, nodes, held, layer_bytes)
    assert fresh[0] == fresh[1] == again
