"""Throughput over time on the two scaled spot traces (the paper's Figures 10, 14, 15).

Runs: the five models x the artifact's two spot traces rescaled to 15-30 nodes (the file
named "gcp", which is the rescaled g4dn trace, and the EC2 P3 one) x the three systems,
in both calibrations, with Varuna's rollback off for the three smaller models in the
artifact calibration as in the paper. Without ../shared the traces are generated
look-alikes (`spot:profile=g4dn|p3`, rescaled the same way), labelled as such.

Figures: `fig10-*` one model (GPT-3-6_7b; GPT-3-medium in the quick setting) on both
traces; `fig14-*` every model on the GCP trace, `fig15-*` every model on the P3 trace;
each panel shows committed throughput in 15-minute bins (samples of iterations that are
never rolled back, so a restart's lost work shows as the dip it is), each system's
average dotted, and the live node count underneath.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from planner.records import RAN_OUTCOMES

from . import plots, tracesrc
from .base import Experiment, Setting
from .common import CALIBRATION_TITLES, CALIBRATIONS, MODELS, SYSTEMS, by_calibration, spot_options
from .simrun import sim_spec, timeline
from .sweep import RunSpec

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "spot"
FIG10_MODEL = "GPT-3-6_7b"
QUICK_MODELS = ("GPT-3-medium",)
BIN_S = 900.0
FIGURE_OF_TRACE = {"gcp": "fig14", "p3": "fig15"}


def specs(setting: Setting) -> list[RunSpec]:
    models = QUICK_MODELS if setting.quick else MODELS
    out = []
    for calibration in CALIBRATIONS:
        for model in models:
            for key in ("gcp", "p3"):
                trace = tracesrc.artifact_spot(key, setting.shared)
                for system in SYSTEMS:
                    out.append(
                        sim_spec(
                            NAME,
                            trace,
                            policy=system,
                            model=model,
                            calibration=calibration,
                            labels={"spot": key},
                            timeline="iterations",
                            **spot_options(calibration, model, system),
                        )
                    )
    return out


def live_nodes(ref: str, fallback: pd.DataFrame) -> pd.DataFrame:
    """The trace's live node count (from the trace itself; from a run's timeline when the
    trace cannot be read here)."""
    try:
        return tracesrc.resolve(ref).live_counts()
    except (ValueError, OSError):
        return fallback[["time_s", "live_nodes"]]


def panel(rows: pd.DataFrame, out_dir: Path, title: str) -> plots.TimelinePanel:
    """One model on one trace: every system's timeline and average."""
    timelines, averages, missing = {}, {}, []
    for _, row in rows.iterrows():
        if row.get("outcome") not in RAN_OUTCOMES:
            missing.append(
                f"{plots.label(row['system'])}: {'out of memory' if row.get('outcome') == 'infeasible' else 'n/a'}"
            )
            continue
        timelines[row["system"]] = timeline(out_dir, row["key"])
        averages[row["system"]] = float(row["avg_samples_per_s"])
    any_timeline = next(iter(timelines.values()), pd.DataFrame(columns=["time_s", "live_nodes"]))
    live = live_nodes(rows["trace"].iloc[0], any_timeline)
    if missing:
        title = f"{title}\n({'; '.join(missing)})"
    return plots.TimelinePanel(title, timelines, live, averages)


def figures(table: pd.DataFrame, out_dir: Path) -> dict[str, Figure]:
    figs = {}
    for calibration, data in by_calibration(table):
        title = CALIBRATION_TITLES[calibration]
        models = [m for m in MODELS if m in set(data["model"])]
        focus = FIG10_MODEL if FIG10_MODEL in models else models[0]
        columns = []
        for key in ("gcp", "p3"):
            rows = data[(data["model"] == focus) & (data["spot"] == key)]
            columns.append(panel(rows, out_dir, rows["trace_label"].iloc[0]))
        figs[f"fig10-{calibration}"] = plots.throughput_panels(columns, ncols=2, bin_s=BIN_S, title=f"{focus}; {title}")
        for key, figure in FIGURE_OF_TRACE.items():
            rows_of_trace = data[data["spot"] == key]
            panels = [panel(rows_of_trace[rows_of_trace["model"] == m], out_dir, m) for m in models]
            label = rows_of_trace["trace_label"].iloc[0]
            figs[f"{figure}-{calibration}"] = plots.throughput_panels(
                panels, ncols=3, bin_s=BIN_S, title=f"{label}; {title}"
            )
    return figs


EXPERIMENT = Experiment(
    name=NAME,
    description="throughput over time on the scaled GCP and EC2 P3 spot traces, 5 models x 3 systems, live nodes underneath",
    paper_figures=("10", "14", "15"),
    notebook="notebooks/spot.py",
    specs=specs,
    figures=figures,
)
