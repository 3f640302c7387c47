"""Every cost term the simulator charges, declared once: one row a term.

A row says the term's flat key (the `CostConfig` field, the `--set` key, the cost-profile
key), its unit, its default, its bounds, which calibrations use it, what it prices, and where
its default comes from. Everything else is derived from `TERMS`:

- `sim.config.CostConfig`'s fields (`cost_config_fields`), the flat keys and their checks
  (`sim.config_keys`: `problem`, `PLANNER_ONLY`);
- the cost-profile format's keys and units (`sim.cost_profiles`: the `PRICED` rows);
- the `paper` profile (`sim.cost_builtins`): every priced cluster term with a default, at
  that default and with that source, so naming `paper` changes no result;
- the planner calibration's defaults (`default`), e.g. `sim.timing.PlannerCosts`.

Adding a term: a row here, the module that charges it, a built-in profile's value and source
where one prices it, and a test.

Kinds of term (`group`): `cluster` (what a cluster's hardware and software cost: start-ups,
relaunches, checkpoints, detection, money), `testbed` (what `ooblab validate` fits on a host
whose emulated nodes share its cores), `factor` (sensitivity multipliers, never priced by a
profile) and `older` (a form kept so that older records rerun; never priced by a profile).

The relaunch line's defaults (`restart_fixed_s`, `restart_per_process_s`): for a cluster
whose nodes start their own processes in parallel. Measured by `benchmarks/restart_fit.py` on
this testbed's 2-core machine, every process on the one host, 2 restarts at each of 2, 4, 8, 16
and 32 processes while other jobs loaded the cores (load average 8-36); the slowest rank's
time, least squares a + b n (CHANGELOG.md has the figures): start-up (spawn, import torch and
the worker's modules, check in with the store) -1.9 s + 3.07 s/process; group creation
(`init_process_group` and the pipeline and gradient groups, gloo over loopback) -0.01 s +
0.014 s/process; checkpoint load (1 MiB a stage) 0.11 s + 0.011 s/process. The residuals are
the run-to-run spread (up to +-22 s at 32 processes for start-up; a quadratic term lowers
their RMS by 7-18% only), so a line is the form the data support. On one host every part
grows with n because its processes share the cores; on a cluster a node's start-up and its
share of the load run on that node, in parallel with every other node's, so they belong to
the fixed part, whose default stays the 40 s intercept of the artifact's fit of Varuna's
restart times (docs/simulator.md). What grows with the job is the rendezvous and group
creation at the coordinator. Here that slope is 0.014 s/process, but from at most 32
processes on loopback gloo: at 8,192 GPUs it would add 115 s a relaunch by extrapolation, so
the default is a published cluster figure instead (MegaScale, NSDI'24, section 3.5: job
initialisation about 5 s at 2,048 GPUs and under 30 s beyond 10,000 once tuned, about 0.003 s
a GPU; 1,047 s at 2,048 GPUs before tuning). The validation fits its own slope on its host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from planner.checkpoint_cost import StorageSpec

from . import artifact_data as art

PLANNER = ("planner",)
BOTH = ("artifact", "planner", "artifact-as-run")
GROUPS = ("cluster", "testbed", "factor", "older")

# bounds: what a value of the term may be
FINITE = "a finite number"
AT_LEAST_0 = ">= 0"
ABOVE_0 = "> 0"
SHARE = "in [0, 1]"
FLAG = "true or false"
# no term is larger in magnitude: 1e9 s is 31 years, $1e9 a node-hour beyond any price; a
# larger value is a typo, and products of such values would overflow to inf in the summary
MAX_MAGNITUDE = 1e9


@dataclass(frozen=True)
class Term:
    """One cost term (module docstring): a `CostConfig` field and a cost-profile key."""

    key: str
    unit: str  # s, s2, GB/s, fraction, cores, core-s, $/node-h, bool, x
    default: float | bool | None  # None: `default_is` says what applies
    meaning: str
    source: str  # where the default comes from: a paper and its table, a fit, or "assumed: why"
    group: str = "cluster"
    bound: str = AT_LEAST_0
    calibrations: tuple[str, ...] = PLANNER
    default_is: str = ""  # for a default of None: what the run takes instead

    @property
    def priced(self) -> bool:
        """Whether a cost profile may set it."""
        return self.group in ("cluster", "testbed")


TERMS_LIST = (
    Term(
        "node_startup_s", "s", art.NODE_STARTUP_S, "a node is usable this long after it joins",
        "Oobleck artifact (SymbioticLab/Oobleck tools/simulator): a node is usable 45 s after it joins",
        calibrations=BOTH,
    ),
    Term(
        "price_per_node_hour", "$/node-h", art.SPOT_PRICE_PER_NODE_HOUR, "what a node-hour costs",
        "Oobleck artifact: the p3.2xlarge spot price it charges", calibrations=BOTH,
    ),
    Term(
        "reconfigure_overhead_s", "s", 2.0, "a live reconfiguration's fixed part: rebuild process groups",
        "Oobleck artifact: its reconfiguration time for the small models",
    ),
    Term(
        "quorum_rejoin_s", "s", None,
        "a replica group's return: every group waits while the process groups are rebuilt for the larger quorum",
        "torchft (torchft/manager.py): the Manager reconfigures its process group on every quorum change, a group "
        "coming back included, as on a group leaving", default_is="reconfigure_overhead_s, the same rebuild",
    ),
    Term(
        "restart_overhead_s", "s", None, "a relaunch as one constant, whatever its processes (the older model)",
        "the relaunch line replaced it", group="older", default_is="the relaunch line (restart_fixed_s, ...)",
    ),
    Term(
        "restart_fixed_s", "s", 40.0, "a relaunch's fixed part: requeue, process start, set-up",
        "Oobleck artifact: the intercept of its fit of Varuna's restart times (docs/simulator.md)",
    ),
    Term(
        "restart_per_process_s", "s", 0.003, "a relaunch's part per GPU process: rendezvous, communicators",
        "MegaScale (arXiv 2402.15627) section 3.5: tuned initialisation about 5 s at 2,048 GPUs, under 30 s "
        "beyond 10,000",
    ),
    Term(
        "restart_startup_share", "fraction", 0.0, "the share of a relaunch a removal during it does not cut short",
        "assumed: a removal during a relaunch abandons it at once", bound=SHARE,
    ),
    Term(
        "restart_load_gb_per_s", "GB/s", None, "checkpoint read bandwidth per node",
        "planner.checkpoint_cost: the GPU type's", bound=ABOVE_0, default_is="the GPU type's (planner.checkpoint_cost)",
    ),
    Term(
        "checkpoint_fixed_s", "s", StorageSpec.fixed_s, "a checkpoint's fixed part: barrier, manifest, blocking copy",
        "assumed: a barrier and a manifest per checkpoint (planner.checkpoint_cost)",
    ),
    Term(
        "detect_s", "s", 0.0, "noticing a removal with no known cause (a preemption)",
        "Oobleck artifact: its simulator acts on a removal at once",
    ),
    Term(
        "detect_crash_s", "s", 0.0, "noticing a crash (gpu, host): exit status, missed heartbeat",
        "Oobleck artifact: as detect_s",
    ),
    Term(
        "detect_network_s", "s", 0.0, "noticing a network fault (cable, switch): link checks",
        "Oobleck artifact: as detect_s",
    ),
    Term(
        "detect_hang_s", "s", 0.0, "noticing a hang (software, NCCL watchdog): the collective's timeout",
        "Oobleck artifact: as detect_s",
    ),
    Term(
        "loaded_hop_fixed_s", "s", 0.0, "a pipeline send's extra cost on a loaded host, fixed part (may be < 0)",
        "assumed: a send costs the profile's hop alone", group="testbed", bound=FINITE,
    ),
    Term(
        "loaded_hop_slope_s2", "s2", 0.0, "... per send a second of the plan",
        "assumed: as loaded_hop_fixed_s", group="testbed",
    ),
    Term(
        "loaded_hop_per_process_s", "s", 0.0, "... per worker process of the plan",
        "assumed: as loaded_hop_fixed_s", group="testbed",
    ),
    Term(
        "startup_cores", "cores", None, "the cores that the start-ups of emulated nodes share (sim.startup_pool)",
        "assumed: each node starts on its own", group="testbed", bound=ABOVE_0,
        default_is="each node starts on its own, in node_startup_s",
    ),
    Term(
        "sync_notice", "bool", False, "a loss is noticed at the survivors' next communication (sim.notice)",
        "assumed: the pause constants hold that wait", group="testbed", bound=FLAG,
    ),
    Term(
        "compute_cores", "cores", None, "the host's cores, as a ceiling on throughput (sim.core_bound)",
        "assumed: each worker on its own accelerator", group="testbed", bound=ABOVE_0, default_is="no ceiling",
    ),
    Term(
        "sample_core_s", "core-s", None, "the core-seconds one sample costs the whole job (on one worker)",
        "assumed: as compute_cores", group="testbed", bound=ABOVE_0, default_is="no ceiling",
    ),
    Term(
        "sample_core_per_worker_s", "core-s", 0.0, "... more for each further worker computing",
        "assumed: a sample costs the same on any count", group="testbed",
    ),
    Term(
        "storage_gb_per_s", "GB/s", None, "checkpoint write bandwidth per node",
        "planner.checkpoint_cost: the GPU type's", bound=ABOVE_0, default_is="the GPU type's (planner.checkpoint_cost)",
    ),
    Term(
        "storage_cap_gb_per_s", "GB/s", None, "the storage system's aggregate bandwidth",
        "assumed: no cap", bound=ABOVE_0, default_is="no cap",
    ),
    Term(
        "reconfigure_cost_factor", "x", 1.0, "reconfigurations and layer copies, scaled (0: free)",
        "the model as it is", group="factor", calibrations=BOTH,
    ),
    Term(
        "restart_cost_factor", "x", 1.0, "starts and restarts, scaled (0: free)", "the model as it is",
        group="factor", calibrations=BOTH,
    ),
    Term(
        "checkpoint_cost_factor", "x", 1.0, "checkpoints, scaled (0: free)", "the model as it is",
        group="factor", calibrations=BOTH,
    ),
)  # fmt: skip

TERMS: dict[str, Term] = {term.key: term for term in TERMS_LIST}
PRICED: dict[str, Term] = {key: term for key, term in TERMS.items() if term.priced}
PLANNER_ONLY = tuple(key for key, term in TERMS.items() if term.calibrations == PLANNER)


def default(key: str) -> Any:
    """The term's default (None where `default_is` says what applies instead)."""
    return TERMS[key].default


def term(costs: Any, key: str) -> Any:
    """The term `key` of a run's costs (`CostConfig`), its row's default where unset."""
    value = getattr(costs, key)
    return TERMS[key].default if value is None else value


def within(key: str, value: Any) -> bool:
    """Whether `value` (not None) is one the term `key` may take (its `bound`)."""
    bound = TERMS[key].bound
    if bound == FLAG:
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        if not (math.isfinite(value) and abs(value) <= MAX_MAGNITUDE):
            return False
    except OverflowError:  # an integer too large for a float
        return False
    return bound == FINITE or not (value < 0 or (bound == ABOVE_0 and value == 0) or (bound == SHARE and value > 1))


def must_be(key: str, value: Any = None) -> str:
    """What a value of the term `key` must be, in words ("a finite number >= 0")."""
    bound = TERMS[key].bound
    text = bound if bound in (FINITE, FLAG) else f"{FINITE} {bound}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            huge = not abs(value) <= MAX_MAGNITUDE and not math.isnan(value)
        except OverflowError:
            huge = True
        if huge:
            return f"{text} of at most {MAX_MAGNITUDE:g} in size"
    return text


def paper_values() -> dict[str, tuple[float | bool, str, str]]:
    """The `paper` profile: each priced cluster term with a default, (value, unit, source)."""
    return {
        key: (term.default, term.unit, term.source)
        for key, term in PRICED.items()
        if term.group == "cluster" and term.default is not None
    }


def relaunch_s(fixed_s: float, per_process_s: float, processes: int) -> float:
    """A relaunch of `processes` fresh processes: the line's fixed part plus its part per
    process (what the simulator charges, and what the validation fits the line to)."""
    return fixed_s + per_process_s * processes
