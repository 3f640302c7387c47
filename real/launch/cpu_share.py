"""The share of a core each busy process got over a window, from Linux's scheduler counters.

`/proc/<pid>/schedstat` holds, for a process's main thread, the nanoseconds it has run on
a CPU and the nanoseconds it has waited, runnable, in a run queue. Over a window in which
a process never sleeps (a contention load, or the profiler timing its passes), its share
of a core is run / (run + wait).

Why the contention profiler needs it: with more busy processes than cores and a count
that does not divide evenly (3 on 2 cores), the kernel may keep the timed process alone
on a core for a whole measurement (share 1) or beside a load (share 0.5). On the 2-core
testbed two sweeps gave the factor for 2 busy neighbours 0.63 and 0.97 (fair share 0.75;
CHANGELOG.md). A job's workers block and wake at every pipeline hop, which lets the
kernel spread them, so what a worker gets over an iteration is near the mean share of
the busy processes, not the share one placement gave the timed process.
`ShareReading.factor` rescales a measured time from the timed process's share to that
mean. Measured since: the timed process got 0.59-0.62 of a core against a mean of 0.66,
so evening moved that factor by 6-10%; the rest of its spread is CPU time (a pass beside
2 loads cost 1.3x the CPU time of one beside 3), which evening keeps, as it should.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


def read_schedstat(pid: int) -> tuple[int, int] | None:
    """(run_ns, wait_ns) of `pid`'s main thread so far; None where the kernel has no such file."""
    try:
        with open(f"/proc/{pid}/schedstat") as handle:
            fields = handle.read().split()
    except OSError:
        return None
    if len(fields) < 2:
        return None
    return int(fields[0]), int(fields[1])


def read_all(pids: Iterable[int]) -> dict[int, tuple[int, int]] | None:
    """Every pid's counters, or None when any is unreadable (then no share is known)."""
    out = {}
    for pid in pids:
        counters = read_schedstat(pid)
        if counters is None:
            return None
        out[pid] = counters
    return out


def shares(before: Mapping[int, tuple[int, int]], after: Mapping[int, tuple[int, int]]) -> dict[int, float]:
    """Per pid, run / (run + wait) between the two readings (1.0 for a pid that neither ran
    nor waited, i.e. slept throughout: it took nothing from the others)."""
    out = {}
    for pid, (run0, wait0) in before.items():
        run1, wait1 = after[pid]
        run, wait = run1 - run0, wait1 - wait0
        if run < 0 or wait < 0:
            raise ValueError(f"internal: the schedstat counters of {pid} went backwards")
        out[pid] = 1.0 if run + wait == 0 else run / (run + wait)
    return out


@dataclass(frozen=True)
class ShareReading:
    """The timed process's share and the mean share of every busy process (itself included)."""

    own: float
    mean: float

    @property
    def factor(self) -> float:
        """A time measured at `own` rescaled to `mean`: time x own / mean."""
        return self.own / self.mean if self.mean > 0 else 1.0


# a window whose busy processes got less than this share of their fair share of the cores
# ran beside load from outside them (another job, the host); `disturbed`
DISTURBED_BELOW = 0.9


def fair_share(busy: int, cores: int) -> float:
    """What each of `busy` always-runnable processes gets of a core on `cores` cores, alone."""
    return min(1.0, cores / busy) if busy > 0 else 1.0


def disturbed(result: ShareReading, busy: int, cores: int) -> bool:
    """Whether the busy processes' mean share fell below `DISTURBED_BELOW` x their fair
    share: something outside them took the cores (on the 2-core testbed a clean sweep read
    means of 1.00, 0.99, 0.66, 0.50 beside 0..3 loads; one with a type checker running beside
    it, 0.82 and 0.58 beside 1 and 2, and its factor for 1 neighbour came out 0.61 against
    0.46-0.48 in clean sweeps)."""
    return result.mean < DISTURBED_BELOW * fair_share(busy, cores)


def reading(own_pid: int, window_shares: Mapping[int, float]) -> ShareReading:
    """`own_pid`'s share against the mean of all of `window_shares` (which holds it)."""
    if own_pid not in window_shares:
        raise ValueError(f"internal: the timed process {own_pid} has no share")
    return ShareReading(window_shares[own_pid], statistics.fmean(window_shares.values()))


class ShareWindow:
    """Reads the counters of the current process and `others` on entry and exit; `result`
    is the `ShareReading` of the window, or None where the counters are unreadable or
    `others` is None (no reading asked)."""

    def __init__(self, others: Iterable[int] | None):
        self.pids = [os.getpid(), *others] if others is not None else []
        self.result: ShareReading | None = None

    def __enter__(self) -> ShareWindow:
        self._before = read_all(self.pids) if self.pids else None
        return self

    def __exit__(self, *exc: object) -> None:
        after = read_all(self.pids) if self.pids else None
        if self._before is not None and after is not None:
            self.result = reading(self.pids[0], shares(self._before, after))
