"""How busy the machine's cores were in each compared phase of a real run.

The real backend records, per committed iteration, the busy share of all the machine's
cores (`real.control.cpu_meter`, the summary's `cpu_busy_share`). On a testbed whose
workers share a few cores the simulator's errors grow with it (deep pipelines kept 2
cores 72% busy where single-node ones kept them 42%, and ran slower than simulated), so
the report sets each phase's share beside its error: the same steady iterations the
phase's throughput is the median of (`compare.steady_indices`), their median share.
Reported, never fed to the simulator (the calibration jobs' shares are, for real compute:
`core_cost`). The same for the share the host stole (`cpu_steal_share`, inside the busy
share): a phase slower than simulated with the cores at their usual busy share may have
lost that time to the virtual machine's host, which only steal shows.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from .compare import PhaseComparison, RunTimeline, steady_indices


def phase_busy_shares(
    real: RunTimeline, shares: Sequence[float | None], phases: Sequence[PhaseComparison]
) -> list[float | None]:
    """Per phase, the median busy share of its steady iterations (None where none has
    one). `shares` is per committed iteration, the first included, as the summary has it;
    `real.iterations()` starts at the second."""
    out: list[float | None] = []
    for phase in phases:
        picked = [
            share
            for k in steady_indices(real, phase.start_s, min(phase.end_s, real.end_s))
            if k + 1 < len(shares) and (share := shares[k + 1]) is not None
        ]
        out.append(statistics.median(picked) if picked else None)
    return out


def as_percents(shares: Sequence[float | None]) -> list[str]:
    """Per-phase shares as the report prints them ('-' where a phase has none)."""
    return [f"{share:.0%}" if share is not None else "-" for share in shares]
