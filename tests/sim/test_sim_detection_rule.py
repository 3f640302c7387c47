"""One detection rule for every design: nothing follows a loss before it is declared.

Under costs that price detection (a crash 60 s, a network fault 60 s, a hang 600 s, a loss
with no cause at once), for every registered design on random traces with causes: after a
working node is lost, the job neither trains nor begins any pause other than the wait for
the declaration (or a restart's start-up already running) until the cluster declares that
loss; a second loss in the window never shortens the first's; a job that waits for nodes
meanwhile restarts only after it. And every wait ends once the nodes are back. The four
defects these rules caught are regression tests with their minimal traces.

`OOBLAB_DETECTION_EXAMPLES` sets the property tests' examples (CI: 25; the rule was checked
at 500).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from designs import registry
from planner.policies import Detect
from planner.records import RUNNING
from sim.config import SimConfig
from sim.engine import Simulation
from sim.engine_state import STARTUP_HOLD
from sim.errors import SimError
from sim.run import simulate
from sim.setup import build
from traces.model import CAUSE_KIND, Trace, TraceEvent

EXAMPLES = int(os.environ.get("OOBLAB_DETECTION_EXAMPLES", "25"))
DETECT = {"crash": 60.0, "network": 60.0, "hang": 600.0}  # h100-datacenter's, by kind
COMMON = dict(calibration="planner", model="gpt3-350m", global_batch=64, costs="h100-datacenter")
BIG = dict(calibration="planner", model="gpt3-1.3b", global_batch=512, costs="h100-datacenter")
# replica groups' own detector is sooner than the cluster's for a hang: let the cluster's apply
OWN = {"replica_groups": {"detection_timeout_s": 10_000.0}}


def declared_after_s(cause: str | None) -> float:
    kind = CAUSE_KIND.get(cause or "")
    return 0.0 if kind is None else DETECT[kind]


def trace(n: int, removals, adds=(), end_s: float = 10_800.0) -> Trace:
    events = [TraceEvent(0.0, "add", f"n{i}") for i in range(n)]
    events += [TraceEvent(t, "remove", node, cause) for t, node, cause in removals]
    events += [TraceEvent(t, "add", node) for t, node in adds]
    events.append(TraceEvent(end_s, "add", "late"))
    return Trace(tuple(sorted(events, key=lambda e: e.time_s)), "hand")


def trains_again_at(result, after_s: float) -> float | None:
    """The first time after `after_s` the job is training again (its timeline)."""
    state_at = [r for r in result.timeline if r.time_s <= after_s]
    if state_at and state_at[-1].state != RUNNING:
        later = [r.time_s for r in result.timeline if r.time_s > after_s and r.state == RUNNING]
        return later[0] if later else None
    return after_s


class Watched(Simulation):
    """A run that notes what the property needs: each removal with its cause and whether it
    hit the plan's nodes, and each pause segment as it begins."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.losses: list[tuple[float, str | None]] = []  # (time, cause) of working nodes lost
        self.begun: list[tuple[float, object]] = []  # (time, action) of each segment begun

    def _interrupted(self, kind, nodes):
        if kind == "removed" and self.decision is not None and self.decision.plan is not None:
            working = set(self.decision.plan.nodes)
            self.losses += [(self.env.now, self._causes.get(n)) for n in nodes if n in working]
        super()._interrupted(kind, nodes)

    def _begin_segment(self):
        self.begun.append((self.env.now, self.segments[0][2]))
        super()._begin_segment()


def check_declared_first(sim: Watched) -> None:
    for t, cause in sim.losses:
        until = t + declared_after_s(cause)
        if until <= t:
            continue
        early = [(s, a) for s, a in sim.begun if t <= s < until and not isinstance(a, Detect) and a is not STARTUP_HOLD]
        assert not early, f"lost at {t} ({cause}), declared at {until}, but {early[0]} began first"
        rows = [r for r in sim.timeline if r.time_s <= t]
        assert not rows or rows[-1].state != RUNNING, f"still training at the loss at {t} ({cause})"
        trained = [r.time_s for r in sim.timeline if t < r.time_s < until and r.state == RUNNING]
        assert not trained, f"lost at {t} ({cause}), declared at {until}, but training at {trained[0]}"


@st.composite
def caused_traces(draw) -> Trace:
    pool = [f"n{i}" for i in range(12)]
    initial = draw(st.integers(4, 12))
    present, absent = pool[:initial], pool[initial:]
    events = [TraceEvent(0.0, "add", n) for n in present]
    t = 0.0
    for _ in range(draw(st.integers(1, 10))):
        t += draw(st.sampled_from([0.0, 1.0, 20.0, 45.0, 300.0, 700.0]) | st.floats(0.5, 3000.0))
        if absent and (len(present) < 2 or draw(st.booleans())):
            node = absent.pop(draw(st.integers(0, len(absent) - 1)))
            present.append(node)
            events.append(TraceEvent(t, "add", node))
        else:
            for _ in range(draw(st.integers(1, min(3, len(present) - 1)))):
                node = present.pop(draw(st.integers(0, len(present) - 1)))
                absent.append(node)
                cause = draw(st.sampled_from([None, "gpu", "switch", "software"]))
                events.append(TraceEvent(t, "remove", node, cause))
    events.append(TraceEvent(t + draw(st.floats(600.0, 4000.0)), "add", "end-marker"))
    return Trace(tuple(events), "random")


@pytest.mark.parametrize("design", registry.names())
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=caused_traces())
def test_nothing_follows_a_loss_before_it_is_declared(design, trace):
    config = SimConfig.of(policy=design, design_options=OWN.get(design), **COMMON)
    try:
        setup = build(config, trace)
    except SimError:
        return  # a configuration the design refuses on this trace (too few nodes for it)
    sim = Watched(setup.trace, setup.policy, setup.pricing).run()
    check_declared_first(sim)


@pytest.mark.parametrize("design", registry.names())
@settings(max_examples=max(5, EXAMPLES // 3), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(back_after_s=st.sampled_from([1.0, 30.0, 600.0]) | st.floats(0.5, 2000.0), cause=st.sampled_from([None, "gpu"]))
def test_every_wait_ends_once_the_nodes_are_back(design, back_after_s, cause):
    """All 16 nodes leave at once and come back: the job trains again before the end."""
    removals = [(5400.0, f"n{i}", cause) for i in range(16)]
    adds = [(5400.0 + back_after_s, f"n{i}") for i in range(16)]
    result = simulate(SimConfig.of(policy=design, **COMMON), trace=trace(16, removals, adds, end_s=14_400.0))
    assert trains_again_at(result, 5400.0) is not None, f"{design} waits to the end"


# -- the four defects, each on its minimal trace ---------------------------------------------
@pytest.mark.parametrize("design", ["bamboo", "recycle"])
def test_a_fail_over_waits_for_the_declaration(design):
    """A crash at 1,800 s: the survivors stall until it is declared at 1,860 s, the
    iteration in flight lost, before the fail-over trains on (or Bamboo, at that iteration
    boundary, replaces the overloaded node); free detection fails over at once."""
    crash = trace(16, [(1800.0, "n3", "gpu")])
    setup = build(SimConfig.of(policy=design, **BIG), crash)
    priced = Watched(setup.trace, setup.policy, setup.pricing).run()
    free = simulate(SimConfig.of(policy=design, **BIG, detect_crash_s=0.0), trace=crash)
    check_declared_first(priced)
    decisions = [e for e in priced.events if e.kind == "decision" and e.time_s >= 1800.0]
    assert [a["action"] for a in decisions[0].detail["actions"]] == ["FailOver"]
    assert decisions[0].detail["declared_at_s"] == 1860.0 and decisions[0].detail["declared_by"] == "cluster"
    assert [e.time_s for e in priced.events if e.kind == "iteration_lost"] == [1800.0]
    assert decisions[1].time_s >= 1860.0 and (trains_again_at(priced, 1800.0) or 0.0) >= 1860.0
    assert trains_again_at(free, 1800.0) == 1800.0  # free detection: the fail-over trains on at once
    assert priced.samples < free.summary.committed_samples


@pytest.mark.parametrize(
    ("second", "resumes_after_s"),
    [
        ((1830.0, "n5", None), 1860.0),  # a preemption in the crash's window: the crash still takes 60 s
        ((1830.0, "n5", "gpu"), 1890.0),  # a second crash: declared at its own time
    ],
)
def test_a_second_loss_never_shortens_the_first_ones_detection(second, resumes_after_s):
    alone = simulate(SimConfig.of(policy="oobleck", **BIG), trace=trace(16, [(1800.0, "n3", "gpu")]))
    both = simulate(SimConfig.of(policy="oobleck", **BIG), trace=trace(16, [(1800.0, "n3", "gpu"), second]))
    reconfigure_s = trains_again_at(alone, 1800.0) - 1860.0
    assert trains_again_at(both, 1800.0) == pytest.approx(resumes_after_s + reconfigure_s, abs=10.0)
    assert trains_again_at(both, 1800.0) >= trains_again_at(alone, 1800.0)


def test_a_crash_during_a_hangs_detection_waits_for_the_hang():
    both = simulate(
        SimConfig.of(policy="oobleck", **BIG), trace=trace(16, [(1800.0, "n3", "software"), (1830.0, "n5", "gpu")])
    )
    assert trains_again_at(both, 1800.0) >= 2400.0  # the hang is declared at 1,800 + 600 s


@pytest.mark.parametrize("design", ["varuna", "gemini", "parcae", "recycle", "replica_groups"])
def test_a_loss_that_leaves_the_job_waiting_is_declared_before_the_restart(design):
    """Two nodes, a hang on one at 3,600 s, a host back at 3,700 s (usable at 3,765 s): no
    restart before the hang is declared at 4,200 s."""
    hang = trace(2, [(3600.0, "n1", "software")], [(3700.0, "n1b")], end_s=7200.0)
    config = SimConfig.of(policy=design, design_options=OWN.get(design), **BIG)  # two V100s: both needed
    setup = build(config, hang)
    sim = Watched(setup.trace, setup.policy, setup.pricing).run()
    check_declared_first(sim)
    assert sim.losses and sim.losses[0] == (3600.0, "software")
    restarts = [s for s, a in sim.begun if s >= 3600.0 and not isinstance(a, Detect) and a is not STARTUP_HOLD]
    assert restarts and restarts[0] >= 4200.0


def test_parcae_resumes_when_every_node_leaves_and_comes_back_within_a_minute():
    """All 16 nodes leave at 5,400 s and are back a second later: Parcae's forecast prefers
    waiting, and it names its next interval to be asked again, so it trains again."""
    removals = [(5400.0, f"n{i}", None) for i in range(16)]
    adds = [(5401.0, f"n{i}") for i in range(16)]
    result = simulate(
        SimConfig.of(policy="parcae", calibration="planner", model="gpt3-350m", global_batch=64, costs="paper"),
        trace=trace(16, removals, adds, end_s=14_400.0),
    )
    again = trains_again_at(result, 5400.0)
    assert again is not None and again < 5401.0 + 45.0 + 600.0
    waits = [e for e in result.events if e.kind == "decision" and e.time_s > 5400.0]
    assert any(a["action"] == "WaitForNodes" for e in waits for a in e.detail["actions"])


# -- which detection a run charged, per failure kind, and where it came from -----------------
def test_the_run_says_per_kind_which_detection_it_charged_and_from_where():
    """Replica groups with a 180 s timeout under h100-datacenter: a crash is declared by the
    profile's 60 s, a hang by the design's 180 s (the profile's 600 s is later)."""
    config = SimConfig.of(policy="replica_groups", design_options={"detection_timeout_s": 180.0}, **COMMON)
    result = simulate(config, trace=trace(8, [(1800.0, "n3", "gpu")]))
    charged = result.summary.extra["detection"]
    assert charged["crash"] == {"s": 60.0, "by": "profile h100-datacenter"}
    assert charged["hang"] == {
        "s": 180.0,
        "by": "the design's detection_timeout_s: sooner than profile h100-datacenter's 600 s",
    }
    assert charged["no_cause"] == {"s": 0.0, "by": "profile h100-datacenter"}
    by_hand = simulate(SimConfig.of(**{**COMMON, "detect_crash_s": 20.0}, policy="varuna"), trace=trace(8, []))
    assert by_hand.summary.extra["detection"]["crash"] == {"s": 20.0, "by": "detect_crash_s set for the run"}
    assert by_hand.summary.extra["detection"]["hang"]["by"] == "profile h100-datacenter"
    from sim.cli import render

    assert "a loss is declared after: crash 60 s (profile h100-datacenter)" in render(result, None)


def test_costs_that_price_no_detection_leave_the_designs_own():
    paper = dict(COMMON, costs="paper")
    groups = simulate(SimConfig.of(policy="replica_groups", **paper), trace=trace(8, [(1800.0, "n3", "gpu")]))
    charged = groups.summary.extra["detection"]
    assert {entry["s"] for entry in charged.values()} == {60.0}
    assert all(
        entry["by"].startswith("the design's detection_timeout_s: the costs price no") for entry in charged.values()
    )
    plain = simulate(SimConfig.of(policy="oobleck", **paper), trace=trace(8, [(1800.0, "n3", "gpu")]))
    assert "detection" not in plain.summary.extra  # nothing charged: nothing to say


def test_ooblab_designs_states_the_rule_for_every_design(capsys):
    from ooblab.cli import main

    assert main(["designs"]) == 0
    out = capsys.readouterr().out
    assert out.count("  detection: a loss of a working node is declared after the cost profile's") == len(
        registry.names()
    )
    assert "its own detector (detection_timeout_s) where sooner" in out
