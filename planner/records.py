"""The run record shared by the simulator and the real backend (DESIGN 4 and 5).

Every run, simulated or real, writes the same four files into its own directory:

- `config.json`: the run's configuration (whatever produced it, as a flat JSON object);
- `summary.json`: `RunSummary` (plus backend-specific extras, e.g. the real backend's losses);
- `timeline.csv`: one `TimelineRow` per state change or iteration;
- `events.jsonl`: one `EventRecord` per trace event, policy decision, checkpoint, failure.

Keeping the schema here (pure Python, no pandas) lets `sim` and `real` share it without
importing each other, and lets validation compare a simulated run with a measured one
field by field.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

# Job states, shared by both backends.
RUNNING = "running"
RECONFIGURING = "reconfiguring"
CHECKPOINTING = "checkpointing"
RESTARTING = "restarting"
WAITING = "waiting"
FINISHED = "finished"
STATES = (RUNNING, RECONFIGURING, CHECKPOINTING, RESTARTING, WAITING, FINISHED)


@dataclass(frozen=True)
class TimelineRow:
    """The job at `time_s`: state entered (or iteration completed) at that instant."""

    time_s: float
    live_nodes: int  # nodes present (starting, idle or working)
    working_nodes: int  # nodes in the current plan
    state: str
    iterations_done: int  # committed iterations (rolls back on a restart)
    samples_done: int  # committed samples
    throughput_samples_per_s: float  # the plan's rate in this state (0 when not running)
    cost_usd: float  # spent so far


@dataclass(frozen=True)
class EventRecord:
    """Something that happened: a trace event, a decision and its actions, a checkpoint."""

    time_s: float
    kind: str
    detail: Mapping[str, Any] = field(default_factory=dict)


# `outcome` in a summary: trained; never started (too few nodes, or the run ended first; the
# reason in `infeasible_reason`); cannot run at all (the model fits nowhere). Experiments
# count the first two as runs (a never-trained one committed nothing).
OK, NEVER_TRAINED, INFEASIBLE = "ok", "never-trained", "infeasible"
RAN_OUTCOMES = (OK, NEVER_TRAINED)


@dataclass(frozen=True)
class TimeBreakdown:
    """Where the wall-clock time of a run went, in seconds (summing to the run's span)."""

    useful_compute_s: float = 0.0
    reconfiguration_s: float = 0.0
    restart_s: float = 0.0
    checkpoint_s: float = 0.0
    lost_work_s: float = 0.0  # iterations computed and then thrown away
    redundant_compute_s: float = 0.0  # Bamboo's extra forward passes and fail-over slowdown
    waiting_s: float = 0.0  # too few nodes to train

    def effective_training_time(self) -> float:
        """Useful compute over the run's wall-clock time (Kokolis et al., arXiv 2410.21680:
        effective training time ratio, ETTR); 0 for a run of no time."""
        total = self.total_s()
        return self.useful_compute_s / total if total > 0 else 0.0

    def total_s(self) -> float:
        return (
            self.useful_compute_s
            + self.reconfiguration_s
            + self.restart_s
            + self.checkpoint_s
            + self.lost_work_s
            + self.redundant_compute_s
            + self.waiting_s
        )


@dataclass(frozen=True)
class RunSummary:
    """The headline numbers of one run.

    `avg_samples_per_s` = committed samples / (time of the last completed iteration -
    time training first started), the artifact's definition (DESIGN 4). `breakdown` holds
    wall-clock seconds only (they sum to the run's span); `idle_gpu_s` is GPU-seconds, of
    GPUs present but outside the plan; `to_dict` adds `effective_training_time`, useful
    compute over wall-clock time, the same in every engine."""

    policy: str
    model: str
    trace: str
    calibration: str
    duration_s: float  # span of the run (trace start to its end)
    avg_samples_per_s: float
    committed_samples: int
    num_iterations: int
    num_reconfigurations: int
    num_restarts: int
    num_checkpoints: int
    failures_survived: int  # removals absorbed without a restart from checkpoint
    node_hours: float
    cost_usd: float
    breakdown: TimeBreakdown
    extra: Mapping[str, Any] = field(default_factory=dict)
    num_failed_checkpoints: int = (
        0  # checkpoints begun and never completed (the real backend's; the simulator's never fail)
    )
    idle_gpu_s: float = 0.0  # GPU-seconds (not wall-clock) of present GPUs outside the plan

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("breakdown", "extra")}
        data["breakdown"] = asdict(self.breakdown)
        data["effective_training_time"] = self.breakdown.effective_training_time()
        data.update(self.extra)
        return data


def upgrade_summary(data: Mapping[str, Any]) -> dict[str, Any]:
    """A saved `summary.json` in today's keys: the one place older keys are mapped
    (`breakdown.idle_gpu_s`, GPU-seconds among wall-clock seconds, is `idle_gpu_s`;
    `effective_training_time` is added where it is missing)."""
    out = dict(data)
    breakdown = dict(out.get("breakdown") or {})
    if "idle_gpu_s" in breakdown:
        out.setdefault("idle_gpu_s", breakdown.pop("idle_gpu_s"))
        out["breakdown"] = breakdown
    if breakdown and "effective_training_time" not in out:
        known = {f.name for f in fields(TimeBreakdown)}
        out["effective_training_time"] = TimeBreakdown(
            **{k: float(v) for k, v in breakdown.items() if k in known}
        ).effective_training_time()
    return out


def _clean(value: Any) -> Any:
    """JSON has no inf/nan: write them as strings so files stay standard JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def write_run(
    directory: str | Path,
    config: Mapping[str, Any],
    summary: RunSummary,
    timeline: Iterable[TimelineRow],
    events: Iterable[EventRecord],
) -> Path:
    """Write the four files of a run; returns the directory."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(_clean(dict(config)), indent=2, sort_keys=True) + "\n")
    (directory / "summary.json").write_text(json.dumps(_clean(summary.to_dict()), indent=2, sort_keys=True) + "\n")
    names = [f.name for f in fields(TimelineRow)]
    with open(directory / "timeline.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(names)
        for row in timeline:
            writer.writerow([getattr(row, name) for name in names])
    with open(directory / "events.jsonl", "w") as handle:
        for event in events:
            handle.write(
                json.dumps(_clean({"time_s": event.time_s, "kind": event.kind, **event.detail}), sort_keys=True) + "\n"
            )
    return directory


def read_events(directory: str | Path) -> list[dict[str, Any]]:
    """Read `events.jsonl` back, one flat dict per event (`time_s`, `kind`, its detail)."""
    with open(Path(directory) / "events.jsonl") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def read_timeline(directory: str | Path) -> list[TimelineRow]:
    """Read `timeline.csv` back (types restored)."""
    types = {f.name: f.type for f in fields(TimelineRow)}
    rows = []
    with open(Path(directory) / "timeline.csv", newline="") as handle:
        for record in csv.DictReader(handle):
            values: dict[str, Any] = {}  # each value's type is its TimelineRow field's
            for name, text in record.items():
                kind = types[name]
                values[name] = text if kind == "str" else int(text) if kind == "int" else float(text)
            rows.append(TimelineRow(**values))
    return rows
