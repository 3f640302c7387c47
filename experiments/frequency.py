"""Throughput vs failure frequency (the paper's Figure 9) and Varuna without checkpoint
overhead (Figure 13).

Runs: the five models x the paper's five fixed-frequency traces (30 nodes, one removal
every 6h, 3h, 1h, 30m, 10m; exactly the artifact's files) x Oobleck, Bamboo, Varuna, in
both calibrations; plus "Varuna (no ckpt cost)": Varuna with free checkpoints every 2
iterations, the artifact's setting for its Figure 13 (`checkpoint_cost_factor=0`,
`checkpoint_every_iterations=2`; restarts keep their cost). Quick: GPT-3-medium and
GPT-3-6_7b on 6h, 1h and 10m.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from . import plots
from .base import Experiment, Setting
from .common import CALIBRATION_TITLES, CALIBRATIONS, MODELS, SYSTEMS, THROUGHPUT_LABEL, by_calibration, notes
from .simrun import sim_spec
from .sweep import RunSpec
from .tracesrc import FREQUENCIES, paper_frequency

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "frequency"
NO_CKPT = "varuna-nockpt"
NO_CKPT_OPTIONS: dict[str, Any] = {"checkpoint_cost_factor": 0.0, "checkpoint_every_iterations": 2}
QUICK_MODELS = ("GPT-3-medium", "GPT-3-6_7b")
QUICK_FREQUENCIES = ("6h", "1h", "10m")


def specs(setting: Setting) -> list[RunSpec]:
    models = QUICK_MODELS if setting.quick else MODELS
    frequencies = QUICK_FREQUENCIES if setting.quick else FREQUENCIES
    out = []
    for calibration in CALIBRATIONS:
        for model in models:
            for interval in frequencies:
                trace = paper_frequency(interval)
                for system in SYSTEMS:
                    out.append(sim_spec(NAME, trace, policy=system, model=model, calibration=calibration))
                out.append(
                    sim_spec(
                        NAME,
                        trace,
                        system=NO_CKPT,
                        policy="varuna",
                        model=model,
                        calibration=calibration,
                        **NO_CKPT_OPTIONS,
                    )
                )
    return out


def _bars(data: pd.DataFrame, title: str):
    order = [f for f in FREQUENCIES if f in set(data["trace_label"])]
    data = data.assign(note=notes(data))
    return plots.grouped_bars(
        data,
        x="trace_label",
        y="avg_samples_per_s",
        panel="model",
        system="system",
        x_order=order,
        xlabel="one failure every",
        ylabel=THROUGHPUT_LABEL,
        annotate="note",
        title=title,
    )


def figures(table: pd.DataFrame, out_dir: Path) -> dict[str, Figure]:
    figs = {}
    for calibration, data in by_calibration(table):
        title = CALIBRATION_TITLES[calibration]
        figs[f"fig09-{calibration}"] = _bars(data[data["system"].isin(SYSTEMS)], title)
        figs[f"fig13-{calibration}"] = _bars(data[data["system"].isin(["oobleck", "varuna", NO_CKPT])], title)
    return figs


EXPERIMENT = Experiment(
    name=NAME,
    description="throughput vs failure frequency, 5 models x 3 systems, and Varuna without checkpoint cost",
    paper_figures=("9", "13"),
    notebook="notebooks/frequency.py",
    specs=specs,
    figures=figures,
)
