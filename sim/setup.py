"""From a `SimConfig` to the pieces of a run: the trace, the policy and its timing.

Artifact calibration: the artifact's model names and tables (`artifact_data`). Planner
calibration: the paper's setting by default, i.e. one V100 16 GB per node (the p3.2xlarge
whose spot price the artifact charges), its 10 Gb/s network, the artifact's global batches
and microbatch 1, with the artifact's model names mapped to analytic profiles:
BERT-large -> bert-large, GPT-2-ours -> gpt2-xl (a guess: the artifact does not say which
GPT-2; its checkpoint time, like GPT-3 medium's, hints at a smaller one), GPT-3-medium ->
gpt3-350m, GPT-3-2_7b -> gpt3-2.7b, GPT-3-6_7b -> gpt3-6.7b. Any built-in planner model or
an Oobleck profile directory works too (then `global_batch` is required).

Planners, Varuna searches and Bamboo layouts are cached per (model, cluster, job), so a
sweep computes each template set once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

import traces
from planner.analytic import MODEL_SHAPES
from planner.catalog import resolve_profile
from planner.checkpoint_cost import storage_for
from planner.errors import PlannerError
from planner.hardware import DEFAULT_GPU, ClusterSpec, make_cluster
from planner.plan import JobSpec
from planner.planner import Planner
from planner.policies import (
    ArtifactOobleckPolicy,
    ArtifactVarunaPolicy,
    BambooPolicy,
    CheckpointSchedule,
    Policy,
    VarunaSearch,
    bamboo_layout,
)
from planner.policies.build import PolicyOptions, build_policy
from planner.policies.oobleck import DEFAULT_CHECKPOINT_EVERY_S, DEFAULT_JOIN_HORIZON_S
from planner.policies.varuna_search import DEFAULT_MAX_MICROBATCH
from planner.profile import ModelProfile
from traces.model import Trace

from . import artifact_data as art
from .artifact_quirks import ArtifactQuirks, resolve
from .config import ARTIFACT_CALIBRATIONS, SimConfig
from .errors import SimError
from .timing import ArtifactTiming, PlannerCosts, PlannerTiming, ScaledPauses, Timing

ARTIFACT_TO_PLANNER = {
    "BERT-large": "bert-large",
    "GPT-2-ours": "gpt2-xl",
    "GPT-3-medium": "gpt3-350m",
    "GPT-3-2_7b": "gpt3-2.7b",
    "GPT-3-6_7b": "gpt3-6.7b",
}
POLICY_ONLY = {
    "bamboo_depth": ("bamboo",),
    "varuna_rollback": ("varuna",),
    "varuna_max_microbatch": ("varuna",),
    "join_horizon_s": ("oobleck",),
    "fault_tolerance": ("oobleck",),
    "min_nodes": ("oobleck", "varuna"),
}
GIGA = 1e9


@dataclass(frozen=True)
class Setup:
    """A run ready to go: its inputs resolved."""

    config: SimConfig
    trace: Trace
    policy: Any
    timing: Timing
    node_startup_s: float
    price_per_node_hour: float
    resolved: dict[str, Any]  # config.json: the inputs, then effective_<field> for defaults filled in
    quirks: ArtifactQuirks | None = None  # artifact calibrations: replayed by sim.artifact_replay when any is on

    @staticmethod
    def record(config: SimConfig, derived: dict[str, Any]) -> dict[str, Any]:
        inputs = config.to_dict()
        out = dict(inputs)
        for key, value in derived.items():
            out[f"effective_{key}" if key in inputs else key] = value
        return out


def load_trace(config: SimConfig) -> Trace:
    return traces.from_spec(config.trace, rng=np.random.default_rng(config.seed))


def build(config: SimConfig, trace: Trace | None = None) -> Setup:
    """The trace (loaded unless given), policy and timing for `config`."""
    for key, policies in POLICY_ONLY.items():
        if getattr(config, key) is not None and config.policy not in policies:
            raise SimError(f"{key} applies to {' and '.join(policies)}, not {config.policy}")
    if trace is None:
        trace = load_trace(config)
    if trace.duration_s <= 0 and config.duration_s is None:
        raise SimError(
            f"trace {trace.name!r} spans no time (first and last events at {trace.start_s:g} s): give duration_s"
        )
    startup = art.NODE_STARTUP_S if config.node_startup_s is None else float(config.node_startup_s)
    price = art.SPOT_PRICE_PER_NODE_HOUR if config.price_per_node_hour is None else float(config.price_per_node_hour)
    derived = {
        "trace_name": trace.name,
        "trace_events": len(trace),
        "node_startup_s": startup,
        "price_per_node_hour": price,
    }
    quirks = None
    if config.calibration in ARTIFACT_CALIBRATIONS:
        quirks, rollback, why = resolve(config, trace.name)
        derived.update(artifact_quirks=",".join(quirks.on()) or "none")
        if config.policy == "varuna":
            derived.update(varuna_rollback_why=why)
        policy, timing = _artifact(config, derived, rollback)
    else:
        policy, timing = _planner(config, trace, derived)
    factors = {
        kind: _or(getattr(config, f"{kind}_cost_factor"), 1.0) for kind in ("reconfigure", "restart", "checkpoint")
    }
    if any(value != 1.0 for value in factors.values()):
        timing = ScaledPauses(timing, **factors)
        derived.update({f"{kind}_cost_factor": value for kind, value in factors.items()})
    return Setup(config, trace, policy, timing, startup, price, Setup.record(config, derived), quirks)


# -- artifact calibration ------------------------------------------------------------------
def _artifact(config: SimConfig, resolved: dict[str, Any], rollback: bool = True):
    model = art.get_model(config.model)
    timing = ArtifactTiming(config.policy, model.name)
    min_nodes = art.MIN_NODES if config.min_nodes is None else config.min_nodes
    min_nodes = max(min_nodes, art.min_runnable_nodes(config.policy, model.name) or 0)
    every = config.checkpoint_every_iterations
    policy: Policy
    if config.policy == "oobleck":
        if every is not None:
            raise SimError("the artifact's Oobleck never checkpoints: checkpoint_every_iterations applies to varuna")
        policy = ArtifactOobleckPolicy(min_nodes)
        resolved.update(min_nodes=min_nodes)
    elif config.policy == "varuna":
        every = art.VARUNA_CHECKPOINT_EVERY if every is None else every
        policy = ArtifactVarunaPolicy(min_nodes, rollback=rollback, checkpoint_every=every)
        resolved.update(min_nodes=min_nodes, varuna_rollback=rollback, checkpoint_every_iterations=every)
    else:
        if every is not None:
            raise SimError("the artifact's Bamboo never checkpoints: checkpoint_every_iterations applies to varuna")
        depth = art.BAMBOO_DEPTH if config.bamboo_depth is None else config.bamboo_depth
        reason = (
            None
            if art.runnable("bamboo", model.name)
            else f"out of memory: the artifact gives Bamboo no throughput on {model.name}"
        )
        policy = BambooPolicy(
            depth,
            fatal_rollback=False,
            overload_threshold=art.BAMBOO_OVERLOAD_THRESHOLD,
            infeasible=reason,
            keep_in_place=False,
        )  # the artifact rebuilds the grid
        resolved.update(bamboo_depth=depth)
    resolved.update(global_batch=model.global_batch, artifact_constants=vars(model).copy())
    return policy, timing


# -- planner calibration -------------------------------------------------------------------
def _model_and_batch(config: SimConfig) -> tuple[str, int]:
    name = ARTIFACT_TO_PLANNER.get(config.model, config.model)
    if name not in MODEL_SHAPES and not Path(name).is_dir():
        raise SimError(
            f"unknown model {config.model!r}: use an artifact name ({', '.join(ARTIFACT_TO_PLANNER)}), "
            f"a built-in model ({', '.join(MODEL_SHAPES)}) or an Oobleck profile directory"
        )
    batch = config.global_batch
    if batch is None:
        if config.model not in art.ARTIFACT_MODELS:
            raise SimError(
                f"global_batch is required for {config.model!r} (defaults exist only for the artifact's models)"
            )
        batch = art.ARTIFACT_MODELS[config.model].global_batch
    return name, batch


@lru_cache(maxsize=64)
def _profile(model: str, gpu: Any, microbatch: int) -> ModelProfile | None:
    try:
        return resolve_profile(model, gpu, microbatch)
    except PlannerError:
        return None


def _resolved_profile(model: str, gpu: Any, microbatch: int) -> ModelProfile:
    """The cached profile; where there is none, `resolve_profile` raises the reason."""
    profile = _profile(model, gpu, microbatch)
    return profile if profile is not None else resolve_profile(model, gpu, microbatch)


@lru_cache(maxsize=32)
def _cached_planner(model: str, cluster: ClusterSpec, batch: int, microbatch: int, f: int) -> Planner:
    profile = _resolved_profile(model, cluster.gpu, microbatch)
    return Planner(profile, cluster, JobSpec(batch, microbatch, f))


@lru_cache(maxsize=32)
def _cached_search(
    model: str, cluster: ClusterSpec, batch: int, max_microbatch: int, analytic: bool, microbatch: int
) -> VarunaSearch:
    def profile_for(b: int) -> ModelProfile | None:
        if not analytic and b != microbatch:
            return None
        return _profile(model, cluster.gpu, b)

    return VarunaSearch(profile_for, cluster, batch, max_microbatch=max_microbatch)


@lru_cache(maxsize=32)
def _cached_layout(model: str, cluster: ClusterSpec, depth: int, microbatches: int, microbatch: int):
    return bamboo_layout(_resolved_profile(model, cluster.gpu, microbatch), cluster, depth, microbatches)


def _planner(config: SimConfig, trace: Trace, resolved: dict[str, Any]):
    name, batch = _model_and_batch(config)
    microbatch = config.microbatch_size or 1
    gpu = config.gpu or DEFAULT_GPU
    g = config.gpus_per_node or 1
    peak = max(1, int(trace.live_counts()["live_nodes"].max()))
    cluster = make_cluster(gpu, peak, g, inter_node_gbps=config.inter_node_gbps)
    profile = _resolved_profile(name, cluster.gpu, microbatch)
    JobSpec(batch, microbatch, 0)  # checks the batch against the microbatch
    costs = PlannerCosts(
        reconfigure_overhead_s=_or(config.reconfigure_overhead_s, PlannerCosts.reconfigure_overhead_s),
        restart_overhead_s=_or(config.restart_overhead_s, PlannerCosts.restart_overhead_s),
    )
    storage = storage_for(
        cluster.gpu.name,
        node_write_bytes_per_s=_giga(config.storage_gb_per_s),
        node_read_bytes_per_s=_giga(config.restart_load_gb_per_s),
        aggregate_bytes_per_s=_giga(config.storage_cap_gb_per_s),
        fixed_s=config.checkpoint_fixed_s,
    )
    every_s = config.checkpoint_every_s
    every_it = config.checkpoint_every_iterations
    layout = None
    if config.policy == "oobleck":
        f = 1 if config.fault_tolerance is None else config.fault_tolerance
        planner = _cached_planner(name, cluster, batch, microbatch, f)
        schedule = _schedule(every_it, every_s, DEFAULT_CHECKPOINT_EVERY_S)
        horizon = _or(config.join_horizon_s, DEFAULT_JOIN_HORIZON_S)
        pause_s = costs.reconfigure_overhead_s * _or(config.reconfigure_cost_factor, 1.0)  # what a join costs, as timed
        policy = build_policy(
            "oobleck", PolicyOptions(schedule, join_horizon_s=horizon, reconfigure_pause_s=pause_s), planner=planner
        )
        resolved.update(fault_tolerance=f, join_horizon_s=horizon)
    elif config.policy == "bamboo":
        depth = config.bamboo_depth or art.BAMBOO_DEPTH
        try:
            layout = _cached_layout(name, cluster, depth, batch // microbatch, microbatch)
        except PlannerError as exc:
            raise SimError(str(exc)) from None
        schedule = _schedule(every_it, every_s, DEFAULT_CHECKPOINT_EVERY_S)
        policy = build_policy(
            "bamboo", PolicyOptions(schedule, bamboo_depth=depth), bamboo_layout=layout, profile=profile
        )
        resolved.update(bamboo_depth=depth)
    else:
        max_mb = config.varuna_max_microbatch or DEFAULT_MAX_MICROBATCH
        analytic = name in MODEL_SHAPES
        search = _cached_search(name, cluster, batch, max_mb, analytic, microbatch)
        # the count default applies only when neither interval is given: every_s alone means by time only
        by_count = art.VARUNA_CHECKPOINT_EVERY if every_it is None and every_s is None else every_it
        schedule = CheckpointSchedule(every_iterations=by_count, every_s=every_s)
        policy = build_policy("varuna", PolicyOptions(schedule, gpus_per_node=g, max_nodes=peak), search=search)
        resolved.update(varuna_max_microbatch=max_mb)
    timing = PlannerTiming(
        config.policy,
        global_batch=batch,
        layer_bytes=[layer.copy_bytes for layer in profile.layers],
        inter_node_bw_bytes_per_s=cluster.inter_node_bw_bytes_per_s,
        gpus_per_node=g,
        costs=costs,
        storage=storage,
        bamboo_layout=layout,
    )
    resolved.update(
        planner_model=name,
        profile_source=profile.source,
        global_batch=batch,
        microbatch_size=microbatch,
        gpu=gpu,
        gpus_per_node=g,
        inter_node_gbps=cluster.inter_node_bw_bytes_per_s * 8 / GIGA,
        peak_nodes=peak,
        checkpoint_every_iterations=schedule.every_iterations,
        checkpoint_every_s=schedule.every_s,
        checkpoint_bytes=profile.copy_bytes,
        reconfigure_overhead_s=costs.reconfigure_overhead_s,
        restart_overhead_s=costs.restart_overhead_s,
        restart_load_gb_per_s=storage.node_read_bytes_per_s / GIGA,
        checkpoint_fixed_s=storage.fixed_s,
        storage_gb_per_s=storage.node_write_bytes_per_s / GIGA,
        storage_cap_gb_per_s=None if storage.aggregate_bytes_per_s is None else storage.aggregate_bytes_per_s / GIGA,
    )
    return policy, timing


def _giga(value: float | None) -> float | None:
    return None if value is None else value * GIGA


def _or(value, default):
    return default if value is None else value


def _schedule(every_it: int | None, every_s: float | None, default_s: float) -> CheckpointSchedule:
    if every_it is None and every_s is None:
        return CheckpointSchedule(every_s=default_s)
    return CheckpointSchedule(every_iterations=every_it, every_s=every_s)
