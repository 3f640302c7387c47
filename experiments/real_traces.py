"""The three systems on the other real traces in ../shared/traces.

Every real trace there that spans time (AWS p3 and g4dn from the Oobleck and Bamboo
artifacts, Bamboo's GCP A100 log, and Bamboo's 2020 g4dn and p2 availability logs; the
p2 logs of a single instant are left out) is scaled in proportion so that its peak is 30
nodes, the paper's cluster: relative drops are kept, unlike the artifact's min-max
rescaling to 15-30, which turns a 10-to-9 drop into 30-to-15. Runs: the five models x
those traces x the three systems, both calibrations; bars are committed samples per second
over the whole run. Without ../shared, the generated
look-alikes of the three fitted traces stand in (labelled). Quick: GPT-3-medium on the
first two traces.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from . import plots, tracesrc
from .base import Experiment, Setting
from .common import CALIBRATION_TITLES, CALIBRATIONS, MODELS, SYSTEMS, by_calibration, notes, run_throughput
from .simrun import sim_spec
from .sweep import RunSpec

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "real-traces"
PEAK_NODES = 30


def specs(setting: Setting) -> list[RunSpec]:
    choices = tracesrc.real_traces(setting.shared, peak=PEAK_NODES)
    models = ("GPT-3-medium",) if setting.quick else MODELS
    if setting.quick:
        choices = choices[:2]
    out = []
    for calibration in CALIBRATIONS:
        for model in models:
            for trace in choices:
                for system in SYSTEMS:
                    out.append(
                        sim_spec(
                            NAME,
                            trace,
                            policy=system,
                            model=model,
                            calibration=calibration,
                            labels={"trace_key": trace.key},
                        )
                    )
    return out


def figures(table: pd.DataFrame, out_dir: Path) -> dict[str, Figure]:
    figs = {}
    table = table.assign(note=notes(table), run_samples_per_s=run_throughput(table))
    facts = table["trace_duration_h"].map(lambda h: f"{h:.0f} h") + table["trace_removals_per_hour"].map(
        lambda r: f", {r:.1f}/h"
    )
    table = table.assign(where=table["trace_key"] + "\n" + facts)
    order = list(dict.fromkeys(table["where"]))
    for calibration, data in by_calibration(table):
        figs[f"real-traces-{calibration}"] = plots.grouped_bars(
            data,
            x="where",
            y="run_samples_per_s",
            panel="model",
            system="system",
            annotate="note",
            ncols=1,
            x_order=order,
            xlabel="trace (length, removals per hour)",
            ylabel="samples/s, whole run",
            title=f"Real traces scaled to a {PEAK_NODES}-node peak; {CALIBRATION_TITLES[calibration]}",
            width_in=plots.FULL_IN,
            row_height_in=1.6,
        )
    return figs


EXPERIMENT = Experiment(
    name=NAME,
    description="the three systems on every other real trace in ../shared/traces, scaled to a 30-node peak",
    paper_figures=(),
    notebook="notebooks/real_traces.py",
    specs=specs,
    figures=figures,
)
