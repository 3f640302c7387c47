"""Where the time went: the time breakdown per system (the paper's Figures 1 and 12).

Every second of a run lands in one bucket (useful compute, Bamboo's redundant compute,
reconfiguration, restart, checkpoint, lost work, waiting for nodes; `sim.ledger`). Runs:
the five models x the 10-minute trace and the scaled EC2 P3 spot trace x the three
systems, in both calibrations (Varuna's rollback as in the paper's spot figures).

Figures: `fig01-*` GPT-2-ours (the largest model all three systems can hold in both
calibrations) on both traces; `fig12-*-<trace>` every model on one trace. Systems that
cannot hold a model are left out of its panel and named in its title.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from planner.records import RAN_OUTCOMES

from . import plots, tracesrc
from .base import Experiment, Setting
from .common import CALIBRATION_TITLES, CALIBRATIONS, MODELS, SYSTEMS, by_calibration, spot_options
from .simrun import sim_spec
from .sweep import RunSpec

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "breakdown"
FIG1_MODEL = "GPT-2-ours"
QUICK_MODELS = ("GPT-2-ours", "GPT-3-6_7b")
TRACES = ("10m", "p3")


def traces_for(setting: Setting) -> dict[str, tracesrc.TraceChoice]:
    return {"10m": tracesrc.paper_frequency("10m"), "p3": tracesrc.artifact_spot("p3", setting.shared)}


def specs(setting: Setting) -> list[RunSpec]:
    models = QUICK_MODELS if setting.quick else MODELS
    out = []
    for calibration in CALIBRATIONS:
        for model in models:
            for key, trace in traces_for(setting).items():
                for system in SYSTEMS:
                    options = spot_options(calibration, model, system) if key == "p3" else {}
                    out.append(
                        sim_spec(
                            NAME,
                            trace,
                            policy=system,
                            model=model,
                            calibration=calibration,
                            labels={"trace_key": key},
                            **options,
                        )
                    )
    return out


def _titled(data: pd.DataFrame, column: str) -> pd.DataFrame:
    """Panel titles that name the systems left out (out of memory, or rejected)."""
    titles = {}
    for value, rows in data.groupby(column, sort=False):
        out = [plots.label(s) for s in rows.loc[~rows["outcome"].isin(RAN_OUTCOMES), "system"]]
        titles[value] = f"{value}" + (f" ({', '.join(out)}: OOM)" if out else "")
    return data.assign(panel_title=data[column].map(titles))


def figures(table: pd.DataFrame, out_dir: Path) -> dict[str, Figure]:
    figs = {}
    for calibration, data in by_calibration(table):
        title = CALIBRATION_TITLES[calibration]
        models = [m for m in MODELS if m in set(data["model"])]
        focus = FIG1_MODEL if FIG1_MODEL in models else models[0]
        one = _titled(data[data["model"] == focus].assign(where=lambda d: d["trace_label"]), "where")
        figs[f"fig01-{calibration}"] = plots.time_breakdown(
            one[one["outcome"].isin(RAN_OUTCOMES)], group="system", panel="panel_title", title=f"{focus}; {title}"
        )
        for key in TRACES:
            rows = _titled(data[data["trace_key"] == key], "model")
            label = rows["trace_label"].iloc[0]
            figs[f"fig12-{calibration}-{key}"] = plots.time_breakdown(
                rows[rows["outcome"].isin(RAN_OUTCOMES)], group="system", panel="panel_title", title=f"{label}; {title}"
            )
    return figs


EXPERIMENT = Experiment(
    name=NAME,
    description="where the time went: useful, redundant, reconfiguration, restart, checkpoint, lost, waiting per system",
    paper_figures=("1", "12"),
    notebook="notebooks/breakdown.py",
    specs=specs,
    figures=figures,
)
