"""What the engine charges, built in one place from a run's costs and its cluster.

`Pricing` is the one object the engine takes for every price (`sim.engine.Simulation`): the
timing of iterations and pauses, a node's start-up, the price of a node-hour, the detection
by a failure's kind, the host's cores that start-ups share, and the notice rule. `price`
builds it from a `SimConfig`'s costs (`sim.cost_terms` fills what they leave unset) and the
calibration's base timing; `planner_timing` builds that base in the planner calibration and
stacks on it the terms a profile directory or the costs ask for, each charged by its own
module:

    PlannerTiming (relaunch line, checkpoints on StorageSpec)   sim.timing, planner.checkpoint_cost
    compute slowed by busy neighbours (profile's contention)   sim.contention
    the gradient ring's messages (profile's per-hop cost)       sim.sync_cost
    sends slowed on a loaded host (loaded_hop_*)                sim.loaded_hops
    the optimizer step (profile's optimizer.json)               sim.optimizer_cost
    the host's cores as a ceiling (compute_cores, sample_core_*) sim.core_bound, last: a floor on the whole
    every pause scaled by kind (*_cost_factor)                  sim.timing.ScaledPauses, in `price`

Each term that the run charges is recorded in `resolved` (config.json's `effective_*`).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

from designs import Design, PolicyBuild
from planner.checkpoint_cost import storage_from_config
from planner.hardware import ClusterSpec
from planner.profile import ModelProfile

from . import cost_profiles
from .contention import ContendedCompute, check_coverage
from .core_bound import CoreBound
from .cost_terms import TERMS, default, term
from .detection import KIND_TERMS, Detection
from .loaded_hops import LoadedHops
from .optimizer_cost import OptimizerStep
from .sync_cost import SyncMessages
from .timing import PlannerCosts, PlannerTiming, ScaledPauses, Timing

GIGA = 1e9
_RELAUNCH = ("reconfigure_overhead_s", "restart_fixed_s", "restart_per_process_s", "restart_overhead_s")


@dataclass(frozen=True)
class Pricing:
    """Every price the engine charges (module docstring); built by `price` for a run, or by
    hand in tests."""

    timing: Timing
    node_startup_s: float = default("node_startup_s")
    price_per_node_hour: float = default("price_per_node_hour")
    detection: Detection = field(default_factory=Detection)  # the default: failures noticed at once
    # start-ups sharing one host's cores (`sim.startup_pool`); None: each node starts on its own
    startup_cores: float | None = default("startup_cores")
    sync_notice: bool = default("sync_notice")  # a loss noticed at the survivors' next communication


def detection_charged(
    given: Any, costs: Any, profile: cost_profiles.CostProfile | None, own: tuple[str, float] | None
) -> dict[str, dict[str, Any]]:
    """Per failure kind, the seconds a loss waits to be declared and by what (`by`): the
    term set by hand, the cost profile's (and its base's), the calibration's default, or the
    design's own detector (`own`: its option and seconds) where that declares sooner or the
    costs price no detection at all (`sim.engine_decide`'s rule). `given`: the costs as the
    run set them, before its profile (`profile`) filled them; `costs`: after."""
    cluster = {key: float(term(costs, key)) for _, key in KIND_TERMS}
    free = not any(cluster.values())
    out = {}
    for kind, key in KIND_TERMS:
        if getattr(given, key) is not None:
            by = f"{key} set for the run"
        elif profile is not None and key in profile.costs:
            came = f" (from its base {profile.base})" if key in profile.inherited else ""
            by = f"profile {profile.name}{came}"
        else:
            by = "the calibration's default"
        seconds = cluster[key]
        if own is not None and (free or own[1] < seconds):
            why = "the costs price no detection" if free else f"sooner than {by}'s {seconds:g} s"
            seconds, by = own[1], f"the design's {own[0]}: {why}"
        out[kind] = {"s": seconds, "by": by}
    return out


def reconfigure_pause_s(costs: Any) -> float:
    """What a live reconfiguration's fixed part costs, as timed (designs weigh a join by it)."""
    return term(costs, "reconfigure_overhead_s") * term(costs, "reconfigure_cost_factor")


def price(costs: Any, timing: Timing, resolved: MutableMapping[str, Any]) -> Pricing:
    """The run's `Pricing` on the calibration's base `timing` (pauses scaled by kind where a
    factor is not 1)."""
    factors = {kind: term(costs, f"{kind}_cost_factor") for kind in ("reconfigure", "restart", "checkpoint")}
    if any(value != 1.0 for value in factors.values()):
        timing = ScaledPauses(timing, **factors)
        resolved.update({f"{kind}_cost_factor": value for kind, value in factors.items()})
    startup_s, per_hour = float(term(costs, "node_startup_s")), float(term(costs, "price_per_node_hour"))
    resolved.update(node_startup_s=startup_s, price_per_node_hour=per_hour)
    return Pricing(
        timing,
        node_startup_s=startup_s,
        price_per_node_hour=per_hour,
        detection=Detection.of(costs),
        startup_cores=costs.startup_cores,
        sync_notice=bool(costs.sync_notice),
    )


def planner_timing(
    costs: Any,
    design: Design,
    built: PolicyBuild,
    profile: ModelProfile,
    cluster: ClusterSpec,
    *,
    global_batch: int,
    peak_nodes: int,
    resolved: MutableMapping[str, Any],
) -> Timing:
    """The planner calibration's timing of `built` (module docstring), its terms recorded."""
    relaunch = PlannerCosts(
        **{key: term(costs, key) for key in _RELAUNCH},
        restart_startup_share=term(costs, "restart_startup_share"),
    )
    storage = storage_from_config(cluster.gpu.name, costs)
    g = cluster.gpus_per_node
    timing: Timing = PlannerTiming(
        design,
        global_batch=global_batch,
        layer_bytes=[layer.copy_bytes for layer in profile.layers],
        inter_node_bw_bytes_per_s=cluster.inter_node_bw_bytes_per_s,
        gpus_per_node=g,
        costs=relaunch,
        storage=storage,
        layout=built.layout,
        options=built.options,
        iteration_s=built.iteration_s,
        terms={key: term(costs, key) for key in TERMS},
    )
    if profile.contention is not None:  # a profile measured per number of busy neighbours
        check_coverage(profile.contention, peak_nodes * g)
        timing = ContendedCompute(timing, profile, cluster, profile.contention)
        resolved.update(compute_contention={str(k): v for k, v in profile.contention.compute_factor})
    message_s = profile.communication.hop_overhead_s if profile.communication is not None else 0.0
    if message_s > 0:  # the gradient ring's messages, each at the measured per-message cost
        timing = SyncMessages(timing, profile, cluster, message_s)
        resolved.update(sync_message_s=message_s)
    hops = {
        key: getattr(costs, key) for key in ("loaded_hop_fixed_s", "loaded_hop_slope_s2", "loaded_hop_per_process_s")
    }
    if any(hops.values()):  # sends that slow with the plan's own send rate and processes
        timing = LoadedHops(timing, profile, cluster, *(value or 0.0 for value in hops.values()))
        resolved.update(hops)
    if profile.optimizer is not None:  # the optimizer step after the gradient sync, as measured
        timing = OptimizerStep(timing, profile.optimizer, profile.contention)
        resolved.update(optimizer_step_s=sum(profile.optimizer.step_s))
    if costs.compute_cores is not None and costs.sample_core_s is not None:  # last: a floor on the whole
        per_worker = term(costs, "sample_core_per_worker_s")
        timing = CoreBound(timing, costs.compute_cores, costs.sample_core_s, per_worker)
        resolved.update(
            compute_cores=costs.compute_cores, sample_core_s=costs.sample_core_s, sample_core_per_worker_s=per_worker
        )
    older = relaunch.restart_overhead_s is not None
    resolved.update(
        reconfigure_overhead_s=relaunch.reconfigure_overhead_s,
        restart_overhead_s=relaunch.restart_overhead_s,
        restart_fixed_s=None if older else relaunch.restart_fixed_s,
        restart_per_process_s=None if older else relaunch.restart_per_process_s,
        restart_startup_share=relaunch.restart_startup_share,
        restart_load_gb_per_s=storage.node_read_bytes_per_s / GIGA,
        checkpoint_fixed_s=storage.fixed_s,
        storage_gb_per_s=storage.node_write_bytes_per_s / GIGA,
        storage_cap_gb_per_s=None if storage.aggregate_bytes_per_s is None else storage.aggregate_bytes_per_s / GIGA,
    )
    return timing
