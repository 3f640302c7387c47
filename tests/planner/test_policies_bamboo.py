"""Bamboo: redundant stages, fail-over, fatal cases, reconfiguration rules, and its cost
model (split, doubled memory, redundant compute filling bubbles), checked by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from designs.bamboo.cost import bamboo_layout
from designs.bamboo.policy import BambooPlan, BambooPolicy, form_grid, regrid
from planner.costmodel import pipeline_time_s
from planner.hardware import ClusterSpec, GpuSpec
from planner.policies import (
    Admit,
    ClusterView,
    Continue,
    Decision,
    FailOver,
    IterationEnd,
    NodesRemoved,
    PauseEnded,
    Reinstantiate,
    Restart,
    RestartFromCheckpoint,
    Start,
    WaitForNodes,
)
from planner.profile import LayerProfile, ModelProfile

GB = 10**9


def profile(weights=(1, 1, 1, 1), state_bytes=GB) -> ModelProfile:
    """Layer i: forward w_i, backward 2 w_i, `state_bytes` of parameters + gradients +
    optimizer state (a quarter, a quarter, a half)."""
    layers = tuple(
        LayerProfile(f"l{i}", float(w), 2.0 * w, state_bytes // 4, state_bytes // 4, state_bytes // 2, 0, 0)
        for i, w in enumerate(weights)
    )
    return ModelProfile("toy", 1, layers)


def cluster(memory_bytes: int, nodes: int = 8) -> ClusterSpec:
    return ClusterSpec(GpuSpec("toy", 1e12, memory_bytes, 1e12, 1e18), nodes, 1, reserved_bytes=0)


def view(ready, state="running"):
    return ClusterView(0.0, tuple(ready), (), state)


NODES = tuple(f"n{i}" for i in range(1, 10))


def running(policy: BambooPolicy, ready) -> Decision:
    return Decision(form_grid(ready, policy.depth), (Continue(),), True)


def test_grid_takes_nodes_in_order_and_leaves_spares():
    plan = form_grid(NODES[:7], 3)
    assert plan.owners == (("n1", "n2", "n3"), ("n4", "n5", "n6"))
    assert plan.spares == ("n7",) and plan.formed_with == 7
    assert form_grid(NODES[:2], 3) is None


def test_fail_over_goes_to_the_predecessor_wrapping_around():
    policy = BambooPolicy(3)
    current = running(policy, NODES[:6])
    d = policy.decide(view(["n1", "n2", "n3", "n5", "n6"]), NodesRemoved(("n4",)), current)
    # n4 is stage 0 of pipeline 1: its predecessor is that pipeline's last stage, n6
    assert d.actions == (FailOver("n4", "n6", (1, 0)),)
    assert d.plan.owners[1] == ("n6", "n5", "n6") and d.plan.covered == ((1, 0),) and d.plan.overloaded == ("n6",)
    assert d.check_at_iteration_end and not d.disruptive


def test_fatal_cases_restart_from_the_checkpoint_or_keep_progress_in_the_artifact_model():
    for rollback, expected in ((True, RestartFromCheckpoint), (False, Restart)):
        policy = BambooPolicy(3, fatal_rollback=rollback)
        current = running(policy, NODES[:6])
        covering = policy.decide(view(["n1", "n2", "n3", "n5", "n6"]), NodesRemoved(("n4",)), current)
        # n6 covers n4's stage: losing n6 is fatal
        d = policy.decide(view(["n1", "n2", "n3", "n5"]), NodesRemoved(("n6",)), covering)
        assert isinstance(d.actions[0], expected) and "covered a neighbour" in d.actions[0].reason
        # n5's predecessor is n6 (covering stage 0 already)... n5 is stage 1, predecessor stage 0 = n6
        d = policy.decide(view(["n1", "n2", "n3", "n6"]), NodesRemoved(("n5",)), covering)
        assert isinstance(d.actions[0], expected) and "already covers" in d.actions[0].reason
        # two adjacent losses at once
        d = policy.decide(view(["n1", "n4", "n5", "n6"]), NodesRemoved(("n2", "n3")), current)
        assert isinstance(d.actions[0], expected)
        assert d.plan.owners == (("n1", "n4", "n5"),)


def test_reconfiguration_rules_at_iteration_end():
    policy = BambooPolicy(3, overload_threshold=0.5)
    current = running(policy, NODES[:7])  # two pipelines, spare n7
    failed = policy.decide(view(["n1", "n2", "n3", "n4", "n5", "n7"]), NodesRemoved(("n6",)), current)
    # a spare can replace the overloaded node
    d = policy.decide(view(["n1", "n2", "n3", "n4", "n5", "n7"]), IterationEnd(5), failed)
    assert isinstance(d.actions[0], Reinstantiate) and "can replace" in d.actions[0].reason
    assert d.plan.owners == (("n1", "n2", "n3"), ("n4", "n5", "n7")) and d.plan.covered == ()
    # no spare, 2 x 1 / 5 active = 0.4 <= 0.5, no new pipeline: carry on covering
    current = running(policy, NODES[:6])
    failed = policy.decide(view(["n1", "n2", "n3", "n4", "n5"]), NodesRemoved(("n6",)), current)
    assert policy.decide(view(["n1", "n2", "n3", "n4", "n5"]), IterationEnd(5), failed).actions == (Continue(),)
    # at the default 5% it reconfigures: one pipeline and two spares
    strict = BambooPolicy(3)
    d = strict.decide(view(["n1", "n2", "n3", "n4", "n5"]), IterationEnd(5), failed)
    assert isinstance(d.actions[0], Reinstantiate) and d.plan.owners == (("n1", "n2", "n3"),)
    # enough new nodes for a whole pipeline
    healthy = running(policy, NODES[:4])
    d = policy.decide(view(NODES[:6]), IterationEnd(5), healthy)
    assert "new pipeline" in d.actions[0].reason and d.plan.num_pipelines == 2


def test_below_the_depth_it_waits_and_nodes_arriving_during_a_pause_join():
    policy = BambooPolicy(3)
    start = policy.decide(view(NODES[:3], "waiting"), IterationEnd(0), None)
    assert start.actions == (Start(),)
    assert isinstance(policy.decide(view(NODES[:2], "waiting"), IterationEnd(0), None).actions[0], WaitForNodes)
    d = policy.decide(view(NODES[:6], "restarting"), PauseEnded("restarting", ("n4", "n5", "n6")), start)
    assert d.actions == (Admit(("n4", "n5", "n6")),) and d.plan.num_pipelines == 2


def test_layout_split_memory_and_redundant_compute_by_hand():
    prof = profile(weights=(1, 1, 1, 1, 4))
    layout = bamboo_layout(prof, cluster(10 * GB), 2, 8)
    # weights 3 3 3 3 12: the least bottleneck of two stages is 12 (the last layer alone)
    assert layout.stage_layers == ((0, 4), (4, 5))
    assert layout.weight_s == (12.0, 12.0) and layout.forward_s == (4.0, 4.0)
    # memory: stage 0's own 4 GB (four layers) + its successor's 1 GB; stage 1: 1 + 4 GB
    assert layout.memory_bytes == pytest.approx((5 * GB, 5 * GB))
    # one pipeline, 8 microbatches: plain T = (8 + 1) x 12 = 108; each stage idles
    # 108 - 96 = 12 s and owes 8 x 4 = 32 s of redundant forward: spill 20
    total, useful = layout.iteration_s(1)
    assert useful == pytest.approx(108) and total == pytest.approx(128)
    # stage 1 failed over to stage 0: one 24 s stage, T = 24 + (8 - 1 + 0 - 1) x 24 + 24 =
    # 192 (8 x 24), plus the same 20 s spill
    total, _ = layout.iteration_s(1, ((0, 1),))
    assert total == pytest.approx(pipeline_time_s([24.0], 8) + 20) == pytest.approx(212)


def test_doubled_state_that_does_not_fit_is_out_of_memory():
    prof = profile()  # 1 GB per layer, 2 GB per stage, 4 GB with the successor's copy
    assert bamboo_layout(prof, cluster(5 * GB), 2, 8).oom_reason is None
    layout = bamboo_layout(prof, cluster(3 * GB), 2, 8)
    assert "out of memory" in layout.oom_reason
    policy = BambooPolicy(2, layout=layout, profile=prof)
    d = policy.decide(view(NODES[:4], "waiting"), IterationEnd(0), None)
    assert d.plan is None and "out of memory" in d.actions[0].reason


def test_reconfiguration_copies_only_what_nodes_lack():
    prof = profile()
    layout = bamboo_layout(prof, cluster(10 * GB), 2, 8)
    policy = BambooPolicy(2, layout=layout, profile=prof)
    old = BambooPlan(2, (("n1", "n2"), ("n3", "n4")))
    new = BambooPlan(2, (("n1", "n3"),), ("n5",))
    # depth 2: every node holds its stage and the other one, i.e. all four layers
    assert policy.copies(old, new) == ()
    fresh = BambooPlan(2, (("n5", "n1"),))
    copies = policy.copies(old, fresh)
    assert [(c.dst_node, c.layers) for c in copies] == [("n5", (0, 1, 2, 3))]
    assert copies[0].total_bytes == 4 * (GB // 4 + GB // 2)


# -- reconfiguration in place (Bamboo's paper) ----------------------------------------------
def test_reconfiguration_keeps_nodes_in_their_stages():
    nine = tuple(f"n{i}" for i in range(1, 11))
    ready = [n for n in nine if n != "n5"]
    for in_place, owners, spares in (
        (True, (("n1", "n2", "n3"), ("n4", "n10", "n6"), ("n7", "n8", "n9")), ()),
        (False, (("n1", "n2", "n3"), ("n4", "n6", "n7"), ("n8", "n9", "n10")), ()),
    ):
        policy = BambooPolicy(3, keep_in_place=in_place)
        current = running(policy, nine[:9])
        failed = policy.decide(view(ready[:-1]), NodesRemoved(("n5",)), current)
        d = policy.decide(view(ready), IterationEnd(5), failed)  # n10 arrived: it can replace n4's extra stage
        assert isinstance(d.actions[0], Reinstantiate) and d.plan.owners == owners and d.plan.spares == spares
    # no spare and too many overloaded: the pipeline with a vacancy goes, its nodes wait
    policy = BambooPolicy(3, overload_threshold=0.1)
    current = running(policy, nine[:9])
    failed = policy.decide(view(ready[:-1]), NodesRemoved(("n5",)), current)
    d = policy.decide(view(ready[:-1]), IterationEnd(5), failed)
    assert d.plan.owners == (("n1", "n2", "n3"), ("n7", "n8", "n9")) and d.plan.spares == ("n4", "n6")


def _copies_by_scanning(layout, prof, old: BambooPlan, new: BambooPlan):
    """The copy plan by its definition: every node of `new` in order, each layer it lacks
    from the alive old holder that has sent the fewest bytes (then the earliest)."""
    d, ranges = layout.depth, layout.stage_layers

    def held(plan, node):
        return {l for _, s in plan.stages_of(node) for t in (s, (s + 1) % d) for l in range(*ranges[t])}

    alive = set(new.nodes) | set(new.spares)
    holders = [n for n in old.nodes if n in alive]
    sent: dict[str, int] = {}
    requests: dict[tuple[str, str], list[int]] = {}
    for node in new.nodes:
        for layer in sorted(held(new, node) - held(old, node)):
            sources = [h for h in holders if layer in held(old, h)]
            if not sources:
                return None
            src = min(sources, key=lambda h: (sent.get(h, 0), holders.index(h)))
            sent[src] = sent.get(src, 0) + prof.layers[layer].copy_bytes
            requests.setdefault((node, src), []).append(layer)
    return {(dst, src): tuple(ls) for (dst, src), ls in requests.items()}


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_regrid_and_its_copies_match_their_definitions(data):
    depth = data.draw(st.integers(2, 4))
    prof = profile(weights=tuple(range(1, 9)))
    layout = bamboo_layout(prof, cluster(100 * GB), depth, 8)
    names = [f"n{i}" for i in range(data.draw(st.integers(depth, 5 * depth)))]
    old = form_grid(names, depth)
    policy = BambooPolicy(depth, layout=layout, profile=prof, overload_threshold=1.0)
    current = Decision(old, (Continue(),), True)
    ready = list(names)
    for _ in range(data.draw(st.integers(0, 3))):  # legal fail-overs, one at a time
        victim = data.draw(st.sampled_from(ready))
        d = policy.decide(view([n for n in ready if n != victim]), NodesRemoved((victim,)), current)
        if not all(isinstance(a, FailOver) for a in d.actions):
            break
        ready.remove(victim)
        current = d
    ready += [f"m{i}" for i in range(data.draw(st.integers(0, 2 * depth)))]
    plan = current.plan
    new = regrid(plan, ready, depth)
    if len(ready) < depth:
        assert new is None
        return
    assert new.num_pipelines == len(ready) // depth and not new.covered
    assert sorted(n for row in new.owners for n in row) + sorted(new.spares) == sorted(new.nodes) + sorted(new.spares)
    assert sorted(new.nodes + new.spares) == sorted(ready)
    # the first rows are the old pipelines with the fewest vacancies, in order, live slots kept
    live = [[n if (p, s) not in plan.covered else None for s, n in enumerate(row)] for p, row in enumerate(plan.owners)]
    kept = sorted(sorted(range(len(live)), key=lambda p: (live[p].count(None), p))[: new.num_pipelines])
    for row, p in zip(new.owners, kept):
        assert all(n is None or n == m for n, m in zip(live[p], row))
    pool = [n for n in ready if not any(n in live[p] for p in kept)]
    assert [n for row in new.owners[len(kept) :] for n in row] + list(new.spares) == pool[
        len(pool) - len(new.spares) - depth * (new.num_pipelines - len(kept)) :
    ]
    copies = policy.copies(plan, new)
    expected = _copies_by_scanning(layout, prof, plan, new)
    assert (None if copies is None else {(c.dst_node, c.src_node): c.layers for c in copies}) == expected
