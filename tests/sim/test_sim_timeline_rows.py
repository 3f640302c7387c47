"""Timeline rows written at trace events that do not interrupt the job (an add while
running) carry the iterations ended by then and come after those iterations' rows.

By hand (artifact calibration, GPT-3-medium, Oobleck's 15-node row, 3 s start pause):
14 nodes ready at 45 s, training from 48 s, one iteration every 819 / 19.10313139 s.
"""

from __future__ import annotations

import math

import pytest

from sim.config import SimConfig
from sim.run import simulate

from .tiny import make_trace, nodes

TAU = 819 / 19.10313139


def run(timeline):
    rows = [(0, "add", nodes(14)), (1000, "add", "extra"), (1500, "add", "late"), (2000, "add", "end")]
    return simulate(
        SimConfig.of(policy="oobleck", model="GPT-3-medium", trace="hand", timeline=timeline), trace=make_trace(rows)
    )


@pytest.mark.parametrize("timeline", ["changes", "iterations"])
def test_row_at_an_add_counts_the_iterations_ended_before_it(timeline):
    result = run(timeline)
    at_add = [r for r in result.timeline if r.time_s == 1000.0]
    assert len(at_add) == 1 and at_add[0].live_nodes == 15
    assert at_add[0].iterations_done == math.floor((1000 - 48) / TAU)  # 22
    times = [r.time_s for r in result.timeline]
    assert times == sorted(times)


def test_iteration_rows_count_up_one_by_one():
    rows = [r for r in run("iterations").timeline if r.state == "running"]
    done = [r.iterations_done for r in rows]
    assert all(b - a in (0, 1) for a, b in zip(done, done[1:]))
    ends = [r.time_s for r, previous in zip(rows[1:], rows) if r.iterations_done == previous.iterations_done + 1]
    assert ends[:3] == pytest.approx([48 + TAU, 48 + 2 * TAU, 48 + 3 * TAU])


@pytest.mark.parametrize("calibration", ["artifact", "planner"])
def test_nodes_ready_after_a_pause_abandoned_for_waiting_start_the_job(calibration):
    # Oobleck, GPT-3-medium: ready at 45 s, start pause (3 s artifact, 40 s planner); three
    # nodes leave at 46 s, during it, leaving 11 (< the artifact's 12) or... the planner's
    # n0 is 1, so there all 14 leave. Three fresh nodes (or 14) arrive at 100 s, ready at
    # 145 s: the job must start again then, not wait for ever.
    lost = nodes(3) if calibration == "artifact" else nodes(14)
    back = nodes(3, "m") if calibration == "artifact" else nodes(14, "m")
    rows = [(0, "add", nodes(14)), (46, "remove", lost), (100, "add", back), (2000, "add", "end")]
    result = simulate(
        SimConfig.of(policy="oobleck", model="GPT-3-medium", calibration=calibration, trace="hand"),
        trace=make_trace(rows),
    )
    waiting = [r.time_s for r in result.timeline if r.state == "waiting"]
    assert 46.0 in waiting
    restarting = [r.time_s for r in result.timeline if r.state == "restarting"]
    assert 145.0 in restarting
    assert result.summary.num_iterations > 0


def test_duration_runs_past_the_last_event_at_the_last_membership_and_cuts_before_it():
    rows = [(0, "add", nodes(14)), (1000, "add", "extra")]
    base = SimConfig.of(policy="oobleck", model="GPT-3-medium", trace="hand", timeline="iterations")
    short = simulate(base, trace=make_trace(rows))
    longer = simulate(base.with_(duration_s=3000.0), trace=make_trace(rows))
    cut = simulate(base.with_(duration_s=500.0), trace=make_trace(rows))
    assert short.summary.duration_s == 1000.0 and longer.summary.duration_s == 3000.0
    assert short.summary.num_iterations == math.floor((1000 - 48) / TAU)
    # after 1000 s the job runs on (15 nodes ready at 1045 s, a join pause, faster pace)
    assert longer.summary.num_iterations > short.summary.num_iterations + math.floor(1900 / TAU)
    assert max(r.live_nodes for r in longer.timeline) == 15
    assert cut.summary.num_iterations == math.floor((500 - 48) / TAU)
    assert max(r.live_nodes for r in cut.timeline) == 14


def test_duration_must_be_positive():
    with pytest.raises(Exception, match="duration_s"):
        SimConfig.of(duration_s=0.0)
