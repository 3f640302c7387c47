"""The optimizer step after every iteration's gradient synchronisation (`optimizer.json`).

The planner's cost model ends an iteration at its last all-reduce; the real backend then
runs, on every rank, the optimizer step over that rank's layers
(`real.worker.stage_runner`: schedule, gradient sync, commit, AdamW), and the next
iteration's first forward waits for it. Where the profile measured that step
(`planner.optimizer_step`, tiny-gpt's profiler writes it), this timing adds the slowest
rank's step to each iteration: max over an Oobleck plan's stages of its layers' step
seconds / its GPUs, over a Varuna plan's stages of its layers' (one GPU each). A profile
with `contention.json` scales the step by the plan's compute factor, as `sim.contention`
scales the layers: the step is the same kind of CPU work, measured beside the same busy
neighbours. Other plan kinds (Bamboo's) are timed as before.

Measured on the 2-core testbed (tiny-gpt, 4 blocks of hidden 256, CHANGELOG.md): the
whole model's AdamW step takes about 22 ms on a core of its own, 5% of a 2-worker
data-parallel iteration (442 ms); the two stages of a 2 x 2 plan take 13-21 ms beside 3
busy neighbours, 3-4% of its 0.49 s iteration.

As with `sim.contention` and `sim.sync_cost`, the plan is chosen without the term, as the
real backend chooses it; only its time changes.
"""

from __future__ import annotations

from typing import Any

from planner.contention import ContentionProfile
from planner.optimizer_step import OptimizerProfile
from planner.plan import ExecutionPlan
from planner.policies.grid import GridPlan

from .contention import plan_factor
from .timing import AddedIterationTime, Timing


def slowest_step_s(plan: Any, optimizer: OptimizerProfile) -> float:
    """The longest optimizer step of any rank of `plan` (0 for other plan kinds)."""
    if isinstance(plan, ExecutionPlan):
        return max(
            (
                optimizer.stage_s(s.first_layer, s.end_layer, s.num_gpus)
                for template in {id(p.template): p.template for p in plan.pipelines}.values()
                for s in template.stages
            ),
            default=0.0,
        )
    if isinstance(plan, GridPlan):
        return max((optimizer.stage_s(a, e) for a, e in plan.config.stage_layers), default=0.0)
    return 0.0


class OptimizerStep(AddedIterationTime):
    """A timing whose iterations also pay the slowest rank's optimizer step; pauses are
    the inner timing's."""

    def __init__(self, inner: Timing, optimizer: OptimizerProfile, contention: ContentionProfile | None = None):
        super().__init__(inner)
        self.optimizer = optimizer
        self.contention = contention

    def extra_s(self, plan: Any) -> float:
        """What the optimizer step adds to `plan`'s iteration."""
        step_s = slowest_step_s(plan, self.optimizer)
        if step_s and self.contention is not None:
            step_s *= plan_factor(self.contention, plan)
        return step_s
