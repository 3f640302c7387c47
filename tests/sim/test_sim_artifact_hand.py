"""The artifact calibration against hand computations on small traces.

Each expectation is worked out from the rules in ../shared/calibration/README.md: nodes are
usable 45 s after their add event, an iteration takes global batch / table throughput at the
live node count (the 15 row below 15 nodes), and the pauses are the per-model constants.
The run ends at the trace's last event (here an add that only marks the end).
"""

from __future__ import annotations

import pytest

from sim.config import SimConfig
from sim.run import simulate

from .tiny import make_trace, nodes

GPT3M_OOBLECK_15 = 19.10313139  # samples/s, oobleck row for 15 (and fewer) nodes
GPT3M_VARUNA_15 = 20.91158092
BERT_BAMBOO_24 = 99.37888199
BERT_BAMBOO_23 = 74.53416149


def run(policy, model, rows, **options):
    trace = make_trace(rows)
    return simulate(SimConfig.of(policy=policy, model=model, trace="hand", **options), trace=trace)


def events_of(result, kind):
    return [e for e in result.events if e.kind == kind]


def test_oobleck_one_removal_by_hand():
    # 14 nodes at 0, one removed at 1000 s, run ends at 2000 s.
    result = run("oobleck", "GPT-3-medium", [(0, "add", nodes(14)), (1000, "remove", "n3"), (2000, "add", "end")])
    tau = 819 / GPT3M_OOBLECK_15  # 42.8726 s
    # ready at 45, 3 s start pause: training from 48; iterations end at 48 + k tau:
    # 22 of them before 1000 (the 22nd at 991.2, the 23rd would end at 1034.1: lost).
    # 3 s reconfiguration: 13 nodes (>= 12) run the 15 row again from 1003; 23 more before 2000.
    s = result.summary
    assert s.num_iterations == 22 + 23
    assert s.committed_samples == 45 * 819
    last = 1003 + 23 * tau
    assert s.avg_samples_per_s == pytest.approx(45 * 819 / (last - 48), rel=1e-12)
    assert s.num_reconfigurations == 1 and s.num_restarts == 0 and s.failures_survived == 1
    b = s.breakdown
    assert b.waiting_s == pytest.approx(45)
    assert b.restart_s == pytest.approx(3)  # the start
    assert b.reconfiguration_s == pytest.approx(3)
    assert b.lost_work_s == pytest.approx((1000 - (48 + 22 * tau)) + (2000 - last))
    assert b.useful_compute_s == pytest.approx(45 * tau)
    assert b.total_s() == pytest.approx(2000)
    # cost: 14 nodes for 1000 s, then 13 for 1000 s, at 0.91 $/h
    assert s.node_hours == pytest.approx((14 * 1000 + 13 * 1000) / 3600)
    assert s.cost_usd == pytest.approx(s.node_hours * 0.91)


def test_oobleck_removal_during_reconfiguration_restarts_the_pause():
    # GPT-3-6_7b: 10 s reconfiguration; Oobleck needs 16 nodes there (0 samples/s at 15).
    rows = [(0, "add", nodes(20)), (1000, "remove", "n1"), (1004, "remove", "n2"), (3000, "add", "end")]
    result = run("oobleck", "GPT-3-6_7b", rows)
    running = [r for r in result.timeline if r.state == "running"]
    assert [r.time_s for r in running][:2] == [pytest.approx(55.0), pytest.approx(1014.0)]
    assert result.summary.num_reconfigurations == 2
    assert result.summary.breakdown.reconfiguration_s == pytest.approx(4 + 10)


def test_oobleck_waits_below_the_minimum_and_new_nodes_join_only_at_a_reconfiguration():
    rows = [
        (0, "add", nodes(12)),
        (500, "remove", "n1"),  # 11 left: wait
        (600, "add", "m1"),  # usable at 645: 12 again, start (3 s)
        (700, "add", "m2"),  # usable at 745 while training: waits as a spare
        (1000, "remove", "n2"),  # reconfigure over 12 usable nodes (m2 included)
        (1500, "add", "end"),
    ]
    result = run("oobleck", "GPT-3-medium", rows)
    states = [(r.time_s, r.state, r.working_nodes) for r in result.timeline]
    assert (500.0, "waiting", 0) in states
    assert (645.0, "restarting", 12) in states
    assert (1003.0, "running", 12) in states
    assert result.summary.breakdown.waiting_s == pytest.approx(45 + 145)


def test_varuna_checkpoints_and_rolls_back_by_hand():
    result = run("varuna", "GPT-3-medium", [(0, "add", nodes(14)), (1000, "remove", "n5"), (2000, "add", "end")])
    tau = 819 / GPT3M_VARUNA_15  # 39.1649 s
    # start: restart 78.7 - checkpoint 11.2 = 67.5 s, training from 112.5. Checkpoints (11.2 s)
    # after iterations 10 (504.1) and 20 (907.0 .. 918.2); iterations 21, 22 end at 957.4
    # and 996.5; the removal at 1000 loses 23 in flight and rolls 21, 22 back to 20.
    # Restart 67.5 s: from 1067.5; checkpoint after the first iteration (21, at 1106.7),
    # then at 30 (1470.3) and 40 (1873.2); 41 and 42 end at 1923.6 and 1962.7 < 2000.
    s = result.summary
    assert s.num_iterations == 42
    assert s.num_restarts == 1 and s.failures_survived == 0
    assert s.num_checkpoints == 2 + 3
    rollback = events_of(result, "rollback")
    assert (
        len(rollback) == 1 and rollback[0].detail["iterations_undone"] == 2 and rollback[0].detail["to_iteration"] == 20
    )
    b = s.breakdown
    assert b.checkpoint_s == pytest.approx(5 * 11.2)
    assert b.restart_s == pytest.approx(2 * 67.5)
    t20_done = 112.5 + 20 * tau + 2 * 11.2  # after the second checkpoint
    assert b.lost_work_s == pytest.approx(1000 - t20_done + (2000 - (1884.398 + 2 * tau)), abs=1e-2)
    assert b.total_s() == pytest.approx(2000)
    last = 1067.5 + 42 * tau - 20 * tau + 3 * 11.2
    assert s.avg_samples_per_s == pytest.approx(42 * 819 / (last - 112.5))


def test_varuna_removal_during_a_checkpoint_fails_it():
    # The first checkpoint runs 504.1 .. 515.3: a removal at 510 fails it, back to 0.
    rows = [(0, "add", nodes(14)), (510, "remove", "n5"), (700, "add", "end")]
    result = run("varuna", "GPT-3-medium", rows)
    assert len(events_of(result, "checkpoint_failed")) == 1
    # restart until 577.5, one iteration (616.7) and its checkpoint (until 627.9), one more
    # iteration (667.0) before 700
    assert result.summary.num_checkpoints == 1
    assert result.summary.num_iterations == 2
    assert events_of(result, "rollback")[0].detail["iterations_undone"] == 10


def test_varuna_without_rollback_keeps_the_work():
    rows = [(0, "add", nodes(14)), (510, "remove", "n5"), (700, "add", "end")]
    result = run("varuna", "GPT-3-medium", rows, varuna_rollback=False)
    assert result.summary.num_iterations == 12
    assert not events_of(result, "rollback")


def test_bamboo_fail_over_then_reconfiguration_by_hand():
    # 24 nodes: two pipelines of 12, no spare. The removed node n18 is pipeline 1, stage 5.
    result = run("bamboo", "BERT-large", [(0, "add", nodes(24)), (1000, "remove", "n18"), (2000, "add", "end")])
    tau = 8192 / BERT_BAMBOO_24  # 82.43 s
    # start: 30 s global rendezvous, training from 75; 11 iterations by 981.8; the 12th is
    # 18.2 s in when n18 goes: n17 covers its stage, the remaining 64.2 s take 1.5x (96.3 s)
    done_11 = 75 + 11 * tau
    iteration_12 = 1000 + 1.5 * (done_11 + tau - 1000)
    # at its end: 1 overloaded of 23 active (2/23 > 5%): reconfigure (76 s) to one pipeline
    # of 12 and 11 spares; the table's 23 row gives 74.53 samples/s
    tau2 = 8192 / BERT_BAMBOO_23
    restart_at = iteration_12 + 76
    more = int((2000 - restart_at) // tau2)
    s = result.summary
    assert more == 7
    assert s.num_iterations == 12 + more
    assert s.num_reconfigurations == 1 and s.num_restarts == 0 and s.failures_survived == 1
    fail_over = [e for e in events_of(result, "decision") if e.detail["actions"][0]["action"] == "FailOver"]
    assert fail_over[0].detail["actions"][0] == {
        "action": "FailOver",
        "node": "n18",
        "covered_by": "n17",
        "stage": [1, 5],
    }
    b = s.breakdown
    assert b.redundant_compute_s == pytest.approx(0.5 * (done_11 + tau - 1000))  # the slowdown's extra
    assert b.reconfiguration_s == pytest.approx(76)
    assert b.total_s() == pytest.approx(2000)


def test_bamboo_adjacent_losses_are_fatal_but_keep_progress_in_the_artifact_model():
    rows = [(0, "add", nodes(24)), (1000, "remove", ["n5", "n6"]), (2000, "add", "end")]
    result = run("bamboo", "BERT-large", rows)
    s = result.summary
    assert s.num_restarts == 1 and s.failures_survived == 0
    assert not events_of(result, "rollback")
    tau = 8192 / BERT_BAMBOO_24
    # training from 75 s: 11 iterations, lost the 12th; restart 30 s to 1030 with one pipeline (22 usable: 23 row)
    done = int((1000 - 75) // tau)
    assert done == 11
    tau2 = 8192 / BERT_BAMBOO_23
    assert s.num_iterations == done + int((2000 - 1030) // tau2)
    assert s.breakdown.restart_s == pytest.approx(30 + 30)


def test_bamboo_on_gpt3_is_out_of_memory_not_a_crash():
    result = run("bamboo", "GPT-3-medium", [(0, "add", nodes(20)), (1000, "add", "end")])
    s = result.summary
    assert s.extra["outcome"] == "infeasible" and "out of memory" in s.extra["infeasible_reason"]
    assert s.committed_samples == 0 and s.avg_samples_per_s == 0
    assert s.breakdown.waiting_s == pytest.approx(1000)
