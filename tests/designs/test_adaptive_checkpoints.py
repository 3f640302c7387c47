"""The adaptive checkpoint interval (planner.checkpoint_interval, applied by sim.engine).

Hand cases on the tiny model (tests/sim/tiny.py): layers of 3 s, a checkpoint costs its
fixed 2 s (no bytes), start 10 s, reconfiguration 5 s; Oobleck with f = 1 on 4 nodes trains
two pipelines at 30 s per iteration, on 3 nodes one pipeline at 48 s. A property: the
intervals chosen before any time T are the same whatever the trace does after T.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from designs import registry
from designs.oobleck.policy import OobleckPolicy
from planner.checkpoint_cost import StorageSpec
from planner.checkpoint_interval import AdaptiveCheckpoints, IntervalTracker, daly_interval_s, young_interval_s
from planner.plan import JobSpec
from planner.planner import Planner
from sim.config import SimConfig
from sim.engine import Simulation
from sim.errors import SimError
from sim.pricing import Pricing
from sim.run import simulate as simulate_config
from sim.timing import PlannerCosts
from tests.sim.tiny import make_trace, nodes, tiny_cluster, tiny_profile, tiny_timing

COSTS = PlannerCosts(reconfigure_overhead_s=5.0, restart_overhead_s=10.0)
STORAGE = StorageSpec(fixed_s=2.0)
BATCH = 8


def _simulate(trace, rule: AdaptiveCheckpoints | None, cluster_nodes: int = 4) -> Simulation:
    planner = Planner(tiny_profile(), tiny_cluster(cluster_nodes), JobSpec(BATCH, 1, 1))
    policy = OobleckPolicy(planner, reconfigure_pause_s=COSTS.reconfigure_overhead_s)
    timing = tiny_timing("oobleck", COSTS, BATCH, storage=STORAGE)
    sim = Simulation(
        trace, policy, Pricing(timing, node_startup_s=45.0, price_per_node_hour=1.0), adaptive_checkpoints=rule
    )
    return sim.run()


def _checkpoints(sim):
    return [e for e in sim.events if e.kind == "checkpoint"]


# -- the formulas ----------------------------------------------------------------------------
def test_formulas_by_hand():
    assert young_interval_s(2.0, 100.0) == pytest.approx(20.0)  # sqrt(400)
    assert daly_interval_s(2.0, 100.0) == pytest.approx(18.0)  # sqrt(400) - 2
    assert daly_interval_s(50.0, 100.0) == pytest.approx(50.0)  # sqrt(10000) - 50
    assert daly_interval_s(200.0, 100.0) == 100.0  # C >= 2M: once per failure
    with pytest.raises(ValueError):
        daly_interval_s(0.0, 10.0)


@given(st.floats(0.01, 1e4), st.floats(1.0, 1e7))
def test_daly_is_young_less_the_checkpoint_below_two_mtbf(c, m):
    if c < 2 * m:
        assert daly_interval_s(c, m) == pytest.approx(young_interval_s(c, m) - c)
        assert 0 < daly_interval_s(c, m) < young_interval_s(c, m)


@pytest.mark.parametrize(
    "kwargs", [{"rule": "fixed"}, {"prior_mtbf_s": 0.0}, {"prior_mtbf_s": math.inf}, {"cost_window": 0}]
)
def test_rule_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError):
        AdaptiveCheckpoints(**kwargs)


def test_tracker_by_hand():
    tracker = IntervalTracker(AdaptiveCheckpoints("young", prior_mtbf_s=900.0, cost_window=2), start_s=100.0)
    assert tracker.mtbf_s(100.0) == 900.0  # only the prior
    assert tracker.checkpoint_s(3.0) == 3.0  # none charged yet: the profiled price
    assert tracker.interval_s(100.0, 2.0) == pytest.approx(math.sqrt(2 * 2.0 * 900.0))
    tracker.interrupted(400.0)
    tracker.interrupted(400.0)  # the same instant: one interruption
    assert tracker.mtbf_s(500.0) == pytest.approx((400.0 + 900.0) / 2)
    for cost in (4.0, 6.0, 10.0):
        tracker.checkpointed(cost)
    assert tracker.checkpoint_s(1.0) == pytest.approx(8.0)  # the last two: (6 + 10) / 2
    tracker.interrupted(700.0)
    assert tracker.interval_s(800.0, 1.0) == pytest.approx(math.sqrt(2 * 8.0 * (700.0 + 900.0) / 3))
    free = IntervalTracker(AdaptiveCheckpoints(), start_s=0.0)
    assert free.interval_s(10.0, 0.0) == 0.0  # free checkpoints: after every iteration


# -- the engine, by hand -----------------------------------------------------------------------
def test_oobleck_interval_follows_cost_and_failures_by_hand():
    trace = make_trace([(0, "add", nodes(4)), (500, "remove", "n4"), (1010, "add", "end")])
    sim = _simulate(trace, AdaptiveCheckpoints("young", prior_mtbf_s=900.0))
    # training from 55 (startup 45 + start 10) at 30 s. C = 2 s (profiled, then charged);
    # no failure yet, M = (t + 900) / 1: at 55 sqrt(2 x 2 x 955) = 61.8 s -> 2 iterations;
    # then every checkpoint at t + 2 re-derives sqrt(4 (t + 2 + 900)), 63.8 ... 74.5 s, which
    # stays under 2.5 iterations: checkpoints after iterations 2, 4, ..., 14 (done at 489).
    # n4 leaves at 500 (iteration 15 lost; one interruption): reconfigured onto 3 nodes (5 s,
    # 48 s per iteration) from 505, M = (t + 900) / 2: sqrt(4 x 702.5) = 53 s -> 1 iteration,
    # and below 1.5 x 48 s until t = 1692: a checkpoint after every iteration, 15..24, the
    # last done at 505 + 10 x 48 + 9 x 2 + 2 = 1005.
    ckpts = _checkpoints(sim)
    assert [c.detail["iterations"] for c in ckpts] == [2, 4, 6, 8, 10, 12, 14, *range(15, 25)]
    assert ckpts[0].time_s == pytest.approx(55 + 2 * 30 + 2)
    assert ckpts[0].detail["mtbf_s"] == pytest.approx(117 + 900)
    assert ckpts[0].detail["interval_s"] == pytest.approx(math.sqrt(4 * 1017))
    after = ckpts[7]  # the first after the removal
    assert after.time_s == pytest.approx(505 + 48 + 2)
    assert after.detail["mtbf_s"] == pytest.approx((555 + 900) / 2)
    assert after.detail["cost_s"] == pytest.approx(2.0)
    assert ckpts[-1].time_s == pytest.approx(1005)
    assert sim.iterations == 24 and sim.counts["reconfigurations"] == 1
    # without the rule the same policy never checkpoints inside this trace (hourly default)
    assert not _checkpoints(_simulate(trace, None))


def test_daly_checkpoints_no_more_often_than_young():
    trace = make_trace([(0, "add", nodes(4)), (500, "remove", "n4"), (1010, "add", "end")])
    young = _checkpoints(_simulate(trace, AdaptiveCheckpoints("young", prior_mtbf_s=900.0)))
    daly = _checkpoints(_simulate(trace, AdaptiveCheckpoints("daly", prior_mtbf_s=900.0)))
    # Daly's interval is 2 s shorter: at 55 sqrt(3820) - 2 = 59.8 s -> still 2 iterations
    assert daly[0].detail["interval_s"] == pytest.approx(math.sqrt(4 * 1017) - 2)
    assert len(daly) >= len(young)


# -- the interval depends only on the past -------------------------------------------------------
def _toggles(draw_times, draw_nodes, start: float, end: float):
    rows, present = [], set(nodes(6))
    for time_s, index in sorted(zip(draw_times, draw_nodes, strict=True)):
        if not start < time_s < end:
            continue
        node = f"n{index}"
        rows.append((time_s, "remove" if node in present else "add", node))
        present ^= {node}
    return rows


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.floats(300.0, 2500.0),
    st.lists(st.tuples(st.floats(1.0, 3000.0), st.integers(1, 6)), max_size=8),
    st.lists(st.tuples(st.floats(1.0, 3000.0), st.integers(1, 6)), max_size=8),
    st.sampled_from(("young", "daly")),
)
def test_intervals_before_t_ignore_the_trace_after_t(cut_s, before, after, rule):
    common = _toggles([t for t, _ in before], [n for _, n in before], 0.0, cut_s)
    present = set(nodes(6))
    for *_, node in common:
        present ^= {node}
    # a different future: its own toggles from the membership at the cut
    future, now_present = [], set(present)
    for time_s, index in sorted(after):
        if cut_s < time_s < 3000.0:
            node = f"n{index}"
            future.append((time_s, "remove" if node in now_present else "add", node))
            now_present ^= {node}
    head = [(0.0, "add", nodes(6)), *common]
    quiet = make_trace([*head, (3000.0, "add", "end")])
    busy = make_trace([*head, *future, (3000.0, "add", "end")])
    chosen = AdaptiveCheckpoints(rule, prior_mtbf_s=600.0)
    a, b = _simulate(quiet, chosen, 6), _simulate(busy, chosen, 6)

    def upto(sim):
        return [(c.time_s, c.detail) for c in _checkpoints(sim) if c.time_s < cut_s]

    assert upto(a) == upto(b)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.floats(100.0, 1500.0), min_size=1, max_size=4, unique=True))
def test_more_failures_seen_never_lengthen_the_interval(times):
    # two trackers fed the same checkpoint costs, one also seeing interruptions: at every
    # later instant the one that saw failures checkpoints more often
    rule = AdaptiveCheckpoints("young", prior_mtbf_s=600.0)
    calm, hit = IntervalTracker(rule, 0.0), IntervalTracker(rule, 0.0)
    for t in sorted(times):
        hit.interrupted(t)
        for tracker in (calm, hit):
            tracker.checkpointed(3.0)
        now = t + 1.0
        assert hit.interval_s(now, 3.0) < calm.interval_s(now, 3.0)


# -- every registered design, through SimConfig -------------------------------------------------
SPOT = "spot:nodes=8,hours=1,seed=3"


@pytest.mark.parametrize("name", [d.name for d in registry.all_designs() if "simulator" in d.runs_on])
def test_every_design_that_checkpoints_runs_adaptive(name):
    config = SimConfig.of(policy=name, calibration="planner", trace=SPOT, checkpoint_adaptive="daly")
    try:
        result = simulate_config(config)
    except SimError as exc:
        assert "writes no periodic checkpoints" in str(exc), exc
        return
    assert result.config["effective_checkpoint_every_s"] is None
    for event in (e for e in result.events if e.kind == "checkpoint"):
        d = event.detail
        assert d["interval_s"] == pytest.approx(max(0.0, math.sqrt(2 * d["cost_s"] * d["mtbf_s"]) - d["cost_s"]))


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"checkpoint_adaptive": "often"}, "unknown checkpoint_adaptive"),
        ({"checkpoint_adaptive": "young", "checkpoint_every_s": 60.0}, "drop checkpoint_every_s"),
        ({"checkpoint_prior_mtbf_s": 60.0}, "needs checkpoint_adaptive"),
        ({"checkpoint_adaptive": "young", "checkpoint_prior_mtbf_s": 0.0}, "must be > 0"),
        ({"checkpoint_adaptive": "young", "calibration": "artifact"}, "no effect in the artifact"),
    ],
)
def test_bad_settings_are_one_line_errors(changes, words):
    with pytest.raises(SimError, match=words) as info:
        SimConfig.of(**{"calibration": "planner", **changes})
    assert "\n" not in str(info.value)


def test_cli_bad_rule_exits_2():
    out = subprocess.run(
        [sys.executable, "-m", "ooblab.cli", "simulate", "--calibration", "planner", "--no-write"]
        + ["--set", "checkpoint_adaptive=often"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "checkpoint_adaptive" in out.stderr and "young, daly" in out.stderr
