"""A simulation's configuration: one flat, validated, JSON-ready record.

`SimConfig` holds every input of a run. Fields left at None take the calibration's default
when the run is set up (`sim.setup`); `config.json` records the inputs as given plus
`effective_<field>` for each default filled in (and a few derived facts: trace name and
size, profile source...), so `SimConfig.from_record(json)` reruns a run from its directory. Options that a calibration does not use must
stay unset: setting one is an error rather than a silent no-op.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from designs import registry
from designs.options import DesignError
from planner.checkpoint_interval import RULES
from traces.errors import MAX_HOURS

from .errors import SimError

CALIBRATIONS = ("artifact", "planner", "artifact-as-run")
ARTIFACT_CALIBRATIONS = ("artifact", "artifact-as-run")  # the artifact's tables and constants
TIMELINES = ("changes", "iterations")

# options each calibration ignores: setting them is an error
PLANNER_ONLY = (
    "global_batch",
    "microbatch_size",
    "fault_tolerance",
    "gpu",
    "gpus_per_node",
    "inter_node_gbps",
    "checkpoint_every_s",
    "checkpoint_adaptive",
    "checkpoint_prior_mtbf_s",
    "join_horizon_s",
    "varuna_max_microbatch",
    "reconfigure_overhead_s",
    "restart_overhead_s",
    "restart_fixed_s",
    "restart_per_process_s",
    "restart_startup_share",
    "restart_load_gb_per_s",
    "checkpoint_fixed_s",
    "storage_gb_per_s",
    "storage_cap_gb_per_s",
    "loaded_hop_fixed_s",
    "loaded_hop_slope_s2",
    "loaded_hop_per_process_s",
    "startup_cores",
    "sync_notice",
    "compute_cores",
    "sample_core_s",
    "detect_s",
    "detect_crash_s",
    "detect_network_s",
    "detect_hang_s",
)
ARTIFACT_ONLY = ("varuna_rollback", "min_nodes", "artifact_quirks")


# the longest run `duration_s` may ask for: beyond the trace it holds the last membership
MAX_DURATION_S = MAX_HOURS * 3600.0  # a year: the traces' own bound on generated hours


@dataclass(frozen=True)
class SimConfig:
    """Everything a run depends on (None: the calibration's default)."""

    policy: str = "oobleck"  # the design's name (`designs.registry`)
    model: str = "GPT-3-medium"
    trace: str = "fixed:interval=1h"
    calibration: str = "artifact"
    seed: int = 0  # trace generators and count-log victims
    # a cost profile (`sim.cost_profiles`): a built-in's name or a .json file; its values
    # fill the cost fields below that are not set
    costs: str | None = None
    # the job and the cluster (planner calibration)
    global_batch: int | None = None  # default: the artifact's batch for its model names
    microbatch_size: int | None = None  # default 1
    fault_tolerance: int | None = None  # Oobleck's f, default 1
    gpu: str | None = None  # default v100-16gb (the p3.2xlarge of the artifact's prices)
    gpus_per_node: int | None = None  # default 1
    inter_node_gbps: float | None = None  # default: the GPU type's (10 Gb/s for the V100)
    # nodes and money (both calibrations)
    node_startup_s: float | None = None  # default 45 s
    price_per_node_hour: float | None = None  # default 0.91 $
    # policy knobs
    checkpoint_every_iterations: int | None = None  # Varuna: default 10
    checkpoint_every_s: float | None = None  # Oobleck and Bamboo (planner): default 3600 s
    # adaptive interval, any design that checkpoints (planner): "young" or "daly", from the
    # checkpoints charged so far and the failures seen so far (planner.checkpoint_interval)
    checkpoint_adaptive: str | None = None
    checkpoint_prior_mtbf_s: float | None = None  # the adaptive rule's prior MTBF, default 3600 s
    varuna_rollback: bool | None = None  # artifact Varuna: default True, False for the 3 small models on spot traces
    # artifact calibrations: the artifact code's departures from its stated model
    # (sim.artifact_quirks: "all", "none", names, or -names from all); default: none in
    # `artifact`, all in `artifact-as-run`
    artifact_quirks: str | None = None
    min_nodes: int | None = None  # artifact: default 12
    bamboo_depth: int | None = None  # default 12
    join_horizon_s: float | None = None  # Oobleck's gain test for joins, default DEFAULT_JOIN_HORIZON_S
    varuna_max_microbatch: int | None = None  # default 8
    # the design's other options, by name (those above stay in their own fields)
    design_options: dict[str, Any] | None = None
    # pause constants (planner calibration)
    reconfigure_overhead_s: float | None = None
    # a relaunch of n processes: restart_fixed_s + restart_per_process_s * n (defaults:
    # `sim.timing.PlannerCosts`); restart_overhead_s, the older model, a constant in their
    # place (not both)
    restart_overhead_s: float | None = None
    restart_fixed_s: float | None = None
    restart_per_process_s: float | None = None
    # the share of a restart's relaunch that its processes' start-up takes, which a removal
    # during it does not cut short (default 0: a removal abandons the restart at once)
    restart_startup_share: float | None = None
    # checkpoints (planner calibration): every layer holder writes (reads) its share at once
    restart_load_gb_per_s: float | None = None  # read bandwidth per node (default: the GPU type's)
    checkpoint_fixed_s: float | None = None
    # seconds until a removal is noticed, by its cause's kind (`sim.detection`; default 0)
    detect_s: float | None = None  # no cause given (a preemption)
    detect_crash_s: float | None = None  # gpu, host
    detect_network_s: float | None = None  # cable, switch
    detect_hang_s: float | None = None  # software: the collective's timeout
    # pipeline sends that cost more the more of them the plan makes, on a testbed whose
    # workers share cores (planner calibration, `sim.loaded_hops`): each send costs
    # loaded_hop_fixed_s + loaded_hop_slope_s2 x (the plan's sends per second)
    # + loaded_hop_per_process_s x (its worker processes) more; default 0, 0 and 0 (the
    # profile's hop alone). The fixed part may be negative.
    loaded_hop_fixed_s: float | None = None
    loaded_hop_slope_s2: float | None = None
    loaded_hop_per_process_s: float | None = None
    # start-ups that share one host's cores, as on a testbed that emulates its nodes on one
    # machine (`sim.startup_pool`): nodes joining once training has begun and every
    # restart's processes each get min(1, cores / starting processes) of a core; default
    # None: each node starts on its own in node_startup_s (a real cluster)
    startup_cores: float | None = None
    # a removal while the job computes is noticed only at the survivors' next communication
    # (`sim.notice`: single-stage pipelines at the gradient sync), and the reconfiguration
    # starts then; default off: the pause constants of the planner calibration's published
    # measurements already hold that wait (the validation measures it apart and sets it)
    sync_notice: bool | None = None
    # the host's cores as a ceiling on throughput, on a testbed whose workers all share
    # them (`sim.core_bound`): an iteration takes at least its samples x sample_core_s /
    # compute_cores (the core-seconds a sample costs the whole job, measured); both or
    # neither; default none (each worker on its own accelerator)
    compute_cores: float | None = None
    sample_core_s: float | None = None
    storage_gb_per_s: float | None = None  # write bandwidth per node (default: the GPU type's)
    storage_cap_gb_per_s: float | None = None  # aggregate cap of the storage system (default: none)
    # pause scaling (both calibrations; sensitivity studies): each pause of a kind is
    # multiplied by its factor, 0 making it free; default 1
    reconfigure_cost_factor: float | None = None  # reconfigurations and layer copies
    restart_cost_factor: float | None = None  # starts and restarts
    checkpoint_cost_factor: float | None = None  # checkpoints
    # how long: seconds from the trace's first event (None: until its last event; longer
    # runs on past it with the membership as the trace left it)
    duration_s: float | None = None
    # output
    timeline: str = "changes"

    def __post_init__(self) -> None:
        try:
            registry.get(self.policy)
        except DesignError as exc:
            raise SimError(str(exc)) from None
        if self.design_options is not None and (
            not isinstance(self.design_options, Mapping) or not all(isinstance(k, str) for k in self.design_options)
        ):
            raise SimError(f"design_options must map option names to values, got {self.design_options!r}")
        if self.calibration not in CALIBRATIONS:
            raise SimError(f"unknown calibration {self.calibration!r}; choose one of {', '.join(CALIBRATIONS)}")
        if self.timeline not in TIMELINES:
            raise SimError(f"unknown timeline granularity {self.timeline!r}; choose one of {', '.join(TIMELINES)}")
        if not isinstance(self.trace, str) or not self.trace.strip():
            raise SimError("trace must be a file path or a generator spec, got an empty value")
        if not isinstance(self.model, str) or not self.model.strip():
            raise SimError("model must be a name or a profile directory, got an empty value")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise SimError(f"seed must be a whole number >= 0, got {self.seed!r}")
        if self.costs is not None and (not isinstance(self.costs, str) or not self.costs.strip()):
            raise SimError(f"costs must name a cost profile or a .json file, got {self.costs!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or f.name in (
                "policy",
                "model",
                "trace",
                "calibration",
                "gpu",
                "timeline",
                "seed",
                "costs",
                "varuna_rollback",
                "design_options",
                "artifact_quirks",
                "checkpoint_adaptive",
                "sync_notice",
            ):
                continue
            if f.name in (
                "global_batch",
                "microbatch_size",
                "gpus_per_node",
                "checkpoint_every_iterations",
                "min_nodes",
                "bamboo_depth",
                "varuna_max_microbatch",
            ):
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise SimError(f"{f.name} must be a whole number >= 1, got {value!r}")
            elif f.name == "loaded_hop_fixed_s":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise SimError(f"loaded_hop_fixed_s must be a finite number, got {value!r}")
            elif f.name == "fault_tolerance":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise SimError(f"fault_tolerance must be a whole number >= 0, got {value!r}")
            else:
                if (
                    isinstance(value, bool)
                    or not isinstance(value, (int, float))
                    or not math.isfinite(value)
                    or value < 0
                ):
                    raise SimError(f"{f.name} must be a finite number >= 0, got {value!r}")
                if (
                    f.name
                    in (
                        "inter_node_gbps",
                        "restart_load_gb_per_s",
                        "storage_gb_per_s",
                        "storage_cap_gb_per_s",
                        "checkpoint_every_s",
                        "checkpoint_prior_mtbf_s",
                        "duration_s",
                        "startup_cores",
                        "compute_cores",
                        "sample_core_s",
                    )
                    and value == 0
                ):
                    raise SimError(f"{f.name} must be > 0")
        if self.duration_s is not None and self.duration_s > MAX_DURATION_S:
            raise SimError(
                f"duration_s {self.duration_s:g} is past the bound of {MAX_DURATION_S:g} s (a year): past its last "
                "event a trace's membership is held as it is, so a longer run is extrapolation; give a longer trace"
            )
        if (self.compute_cores is None) != (self.sample_core_s is None):
            raise SimError(
                "compute_cores and sample_core_s bound throughput together (the host's cores and the "
                "core-seconds a sample costs): set both or neither"
            )
        if self.restart_startup_share is not None and self.restart_startup_share > 1:
            raise SimError(f"restart_startup_share must be in [0, 1], got {self.restart_startup_share!r}")
        if self.restart_overhead_s is not None and (
            self.restart_fixed_s is not None or self.restart_per_process_s is not None
        ):
            raise SimError(
                "restart_overhead_s (a constant relaunch) and restart_fixed_s / restart_per_process_s "
                "(a relaunch growing with its processes) are alternatives: set one"
            )
        if self.varuna_rollback is not None and not isinstance(self.varuna_rollback, bool):
            raise SimError(f"varuna_rollback must be true or false, got {self.varuna_rollback!r}")
        if self.artifact_quirks is not None and not isinstance(self.artifact_quirks, str):
            raise SimError(f"artifact_quirks must be a comma-separated list of names, got {self.artifact_quirks!r}")
        self._check_adaptive()
        if self.sync_notice is not None and not isinstance(self.sync_notice, bool):
            raise SimError(f"sync_notice must be true or false, got {self.sync_notice!r}")
        unused = PLANNER_ONLY if self.calibration in ARTIFACT_CALIBRATIONS else ARTIFACT_ONLY
        stray = [name for name in unused if getattr(self, name) is not None]
        if stray:
            raise SimError(
                f"{', '.join(stray)} ha{'s' if len(stray) == 1 else 've'} no effect in the {self.calibration} calibration"
            )

    def _check_adaptive(self) -> None:
        if self.checkpoint_adaptive is None:
            if self.checkpoint_prior_mtbf_s is not None:
                raise SimError("checkpoint_prior_mtbf_s needs checkpoint_adaptive (young or daly)")
            return
        if self.checkpoint_adaptive not in RULES:
            raise SimError(
                f"unknown checkpoint_adaptive {self.checkpoint_adaptive!r}; choose one of {', '.join(RULES)}"
            )
        fixed = [k for k in ("checkpoint_every_iterations", "checkpoint_every_s") if getattr(self, k) is not None]
        if fixed:
            raise SimError(f"checkpoint_adaptive sets the interval: drop {' and '.join(fixed)}")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> SimConfig:
        """Build from a dict (e.g. a config.json), rejecting unknown keys by name; `design`
        is another name for `policy`."""
        known = {f.name for f in fields(cls)}
        if "design" in data:
            data = dict(data)
            design = data.pop("design")
            if data.setdefault("policy", design) != design:
                raise SimError(f"design {design!r} and policy {data['policy']!r} disagree: give one")
        unknown = sorted(set(data) - known)
        if unknown:
            raise SimError(f"unknown config key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**dict(data))

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> SimConfig:
        """The config of a run's `config.json` (its input fields; derived keys ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in names})

    def with_(self, **changes: Any) -> SimConfig:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
