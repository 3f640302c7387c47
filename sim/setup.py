"""From a `SimConfig` to the pieces of a run: the trace, the policy and its pricing.

Artifact calibration: the artifact's model names and tables (`artifact_data`). Planner
calibration: the paper's setting by default, i.e. one V100 16 GB per node (the p3.2xlarge
whose spot price the artifact charges), its 10 Gb/s network, the artifact's global batches
and microbatch 1, with the artifact's model names mapped to analytic profiles:
BERT-large -> bert-large, GPT-2-ours -> gpt2-xl (a guess: the artifact does not say which
GPT-2; its checkpoint time, like GPT-3 medium's, hints at a smaller one), GPT-3-medium ->
gpt3-350m, GPT-3-2_7b -> gpt3-2.7b, GPT-3-6_7b -> gpt3-6.7b. Any built-in planner model or
an Oobleck profile directory works too (then `global_batch` is required); a directory with
a `contention.json` gets each plan's compute scaled by its worker count's factor
(`sim.contention`), one whose `communication.json` measured a per-hop runtime cost gets the
gradient ring's messages charged at it (`sim.sync_cost`), one with an `optimizer.json`
gets the slowest rank's optimizer step added to each iteration (`sim.optimizer_cost`); those
terms and every other price are put together by `sim.pricing`.

Planners, Varuna searches and Bamboo layouts are cached per (model, cluster, job), so a
sweep computes each template set once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

import traces
from designs import BuildContext, Design, DesignError, PolicyBuild
from designs import registry as designs
from designs.options import ARTIFACT, as_dict
from planner.analytic import MODEL_SHAPES
from planner.catalog import resolve_profile
from planner.checkpoint_interval import DEFAULT_PRIOR_MTBF_S, AdaptiveCheckpoints
from planner.errors import PlannerError
from planner.hardware import DEFAULT_GPU, ClusterSpec, make_cluster
from planner.plan import JobSpec
from planner.planner import Planner
from planner.policies import CheckpointSchedule
from planner.profile import ModelProfile
from traces.model import Trace

from . import artifact_data as art
from . import cost_profiles
from .artifact_quirks import ArtifactQuirks, resolve
from .config import ARTIFACT_CALIBRATIONS, SimConfig
from .errors import SimError
from .pricing import Pricing, detection_charged, planner_timing, price, reconfigure_pause_s
from .timing import ArtifactTiming, Timing

ARTIFACT_TO_PLANNER = {
    "BERT-large": "bert-large",
    "GPT-2-ours": "gpt2-xl",
    "GPT-3-medium": "gpt3-350m",
    "GPT-3-2_7b": "gpt3-2.7b",
    "GPT-3-6_7b": "gpt3-6.7b",
}
GIGA = 1e9


@dataclass(frozen=True)
class Setup:
    """A run ready to go: its inputs resolved."""

    config: SimConfig
    trace: Trace
    policy: Any
    pricing: Pricing  # every price the engine charges (`sim.pricing`)
    resolved: dict[str, Any]  # config.json: the inputs, then effective_<field> for defaults filled in
    quirks: ArtifactQuirks | None = None  # artifact calibrations: replayed by sim.artifact_replay when any is on
    adaptive: AdaptiveCheckpoints | None = None  # the adaptive checkpoint interval, replacing the periodic one

    @property
    def timing(self) -> Timing:
        return self.pricing.timing

    @property
    def node_startup_s(self) -> float:
        return self.pricing.node_startup_s

    @property
    def price_per_node_hour(self) -> float:
        return self.pricing.price_per_node_hour

    @staticmethod
    def record(config: SimConfig, derived: dict[str, Any]) -> dict[str, Any]:
        inputs = config.to_dict()
        out = dict(inputs)
        for key, value in derived.items():
            out[f"effective_{key}" if key in inputs else key] = value
        return out


def load_trace(config: SimConfig) -> Trace:
    return traces.from_spec(config.job.trace, rng=np.random.default_rng(config.run.seed))


def build(config: SimConfig, trace: Trace | None = None) -> Setup:
    """The trace (loaded unless given), policy and pricing for `config`."""
    profile = cost_profiles.get(config.costs.profile) if config.costs.profile is not None else None
    given, config = config, cost_profiles.apply(config, profile)
    design, options = resolve_design(config)
    if trace is None:
        trace = load_trace(config)
    if trace.duration_s <= 0 and config.run.duration_s is None:
        raise SimError(
            f"trace {trace.name!r} spans no time (first and last events at {trace.start_s:g} s): give duration_s"
        )
    derived: dict[str, Any] = {
        "trace_name": trace.name,
        "trace_events": len(trace),
        "trace_span_s": trace.duration_s,
        # the run ends at the trace's last instant without processing its events
        "trace_last_instant_events": sum(1 for e in trace.events if e.time_s == trace.stop_s)
        if config.run.duration_s is None
        else 0,
    }
    quirks = None
    if config.run.calibration in ARTIFACT_CALIBRATIONS:
        quirks, rollback, why = resolve(config, trace.name)
        derived.update(artifact_quirks=",".join(quirks.on()) or "none")
        policy, timing = _artifact(config, design, options, derived, (rollback, why))
    else:
        policy, timing = _planner(config, trace, design, options, derived)
    adaptive = _adaptive(config, design, policy, derived)
    pricing = price(config.costs, timing, derived)
    if config.run.calibration not in ARTIFACT_CALIBRATIONS:  # per failure kind: how long, and by what
        option = design.detector_option
        used = derived.get("design_options") or {}
        own = (option, float(used[option])) if option and used.get(option) is not None else None
        charged = detection_charged(given.costs, config.costs, profile, own)
        if any(entry["s"] for entry in charged.values()):
            derived["detection"] = charged
    if "peak_nodes" in derived:  # the planner calibration: a profile's values outside their sources' range
        nodes = int(derived["peak_nodes"])
        outside = cost_profiles.extrapolated(profile, given.costs, nodes * int(derived["gpus_per_node"]), nodes)
        if outside:
            derived["extrapolated_terms"] = outside
    return Setup(config, trace, policy, pricing, Setup.record(config, derived), quirks, adaptive)


def _adaptive(config: SimConfig, design: Design, policy: Any, resolved: dict[str, Any]) -> AdaptiveCheckpoints | None:
    """The adaptive interval rule, for a design whose policy writes periodic checkpoints
    (it replaces that schedule's interval; `after_restart` still holds)."""
    if config.design.checkpoint_adaptive is None:
        return None
    schedule = policy.checkpoints
    if not (schedule.every_iterations or schedule.every_s):
        raise SimError(
            f"design {design.name} writes no periodic checkpoints: checkpoint_adaptive applies to designs that do"
        )
    rule = AdaptiveCheckpoints(
        config.design.checkpoint_adaptive, _or(config.design.checkpoint_prior_mtbf_s, DEFAULT_PRIOR_MTBF_S)
    )
    resolved.update(
        checkpoint_every_iterations=None,
        checkpoint_every_s=None,
        checkpoint_prior_mtbf_s=rule.prior_mtbf_s,
        checkpoint_cost_window=rule.cost_window,
    )
    return rule


# -- the design and its options -------------------------------------------------------------
def resolve_design(config: SimConfig) -> tuple[Design, object]:
    """The design `config.design` names and its options, checked for the calibration."""
    settings = dict(config.design.options or {})
    try:
        where = ARTIFACT if config.run.calibration in ARTIFACT_CALIBRATIONS else config.run.calibration
        return designs.resolve(config.design.name, settings, where)
    except DesignError as exc:
        raise SimError(str(exc)) from None


def _record_options(design: Design, options: object, resolved: dict[str, object]) -> None:
    """config.json: the design's options as used, by their names (`effective_design_options`)."""
    resolved.update(design=design.name, design_options=as_dict(options))


# -- artifact calibration ------------------------------------------------------------------
def _artifact(
    config: SimConfig, design: Design, options: object, resolved: dict[str, object], rollback: tuple[bool, str]
):
    hooks = design.artifact
    if hooks is None:
        able = [d.name for d in designs.all_designs() if d.artifact is not None]
        raise SimError(
            f"design {design.name} has no artifact calibration (use --calibration planner); designs with one: {', '.join(able)}"
        )
    model = art.get_model(config.job.model)
    timing = ArtifactTiming(design, model.name, config.run.calibration, options)
    given = frozenset(spec.name for spec in design.option_specs if spec.name in (config.design.options or {}))
    ctx = replace(
        timing.context,
        checkpoint_every_iterations=config.design.checkpoint_every_iterations,
        given=given,
        paper_rollback=rollback[0],
        paper_rollback_why=rollback[1],
    )
    try:
        built = hooks.policy(ctx, options)
    except DesignError as exc:
        raise SimError(str(exc)) from None
    timing.options = built.options
    _record_options(design, built.options, resolved)
    if built.checkpoints is not None:
        resolved.update(checkpoint_every_iterations=built.checkpoints.every_iterations)
    resolved.update(built.notes)
    resolved.update(global_batch=model.global_batch, artifact_constants=vars(model).copy())
    return built.policy, timing


# -- planner calibration -------------------------------------------------------------------
def _model_and_batch(config: SimConfig) -> tuple[str, int]:
    name = ARTIFACT_TO_PLANNER.get(config.job.model, config.job.model)
    if name not in MODEL_SHAPES and not Path(name).is_dir():
        raise SimError(
            f"unknown model {config.job.model!r}: use an artifact name ({', '.join(ARTIFACT_TO_PLANNER)}), "
            f"a built-in model ({', '.join(MODEL_SHAPES)}) or an Oobleck profile directory"
        )
    batch = config.job.global_batch
    if batch is None:
        if config.job.model not in art.ARTIFACT_MODELS:
            raise SimError(
                f"global_batch is required for {config.job.model!r} (defaults exist only for the artifact's models)"
            )
        batch = art.ARTIFACT_MODELS[config.job.model].global_batch
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


_MEMO: OrderedDict[tuple, Any] = OrderedDict()
_MEMO_SIZE = 64


def _memo(scope: tuple, key: Hashable, make: Callable[[], Any]) -> Any:
    """What a design builds once per (model, cluster, job): Varuna searches, Bamboo layouts
    (least recently used dropped beyond `_MEMO_SIZE`)."""
    full = (scope, key)
    if full in _MEMO:
        _MEMO.move_to_end(full)
        return _MEMO[full]
    value = make()
    _MEMO[full] = value
    if len(_MEMO) > _MEMO_SIZE:
        _MEMO.popitem(last=False)
    return value


def _planner(config: SimConfig, trace: Trace, design: Design, options: object, resolved: dict[str, Any]):
    name, batch = _model_and_batch(config)
    microbatch = config.job.microbatch_size or 1
    gpu = config.job.gpu or DEFAULT_GPU
    g = config.job.gpus_per_node or 1
    peak = max(1, int(trace.live_counts()["live_nodes"].max()))
    cluster = make_cluster(gpu, peak, g, inter_node_gbps=config.job.inter_node_gbps)
    profile = _resolved_profile(name, cluster.gpu, microbatch)
    JobSpec(batch, microbatch, 0)  # checks the batch against the microbatch
    analytic = name in MODEL_SHAPES

    def profile_for(b: int) -> ModelProfile | None:
        if not analytic and b != microbatch:
            return None
        return _profile(name, cluster.gpu, b)

    schedule = _schedule(
        config.design.checkpoint_every_iterations, config.design.checkpoint_every_s, design.default_checkpoints
    )
    ctx = BuildContext(
        profile=profile,
        cluster=cluster,
        global_batch=batch,
        microbatch_size=microbatch,
        gpus_per_node=g,
        max_nodes=peak,
        checkpoints=schedule,
        # what a join costs, as timed
        reconfigure_pause_s=reconfigure_pause_s(config.costs),
        profile_for=profile_for,
        profiled_microbatch=None if analytic else microbatch,
        planner_for=lambda f: _cached_planner(name, cluster, batch, microbatch, f),
        cached=lambda key, make: _memo((name, cluster, batch, microbatch, analytic), key, make),
        start_nodes=len(trace.initial_nodes),
    )
    try:
        built: PolicyBuild = design.build(ctx, options)
    except (DesignError, PlannerError) as exc:
        raise SimError(str(exc)) from None
    schedule = built.checkpoints or schedule
    _record_options(design, built.options, resolved)
    timing = planner_timing(
        config.costs, design, built, profile, cluster, global_batch=batch, peak_nodes=peak, resolved=resolved
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
    )
    return built.policy, timing


def _or(value, default):
    return default if value is None else value


def _schedule(every_it: int | None, every_s: float | None, default: CheckpointSchedule) -> CheckpointSchedule:
    """The run's intervals; the design's default schedule when it sets neither."""
    if every_it is None and every_s is None:
        return default
    return CheckpointSchedule(every_iterations=every_it, every_s=every_s)
