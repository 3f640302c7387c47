"""How busy the machine's cores were over each committed iteration.

Where workers share a few cores (the emulated backend runs dozens of them on 2), an
iteration's length depends on how busy the cores are, and that differs by plan: on the
2-core testbed a 30-node job kept the cores 42% busy on single-node pipelines and 72% on
deep ones, which ran slower than the simulator said (CHANGELOG.md). The
coordinator reads the machine's aggregate CPU counters (`/proc/stat`: every process, the
job's and anyone else's, which is the load its workers compete with) when training
starts and at each commit; `busy_share` turns two readings into the busy share of all
cores between them, 0 to 1. Without `/proc/stat` (not Linux) nothing is read and the
shares are None. A reading is one small file read per iteration. The counters are the
coordinator's machine's: every worker's in a local run (`ooblab run`, the validation);
in a job across machines (`ooblab node`) they say nothing of the workers elsewhere.

Steal (the time a virtual machine's cores were ready to run but the host ran something
else) counts as busy and is also kept apart (`steal_share`): an iteration slowed with the
cores at their usual busy share may have lost the time to the host, which nothing the
machine's own processes do shows.
"""

from __future__ import annotations

from dataclasses import dataclass

PROC_STAT = "/proc/stat"
IDLE_FIELDS = (3, 4)  # idle, iowait: the rest of user nice system idle iowait irq softirq steal is busy
STEAL_FIELD = 7  # kernels before 2.6.11 have no steal column: none is read there
COUNTED_FIELDS = 8  # guest time is already inside user time


@dataclass(frozen=True)
class CpuReading:
    """Cumulative clock ticks of all cores since boot: busy, in all, and of the busy ones
    those stolen by the host."""

    busy_ticks: int
    total_ticks: int
    steal_ticks: int = 0


def parse_proc_stat(text: str) -> CpuReading:
    """The aggregate `cpu` line of a /proc/stat text."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(v) for v in fields[1 : 1 + COUNTED_FIELDS]]
            if len(values) < 5:
                break
            total = sum(values)
            steal = values[STEAL_FIELD] if len(values) > STEAL_FIELD else 0
            return CpuReading(total - sum(values[i] for i in IDLE_FIELDS), total, steal)
    raise ValueError("no aggregate 'cpu' line with its counters in /proc/stat")


def read_cpu(path: str = PROC_STAT) -> CpuReading | None:
    """The machine's counters now, or None where they cannot be read."""
    try:
        with open(path) as f:
            return parse_proc_stat(f.read())
    except (OSError, ValueError):
        return None


def busy_share(before: CpuReading | None, after: CpuReading | None) -> float | None:
    """Busy share of all cores between two readings (None without both, or without a
    tick between them)."""
    return _share(before, after, "busy_ticks")


def steal_share(before: CpuReading | None, after: CpuReading | None) -> float | None:
    """Share of all cores' time between two readings that the host stole (None as
    `busy_share`)."""
    return _share(before, after, "steal_ticks")


def _share(before: CpuReading | None, after: CpuReading | None, ticks: str) -> float | None:
    if before is None or after is None:
        return None
    total = after.total_ticks - before.total_ticks
    if total <= 0:
        return None
    return min(1.0, max(0.0, (getattr(after, ticks) - getattr(before, ticks)) / total))
