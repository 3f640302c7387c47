"""`Decision.wake_at_s`: one `IterationEnd` at the first iteration boundary at or after it."""

from __future__ import annotations

from dataclasses import dataclass

import traces
from planner.policies import CheckpointSchedule, Continue, Decision, IterationEnd, PauseEnded, Start
from sim.engine import Simulation
from sim.pricing import Pricing
from sim.timing import IterationCost

from .tiny import FixedTiming

ONE_SECOND = FixedTiming(IterationCost(1.0, 1.0), 2.0, 1, "planner")  # 1 s iterations; the start 2 s


@dataclass(frozen=True)
class _Plan:
    nodes: tuple[str, ...]


class _Clock:
    """Starts on every node, then asks to be woken `every_s` after each decision."""

    name, checkpoints = "clock", CheckpointSchedule()

    def __init__(self, every_s: float):
        self.every_s = every_s
        self.seen: list[float] = []

    def infeasible_reason(self):
        return None

    def decide(self, view, event, current):
        if current is None or current.plan is None:
            return Decision(_Plan(view.ready), (Start(),))
        if isinstance(event, IterationEnd):
            self.seen.append(view.time_s)
        wake = view.time_s + self.every_s if isinstance(event, (IterationEnd, PauseEnded)) else current.wake_at_s
        return Decision(current.plan, (Continue(),), wake_at_s=wake)


def test_wakes_at_the_first_iteration_end_at_or_after_the_time():
    trace = traces.Trace.from_tuples([(0.0, "add", "a"), (0.0, "add", "b"), (100.0, "add", "c")], "clock")
    policy = _Clock(every_s=10.5)
    sim = Simulation(trace, policy, Pricing(ONE_SECOND, node_startup_s=5.0, price_per_node_hour=1.0)).run()
    # ready at 5, started at 7; iterations end at 8, 9, ...; woken 10.5 s after each wake-up:
    # 17.5 -> 18, 28.5 -> 29, ... and the run ends at 100 (c's add is the last event)
    assert policy.seen == [18.0 + 11.0 * k for k in range(8)]
    assert sim.iterations == 92  # the wake-ups cost no iteration
    # the readiness of c at 105 is past the end; decisions: start, its pause end, 8 wake-ups
    assert sim.counts["decisions"] == 2 + 8


def test_a_wake_time_already_past_is_the_next_boundary():
    trace = traces.Trace.from_tuples([(0.0, "add", "a"), (30.0, "add", "z")], "clock")
    policy = _Clock(every_s=-5.0)  # always in the past: every iteration end
    Simulation(trace, policy, Pricing(ONE_SECOND, node_startup_s=5.0, price_per_node_hour=1.0)).run()
    assert policy.seen == [float(t) for t in range(8, 30)]
