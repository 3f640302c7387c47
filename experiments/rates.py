"""The three systems across preemption rates, on generated spot traces, with error bands
over seeds.

Traces: the spot-market generator with the p3 profile (fitted to the real EC2 P3 trace)
on 30 nodes for 12 hours, its burst rate times 0.25, 0.5, 1, 1.5 and 2 (about 3.5 to 28
removals per hour), 5 seeds each. Runs: BERT-large, GPT-3-medium and GPT-3-2_7b x the
three systems, both calibrations. The figure plots committed samples per second over the
whole run (mean over seeds, band: one standard error of the mean) against the traces'
measured removals per hour. Quick: BERT-large, rates 0.5 and 2, 2 seeds, 4 h.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from planner.records import RAN_OUTCOMES

from . import plots, tracesrc
from .base import Experiment, Setting
from .common import (
    CALIBRATION_TITLES,
    CALIBRATIONS,
    RUN_THROUGHPUT_LABEL,
    SYSTEMS,
    by_calibration,
    mean_std,
    run_throughput,
)
from .simrun import sim_spec
from .sweep import RunSpec

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "preemption-rates"
MODELS = ("BERT-large", "GPT-3-medium", "GPT-3-2_7b")  # BERT-large: the artifact gives Bamboo no GPT-3
RATES = (0.25, 0.5, 1.0, 1.5, 2.0)
NODES, HOURS, SEEDS = 30, 12.0, 5


def specs(setting: Setting) -> list[RunSpec]:
    quick = setting.quick
    models = MODELS[:1] if quick else MODELS
    rates = (0.5, 2.0) if quick else RATES
    seeds = range(2) if quick else range(SEEDS)
    hours = 4.0 if quick else HOURS
    out = []
    for calibration in CALIBRATIONS:
        for model in models:
            for rate in rates:
                for seed in seeds:
                    trace = tracesrc.generated("p3", nodes=NODES, hours=hours, rate=rate, seed=seed)
                    for system in SYSTEMS:
                        out.append(
                            sim_spec(
                                NAME,
                                trace,
                                policy=system,
                                model=model,
                                calibration=calibration,
                                labels={"rate": rate, "trace_seed": seed},
                            )
                        )
    return out


def figures(table: pd.DataFrame, out_dir: Path) -> dict[str, Figure]:
    figs = {}
    ran = table[table["outcome"].isin(RAN_OUTCOMES)]
    ran = ran.assign(run_samples_per_s=run_throughput(ran))
    for calibration, data in by_calibration(ran):
        summary = mean_std(data, ["model", "system", "rate"], "run_samples_per_s")
        removals = data.groupby("rate")["trace_removals_per_hour"].mean()
        summary["removals_per_hour"] = summary["rate"].map(removals)
        figs[f"preemption-rates-{calibration}"] = plots.lines(
            summary,
            x="removals_per_hour",
            y="run_samples_per_s",
            band="run_samples_per_s_sem",
            series="system",
            panel="model",
            xlabel="removals per hour (generated p3-like traces, 30 nodes)",
            ylabel=RUN_THROUGHPUT_LABEL,
            title=CALIBRATION_TITLES[calibration],
        )
    return figs


EXPERIMENT = Experiment(
    name=NAME,
    description="the three systems across preemption rates on generated spot traces, mean and spread over seeds",
    paper_figures=(),
    notebook="notebooks/rates.py",
    specs=specs,
    figures=figures,
)
