"""Parcae (NSDI'24): forecast availability, choose the (D, W) grid by liveput, migrate early.

Source: Duan, Jiangfei et al., "Parcae: Proactive, Liveput-Optimized DNN Training on
Preemptible Instances", NSDI 2024: liveput (expected committed samples under preemptions,
section 3), the availability predictor (ARIMA over interval counts, section 4), intra- vs
inter-stage migration and the look-ahead optimiser (section 5). Constants from its code
(JF-D/Parcae, liveput/): 60 s intervals (`interval_length=60`), a 10-interval look-ahead
(`--look-ahead 10`) with the same number of past intervals, ARIMA(p=1, d=1, q=0), forecasts
kept within 3 of the first (`in_grow_bound`, `out_grow_bound`).

The policy is `planner.policies.ParcaePolicy` (its docstring gives the rules). What the paper
leaves open, and what was chosen:

- shapes are Varuna-style uniform grids from the job's `VarunaSearch` (depth dividing the
  layers, the largest microbatch that fits), Parcae's (data-parallel, pipeline) pairs;
- the Monte-Carlo preemption sampling that estimates a shape's survival becomes its
  expectation: forecast removals hit a shape in proportion to the nodes it uses;
- a migration is priced by the copies it asks for (reconfiguration + busiest node's bytes),
  so intra-stage and inter-stage moves differ by what they move, not by a fixed constant; a
  hit on a single-replica grid, or a restart, is charged `restart_estimate_s` in the
  forecast (the engine charges its own prices when it happens);
- preemptions come without notice (the traces carry none), so a hit is repaired after the
  fact; Parcae's grace-period migration is not modelled.

Its actions cost the standard prices. Simulator only: the real backend has no grid
migration with layer re-cutting.
"""

from __future__ import annotations

from dataclasses import dataclass

from designs.varuna.search import DEFAULT_MAX_MICROBATCH, VarunaSearch
from planner.policies import CheckpointSchedule
from planner.policies.decisions import DEFAULT_CHECKPOINT_EVERY_S

from ..base import SIMULATOR, BuildContext, Design, PolicyBuild
from ..options import PLANNER, option
from .policy import ParcaePolicy, ParcaeSettings


@dataclass(frozen=True)
class ParcaeOptions:
    interval_s: float = option(
        60.0, unit="s", doc="length of a prediction interval (Parcae's code: 60 s)",
        where=(PLANNER,), minimum=0, positive=True,
    )  # fmt: skip
    horizon_intervals: int = option(
        10, doc="intervals the liveput optimiser looks ahead (Parcae's --look-ahead default)",
        where=(PLANNER,), minimum=1,
    )  # fmt: skip
    window_intervals: int = option(
        10, doc="past intervals the predictor fits (Parcae pairs it with the look-ahead)",
        where=(PLANNER,), minimum=2,
    )  # fmt: skip
    grow_bound: int = option(
        3, doc="a forecast stays within this many nodes of its first interval (Parcae's grow bound)",
        where=(PLANNER,), minimum=0,
    )  # fmt: skip
    shapes_per_count: int = option(
        3, doc="fastest grids per forecast node count the optimiser considers",
        where=(PLANNER,), minimum=1,
    )  # fmt: skip
    restart_estimate_s: float = option(
        120.0, unit="s", doc="what the optimiser charges a restart or a lost stage (relaunch, load, lost work)",
        where=(PLANNER,), minimum=0,
    )  # fmt: skip
    max_microbatch: int = option(
        DEFAULT_MAX_MICROBATCH, doc="largest microbatch tried per grid (a measured profile: its own)",
        where=(PLANNER,), minimum=1,
    )  # fmt: skip


def build(ctx: BuildContext, options: ParcaeOptions) -> PolicyBuild:
    cap = options.max_microbatch if ctx.profiled_microbatch is None else ctx.profiled_microbatch
    search = ctx.cached(
        ("varuna_search", cap),
        lambda: VarunaSearch(ctx.profile_for, ctx.cluster, ctx.global_batch, max_microbatch=cap),
    )
    settings = ParcaeSettings(
        interval_s=options.interval_s,
        horizon=options.horizon_intervals,
        window=options.window_intervals,
        grow_bound=options.grow_bound,
        shapes_per_count=options.shapes_per_count,
        restart_estimate_s=options.restart_estimate_s,
    )
    cache = ctx.cached(("parcae_cache", cap, settings, ctx.reconfigure_pause_s, ctx.max_nodes), dict)
    policy = ParcaePolicy(
        search,
        ctx.profile.layers,
        bandwidth_bytes_per_s=ctx.cluster.inter_node_bw_bytes_per_s,
        gpus_per_node=ctx.gpus_per_node,
        checkpoints=ctx.checkpoints,
        reconfigure_pause_s=ctx.reconfigure_pause_s,
        max_nodes=ctx.max_nodes,
        settings=settings,
        cache=cache,
    )
    return PolicyBuild(policy, options)


PARCAE = Design(
    name="parcae",
    display="Parcae",
    summary="proactive: forecast availability, pick the (D, W) grid by liveput, migrate early (NSDI'24)",
    options=ParcaeOptions,
    build=build,
    runs_on=(SIMULATOR,),
    default_checkpoints=CheckpointSchedule(every_s=DEFAULT_CHECKPOINT_EVERY_S),
)
