"""ReCycle: the adapted 1F1B schedule against hand-worked schedules, and the design end to end."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traces
from designs import DesignError, registry
from designs.recycle.policy import canonical
from designs.recycle.schedule import makespan
from ooblab.cli import main
from planner.errors import PlannerError
from sim.config import SimConfig
from sim.run import simulate
from sim.setup import build

# -- the schedule, by hand -------------------------------------------------------------------


def test_healthy_two_stage_1f1b_by_hand():
    # f = 1, b = 2. Stage 0: F0 [0,1] F1 [1,2] B0 [4,6] B1 [7,9]; stage 1: F0 [1,2] B0 [2,4]
    # F1 [4,5] B1 [5,7]. Makespan 9 = (N + D - 1)(f + b).
    assert makespan([1, 1], [2, 2], pipelines=1, microbatches=2) == 9


def test_a_failed_last_stage_runs_on_its_peer_by_hand():
    # Two pipelines, pipeline 1's stage 1 failed: worker (0, 1) runs both pipelines' stage 1.
    # (0,1): F00 [1,2] B00 [2,4] F10 [4,5] B10 [5,7] F01 [7,8] B01 [8,10] F11 [10,11] B11 [11,13];
    # stage 0 backward of pipeline 1's last microbatch [13,15].
    assert makespan([1, 1], [2, 2], pipelines=2, microbatches=2, failed=[(1, 1)]) == 15


def test_decoupled_weight_gradients_wait_for_the_bubbles_by_hand():
    # Same grid, backward split B = W = 1: the host runs F and B first (B00 [2,3], F10 [3,4],
    # B10 [4,5], F01 [5,6], B01 [6,7], F11 [7,8], B11 [8,9]) and its four W after [9,13];
    # pipeline 1's stage 0 gets B11 at 9 and finishes its W at 11.
    assert makespan([1, 1], [2, 2], pipelines=2, microbatches=2, failed=[(1, 1)], weight_share=0.5) == 13


def test_one_stage_failed_replica_spreads_its_microbatches_by_hand():
    # D = 1, three replicas, replica 1 lost: its 4 microbatches go 2 + 2 to replicas 0 and 2,
    # each then runs 6 microbatches of f + b = 3 s.
    assert makespan([1], [2], pipelines=3, microbatches=4, failed=[(1, 0)]) == 18
    # the list schedule agrees with the one-stage shortcut (comm_s > 0 takes the general path;
    # one stage has no transfers, so the value is the same)
    assert makespan([1], [2], pipelines=3, microbatches=4, failed=[(1, 0)], comm_s=1e-9) == 18


def test_a_stage_with_no_live_worker_is_refused():
    with pytest.raises(PlannerError, match="stage 1 has no live worker"):
        makespan([1, 1], [2, 2], pipelines=2, microbatches=2, failed=[(0, 1), (1, 1)])


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(1, 8), st.floats(0.1, 3), st.floats(0.1, 3), st.integers(1, 3))
def test_healthy_uniform_schedule_is_plain_1f1b(depth, microbatches, f, b, pipelines):
    got = makespan([f] * depth, [b] * depth, pipelines=pipelines, microbatches=microbatches)
    assert got == pytest.approx((microbatches + depth - 1) * (f + b))


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(2, 4),
    st.integers(1, 6),
    st.lists(st.floats(0.1, 3), min_size=8, max_size=8),
    st.sets(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=3),
    st.sampled_from([0.0, 0.5]),
)
def test_adapted_schedule_finishes_and_respects_each_workers_load(depth, pipelines, n, times, failed, share):
    fwd, bwd = times[:depth], times[4 : 4 + depth]
    failed = {(p, s) for p, s in failed if p < pipelines and s < depth}
    if any(all((p, s) in failed for p in range(pipelines)) for s in range(depth)):
        return  # no live worker for a stage: refused above
    got = makespan(fwd, bwd, pipelines=pipelines, microbatches=n, failed=failed, weight_share=share)
    # a live stage-s worker runs at least its own n microbatches, and the peers of a stage
    # together run all `pipelines` x n of them
    for s in range(depth):
        live = pipelines - sum(1 for _, t in failed if t == s)
        assert got >= pipelines * n / live * (fwd[s] + bwd[s]) - 1e-9
    assert got >= sum(fwd) + (1 - share) * sum(bwd) - 1e-9  # one microbatch's forward and input gradients


def test_failure_shapes_are_canonical_up_to_renaming_pipelines():
    assert canonical([(3, 1), (0, 2), (3, 0)]) == canonical([(1, 2), (2, 0), (2, 1)]) == ((0, 1), (2,))


# -- the design in the simulator -------------------------------------------------------------
def _trace(removals: list[tuple[float, str]], nodes: int = 8, end_s: float = 4 * 3600.0) -> traces.Trace:
    events = [(0.0, "add", f"n{i}") for i in range(nodes)] + [(t, "remove", n) for t, n in removals]
    events.append((end_s, "add", "last"))
    return traces.Trace.from_tuples(sorted(events, key=lambda e: e[0]), "inline")


def _run(trace: traces.Trace, **options):
    config = SimConfig.of(
        policy="recycle", model="GPT-2-ours", trace="inline", calibration="planner", design_options=options or None,
        checkpoint_every_s=1800.0,
    )  # fmt: skip
    return build(config, trace), simulate(config, trace=trace)


def _decisions(result):
    return [e for e in result.events if e.kind == "decision"]


def test_a_failure_runs_degraded_at_the_schedules_pace_then_replans_at_the_checkpoint():
    setup, result = _run(_trace([(1000.0, "n5")]), replan_s=1e9)  # a re-plan never pays at once
    summary = result.summary
    assert summary.failures_survived == 1 and summary.num_restarts == 1 and summary.extra["rollbacks"] == 0
    hit = next(e for e in _decisions(result) if e.detail["event"] == "NodesRemoved")
    assert [a["action"] for a in hit.detail["actions"]] == ["FailOver"]
    # GPT-2-ours on 8 nodes: a 2 x 4 grid; node 5 runs worker 5 = replica 2, stage 1
    policy = setup.policy
    grid = policy.plan_for(tuple(f"n{i}" for i in range(8))).config
    assert (grid.depth, grid.width) == (2, 4) and hit.detail["actions"][0]["stage"] == [2, 1]
    tables = policy.search.tables(grid.microbatch_size)
    fwd = [tables.forward_s(a, e, 1) for a, e in grid.stage_layers]
    bwd = [tables.backward_s(a, e, 1) for a, e in grid.stage_layers]
    run = dict(pipelines=4, microbatches=grid.num_microbatches, weight_share=0.5)
    ratio = makespan(fwd, bwd, failed=[(2, 1)], **run) / makespan(fwd, bwd, **run)
    # 64 microbatches leave small bubbles: each stage-1 peer runs 4/3 of its work, and the
    # schedule is at least that much slower, yet far from stopping everyone for the lost one
    assert 4 / 3 - 0.01 < ratio < 1.5
    assert hit.detail["plan"]["predicted_iteration_s"] == pytest.approx(grid.compute_s * ratio + grid.allreduce_s)
    replan = next(e for e in _decisions(result) if any(a["action"] == "Restart" for a in e.detail["actions"]))
    saved = next(e for e in result.events if e.kind == "checkpoint" and e.time_s > 1000.0)
    assert replan.time_s == saved.time_s  # right as the first checkpoint after the failure completes
    assert [a["action"] for a in replan.detail["actions"]] == ["Restart"]  # nothing new to save
    assert replan.detail["plan"]["nodes"] == 7 - 1 and replan.detail["plan"]["width"] == 3  # 2 x 3 on 7 nodes


def test_a_replan_at_once_when_the_slowdown_costs_more():
    _, result = _run(_trace([(1000.0, "n5")]), replan_s=0.0)
    hit = next(e for e in _decisions(result) if e.detail["event"] == "NodesRemoved")
    assert [a["action"] for a in hit.detail["actions"]] == ["Checkpoint", "Restart"]


def test_losing_every_worker_of_a_stage_rolls_back():
    # a 2 x 4 grid's stage 1 runs on n1, n3, n5, n7
    _, result = _run(_trace([(1000.0 + k, n) for k, n in enumerate(("n1", "n3", "n5", "n7"))]), replan_s=1e9)
    assert result.summary.extra["rollbacks"] == 1


def test_recycle_is_simulator_only_and_listed_so(capsys):
    with pytest.raises(DesignError, match="does not run on the real backend"):
        registry.resolve("recycle", {}, "real")
    assert main(["designs", "--json"]) == 0
    listed = {d["name"]: d for d in json.loads(capsys.readouterr().out)}
    assert listed["recycle"]["runs_on"] == ["simulator"]


def test_arrivals_wait_for_the_next_checkpoint():
    events = [(0.0, "add", f"n{i}") for i in range(6)] + [(1000.0, "add", "m0"), (1000.0, "add", "m1")]
    trace = traces.Trace.from_tuples(events + [(4 * 3600.0, "add", "last")], "inline")
    _, result = _run(trace)
    restart = next(e for e in _decisions(result) if any(a["action"] == "Restart" for a in e.detail["actions"]))
    saved = next(e for e in result.events if e.kind == "checkpoint" and e.time_s > 1045.0)
    assert restart.time_s == saved.time_s and restart.detail["plan"]["nodes"] == 8
    assert result.summary.extra["rollbacks"] == 0
