"""The join's spread, batched: `MixScreen.seconds` gives `Planner.mix_seconds`' floats bit
for bit, and `_spread` makes `_reference_spread`'s decisions (random mixes and plans on
toy models whose templates differ in speed, stage layout and exposed all-reduce)."""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from designs.oobleck.join import _reference_spread, _spread
from designs.oobleck.spread_screen import screen_for
from planner.errors import InfeasibleError
from planner.hardware import ClusterSpec, GpuSpec
from planner.plan import JobSpec
from planner.planner import Planner
from planner.profile import LayerProfile, ModelProfile

GB = 10**9


@cache
def toy(kind: int, batch: int) -> Planner:
    """Three models: uneven layers, equal layers (flat then stepped templates), and heavy
    gradients (the all-reduce is exposed)."""
    if kind == 0:
        layers = tuple(
            LayerProfile(f"l{i}", 1.0 + (i % 3), 2.0 + i % 2, GB // 4, GB // 4, GB // 2, 0, 0) for i in range(12)
        )
        gpu, per_node = GpuSpec("toy", 1e12, 7 * GB // 2, 1e12, 1e9), 1
    elif kind == 1:
        layers = tuple(LayerProfile(f"l{i}", 1.0, 2.0, GB // 4, GB // 4, GB // 2, 0, 0) for i in range(10))
        gpu, per_node = GpuSpec("toy", 1e12, 5 * GB // 2, 1e12, 1e9), 1
    else:
        layers = tuple(
            LayerProfile(f"l{i}", 0.2 + 0.1 * (i % 4), 0.5 + 0.2 * (i % 3), GB // 4, GB, GB // 2, 0, 0)
            for i in range(9)
        )
        gpu, per_node = GpuSpec("toy", 1e12, 4 * GB, 1e12, 1e9), 1
    cluster = ClusterSpec(gpu, 40, per_node, reserved_bytes=0)
    return Planner(ModelProfile(f"toy{kind}", 1, layers), cluster, JobSpec(batch, 1, 1))


def sizes_of(p: Planner) -> list[int]:
    return [n for n in p.feasible_sizes(40) if p.template(n) is not None]


kinds = st.integers(0, 2)
batches = st.sampled_from([2, 5, 16, 37, 64, 300])


@settings(max_examples=60, deadline=None)
@given(kinds, batches, st.data())
def test_the_screen_gives_mix_seconds_bit_for_bit(kind, batch, data):
    p = toy(kind, batch)
    sizes = sizes_of(p)
    pipelines = data.draw(st.integers(1, 6))
    mixes = []
    for _ in range(data.draw(st.integers(1, 5))):
        chosen = data.draw(st.lists(st.sampled_from(sizes), min_size=pipelines, max_size=pipelines))
        mixes.append({n: chosen.count(n) for n in set(chosen)})
    try:
        expected = [p.mix_seconds(sorted(m.items())) for m in mixes]
    except InfeasibleError:  # fewer microbatches than pipelines: the screen declines
        assert screen_for(p, pipelines).seconds(mixes) is None
        return
    assert screen_for(p, pipelines).seconds(mixes) == expected


def test_the_screen_sees_ties_and_exposure():
    """The cases the exact split and the exposure shortcut must get right occur here: tied
    units at the threshold and an all-reduce end past the slowest pipeline."""
    from planner.batching import linear_cost, split_groups

    tied = exposed = 0
    for kind in (0, 1, 2):
        p = toy(kind, 64)
        for a in sizes_of(p):
            for b in sizes_of(p):
                mix = sorted(({a: 2, b: 1} if a != b else {a: 3}).items())
                split = split_groups([(linear_cost(p.template(n)), x) for n, x in mix], 64)
                tied += any(extra for _, extra in split)
                latest = max(
                    p.template(n).iteration_time(base + max(e, default=0)) for (n, _), (base, e) in zip(mix, split)
                )
                exposed += p.mix_seconds(mix) > latest
    assert tied > 0 and exposed > 0


@settings(max_examples=60, deadline=None)
@given(kinds, batches, st.data())
def test_the_spread_decides_as_the_reference(kind, batch, data):
    p = toy(kind, batch)
    sizes = sizes_of(p)
    plan = data.draw(st.lists(st.sampled_from(sizes), min_size=1, max_size=6))
    spares = [f"s{i}" for i in range(data.draw(st.integers(1, 8)))]
    largest = data.draw(st.sampled_from(sizes))
    groups, start = [], 0
    for n in plan:
        groups.append([f"n{start + i}" for i in range(n)])
        start += n
    try:
        expected = _reference_spread(p, groups, spares, largest)
    except InfeasibleError:
        with pytest.raises(InfeasibleError):
            _spread(p, groups, spares, largest)
        return
    assert _spread(p, groups, spares, largest) == expected


def test_the_screen_on_every_small_mix_of_the_equal_layer_model():
    """Brute force where unit costs tie exactly across templates (integer layer times):
    every mix of up to four pipelines, several batches, in one call per pipeline count."""
    from itertools import combinations_with_replacement

    for batch in (4, 9, 23, 64):
        p = toy(1, batch)
        for pipelines in range(1, 5):
            mixes = []
            for chosen in combinations_with_replacement(sizes_of(p), pipelines):
                mixes.append({n: chosen.count(n) for n in set(chosen)})
            if batch < pipelines:
                assert screen_for(p, pipelines).seconds(mixes) is None
                continue
            assert screen_for(p, pipelines).seconds(mixes) == [p.mix_seconds(sorted(m.items())) for m in mixes]


def test_the_screens_split_is_split_groups_busiest_pipeline_per_size():
    """The batched split against `split_groups` directly (the busiest pipeline of each size,
    tied units to the lowest indices), on every small mix of the three models."""
    from itertools import combinations_with_replacement

    import numpy as np

    from planner.batching import linear_cost, split_groups

    checked = partial = 0
    for kind in (0, 1, 2):
        for batch in (9, 23, 64, 100):
            p = toy(kind, batch)
            sizes = sizes_of(p)
            lines = [linear_cost(p.template(n)) for n in sizes]
            c, beta = np.array([line[0] for line in lines]), np.array([line[1] for line in lines])
            for pipelines in range(2, 5):
                chosen = list(combinations_with_replacement(range(len(sizes)), pipelines))
                x = np.array([[pick.count(g) for g in range(len(sizes))] for pick in chosen])
                top = screen_for(p, pipelines)._latest_units(c, beta, x, batch - pipelines)
                for row, counts in zip(top, x):
                    groups = [(lines[g], int(n)) for g, n in enumerate(counts) if n]
                    split = split_groups(groups, batch)
                    want = [base + max(extra, default=0) for base, extra in split]
                    assert [int(row[g]) for g, n in enumerate(counts) if n] == want
                    partial += any(extra and len(extra) < n for (_, n), (_, extra) in zip(groups, split))
                    checked += 1
    assert checked > 1000 and partial > 100  # ties split across pipelines are exercised
