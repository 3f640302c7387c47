"""Sensitivity of each system to what its pauses cost.

Each pause kind is scaled by a factor (the simulator's `reconfigure_cost_factor`,
`restart_cost_factor`, `checkpoint_cost_factor`; 0 = free, 1 = the calibration's value)
while the others stay at 1: which system's standing hangs on which constant? Runs: GPT-3
medium and GPT-3 6.7B on the scaled EC2 P3 spot trace and the 30-minute trace x factors
0, 0.25, 0.5, 1, 2, 4, 8 x the three systems, both calibrations (Varuna's rollback as in
the paper's spot figures). The figure plots committed samples per second over the whole
run (not the paper's average, which ignores a stalled tail): a flat line is a system that
does not care. Quick: GPT-3-medium on the
P3 trace, factors 0, 1, 4.
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
    run_throughput,
    spot_options,
)
from .simrun import sim_spec
from .sweep import RunSpec

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "sensitivity"
KNOBS = {"reconfigure": "reconfiguration", "restart": "restart", "checkpoint": "checkpoint"}
FACTORS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
MODELS = ("GPT-3-medium", "GPT-3-6_7b")
TRACE_SHORT = {"p3": "P3 trace", "30m": "30m trace"}


def traces_for(setting: Setting) -> dict[str, tracesrc.TraceChoice]:
    out = {"p3": tracesrc.artifact_spot("p3", setting.shared)}
    if not setting.quick:
        out["30m"] = tracesrc.paper_frequency("30m")
    return out


def specs(setting: Setting) -> list[RunSpec]:
    models = MODELS[:1] if setting.quick else MODELS
    factors = (0.0, 1.0, 4.0) if setting.quick else FACTORS
    out = []
    for calibration in CALIBRATIONS:
        for model in models:
            for key, trace in traces_for(setting).items():
                for knob in KNOBS:
                    for factor in factors:
                        for system in SYSTEMS:
                            options = spot_options(calibration, model, system) if key == "p3" else {}
                            if factor != 1.0:
                                options[f"{knob}_cost_factor"] = factor
                            out.append(
                                sim_spec(
                                    NAME,
                                    trace,
                                    policy=system,
                                    model=model,
                                    calibration=calibration,
                                    labels={"knob": knob, "factor": factor, "trace_key": key},
                                    **options,
                                )
                            )
    return out


def figures(table: pd.DataFrame, out_dir: Path) -> dict[str, Figure]:
    figs = {}
    data = table[table["outcome"].isin(RAN_OUTCOMES)]
    data = data.assign(
        run_samples_per_s=run_throughput(data),
        where=data["model"]
        + ", "
        + data["trace_key"].map(TRACE_SHORT)
        + "\n"
        + data["knob"].map(lambda k: f"{KNOBS[k]} cost"),
    )
    for calibration, part in by_calibration(data):
        figs[f"sensitivity-{calibration}"] = plots.lines(
            part,
            x="factor",
            y="run_samples_per_s",
            series="system",
            panel="where",
            xlabel="cost factor (1 = calibrated)",
            ylabel=RUN_THROUGHPUT_LABEL,
            title=CALIBRATION_TITLES[calibration],
        )
    return figs


EXPERIMENT = Experiment(
    name=NAME,
    description="sensitivity of each system to reconfiguration, restart and checkpoint costs (factors 0-8x)",
    paper_figures=(),
    notebook="notebooks/sensitivity.py",
    specs=specs,
    figures=figures,
)
