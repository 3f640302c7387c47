"""Dollar cost per million samples on spot nodes, against an on-demand cluster.

Runs: the five models x traces (the 6h, 1h and 10m frequency traces and the two scaled
spot traces) x the three systems at the spot price (0.91 $/node-hour, every present node
charged, as in the artifact), in both calibrations; plus each system on an on-demand
cluster: 30 nodes for 12 h with no preemption at 3.06 $/node-hour (the artifact's p3.2xlarge
prices). Cost per million samples = cost / committed samples x 10^6; the on-demand
reference line of a model is its cheapest system there. Quick: GPT-3-medium on 1h and
the P3 trace.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from planner.records import RAN_OUTCOMES

from . import plots, tracesrc
from .base import Experiment, Setting
from .common import CALIBRATION_TITLES, CALIBRATIONS, MODELS, SYSTEMS, by_calibration, notes, spot_options
from .simrun import sim_spec
from .sweep import RunSpec

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "cost"
ON_DEMAND_PRICE = 3.06  # $/node-hour, p3.2xlarge on demand (the artifact's figure)
ON_DEMAND_NODES, ON_DEMAND_HOURS = 30, 12.0
TRACE_ORDER = ("6h", "1h", "10m", "gcp", "p3")
QUICK_TRACES = ("1h", "p3")
SHORT = {"gcp": "GCP*", "p3": "P3*"}  # * the scaled spot traces (or their look-alikes)


def traces_for(setting: Setting) -> dict[str, tracesrc.TraceChoice]:
    keys = QUICK_TRACES if setting.quick else TRACE_ORDER
    out = {}
    for key in keys:
        out[key] = (
            tracesrc.artifact_spot(key, setting.shared)
            if key in tracesrc.ARTIFACT_SPOT
            else tracesrc.paper_frequency(key)
        )
    return out


def specs(setting: Setting) -> list[RunSpec]:
    models = ("GPT-3-medium",) if setting.quick else MODELS
    ondemand = tracesrc.on_demand(ON_DEMAND_NODES, ON_DEMAND_HOURS)
    out = []
    for calibration in CALIBRATIONS:
        for model in models:
            for key, trace in traces_for(setting).items():
                for system in SYSTEMS:
                    options = spot_options(calibration, model, system) if key in tracesrc.ARTIFACT_SPOT else {}
                    out.append(
                        sim_spec(
                            NAME,
                            trace,
                            policy=system,
                            model=model,
                            calibration=calibration,
                            labels={"market": "spot", "trace_key": key},
                            **options,
                        )
                    )
            for system in SYSTEMS:
                out.append(
                    sim_spec(
                        NAME,
                        ondemand,
                        policy=system,
                        model=model,
                        calibration=calibration,
                        labels={"market": "on-demand", "trace_key": "on-demand"},
                        price_per_node_hour=ON_DEMAND_PRICE,
                    )
                )
    return out


def usd_per_million(table: pd.DataFrame) -> pd.Series:
    """Cost per million committed samples (NaN when nothing was committed)."""
    samples = table["committed_samples"].astype(float)
    return pd.Series(
        np.where(samples > 0, table["cost_usd"] / samples.where(samples > 0, 1.0) * 1e6, math.nan), index=table.index
    )


def figures(table: pd.DataFrame, out_dir: Path) -> dict[str, Figure]:
    figs = {}
    table = table.assign(usd_per_m=usd_per_million(table), note=notes(table))
    table.loc[(table["note"] == "") & table["usd_per_m"].isna(), "note"] = "no progress"
    for calibration, data in by_calibration(table):
        spot = data[data["market"] == "spot"]
        ondemand = data[(data["market"] == "on-demand") & (data["outcome"].isin(RAN_OUTCOMES))]
        reference = ondemand.groupby("model")["usd_per_m"].min().to_dict()
        labels = {k: SHORT.get(k, k) for k in spot["trace_key"]}
        order = [labels[k] for k in TRACE_ORDER if k in labels]
        spot = spot.assign(where=spot["trace_key"].map(labels))
        figs[f"cost-{calibration}"] = plots.grouped_bars(
            spot,
            x="where",
            y="usd_per_m",
            panel="model",
            system="system",
            x_order=order,
            annotate="note",
            reference=reference,
            reference_label=f"on-demand ({ON_DEMAND_NODES} nodes, cheapest system)",
            xlabel="trace (*: the scaled spot traces)",
            ylabel="$ per million samples",
            title=CALIBRATION_TITLES[calibration],
        )
    return figs


EXPERIMENT = Experiment(
    name=NAME,
    description="dollar cost per million samples on spot nodes vs an on-demand cluster, 5 models x 3 systems",
    paper_figures=(),
    notebook="notebooks/cost.py",
    specs=specs,
    figures=figures,
)
