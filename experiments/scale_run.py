"""The scale experiment's runner: a simulator run with Varuna's checkpoint interval set
by Young's formula for that size, plus what the run summary does not hold.

Per run, beside `sim.simulate`:
- the failure-free plan on the trace's first membership (every node of the job):
  its throughput (`plan_samples_per_s`, what effective training time divides by) and its
  checkpoint cost read through the simulator's timing (`checkpoint_cost_s`:
  `timing.pause_s(Checkpoint(), plan)`, so a new checkpoint model in `sim.timing` is
  picked up without a change here);
- Varuna (label `young_daly`): checkpoint every `young_interval_s(C, M)` seconds of
  training (`planner.checkpoint_interval`, the formula the adaptive interval also uses),
  C that checkpoint cost, M the trace generator's expected mean time between
  interruptions (label `mtbf_s`); with `checkpoint_every_s` alone the simulator drops
  its count-based default;
- copy volume: the bytes of every `CopyLayers` action in the run's decisions;
- with label `measure_planning` (Oobleck): wall time of a fresh planner's templates plus
  instantiation on the job's nodes, and of one reconfiguration after one node leaves
  (with its copy bytes). The simulator records no wall time (its output is
  deterministic), so these are measured here with the planner, outside the run.
A trace with no event after its first instant (a short datacenter trace that saw no
failure) runs as it is: the configs set `duration_s`, which the simulator accepts for it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from planner.checkpoint_interval import young_interval_s

from .sweep import RunSpec


def _first_plan(setup):
    """The plan the policy makes on the trace's first membership, all nodes ready."""
    from planner.policies import ClusterView, NodesReady

    nodes = setup.trace.initial_nodes
    decision = setup.policy.decide(ClusterView(time_s=0.0, ready=nodes), NodesReady(nodes), None)
    return decision.plan


def copy_volume(events) -> tuple[int, int]:
    """(bytes, actions) over the `CopyLayers` actions of a run's decision events."""
    total, count = 0, 0
    for event in events:
        if event.kind != "decision":
            continue
        for action in event.detail.get("actions", ()):
            if action.get("action") == "CopyLayers":
                total += int(action.get("bytes", 0))
                count += 1
    return total, count


def planning_measures(config, nodes: tuple[str, ...]) -> dict[str, float]:
    """Wall time of a fresh Oobleck planner on `nodes`, and of one removal after it."""
    from planner.catalog import resolve_profile
    from planner.hardware import make_cluster
    from planner.plan import JobSpec
    from planner.planner import Planner
    from planner.reconfigure import on_removal
    from sim.setup import ARTIFACT_TO_PLANNER

    model = ARTIFACT_TO_PLANNER.get(config.job.model, config.job.model)
    microbatch = config.job.microbatch_size or 1
    cluster = make_cluster(
        config.job.gpu, len(nodes), config.job.gpus_per_node or 1, inter_node_gbps=config.job.inter_node_gbps
    )
    profile = resolve_profile(model, cluster.gpu, microbatch)
    f = 1 if config.design.option("fault_tolerance") is None else config.design.option("fault_tolerance")
    start = time.perf_counter()
    planner = Planner(profile, cluster, JobSpec(config.job.global_batch, microbatch, f))
    planner.template_set()
    middle = time.perf_counter()
    plan = planner.instantiate(list(nodes))
    end = time.perf_counter()
    reconf = on_removal(planner, plan, [plan.nodes[0]])
    done = time.perf_counter()
    return {
        "templates_s": middle - start,
        "instantiate_s": end - middle,
        "planning_s": end - start,
        "reconfigure_one_s": done - end,
        "reconfigure_one_copy_bytes": float(reconf.copy_bytes),
    }


def run_scale(spec: RunSpec, run_dir: Path) -> Mapping[str, Any]:
    """Sweep runner (module level, so it crosses process boundaries)."""
    from planner.policies import Checkpoint
    from sim.config import FLAT_KEYS, SimConfig
    from sim.run import simulate
    from sim.setup import build

    from . import tracesrc

    params = spec.params
    names = set(FLAT_KEYS)
    config = SimConfig.of(**{k: v for k, v in params.items() if k in names})
    trace = tracesrc.resolve(params["trace"])
    facts = tracesrc.stats(trace)
    extra: dict[str, Any] = {"checkpoint_interval_s": math.nan}
    try:
        setup = build(config, trace)
        plan = _first_plan(setup)
        if plan is None:
            raise ValueError(f"{config.design.name} makes no plan on the {len(trace.initial_nodes)} nodes of the job")
        cost = setup.timing.iteration(plan)
        checkpoint_s = setup.timing.pause_s(Checkpoint(), plan)
        extra.update(
            plan_samples_per_s=setup.timing.samples_per_iteration / cost.total_s, checkpoint_cost_s=checkpoint_s
        )
        if params.get("young_daly"):
            interval = young_interval_s(checkpoint_s, float(params["mtbf_s"]))
            config = config.with_(checkpoint_every_s=interval)
            extra["checkpoint_interval_s"] = interval
        start = time.perf_counter()
        result = simulate(config, trace=trace)
        extra["sim_wall_s"] = time.perf_counter() - start
    except ValueError as exc:  # SimError, PlannerError, TraceError: the reason is the message
        return {
            "outcome": "error",
            "infeasible_reason": str(exc),
            "avg_samples_per_s": math.nan,
            "committed_samples": 0,
            **facts,
            **extra,
        }
    result.write(run_dir)
    copied, actions = copy_volume(result.events)
    extra.update(copy_bytes=float(copied), copy_actions=actions)
    if params.get("measure_planning"):
        extra.update(planning_measures(config, trace.initial_nodes))
    return {**result.summary.to_dict(), **facts, **extra}
