"""Pipeline sends that cost more the more of them the job makes (`loaded_hop_*` options).

On a testbed whose workers share CPU cores (the emulated backend on 2 cores), every
pipeline send wakes a receiver that may have to wait for a core, and the busier the
job's own sends keep the cores, the longer that wait. The profile's `hop_overhead_s` is
measured on short pipelines alone (`real.launch.comm_profile`), so the planner charges
a send the same whatever the plan. Measured on the testbed (emulated tiny-gpt layers, 60
ms per microbatch; CHANGELOG.md), the steady iteration over the plan's prediction
was 1.04 for two 3-stage pipelines (24 sends an iteration), 1.16 for two 7-stage ones
(168) and 1.31 for four (336), while single-stage pipelines, which send nothing, agreed.

This timing charges each pipeline send of a plan `fixed_s + slope_s2 x rate +
per_process_s x processes` more, where rate is the plan's own sends per second (every
pipeline's 2 (S - 1) sends per microbatch, over its predicted iteration) and processes
its workers, never less than `-floor_s` (a send costs at least nothing). The
validation's calibration, when asked for (`ooblab validate --loaded-sends`: two short
jobs on forced plans of deep pipelines, `experiments.validation.loaded_hops`), fits the
process-count line and leaves the rate at 0: fitted on sends per second (the evening of
2026-12-03) the line helped at 32 nodes and overshot at 16, while the waits measured in
two calm runs followed the job's processes (about 1.1 ms a pass at 12-15, 3.3 ms at
29-30; CHANGELOG.md). The line is a setting's own, not a law across settings: its
per-process slope came out 16 times steeper at 16 nodes than at 32. Off by default.
The plan is chosen without the term, as the real backend chooses it; only its time
changes (`sim.contention.PlanScaler` re-times the stages with longer sends). Plans
without sends (single-stage pipelines) are untouched. Other plan kinds (Bamboo's) are
refused.
"""

from __future__ import annotations

from typing import Any

from planner.hardware import ClusterSpec
from planner.plan import ExecutionPlan
from planner.policies.grid import GridPlan
from planner.profile import ModelProfile

from .contention import PlanScaler
from .errors import SimError
from .timing import AddedIterationTime, Timing


def plan_sends(plan: Any) -> int:
    """Pipeline sends of one iteration of `plan`: per pipeline, 2 (S - 1) per microbatch
    (forward to the next stage, backward to the one before)."""
    if isinstance(plan, ExecutionPlan):
        return sum(2 * (len(p.template.stages) - 1) * p.num_microbatches for p in plan.pipelines)
    if isinstance(plan, GridPlan):
        c = plan.config
        return c.width * 2 * (c.depth - 1) * c.num_microbatches
    raise SimError(f"loaded hops time Oobleck and Varuna plans only, not a {type(plan).__name__}")


def plan_processes(plan: Any) -> int:
    """Worker processes (GPUs) the plan runs: every stage's GPUs over its pipelines
    (Oobleck), width x depth (Varuna)."""
    if isinstance(plan, ExecutionPlan):
        return sum(stage.num_gpus for p in plan.pipelines for stage in p.template.stages)
    if isinstance(plan, GridPlan):
        return plan.config.width * plan.config.depth
    raise SimError(f"loaded hops time Oobleck and Varuna plans only, not a {type(plan).__name__}")


def send_rate_per_s(plan: Any) -> float:
    """The plan's pipeline sends per second at its predicted pace."""
    sends = plan_sends(plan)
    return sends / plan.iteration_time_s if sends else 0.0


def loaded_hop_s(
    fixed_s: float,
    slope_s2: float,
    floor_s: float,
    rate_per_s: float,
    per_process_s: float = 0.0,
    processes: int = 0,
) -> float:
    """What one send costs over the profile's hop at `rate_per_s` sends a second in a
    job of `processes` workers."""
    return max(-floor_s, fixed_s + slope_s2 * rate_per_s + per_process_s * processes)


class LoadedHops(AddedIterationTime):
    """A timing whose pipeline sends each cost `loaded_hop_s` at the plan's send rate more;
    pauses are the inner timing's."""

    def __init__(
        self,
        inner: Timing,
        profile: ModelProfile,
        cluster: ClusterSpec,
        fixed_s: float,
        slope_s2: float,
        per_process_s: float = 0.0,
    ):
        super().__init__(inner)  # the constants are checked where they are read (`SimConfig`)
        self.fixed_s, self.slope_s2, self.per_process_s = float(fixed_s), float(slope_s2), float(per_process_s)
        self.floor_s = profile.communication.hop_overhead_s if profile.communication is not None else 0.0
        self.scaler = PlanScaler(profile, cluster)

    def hop_extra_s(self, plan: Any) -> float:
        return loaded_hop_s(
            self.fixed_s, self.slope_s2, self.floor_s, send_rate_per_s(plan), self.per_process_s, plan_processes(plan)
        )

    def extra_s(self, plan: Any) -> float:
        if not plan_sends(plan):
            return 0.0
        extra = self.hop_extra_s(plan)
        if extra == 0.0:
            return 0.0
        return self.scaler.scaled_plan_s(plan, 1.0, extra) - plan.iteration_time_s
