"""The host's cores as a ceiling on throughput, on a testbed whose workers share them.

On a machine whose cores every worker shares (real compute on one host), the job cannot
commit samples faster than the cores can process them: with `cores` cores and
`sample_core_s` core-seconds a sample costs (its forward and backward on every stage,
the pipeline sends and the gradient sync on the CPU, the optimizer step, the framework
around them: everything the job runs), an iteration of n samples takes at least
n x sample_core_s / cores. Where the plan's own time is shorter, the iteration is
stretched to that floor, its useful share kept.

Why a floor and not more contention factors: the profile's factors (`sim.contention`)
slow each worker's compute by how many neighbours compute beside it, measured with
every neighbour busy all the time. On 2 cores a tiny-gpt job kept them 94-98% busy with
4, 3 and 2 workers; with fewer workers each gets more of a core, but the job as a whole
gets no more of the machine. The factors, with the rest of the iteration (sends, sync,
optimizer) left at its unloaded time, let a 2-worker phase run 27-39% faster than that
(CHANGELOG.md). Replacing the factors above one worker per core by the floor alone
(`benchmarks/contention_resim.py`, "capped") was no better over four validations.

What a sample costs may grow with the workers computing: a worker's share of the sends
and of the gradient sync, and on cores shared by more processes than they hold, the
switches between them. The cost is a line in the plan's computing workers w
(`sim.contention.computing_workers`: a Varuna plan's idle spares do not compute),
sample_core_s + sample_core_per_worker_s x (w - 1); on 2 cores a 4-block Hugging Face
GPT-2 cost 47, 53 and 55 core-ms a sample on 2, 3 and 4 workers (failure-free Oobleck
jobs; docs/validation.md).

Off by default (a real cluster gives each worker its own accelerator); the validation
measures the line in calibration jobs for real compute (`experiments.validation.core_cost`).
"""

from __future__ import annotations

from typing import Any

from .contention import computing_workers
from .errors import SimError
from .timing import IterationCost, IterationWrapper, Timing


class CoreBound(IterationWrapper):
    """A timing whose iterations take at least their samples x the core-seconds a sample
    costs on the plan's computing workers / `cores`; pauses are the inner timing's."""

    def __init__(self, inner: Timing, cores: float, sample_core_s: float, per_worker_s: float = 0.0):
        super().__init__(inner)
        if not cores > 0 or not sample_core_s > 0 or not per_worker_s >= 0:
            raise ValueError(
                f"internal: cores and sample_core_s must be > 0 and per_worker_s >= 0, got {cores!r}, "
                f"{sample_core_s!r} and {per_worker_s!r}"
            )
        self.cores = cores
        self.sample_core_s = sample_core_s
        self.per_worker_s = per_worker_s
        self._last: tuple[Any, IterationCost] | None = None

    def sample_cost_s(self, workers: int) -> float:
        """The core-seconds a sample costs with `workers` computing."""
        return self.sample_core_s + self.per_worker_s * max(0, workers - 1)

    def floor_s(self, samples: int, workers: int = 1) -> float:
        """The least time the host's cores need for `samples` samples on `workers` workers."""
        return samples * self.sample_cost_s(workers) / self.cores

    def _workers(self, plan: Any) -> int:
        if not self.per_worker_s:
            return 1
        try:
            return computing_workers(plan)
        except SimError:
            raise SimError(
                f"sample_core_per_worker_s prices Oobleck and Varuna plans, not a {type(plan).__name__}"
            ) from None

    def iteration(self, plan: Any) -> IterationCost:
        if self._last is not None and self._last[0] is plan:
            return self._last[1]
        cost = self.inner.iteration(plan)
        samples = cost.samples if cost.samples is not None else self.samples_per_iteration
        floor = self.floor_s(samples, self._workers(plan))
        if cost.total_s < floor:
            useful = cost.useful_s * floor / cost.total_s if cost.total_s > 0 else floor
            cost = IterationCost(floor, useful, cost.samples)
        self._last = (plan, cost)
        return cost
