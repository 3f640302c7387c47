"""Process start-ups that share one host's cores (an emulated cluster, `Simulation`'s
`startup_cores`).

On a real cluster a node's start-up runs on that node, beside every other node's. On a
testbed that emulates the nodes on one machine, every starting process (a joining node's
worker, each of a restart's relaunched workers) imports its modules on the same few cores:
a node that joins while a restart's processes start becomes ready only when it has had
its share of the cores, and the restart's processes are slowed by it in turn. Measured on
2 cores (CHANGELOG.md): nodes joining during a Varuna restart of 26
processes took 31-57 s to start against 4.5 s otherwise, and the restart's start-up about
8 s longer than its calibrated time.

The model is processor sharing: `cores` cores; each process can use at most one, so with
P processes starting each progresses at min(1, cores / P) core-seconds per second. A job
is a group of identical processes started together (a joining node: its GPUs' workers; a
restart: all of its workers); it is done when each of its processes has had its work.
A job's work is set from how long it takes alone (`work_for`), so a job alone takes
exactly its calibrated time and only overlaps change anything.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass


def rate_per_process(processes: int, cores: float) -> float:
    """Core-seconds per second each of `processes` starting processes gets."""
    return min(1.0, cores / processes) if processes > 0 else 0.0


def work_for(seconds_alone: float, processes: int, cores: float) -> float:
    """Core-seconds per process of a job of `processes` that takes `seconds_alone` alone."""
    return seconds_alone * rate_per_process(processes, cores)


@dataclass
class _Job:
    processes: int
    work_left: float  # core-seconds per process


class StartupPool:
    """The start-ups in progress on one host, advanced in time by the caller."""

    def __init__(self, cores: float, now_s: float = 0.0):
        if not cores > 0:
            raise ValueError(f"cores must be > 0, got {cores!r}")
        self.cores = float(cores)
        self.now_s = now_s
        self._jobs: dict[Hashable, _Job] = {}

    def __contains__(self, key: Hashable) -> bool:
        return key in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def processes(self) -> int:
        return sum(j.processes for j in self._jobs.values())

    def rate(self) -> float:
        return rate_per_process(self.processes(), self.cores)

    def advance(self, now_s: float) -> list[Hashable]:
        """Move to `now_s` (not before the last time); return the jobs that finished by
        then, in order of finishing, and drop them."""
        if now_s < self.now_s - 1e-9:
            raise ValueError(f"the pool is at {self.now_s:g} s, cannot go back to {now_s:g} s")
        done: list[Hashable] = []
        while self._jobs:
            rate = self.rate()
            key, job = min(self._jobs.items(), key=lambda kv: kv[1].work_left)
            finish = self.now_s + job.work_left / rate
            if finish > now_s + 1e-9:
                break
            step = job.work_left  # every process got the same in the meantime
            for other in self._jobs.values():
                other.work_left -= step
            self.now_s = max(self.now_s, finish)
            for k in [k for k, j in self._jobs.items() if j.work_left <= 1e-12]:
                del self._jobs[k]
                done.append(k)
        if self._jobs and now_s > self.now_s:
            step = (now_s - self.now_s) * self.rate()
            for job in self._jobs.values():
                job.work_left -= step
        self.now_s = max(self.now_s, now_s)
        return done

    def add(self, key: Hashable, processes: int, seconds_alone: float) -> None:
        """A job of `processes` that would take `seconds_alone` on an idle host starts now."""
        if key in self._jobs:
            raise ValueError(f"start-up {key!r} is already in the pool")
        if processes < 1 or not seconds_alone >= 0:
            raise ValueError(f"a start-up needs processes >= 1 and seconds >= 0, got {processes}, {seconds_alone}")
        if seconds_alone > 0:
            self._jobs[key] = _Job(processes, work_for(seconds_alone, processes, self.cores))

    def remove(self, key: Hashable) -> None:
        self._jobs.pop(key, None)

    def shrink(self, key: Hashable, processes: int) -> None:
        """`processes` of the job died before starting (gone when none is left)."""
        job = self._jobs.get(key)
        if job is None:
            return
        job.processes -= processes
        if job.processes <= 0:
            del self._jobs[key]

    def finish_s(self, key: Hashable) -> float:
        """When `key` finishes if nothing joins or leaves (inf: not in the pool)."""
        job = self._jobs.get(key)
        if job is None:
            return math.inf
        t, jobs = self.now_s, sorted(self._jobs.values(), key=lambda j: j.work_left)
        processes, done_work = self.processes(), 0.0
        for other in jobs:
            t += (other.work_left - done_work) / rate_per_process(processes, self.cores)
            done_work = other.work_left
            if other is job:
                return t
            processes -= other.processes
        raise AssertionError("internal: a pool job was not found among its jobs")

    def next_finish(self) -> float:
        """When the first job finishes (inf: none is starting)."""
        if not self._jobs:
            return math.inf
        return self.now_s + min(j.work_left for j in self._jobs.values()) / self.rate()
