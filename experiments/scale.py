"""The three designs from 64 to 12,500 nodes: effective training time and throughput per
GPU, with what changes with size beside them (checkpoint cost, copy volume, planning).

The job (the issue's reference): GPT-3 175B on nodes of 8 x A100 80 GB (400 Gb/s),
global batch 24 x nodes, microbatch 1, Oobleck with f = 3, planner calibration. Traces,
per size N and seed:
- datacenter: `datacenter:gpus=8N,days=D,seed=S` (hardware and software interruptions at
  Llama 3's rates, repaired hosts coming back), run for the whole D days;
- spot: `spot:nodes=N,hours=H,profile=gcp-a100,seed=S` (the profile fitted to the GCP A100
  preemptible log: same GPU; its per-node hazard holds at any capacity), run for H hours.
Varuna checkpoints every sqrt(2 C M) seconds of training (Young 1974; `scale_run`), C its
checkpoint cost on the N nodes from the simulator's timing, M the generator's expected
mean time between interruptions (`mtbf_s`: 24 h / `expected_interruptions_per_day` for
the datacenter trace; 1 h / (the profile's bursts per hour x N / its capacity) for spot):
an a-priori rate, the same for every seed, defined even when a short trace sees no
failure. An interruption is one burst (nodes lost at one instant cost Varuna one restart).
Oobleck and Bamboo keep the simulator's default (a checkpoint every hour).

Measures (`measures`): effective training time = committed samples / (throughput of the
design's failure-free plan on all N nodes x wall time): the share of the window that the
run turned into progress at full speed, so lost work, pauses, waiting and a shrunken
cluster all count against it. Throughput per GPU = committed samples / wall time / the
time-averaged GPUs present (node-hours x 8 / wall time). Also the breakdown's share of
useful compute (time only), copy volume per day, Varuna's checkpoint cost and interval,
and Oobleck's planning time (measured beside the run, `scale_run.planning_measures`).

Full: N = 64, 256, 1024, 4096, 12500, 7 days / 6 hours, 3 seeds. Quick: N = 32 and 64,
2 days / 2 hours, seed 0. Runs one at a time by default (the planning times are wall
times); `ooblab reproduce scale --processes N` trades that for speed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from planner.records import RAN_OUTCOMES

from . import plots
from .base import Experiment, Setting
from .common import SYSTEMS, mean_std
from .scale_run import run_scale
from .simrun import sim_spec
from .sweep import RunSpec
from .tracesrc import TraceChoice

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "scale"
MODEL, GPU, GPUS_PER_NODE, FAULT_TOLERANCE, BATCH_PER_NODE = "gpt3-175b", "a100-80gb", 8, 3, 24
SIZES = (64, 256, 1024, 4096, 12500)
QUICK_SIZES = (32, 64)
DAYS, HOURS, SEEDS = 7.0, 6.0, 3
QUICK_DAYS, QUICK_HOURS, QUICK_SEEDS = 2.0, 2.0, 1
SPOT_PROFILE = "gcp-a100"
XLABEL = "cluster size (nodes of 8 x A100 80 GB)"
# per system: its options here, whether its checkpoint interval follows Young/Daly (Varuna
# checkpoints; the others survive in memory), whether the planner's time is measured (Oobleck)
SYSTEM_SETTINGS: dict[str, dict[str, Any]] = {
    "oobleck": {"options": {"fault_tolerance": FAULT_TOLERANCE}, "young_daly": False, "measure_planning": True},
    "bamboo": {"options": {}, "young_daly": False, "measure_planning": False},
    "varuna": {"options": {}, "young_daly": True, "measure_planning": False},
}
TRACE_KINDS = {
    "datacenter": "datacenter failures (Llama 3 rates)",
    "spot": f"spot preemptions ({SPOT_PROFILE} profile)",
}


def datacenter_trace(nodes: int, days: float, seed: int) -> tuple[TraceChoice, float]:
    """The datacenter trace of a job on `nodes` hosts, and its expected MTBF in seconds."""
    from traces.datacenter import expected_interruptions_per_day

    gpus = nodes * GPUS_PER_NODE
    per_day = expected_interruptions_per_day(gpus)
    return TraceChoice(
        f"datacenter:gpus={gpus},days={days:g},seed={seed}", TRACE_KINDS["datacenter"], True
    ), 86400.0 / per_day


def spot_trace(nodes: int, hours: float, seed: int) -> tuple[TraceChoice, float]:
    """The spot trace of `nodes` nodes, and its expected mean time between bursts (s)."""
    from traces.spot import get_profile

    profile = get_profile(SPOT_PROFILE)
    per_hour = profile.burst_rate_per_h * nodes / profile.capacity_nodes
    return TraceChoice(
        f"spot:nodes={nodes},hours={hours:g},profile={SPOT_PROFILE},seed={seed}", TRACE_KINDS["spot"], True
    ), 3600.0 / per_hour


def specs(setting: Setting) -> list[RunSpec]:
    quick = setting.quick
    sizes = QUICK_SIZES if quick else SIZES
    days, hours = (QUICK_DAYS, QUICK_HOURS) if quick else (DAYS, HOURS)
    seeds = range(QUICK_SEEDS if quick else SEEDS)
    out = []
    for kind in TRACE_KINDS:
        for nodes in sizes:
            for seed in seeds:
                if kind == "datacenter":
                    trace, mtbf_s = datacenter_trace(nodes, days, seed)
                    window_s = days * 86400.0
                else:
                    trace, mtbf_s = spot_trace(nodes, hours, seed)
                    window_s = hours * 3600.0
                for system in SYSTEMS:
                    chosen = SYSTEM_SETTINGS[system]
                    options: dict[str, Any] = dict(chosen["options"])
                    labels = {
                        "nodes": nodes,
                        "trace_kind": kind,
                        "trace_seed": seed,
                        "mtbf_s": mtbf_s,
                        "young_daly": chosen["young_daly"],
                        "measure_planning": chosen["measure_planning"] and kind == "datacenter" and seed == 0,
                    }
                    out.append(
                        sim_spec(
                            NAME,
                            trace,
                            policy=system,
                            model=MODEL,
                            calibration="planner",
                            gpu=GPU,
                            gpus_per_node=GPUS_PER_NODE,
                            global_batch=BATCH_PER_NODE * nodes,
                            duration_s=window_s,
                            labels=labels,
                            **options,
                        )
                    )
    return out


def measures(table: pd.DataFrame) -> pd.DataFrame:
    """The runs that trained, with the derived measures of the module doc added."""
    ran = table[table["outcome"].isin(RAN_OUTCOMES)].copy()
    wall_s = ran["duration_s"].astype(float)
    samples = ran["committed_samples"].astype(float)
    gpus = ran["node_hours"].astype(float) * 3600.0 / wall_s * GPUS_PER_NODE
    ran["effective_training"] = samples / (ran["plan_samples_per_s"].astype(float) * wall_s)
    ran["samples_per_s_per_gpu"] = samples / wall_s / gpus
    ran["useful_fraction"] = ran["breakdown_useful_compute_s"].astype(float) / wall_s
    ran["copy_tb_per_day"] = ran["copy_bytes"].astype(float) / 1e12 / (wall_s / 86400.0)
    ran["where"] = ran["trace_kind"].map(TRACE_KINDS)
    return ran


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """One row per trace kind, size and design: means over seeds (the table in docs/experiments.md)."""
    ran = measures(table)
    columns = [
        "effective_training",
        "samples_per_s_per_gpu",
        "useful_fraction",
        "copy_tb_per_day",
        "checkpoint_cost_s",
        "checkpoint_interval_s",
        "mtbf_s",
        "num_restarts",
        "num_reconfigurations",
        "trace_removals_per_hour",
    ]
    grouped = ran.groupby(["trace_kind", "nodes", "system"], sort=True)[columns].mean()
    planning = ran[ran["measure_planning"].astype(bool)]
    if "planning_s" in planning:
        grouped = grouped.join(
            planning.set_index(["trace_kind", "nodes", "system"])[
                ["planning_s", "reconfigure_one_s", "reconfigure_one_copy_bytes"]
            ]
        )
    return grouped.reset_index()


def figures(table: pd.DataFrame, out_dir: Path) -> dict[str, Figure]:
    ran = measures(table)
    if ran.empty:
        return {"scale": plots.text_figure("no run trained")}
    sizes = sorted(set(ran["nodes"]))
    common = {"x": "nodes", "series": "system", "panel": "where", "xlabel": XLABEL, "logx": True, "xticks": sizes}
    title = "GPT-3 175B, global batch 24 x nodes, Oobleck f = 3; Varuna checkpoints at Young's interval"
    figs = {}
    ett = mean_std(ran, ["where", "nodes", "system"], "effective_training")
    figs["scale-effective-training"] = plots.lines(
        ett,
        y="effective_training",
        band="effective_training_sem",
        ylabel="effective training time",
        title=title,
        **common,
    )
    per_gpu = mean_std(ran, ["where", "nodes", "system"], "samples_per_s_per_gpu")
    figs["scale-throughput-per-gpu"] = plots.lines(
        per_gpu,
        y="samples_per_s_per_gpu",
        band="samples_per_s_per_gpu_sem",
        ylabel="committed samples/s per GPU",
        title=title,
        **common,
    )
    copies = mean_std(ran[ran["system"] != "varuna"], ["where", "nodes", "system"], "copy_tb_per_day")
    figs["scale-copy-volume"] = plots.lines(
        copies,
        y="copy_tb_per_day",
        ylabel="layer copies (TB per day)",
        title="Bytes moved by reconfigurations",
        **common,
    )
    varuna = ran[ran["system"] == "varuna"]
    if not varuna.empty:
        long = pd.concat(
            [
                varuna.assign(quantity="checkpoint cost C", seconds=varuna["checkpoint_cost_s"]),
                varuna.assign(quantity="mean time between interruptions M", seconds=varuna["mtbf_s"]),
                varuna.assign(quantity="Young interval sqrt(2 C M)", seconds=varuna["checkpoint_interval_s"]),
            ]
        )
        long = long.groupby(["where", "nodes", "quantity"], sort=False)["seconds"].mean().reset_index()
        figs["scale-checkpoint"] = plots.lines(
            long,
            x="nodes",
            y="seconds",
            series="quantity",
            panel="where",
            xlabel=XLABEL,
            ylabel="seconds",
            logx=True,
            logy=True,
            xticks=sizes,
            title="Varuna's checkpoints by size",
        )
    planning = ran[ran["measure_planning"].astype(bool)]
    if not planning.empty and "planning_s" in planning:
        long = pd.concat(
            [
                planning.assign(part="templates", seconds=planning["templates_s"]),
                planning.assign(part="instantiation", seconds=planning["instantiate_s"]),
                planning.assign(part="reconfiguration after one removal", seconds=planning["reconfigure_one_s"]),
            ]
        )
        figs["scale-planning"] = plots.lines(
            long,
            x="nodes",
            y="seconds",
            series="part",
            xlabel=XLABEL,
            ylabel="wall time (s)",
            logx=True,
            logy=True,
            xticks=sizes,
            title="Oobleck's planner, f = 3 (this machine)",
        )
    return figs


EXPERIMENT = Experiment(
    name=NAME,
    description="the three designs from 64 to 12,500 nodes (GPT-3 175B): effective training time and throughput per GPU on datacenter and spot traces, Varuna at Young's checkpoint interval",
    paper_figures=(),
    notebook="notebooks/scale.py",
    specs=specs,
    figures=figures,
    runner=run_scale,
    processes=1,  # planning times are wall times; `--processes N` for the full setting where they matter less
)
