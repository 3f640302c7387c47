"""What a design is: one frozen record that the engines ask instead of testing its name.

A design module defines a `Design` (module-level; the registry collects every one it finds)
made of:

- `name`, `summary`, `options` (a frozen dataclass of `designs.option` fields);
- `build(ctx, options) -> PolicyBuild`: its policy on a `BuildContext`, the job's profile,
  cluster, batch, checkpoint schedule and (cached) planner, the same for the simulator's
  planner calibration and the real backend;
- `pause_s(costs, options, action, plan, alive)`: what each of its actions costs in the
  planner calibration, from the `ActionCosts` the calibration derives from profile, cluster
  and storage, and its options (`standard_pause_s` unless its actions cost something else);
- `default_checkpoints`: its checkpoint schedule when the run sets no interval;
- `artifact`: `ArtifactHooks` for the paper artifact's calibration (its table, policy and
  pauses), or None where the artifact has no data for it;
- `runs_on`: `SIMULATOR` and/or `REAL`; `real`: `RealHooks`, the capabilities the real
  backend needs to carry its decisions out.

Nothing here imports an engine: a design sees only the planner and these records.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from planner.hardware import ClusterSpec
from planner.planner import Planner
from planner.policies import (
    Action,
    Checkpoint,
    CheckpointSchedule,
    CopyLayers,
    Decision,
    Policy,
    Reinstantiate,
    Restart,
    RestartFromCheckpoint,
    RestartFromSnapshot,
    Start,
)
from planner.profile import ModelProfile

from .options import DesignError, OptionSpec, specs

SIMULATOR, REAL_BACKEND = "simulator", "real"
ENGINES = (SIMULATOR, REAL_BACKEND)
T = TypeVar("T")


@dataclass(frozen=True)
class BuildContext:
    """What an engine tells a design's `build`: the job and the cluster it runs on.

    `profile_for(b)` is the profile at microbatch b (None where the engine has none);
    `profiled_microbatch` is the one microbatch a measured profile covers (None: any b can
    be derived analytically). `planner_for(f)` is the job's planner for fault tolerance f.
    `cached(key, make)` returns `make()`, computed once per key for this model, cluster and
    job (the simulator keeps them across a sweep; the real backend builds once anyway).
    `reconfigure_pause_s` is what the engine charges for a reconfiguration (the simulator's
    timed pause; 0 on the real backend, where it is measured). `max_nodes` bounds the
    cluster (the trace's peak in the simulator, `--nodes` on the real backend): a design may
    size tables by it, but nothing it decides may depend on it, since in the simulator it
    comes from the trace's future; `start_nodes` is what the job has when it is launched
    (the nodes of the trace's first instant; None: `max_nodes`), for a design whose job is
    sized once at launch."""

    profile: ModelProfile
    cluster: ClusterSpec
    global_batch: int
    microbatch_size: int
    gpus_per_node: int
    max_nodes: int
    checkpoints: CheckpointSchedule
    reconfigure_pause_s: float
    profile_for: Callable[[int], ModelProfile | None]
    profiled_microbatch: int | None
    planner_for: Callable[[int], Planner]
    cached: Callable[[Hashable, Callable[[], Any]], Any]
    start_nodes: int | None = None

    @property
    def launch_nodes(self) -> int:
        """The nodes the job is launched with."""
        return self.max_nodes if self.start_nodes is None else self.start_nodes


@dataclass(frozen=True)
class PolicyBuild:
    """A design's answer: its policy, its options as used (a default raised to what the
    model needs, say), the checkpoint schedule it runs (None: the context's), and for
    designs that keep redundant stages their `layout`, by which the planner calibration
    times plans and places state. `iteration_s(plan, plan_s)`, where given, is the time
    an iteration of `plan` takes under the design when the plan alone takes `plan_s` (a
    design whose background work slows training, GEMINI's checkpoint traffic, adds it
    there; the planner calibration times every iteration with it)."""

    policy: Policy
    options: Any
    checkpoints: CheckpointSchedule | None = None
    layout: Any = None  # a fixed stage layout the engines time plans with (Bamboo's `BambooLayout`)
    iteration_s: Callable[[Any, float], float] | None = None
    notes: Mapping[str, Any] = field(default_factory=dict)  # extra entries for the run's config.json


class ActionCosts(Protocol):
    """The planner calibration's prices, from profile, cluster and storage (`sim.timing`)."""

    @property
    def reconfigure_overhead_s(self) -> float: ...  # rebuilding process groups in place

    # starting processes afresh (no state loaded): those of every node in `alive` (the nodes
    # up, which a restart relaunches all of), or of `plan`'s nodes when not given
    def relaunch_s(self, plan: Any, alive: Collection[str] | None = None) -> float: ...

    def checkpoint_s(self, plan: Any, alive: Container[str] | None = None) -> float: ...
    def restart_s(self, plan: Any, alive: Collection[str] | None = None) -> float: ...  # relaunch, load onto `plan`
    def copy_s(self, action: CopyLayers) -> float: ...
    def memory_load_s(self, plan: Any) -> float: ...  # every node of `plan` receives its layers over the network

    # any cost term of the run by its key (`sim.cost_terms`: its row's default where the run
    # sets none), so that a design can charge a new term without a new field here
    def term(self, key: str) -> Any: ...


def standard_pause_s(
    costs: ActionCosts, options: Any, action: Action, plan: Any, alive: Collection[str] | None = None
) -> float:
    """What an action costs unless a design says otherwise: a start relaunches; a restart
    relaunches and loads the checkpoint; a restart from a snapshot relaunches and receives
    every node's layers from peers over the network; a checkpoint writes from the plan's nodes; a
    re-instantiation rebuilds groups; layer copies move the busiest node's bytes."""
    if isinstance(action, Start):
        return costs.relaunch_s(plan, alive)
    if isinstance(action, (Restart, RestartFromCheckpoint)):
        return costs.restart_s(plan, alive)
    if isinstance(action, RestartFromSnapshot):
        return costs.relaunch_s(plan, alive) + costs.memory_load_s(plan)
    if isinstance(action, Checkpoint):
        return costs.checkpoint_s(plan, alive)
    if isinstance(action, Reinstantiate):
        return costs.reconfigure_overhead_s
    if isinstance(action, CopyLayers):
        return costs.copy_s(action)
    return 0.0


@dataclass(frozen=True)
class ArtifactContext:
    """The paper artifact's facts for one model, as the simulator hands them to a design:
    `model` (its record: global batch, per-system pause constants), `constants` (the
    artifact's global constants by name), `row(n)` (the design's table row at n live
    nodes), the fewest nodes at which the table gives it throughput, and the run's
    `checkpoint_every_iterations` (None: not set). `calibration` names the artifact
    calibration asked for, so a second one can plug into the same hooks. `given` names the
    options the run set itself; `paper_rollback` says whether the paper's own run of this
    model on this trace rolled back on a restart (its eval script turned that off for three
    small models on the spot traces), with the reason for config.json."""

    calibration: str
    model: Any
    constants: Mapping[str, Any]
    row: Callable[[int], Any]
    min_runnable_nodes: int | None
    runnable: bool
    checkpoint_every_iterations: int | None
    given: frozenset[str] = frozenset()  # the options the run set itself (others are defaults)
    paper_rollback: bool = True  # whether the paper's run of this model on this trace rolled back
    paper_rollback_why: str = "the artifact's default"


@dataclass(frozen=True)
class ArtifactHooks:
    """A design in the artifact calibration: `system`, its name in the artifact's tables;
    `policy(ctx, options)`; `pause_s(ctx, options, action, plan)`, seconds of an action, None
    where the artifact has no time for it (free, except a checkpoint: an error)."""

    system: str
    policy: Callable[[ArtifactContext, Any], PolicyBuild]
    pause_s: Callable[[ArtifactContext, Any, Action, Any], float | None]


@dataclass(frozen=True)
class MemoryCopies:
    """Copies of every node's layers in CPU memory, as the real backend takes them: after
    every `every` committed steps, each node's layers (parameters and optimizer state) go
    to the memory of the nodes `holders(nodes)[node]` names (the node itself included),
    `nodes` being the plan's nodes in order. A design restores them with
    `RestartFromSnapshot`; the backend keeps the newest copy complete on every holder."""

    every: int
    holders: Callable[[Sequence[str]], Mapping[str, frozenset[str]]]

    def __post_init__(self) -> None:
        if not isinstance(self.every, int) or self.every < 1:
            raise DesignError(f"in-memory copies need an interval of >= 1 step, got {self.every!r}")


@dataclass(frozen=True)
class RealHooks:
    """How the real backend carries a design's decisions out.

    - `restarts_processes`: a restart starts every worker process afresh (Varuna) instead
      of rebuilding process groups in the running ones;
    - `saves_on_demand`: the design checkpoints when membership changes, so workers need a
      checkpoint store even when periodic checkpoints are off;
    - `forced_start(plan)`: the first decision on a grouping forced with `--pipelines`
      (None: the design chooses its own configuration and refuses a forced one);
    - `memory_copies(options)`: the in-memory copies workers take while they train
      (`MemoryCopies`; None: none), which a `RestartFromSnapshot` restores from (GEMINI)."""

    restarts_processes: bool = False
    saves_on_demand: bool = False
    forced_start: Callable[[Any], Decision] | None = None
    memory_copies: Callable[[Any], MemoryCopies | None] | None = None


DETECTION_RULE = (
    "a loss of a working node is declared after the cost profile's detection for its kind (crash, network, "
    "hang, no cause); nothing follows before that"
)


@dataclass(frozen=True)
class Design:
    """A fault-tolerance design, as registered (see the module docstring)."""

    name: str
    summary: str
    options: type
    build: Callable[[BuildContext, Any], PolicyBuild]
    runs_on: tuple[str, ...] = (SIMULATOR,)
    pause_s: Callable[[ActionCosts, Any, Action, Any, Collection[str] | None], float] = standard_pause_s
    default_checkpoints: CheckpointSchedule = field(default_factory=CheckpointSchedule)
    artifact: ArtifactHooks | None = None
    real: RealHooks = field(default_factory=RealHooks)
    # the one name figures, tables and human-readable output show ("" shows `name`);
    # `name` stays what options, configs and results tables hold
    display: str = ""
    # a failure detector of its own (its `Detect` action): the option that sets its seconds,
    # "" for none; a loss is declared by it or the cost profile's for its kind, the sooner
    detector_option: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or not self.name.replace("-", "_").isidentifier():
            raise DesignError(f"a design name must be a word (letters, digits, - or _), got {self.name!r}")
        if not isinstance(self.display, str) or self.display != self.display.strip() or "\n" in self.display:
            raise DesignError(f"design {self.name}: display must be one line of text, got {self.display!r}")
        if not self.runs_on or set(self.runs_on) - set(ENGINES):
            raise DesignError(f"design {self.name}: runs_on must be among {', '.join(ENGINES)}, got {self.runs_on!r}")
        if not callable(self.build):
            raise DesignError(f"design {self.name}: build must be callable")
        specs(self.options)  # checks the options dataclass

    @property
    def option_specs(self) -> tuple[OptionSpec, ...]:
        return specs(self.options)

    @property
    def label(self) -> str:
        """The name people read: `display`, or `name` where the design gives none."""
        return self.display or self.name

    def describe(self) -> dict[str, Any]:
        """The design as `ooblab designs --json` lists it."""
        where = list(self.runs_on)
        return {
            "name": self.name,
            "display": self.label,
            "summary": self.summary,
            "runs_on": where,
            "calibrations": ["planner"] + (["artifact"] if self.artifact is not None else []),
            "options": [s.to_dict() for s in self.option_specs],
            "detection": DETECTION_RULE
            + (f"; its own detector ({self.detector_option}) where sooner" if self.detector_option else ""),
        }
