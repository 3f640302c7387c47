"""How long the survivors of a removal take to notice it, when they notice only by talking.

A node lost in the middle of an iteration is known to the coordinator at once (its
processes exit), but a survivor that is computing learns of it only at its next
communication, and every survivor must have stopped before the job can be rebuilt. A rank
of a pipeline of several stages sends or receives every stage pass, so it stops within one
pass (not charged: a pass is short against a reconfiguration). A single-stage pipeline
communicates only in the gradient synchronisation after its whole compute, so it stops at
the end of its compute: the reconfiguration starts only then.

The simulator charges that wait's mean over where in the iteration the removal falls
(uniform): c^2 / (2 T) for the slowest surviving single-stage pipeline's compute c in an
iteration of T (0 while it is in the gradient sync). Not the wait of its own iteration's
phase: a trace's removals fall wherever the real job's iteration then is, which no
simulator reproduces to a fraction of a second over a run (start-ups, recoveries and pace
all shift it). On the 2-core testbed's 8-node validation (eight single-stage pipelines,
0.51-0.98 s iterations) the survivors stopped 0.12-0.87 s after the removals; charging each
its simulated phase put Oobleck's recoveries at -31 to +40% of the real ones on the same
runs, the mean at -19 to +17%, and one constant (the calibration's median, whose kills fell
late in their iterations) at -16 to +38%.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

from planner.plan import ExecutionPlan


def notice_s(plan: Any, lost: Container[str], iteration_s: float) -> float:
    """The mean seconds from a removal to the moment the last survivor of `plan` has
    stopped (0 where no single-stage pipeline survives, or the plan is not Oobleck's
    `ExecutionPlan`). `iteration_s`: what the simulator takes for an iteration of the plan
    (its pipelines' times are scaled to it, so that terms added to the iteration count)."""
    if not isinstance(plan, ExecutionPlan) or plan.iteration_time_s <= 0 or iteration_s <= 0:
        return 0.0
    singles = [
        p.iteration_time_s for p in plan.pipelines if p.template.num_stages == 1 and not any(n in lost for n in p.nodes)
    ]
    if not singles:
        return 0.0
    compute_s = min(iteration_s, max(singles) * iteration_s / plan.iteration_time_s)
    return compute_s * compute_s / (2 * iteration_s)
