"""The gradient synchronisation's own messages, which the planner's all-reduce model omits.

The planner times a layer's cross-pipeline all-reduce by its bytes alone (a ring's
2 (K - 1) / K x bytes / bandwidth, `planner.allreduce`). A ring all-reduce across K
replicas is also 2 (K - 1) messages, one after another, and each pays the runtime's own
per-message cost, as a pipeline hop does. Where the profile measured that cost
(`communication.json`'s `hop_overhead_s`, timed in the backend's 1F1B schedule: on the
2-core testbed a receiver that has to wait for a core, about 1 ms), this timing charges
every stage's synchronisation 2 (K - 1) x hop_overhead_s on top of its bytes, where the
exposure model puts the synchronisation (after the stage's last backward,
`planner.allreduce`'s `stage_latency_s`): K is an Oobleck plan's pipelines, a Varuna
plan's width (whose model exposes the all-reduce in full, so the term adds in full).

Why: the emulated backend all-reduces its (tiny) gradients for real before it sleeps the
planner's all-reduce time (`real.worker.gradsync`), so its iteration pays those messages,
and they grow with the replicas. In the 32-node validation's calibration runs
(CHANGELOG.md) the measured iteration exceeded the plan's prediction by 61-71 ms
with 32 single-stage pipelines (62 messages: 63 ms charged here), 58 ms with 31, and
35-44 ms for Varuna's 15 two-stage pipelines (28 messages: 29 ms).

As with `sim.contention`, the plan is chosen without the term, as the real backend
chooses it; only its time changes. Other plan kinds (Bamboo's) are timed as before.
"""

from __future__ import annotations

from typing import Any

from planner.allreduce import exposed_allreduce_s, layer_allreduce_s
from planner.errors import PlannerError
from planner.hardware import ClusterSpec
from planner.plan import ExecutionPlan
from planner.policies.grid import GridPlan
from planner.profile import ModelProfile

from .errors import SimError
from .timing import AddedIterationTime, Timing


def ring_messages(replicas: int) -> int:
    """Messages in sequence of a ring all-reduce across `replicas` (0 for one: no sync)."""
    return 2 * (replicas - 1) if replicas > 1 else 0


class SyncMessages(AddedIterationTime):
    """A timing whose iterations also pay the gradient ring's messages, `message_s` each;
    pauses are the inner timing's."""

    def __init__(self, inner: Timing, profile: ModelProfile, cluster: ClusterSpec, message_s: float):
        if not message_s >= 0:
            raise SimError(f"internal: a per-message cost must be >= 0, got {message_s!r}")
        super().__init__(inner)
        self.profile = profile
        self.cluster = cluster
        self.message_s = message_s
        self._layer_s: dict[int, Any] = {}

    def extra_s(self, plan: Any) -> float:
        """What the ring's messages add to `plan`'s iteration."""
        if isinstance(plan, ExecutionPlan):
            replicas = len(plan.pipelines)
            if replicas <= 1:
                return 0.0
            if replicas not in self._layer_s:
                try:
                    self._layer_s[replicas] = layer_allreduce_s(self.profile, self.cluster, replicas)
                except PlannerError as exc:
                    raise SimError(str(exc)) from None
            layer_s = self._layer_s[replicas]
            templates = [p.template for p in plan.pipelines]
            times = [p.template.iteration_time(p.num_microbatches) for p in plan.pipelines]
            latency = ring_messages(replicas) * self.message_s
            return exposed_allreduce_s(templates, times, layer_s, latency) - exposed_allreduce_s(
                templates, times, layer_s
            )
        if isinstance(plan, GridPlan):
            return ring_messages(plan.config.width) * self.message_s
        return 0.0
