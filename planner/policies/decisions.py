"""What a policy sees, what it is told, and what it decides (DESIGN 3.6).

A policy is pure: ``decide(view, event, current) -> Decision``. The simulator and the real
backend call the same policy objects and log the same records; they differ only in how
long an action takes (the simulator's calibration) and how it is carried out (the real
backend's processes). Nothing here knows about time passing: durations are never part of
a decision.

- `ClusterView`: the nodes that are usable now (in arrival order), those still starting,
  and where the job stands (its state, committed iterations, last checkpoint).
- Events: `NodesRemoved`, `NodesReady`, `PauseEnded` (a start, restart, reconfiguration or
  checkpoint finished), `IterationEnd` (asked for by the previous decision).
- Actions, carried out in order: `Continue`, `Detect`, `Start`, `Reinstantiate`,
  `CopyLayers`, `FailOver`, `Admit`, `Checkpoint`, `Restart`, `RestartFromCheckpoint`,
  `RestartFromSnapshot`, `WaitForNodes`. Every action other than `Continue`, `FailOver`
  and `Admit` ends the iteration in flight (its work is lost); `RestartFromCheckpoint` and
  `WaitForNodes(rollback=True)` also roll committed progress back to the last completed
  checkpoint, `RestartFromSnapshot` to a later state the design keeps itself.
- `Decision`: the plan to run (None while waiting), the actions, the policy's own memory
  (passed back on the next call), whether it wants to see the next iteration end, and
  `wake_at_s`: the time of the first iteration end it wants to see while training goes
  on (policies that act on a clock, e.g. per prediction interval; None: none).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..reconfigure import LayerCopy

# -- what the policy sees ----------------------------------------------------------------


@dataclass(frozen=True)
class ClusterView:
    """The cluster and the job at the moment of a decision."""

    time_s: float
    ready: tuple[str, ...]  # usable nodes, in the order they became usable
    starting: tuple[str, ...] = ()  # present but still booting
    job_state: str = "waiting"  # one of planner.records.STATES
    iterations_done: int = 0
    checkpoint_iterations: int = 0  # committed iterations saved by the last checkpoint


# -- events ------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodesRemoved:
    """Nodes left (preempted); they may have been working, spare or still starting.

    `notice`: the job heard of the loss before it broke anything (a preemption notice, or
    a real worker that catches the failed collective), so a design that stops its processes
    to restart may still save from the survivors first. False for a removal with a failure
    cause (a `datacenter:` trace's hardware or network fault): the failed collective ends
    every rank of a checkpoint-restart job, and what was committed since its last checkpoint
    is gone with them."""

    nodes: tuple[str, ...]
    notice: bool = True


@dataclass(frozen=True)
class NodesReady:
    """Nodes finished starting and can be used (delivered at an iteration boundary while
    the job runs, at once while it waits)."""

    nodes: tuple[str, ...]


@dataclass(frozen=True)
class PauseEnded:
    """The pause the last decision asked for is over (`kind`: the job state it was in);
    `newly_ready` became usable during it."""

    kind: str
    newly_ready: tuple[str, ...] = ()


@dataclass(frozen=True)
class IterationEnd:
    """An iteration boundary the previous decision asked to see."""

    iterations_done: int


Event = NodesRemoved | NodesReady | PauseEnded | IterationEnd

# -- actions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Continue:
    """Nothing changes: the iteration (or the pause) in progress goes on."""


@dataclass(frozen=True)
class Detect:
    """The survivors are blocked until a failure detector declares the loss (a collective
    that times out, a missed heartbeat) before anything else can happen: a pause that the
    design prices (`standard_pause_s`: free). The real backend detects failures its own way
    (and measures it), so there it is a no-op."""

    reason: str = ""


@dataclass(frozen=True)
class Start:
    """Launch the job on the plan without rolling anything back (first start, or a
    resumption whose state survives)."""


@dataclass(frozen=True)
class Reinstantiate:
    """Switch to the decision's plan in place (a reconfiguration pause)."""

    reason: str = ""


@dataclass(frozen=True)
class CopyLayers:
    """Layer parameters and optimizer state to move before the new plan can run."""

    copies: tuple[LayerCopy, ...]

    @property
    def total_bytes(self) -> int:
        return sum(c.total_bytes for c in self.copies)


@dataclass(frozen=True)
class FailOver:
    """`covered_by` takes over `stage` (pipeline, stage) of the lost `node` from its
    redundant copy; training goes on, slower."""

    node: str
    covered_by: str
    stage: tuple[int, int]


@dataclass(frozen=True)
class Admit:
    """Nodes join the plan: nodes that became usable during a pause, or nodes that got the
    live state in the background while the others trained (replica groups). Free unless
    the design prices it: the iteration in flight goes on (re-timed on the new plan). A
    price (replica groups' quorum rejoin) is a pause of every node at the step boundary
    where it is admitted. The real backend carries a plan change out at the next step
    boundary (a planned stop, no work lost)."""

    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Checkpoint:
    """Write a blocking checkpoint of the committed progress now."""

    reason: str = ""


@dataclass(frozen=True)
class Restart:
    """Relaunch every worker, keeping committed progress (it was just checkpointed, or
    the model keeps it)."""

    reason: str = ""


@dataclass(frozen=True)
class RestartFromCheckpoint:
    """Roll committed progress back to the last completed checkpoint and relaunch."""

    reason: str = ""


@dataclass(frozen=True)
class RestartFromSnapshot:
    """Roll committed progress back to `iteration`, a state the design keeps outside the
    job's checkpoints (GEMINI: copies in peers' CPU memory), and relaunch with every node
    of the plan receiving its layers from those copies. `iteration` lies between the last
    completed checkpoint and the committed iterations (the engines check it)."""

    iteration: int
    reason: str = ""


@dataclass(frozen=True)
class WaitForNodes:
    """Too few usable nodes: stop until more arrive (`needed` in total)."""

    needed: int
    reason: str = ""
    rollback: bool = False


Action = (
    Continue
    | Detect
    | Start
    | Reinstantiate
    | CopyLayers
    | FailOver
    | Admit
    | Checkpoint
    | Restart
    | RestartFromCheckpoint
    | RestartFromSnapshot
    | WaitForNodes
)

# Actions that leave the iteration in flight running.
NON_DISRUPTIVE = (Continue, FailOver, Admit)


DEFAULT_CHECKPOINT_EVERY_S = 3600.0  # the hourly default of Oobleck and the designs that follow it


@dataclass(frozen=True)
class CheckpointSchedule:
    """When a policy writes periodic blocking checkpoints while it trains.

    After iteration n when n is a multiple of `every_iterations`; or, with `every_s`, after
    max(1, round(every_s / iteration time)) iterations since the last checkpoint; and after
    the first iteration that follows a restart when `after_restart` is set. No field set:
    no periodic checkpoints."""

    every_iterations: int | None = None
    every_s: float | None = None
    after_restart: bool = False

    def __post_init__(self) -> None:
        if self.every_iterations is not None and self.every_iterations < 1:
            raise ValueError(f"checkpoint interval must be >= 1 iteration, got {self.every_iterations}")
        if self.every_s is not None and not self.every_s > 0:
            raise ValueError(f"checkpoint interval must be > 0 s, got {self.every_s}")


@dataclass(frozen=True)
class Decision:
    """A policy's answer: the plan to run (None: not training), what to do, and the
    policy's memory for its next call."""

    plan: Any
    actions: tuple[Action, ...] = (Continue(),)
    memory: Any = None
    check_at_iteration_end: bool = False
    notes: tuple[str, ...] = field(default=())
    # An `IterationEnd` at the first iteration boundary at or after this time (a time already
    # past: the next boundary). Only while the decision stands: the next decision sets its own.
    wake_at_s: float | None = None

    @property
    def disruptive(self) -> bool:
        """True when the iteration (or pause) in progress is abandoned."""
        return any(not isinstance(a, NON_DISRUPTIVE) for a in self.actions)

    @property
    def rolls_back(self) -> bool:
        return any(
            isinstance(a, (RestartFromCheckpoint, RestartFromSnapshot)) or (isinstance(a, WaitForNodes) and a.rollback)
            for a in self.actions
        )

    @property
    def snapshot(self) -> int | None:
        """The iteration a `RestartFromSnapshot` rolls back to (None: no such action)."""
        return next((a.iteration for a in self.actions if isinstance(a, RestartFromSnapshot)), None)


class Policy(Protocol):
    """What the simulator and the real backend need from a policy."""

    name: str
    checkpoints: CheckpointSchedule

    def infeasible_reason(self) -> str | None:
        """Why this policy can never run the job (e.g. out of memory), or None."""

    def decide(self, view: ClusterView, event: Event, current: Decision | None) -> Decision:
        """The decision after `event`; `current` is the previous decision (None at first)."""


# -- records -----------------------------------------------------------------------------


def plan_nodes(plan: Any) -> tuple[str, ...]:
    """The nodes a plan keeps busy (empty for no plan)."""
    return tuple(plan.nodes) if plan is not None else ()


def describe_plan(plan: Any) -> dict[str, Any]:
    """A small JSON-ready description of any policy's plan, for event logs."""
    if plan is None:
        return {"nodes": 0}
    describe = getattr(plan, "describe", None)
    if callable(describe):
        return describe()
    info: dict[str, Any] = {"nodes": len(plan.nodes)}
    pipelines = getattr(plan, "pipelines", None)
    if pipelines is not None:
        info["pipelines"] = [len(p.nodes) for p in pipelines]
        info["microbatches"] = [p.num_microbatches for p in pipelines]
    iteration = getattr(plan, "iteration_time_s", None)
    if iteration is not None:
        info["predicted_iteration_s"] = iteration
    return info


def describe_action(action: Action) -> dict[str, Any]:
    """A JSON-ready record of one action (copy plans summarised by count and bytes)."""
    name = type(action).__name__
    if isinstance(action, CopyLayers):
        return {"action": name, "copies": len(action.copies), "bytes": action.total_bytes}
    data: dict[str, Any] = {"action": name}
    for key, value in vars(action).items():
        data[key] = list(value) if isinstance(value, tuple) else value
    return data


def describe_event(event: Event) -> dict[str, Any]:
    data: dict[str, Any] = {"event": type(event).__name__}
    for key, value in vars(event).items():
        data[key] = list(value) if isinstance(value, tuple) else value
    return data


def nodes_in_order(nodes: Sequence[str], keep: set[str]) -> tuple[str, ...]:
    """`nodes` filtered to `keep`, order kept."""
    return tuple(n for n in nodes if n in keep)
