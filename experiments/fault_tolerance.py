"""The choice of f against a trace's burst sizes (planner calibration: Oobleck's f).

Oobleck survives any f simultaneous failures without a restart; a burst larger than f
may wipe out every replica of some layer and send it back to its last checkpoint, while
a larger f costs throughput (more, smaller pipelines) and needs more nodes. Runs: Oobleck
with f = 0..3 on generated spot traces (the p3 profile at half its removal rate, 30 nodes,
12 h) whose mean burst size is 1, 1.5, 2, 3, 4, 6 at the same removals per hour, 5 seeds
each, for GPT-2-ours (GPT-2 XL), GPT-3-2_7b and GPT-3-6_7b; plus the two scaled spot
traces of the paper. Figures: committed samples per second over the whole run and restarts
from checkpoint (mean over seeds, band: one standard error). Quick: GPT-3-2_7b, f = 0..2,
bursts 1 and 4, 2 seeds, 6 h.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from planner.records import RAN_OUTCOMES

from . import plots, tracesrc
from .base import Experiment, Setting
from .common import RUN_THROUGHPUT_LABEL, mean_std, run_throughput
from .simrun import sim_spec
from .sweep import RunSpec

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "fault-tolerance"
MODELS = ("GPT-2-ours", "GPT-3-2_7b", "GPT-3-6_7b")
BURSTS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
RATE = 0.5  # of the p3 profile's removals per hour
NODES, HOURS = 30, 12.0
SEEDS = 5


def specs(setting: Setting) -> list[RunSpec]:
    quick = setting.quick
    models = ("GPT-3-2_7b",) if quick else MODELS
    fs = range(3) if quick else range(4)
    bursts = (1.0, 4.0) if quick else BURSTS
    seeds = range(2) if quick else range(SEEDS)
    hours = 6.0 if quick else HOURS
    out = []
    for model in models:
        for f in fs:
            for burst in bursts:
                for seed in seeds:
                    trace = tracesrc.generated("p3", nodes=NODES, hours=hours, rate=RATE, burst=burst, seed=seed)
                    out.append(
                        sim_spec(
                            NAME,
                            trace,
                            policy="oobleck",
                            model=model,
                            calibration="planner",
                            fault_tolerance=f,
                            labels={"burst": burst, "trace_seed": seed},
                        )
                    )
            if not quick:
                for key in ("gcp", "p3"):
                    out.append(
                        sim_spec(
                            NAME,
                            tracesrc.artifact_spot(key, setting.shared),
                            policy="oobleck",
                            model=model,
                            calibration="planner",
                            fault_tolerance=f,
                            labels={"burst": -1.0, "trace_seed": -1},
                        )
                    )
    return out


OPTION_F = "design_options_fault_tolerance"  # the results table's column of Oobleck's f


def figures(table: pd.DataFrame, out_dir: Path) -> dict[str, Figure]:
    # f is Oobleck's option: the table holds it with the design's options
    table = table.assign(run_samples_per_s=run_throughput(table), fault_tolerance=table[OPTION_F])
    generated = table[(table["burst"] > 0) & (table["outcome"].isin(RAN_OUTCOMES))]
    if generated.empty:
        return {"fault-tolerance": plots.text_figure("no run could be planned")}
    throughput = mean_std(generated, ["model", "fault_tolerance", "burst"], "run_samples_per_s")
    restarts = mean_std(generated, ["model", "fault_tolerance", "burst"], "num_restarts")
    title = f"Oobleck, planner calibration; generated p3-like traces, {NODES} nodes, same removal rate"
    figs = {
        "fault-tolerance-throughput": plots.lines(
            throughput,
            x="burst",
            y="run_samples_per_s",
            band="run_samples_per_s_sem",
            series="fault_tolerance",
            series_fmt="f = {}",
            panel="model",
            xlabel="mean burst size (nodes)",
            ylabel=RUN_THROUGHPUT_LABEL,
            title=title,
        ),
        "fault-tolerance-restarts": plots.lines(
            restarts,
            x="burst",
            y="num_restarts",
            band="num_restarts_sem",
            series="fault_tolerance",
            series_fmt="f = {}",
            panel="model",
            xlabel="mean burst size (nodes)",
            ylabel="restarts from checkpoint",
            title=title,
        ),
    }
    real = table[(table["burst"] < 0) & (table["outcome"].isin(RAN_OUTCOMES))]
    if not real.empty:
        real = real.assign(
            where=real["trace_label"].str.split(" \\(").str[0]
            + real["trace_mean_burst"].map(lambda b: f" (mean burst {b:.1f})")
        )
        figs["fault-tolerance-paper-traces"] = plots.lines(
            real,
            x="fault_tolerance",
            y="run_samples_per_s",
            series="where",
            panel="model",
            xlabel="f",
            ylabel=RUN_THROUGHPUT_LABEL,
            title="Oobleck, planner calibration; the paper's scaled spot traces",
        )
    return figs


EXPERIMENT = Experiment(
    name=NAME,
    description="Oobleck's f = 0..3 against the burst sizes of generated spot traces (planner calibration, bands over seeds)",
    paper_figures=(),
    notebook="notebooks/fault_tolerance.py",
    specs=specs,
    figures=figures,
)
