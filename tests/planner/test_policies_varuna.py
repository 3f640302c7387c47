"""Varuna: the configuration search by hand, and the checkpoint/restart decisions."""

from __future__ import annotations

import pytest

from designs.varuna.policy import VarunaMemory, VarunaPolicy, place
from designs.varuna.search import VarunaSearch
from planner.hardware import ClusterSpec, GpuSpec
from planner.policies import (
    Checkpoint,
    ClusterView,
    Continue,
    Decision,
    NodesReady,
    NodesRemoved,
    PauseEnded,
    Restart,
    RestartFromCheckpoint,
    Start,
)
from planner.profile import LayerProfile, ModelProfile

GB = 10**9


def profile_at(b: int, num_layers: int = 4) -> ModelProfile:
    """Per layer and microbatch of b: forward b s, backward 2b s, 1 GB of state, b/4 GB of
    activations kept per microbatch in flight."""
    layers = tuple(
        LayerProfile(f"l{i}", float(b), 2.0 * b, GB // 4, GB // 4, GB // 2, b * GB // 4, 0) for i in range(num_layers)
    )
    return ModelProfile("toy", b, layers)


def cluster(nodes: int = 8) -> ClusterSpec:
    return ClusterSpec(GpuSpec("toy", 1e12, 4 * GB, 1e12, 1e18), nodes, 1, reserved_bytes=0)


def search(batch: int = 16, layers: int = 4, max_microbatch: int = 4) -> VarunaSearch:
    return VarunaSearch(lambda b: profile_at(b, layers), cluster(), batch, max_microbatch=max_microbatch)


def test_depths_divide_the_layer_count():
    assert search(layers=6).depths == (1, 2, 3, 6)


def test_search_by_hand_largest_fitting_microbatch_then_fastest():
    # 4 GB per GPU. Depth 1: 4 GB of state alone, nothing fits. Depth 2 (two layers, 2 GB):
    # stage 0 holds 2 microbatches of b/2 GB: b <= 2. Depth 4: 1 GB + 4 x b/4 GB: b <= 3, so 2.
    # On 4 GPUs, 16 samples: 2 x 2 at b = 2: 4 microbatches of 2 x 3 x 2 = 12 s stages,
    # (4 + 1) x 12 = 60 s; 4 x 1 at b = 2: 8 microbatches of 6 s stages, (8 + 3) x 6 = 66 s.
    best = search().best(4)
    assert (best.depth, best.width, best.microbatch_size, best.num_microbatches) == (2, 2, 2, 4)
    assert best.iteration_time_s == pytest.approx(60.0)
    # b = 1 would be faster at depth 2 ((8 + 1) x 6 = 54 s) but Varuna takes the largest b
    assert search(max_microbatch=1).best(4).iteration_time_s == pytest.approx(54.0)
    # 3 GPUs: 2 x 1 (8 microbatches of 12 s: 108 s) with one GPU idle
    three = search().best(3)
    assert (three.depth, three.width, three.iteration_time_s) == (2, 1, pytest.approx(108.0))
    placed = place(three, ["a", "b", "c"], 1)
    assert placed.nodes == ("a", "b") and placed.idle_gpus == 0  # c stays outside the plan
    # with 2 GPUs per node the two workers share node a
    assert place(three, ["a", "b"], 2).nodes == ("a",) and place(three, ["a", "b"], 2).idle_gpus == 0
    assert search().best(1) is None and search().min_gpus(8) == 2


def view(ready, state="running", done=3, saved=0):
    """`done` committed iterations, of which the last checkpoint holds `saved`."""
    return ClusterView(0.0, tuple(ready), (), state, iterations_done=done, checkpoint_iterations=saved)


def running(policy, ready) -> Decision:
    plan = policy.plan_for(ready)
    return Decision(plan, (Continue(),), VarunaMemory(plan, True))


def test_losses_checkpoint_when_a_replica_survives_and_roll_back_when_none_does():
    policy = VarunaPolicy(search(), 1, max_nodes=8)
    current = running(policy, ["a", "b", "c", "d", "e"])  # 2 x 2 on a..d, e idle
    assert current.plan.stage_nodes == (("a", "c"), ("b", "d"))
    assert policy.decide(view("abcd"), NodesRemoved(("e",)), current).actions == (Continue(),)
    saved = policy.decide(view("abce"), NodesRemoved(("d",)), current)
    assert [type(a) for a in saved.actions] == [Checkpoint, Restart] and not saved.rolls_back
    assert saved.plan == policy.plan_for(list("abce"))
    lost = policy.decide(view("ace"), NodesRemoved(("b", "d")), current)
    assert [type(a) for a in lost.actions] == [RestartFromCheckpoint] and lost.rolls_back


def test_a_loss_without_notice_rolls_back_though_a_replica_survives():
    """A hardware fault stops every rank with the failed collective: nothing is saved from
    the survivors, the restart resumes from the last checkpoint."""
    policy = VarunaPolicy(search(), 1, max_nodes=8)
    current = running(policy, ["a", "b", "c", "d", "e"])
    sudden = policy.decide(view("abce"), NodesRemoved(("d",), notice=False), current)
    assert [type(a) for a in sudden.actions] == [RestartFromCheckpoint] and sudden.rolls_back
    assert sudden.plan == policy.plan_for(list("abce"))
    warned = policy.decide(view("abce"), NodesRemoved(("d",), notice=True), current)
    assert [type(a) for a in warned.actions] == [Checkpoint, Restart] and not warned.rolls_back


def test_new_nodes_morph_the_job_only_when_faster():
    policy = VarunaPolicy(search(), 1, max_nodes=8)
    current = running(policy, ["a", "b"])  # 2 x 1, 108 s
    grow = policy.decide(view("abcd"), NodesReady(("c", "d")), current)
    assert [type(a) for a in grow.actions] == [Checkpoint, Restart] and grow.plan.config.width == 2
    four = running(policy, list("abcd"))
    assert policy.decide(view("abcde"), NodesReady(("e",)), four).actions == (Continue(),)


def test_nothing_new_since_the_last_checkpoint_restarts_without_saving():
    """Removals and morphs re-save only committed work the last checkpoint lacks; with
    none (no iteration since it, or none at all) the restart resumes from it as it is."""
    policy = VarunaPolicy(search(), 1, max_nodes=8)
    current = running(policy, ["a", "b", "c", "d", "e"])
    for done in (0, 4):
        same = policy.decide(view("abce", done=done, saved=done), NodesRemoved(("d",)), current)
        assert [type(a) for a in same.actions] == [Restart] and not same.rolls_back
    newer = policy.decide(view("abce", done=5, saved=4), NodesRemoved(("d",)), current)
    assert [type(a) for a in newer.actions] == [Checkpoint, Restart]
    two = running(policy, ["a", "b"])
    grow = policy.decide(view("abcd", done=2, saved=2), NodesReady(("c", "d")), two)
    assert [type(a) for a in grow.actions] == [Restart] and grow.plan.config.width == 2


def test_start_and_resume():
    policy = VarunaPolicy(search(), 1, max_nodes=8)
    first = policy.decide(view("ab", "waiting"), NodesReady(("a", "b")), None)
    assert first.actions == (Start(),)
    done = policy.decide(view("ab", "restarting"), PauseEnded("restarting"), first)
    assert done.memory == VarunaMemory(first.plan, True)
    waiting = policy.decide(view("a"), NodesRemoved(("b",)), done)
    assert waiting.plan is None
    back = policy.decide(view("ac", "waiting"), NodesReady(("c",)), waiting)
    assert back.actions[0].__class__ is RestartFromCheckpoint


def test_a_model_that_fits_nowhere_is_reported_not_crashed():
    tight = VarunaSearch(
        lambda b: profile_at(b), ClusterSpec(GpuSpec("toy", 1e12, GB // 2, 1e12, 1e9), 8, 1, reserved_bytes=0), 16
    )
    policy = VarunaPolicy(tight, 1, max_nodes=8)
    assert "out of memory" in policy.infeasible_reason()
    assert policy.decide(view("abcd", "waiting"), NodesReady(tuple("abcd")), None).plan is None
