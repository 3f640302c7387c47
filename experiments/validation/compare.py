"""Simulated vs measured: one run's timeline from either side, and the errors between them.

Pure functions on plain numbers, so they are tested without processes. Every time here
counts from the moment training first started on that side (the real backend replays the
trace from then; the simulator's trace is shifted so that its own start lines up), which
makes both sides see each trace event at the same instant.

- Iterations: the end time of each committed iteration, in order (after a rollback, the
  time it was committed again).
- Recoveries: from the failure to the completion of the iteration it interrupted (both
  sides, the same definition as `real.control.recovery`).
- Joins: the pause of a plan change with nobody lost (replica groups' quorum growing as a
  group returns, Oobleck's morph onto new nodes): from the last iteration committed
  before it to the moment training goes on (the real backend's planned stop to its new
  generation's readiness; the simulator's pause that no removal began). Paired by time as
  recoveries are.
- Phases: the stretches between trace events. A phase's steady-state throughput is the
  global batch over the median duration of its iterations that overlap no recovery (the
  first iteration of a run, with its one-off set-up, never counts); a phase with fewer
  than `MIN_PHASE_ITERATIONS` such iterations on either side is not compared.
- Errors are relative to the measurement: (simulated - measured) / measured.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

MIN_PHASE_ITERATIONS = 3


@dataclass(frozen=True)
class RunTimeline:
    """One side of one run, times in seconds since training started."""

    side: str  # "real" | "sim"
    policy: str
    samples_per_iteration: int
    iteration_end_s: tuple[float, ...]
    recoveries: tuple[tuple[float, float], ...]  # (failure, next completed iteration)
    end_s: float  # the end of the comparison window on this side
    joins: tuple[tuple[float, float], ...] = ()  # (pause begins, training goes on) of each join
    # the samples of each committed iteration where they vary (replica groups train on the
    # live groups' share while a group is out); empty: `samples_per_iteration` each
    iteration_samples: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        ends = self.iteration_end_s
        if any(b < a for a, b in zip(ends, ends[1:])):
            raise ValueError(f"{self.side} iteration end times are not in order")
        if self.samples_per_iteration < 1:
            raise ValueError("samples_per_iteration must be >= 1")
        if self.iteration_samples and len(self.iteration_samples) != len(ends):
            raise ValueError(
                f"{self.side}: {len(self.iteration_samples)} iteration sample counts for {len(ends)} iterations"
            )

    def samples_at(self, t_s: float) -> int:
        """Samples committed by `t_s`."""
        done = bisect.bisect_right(self.iteration_end_s, t_s)
        return sum(self.iteration_samples[:done]) if self.iteration_samples else done * self.samples_per_iteration

    def samples_of(self, k: int) -> int:
        """Samples of `iterations()[k]` (the iteration that ends at `iteration_end_s[k + 1]`)."""
        return self.iteration_samples[k + 1] if self.iteration_samples else self.samples_per_iteration

    def iterations(self) -> list[tuple[float, float]]:
        """(start, end) of every committed iteration but the first."""
        ends = self.iteration_end_s
        return list(zip(ends, ends[1:]))

    def throughput_points(self) -> list[tuple[float, float]]:
        """(end time, samples/s) of each iteration after the first: the plotted timeline."""
        return [(b, self.samples_of(k) / (b - a)) for k, (a, b) in enumerate(self.iterations()) if b > a]


@dataclass(frozen=True)
class PhaseComparison:
    start_s: float
    end_s: float
    real_samples_per_s: float | None
    sim_samples_per_s: float | None
    real_iterations: int
    sim_iterations: int

    @property
    def error(self) -> float | None:
        if self.real_samples_per_s and self.sim_samples_per_s is not None:
            return (self.sim_samples_per_s - self.real_samples_per_s) / self.real_samples_per_s
        return None


@dataclass(frozen=True)
class RecoveryComparison:
    real_fail_s: float
    real_s: float
    sim_fail_s: float | None
    sim_s: float | None

    @property
    def error(self) -> float | None:
        if self.sim_s is None or self.real_s <= 0:
            return None
        return (self.sim_s - self.real_s) / self.real_s


@dataclass(frozen=True)
class RunComparison:
    policy: str
    window_s: float
    real_samples: int
    sim_samples: int
    phases: tuple[PhaseComparison, ...]
    recoveries: tuple[RecoveryComparison, ...]
    unmatched_sim_recoveries: tuple[float, ...] = field(default_factory=tuple)
    # joins as recoveries are paired (`real_fail_s`, `sim_fail_s`: the pause's start)
    joins: tuple[RecoveryComparison, ...] = field(default_factory=tuple)

    @property
    def samples_error(self) -> float | None:
        return (self.sim_samples - self.real_samples) / self.real_samples if self.real_samples else None

    def throughput_errors(self) -> list[float]:
        return [p.error for p in self.phases if p.error is not None]

    def recovery_errors(self) -> list[float]:
        return [r.error for r in self.recoveries if r.error is not None]

    def join_errors(self) -> list[float]:
        return [j.error for j in self.joins if j.error is not None]

    def to_dict(self) -> dict:
        return {
            "policy": self.policy,
            "window_s": self.window_s,
            "real_samples": self.real_samples,
            "sim_samples": self.sim_samples,
            "samples_error": self.samples_error,
            "phases": [
                {
                    "start_s": p.start_s,
                    "end_s": p.end_s,
                    "real_samples_per_s": p.real_samples_per_s,
                    "sim_samples_per_s": p.sim_samples_per_s,
                    "real_iterations": p.real_iterations,
                    "sim_iterations": p.sim_iterations,
                    "error": p.error,
                }
                for p in self.phases
            ],
            "recoveries": [
                {
                    "real_fail_s": r.real_fail_s,
                    "real_s": r.real_s,
                    "sim_fail_s": r.sim_fail_s,
                    "sim_s": r.sim_s,
                    "error": r.error,
                }
                for r in self.recoveries
            ],
            "unmatched_sim_recoveries": list(self.unmatched_sim_recoveries),
            "joins": [
                {
                    "real_start_s": j.real_fail_s,
                    "real_s": j.real_s,
                    "sim_start_s": j.sim_fail_s,
                    "sim_s": j.sim_s,
                    "error": j.error,
                }
                for j in self.joins
            ],
        }


def _overlaps(a: float, b: float, spans: Sequence[tuple[float, float]]) -> bool:
    return any(a < end and b > start for start, end in spans)


def steady_indices(side: RunTimeline, start_s: float, end_s: float) -> list[int]:
    """Indices into `side.iterations()` of those inside [start_s, end_s] that overlap no recovery."""
    return [
        k
        for k, (a, b) in enumerate(side.iterations())
        if a >= start_s and b <= end_s and not _overlaps(a, b, side.recoveries)
    ]


def steady_durations(side: RunTimeline, start_s: float, end_s: float) -> list[float]:
    """Durations of the iterations inside [start_s, end_s] that overlap no recovery."""
    spans = side.iterations()
    return [spans[k][1] - spans[k][0] for k in steady_indices(side, start_s, end_s)]


def phase_rate(side: RunTimeline, start_s: float, end_s: float) -> float:
    """A phase's steady samples/s: the batch over the median steady iteration; where the
    batch varies (`iteration_samples`), the median of the steady iterations' own rates."""
    if not side.iteration_samples:
        return side.samples_per_iteration / statistics.median(steady_durations(side, start_s, end_s))
    spans = side.iterations()
    return statistics.median(
        side.samples_of(k) / (spans[k][1] - spans[k][0]) for k in steady_indices(side, start_s, end_s)
    )


def phase_bounds(event_times_s: Sequence[float], end_s: float) -> list[tuple[float, float]]:
    """[0, e1), [e1, e2), ... [ek, end_s): the stretches between distinct event times."""
    cuts = sorted({t for t in event_times_s if 0 < t < end_s})
    edges = [0.0, *cuts, end_s]
    return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]


def match_recoveries(
    real: Sequence[tuple[float, float]], sim: Sequence[tuple[float, float]], tolerance_s: float
) -> tuple[list[RecoveryComparison], list[float]]:
    """Pair each measured recovery with the simulated one whose failure is nearest (within
    `tolerance_s`; each simulated one used once)."""
    free = list(sim)
    pairs = []
    for fail, done in real:
        best = min(free, key=lambda s: abs(s[0] - fail), default=None)
        if best is not None and abs(best[0] - fail) <= tolerance_s:
            free.remove(best)
            pairs.append(RecoveryComparison(fail, done - fail, best[0], best[1] - best[0]))
        else:
            pairs.append(RecoveryComparison(fail, done - fail, None, None))
    return pairs, [s[0] for s in free]


def compare_run(
    real: RunTimeline, sim: RunTimeline, event_times_s: Sequence[float], *, tolerance_s: float = 2.0
) -> RunComparison:
    """Compare two sides of one run over the measured run's window [0, real.end_s]."""
    if real.samples_per_iteration != sim.samples_per_iteration:
        raise ValueError("the two sides train with different global batches")
    window = real.end_s
    phases = []
    for a, b in phase_bounds(event_times_s, window):
        rates = {}
        counts = {}
        for side in (real, sim):
            durations = steady_durations(side, a, min(b, side.end_s))
            counts[side.side] = len(durations)
            rates[side.side] = (
                phase_rate(side, a, min(b, side.end_s)) if len(durations) >= MIN_PHASE_ITERATIONS else None
            )
        if rates["real"] is not None and rates["sim"] is not None:
            phases.append(PhaseComparison(a, b, rates["real"], rates["sim"], counts["real"], counts["sim"]))
    recoveries, unmatched = match_recoveries(
        [r for r in real.recoveries if r[0] <= window], [r for r in sim.recoveries if r[0] <= window], tolerance_s
    )
    joins, _ = match_recoveries(
        [j for j in real.joins if j[0] <= window], [j for j in sim.joins if j[0] <= window], tolerance_s
    )
    return RunComparison(
        real.policy,
        window,
        real.samples_at(window),
        sim.samples_at(window),
        tuple(phases),
        tuple(recoveries),
        tuple(unmatched),
        tuple(joins),
    )


def percent(value: float | None) -> str:
    """A relative error as the reports print it: "+1.2%", or "n/a" where none was measured."""
    return "n/a" if value is None else f"{100 * value:+.1f}%"


def median_abs(values: Sequence[float]) -> float | None:
    return statistics.median(abs(v) for v in values) if values else None


def summarize(comparisons: Sequence[RunComparison]) -> dict:
    """The headline figures: median absolute relative errors over every compared phase,
    run, recovery and join."""
    throughput = [e for c in comparisons for e in c.throughput_errors()]
    samples = [c.samples_error for c in comparisons if c.samples_error is not None]
    recovery = [e for c in comparisons for e in c.recovery_errors()]
    joins = [e for c in comparisons for e in c.join_errors()]
    return {
        "throughput_error": median_abs(throughput),
        "samples_error": median_abs(samples),
        "recovery_error": median_abs(recovery),
        "join_error": median_abs(joins),
        "phases_compared": len(throughput),
        "runs_compared": len(samples),
        "recoveries_compared": len(recovery),
        "joins_compared": len(joins),
    }
