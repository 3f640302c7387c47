"""What the experiments share: the paper's models, systems and calibrations, the
settings the paper's spot figures used, and small table helpers for the figures."""

from __future__ import annotations

import numpy as np
import pandas as pd

from planner.records import RAN_OUTCOMES

MODELS = ("BERT-large", "GPT-2-ours", "GPT-3-medium", "GPT-3-2_7b", "GPT-3-6_7b")
SYSTEMS = ("oobleck", "bamboo", "varuna")
CALIBRATIONS = ("artifact", "planner")
CALIBRATION_TITLES = {
    "artifact": "artifact calibration (the paper's tables and constants)",
    "planner": "planner calibration (our cost model, V100 16 GB, 10 Gb/s)",
}
THROUGHPUT_LABEL = "throughput (samples/s)"
RUN_THROUGHPUT_LABEL = "samples/s over the whole run"


def by_calibration(table: pd.DataFrame):
    """(calibration, its rows) for each calibration present, in `CALIBRATIONS` order."""
    present = set(table["calibration"])
    for calibration in CALIBRATIONS:
        if calibration in present:
            yield calibration, table[table["calibration"] == calibration]


# what the paper's spot figures change per system, for the models whose artifact record says so
SPOT_NO_ROLLBACK_OPTIONS = {"varuna": {"rollback": False}}


def spot_options(calibration: str, model: str, system: str) -> dict:
    """The paper's spot-trace figures turn Varuna's rollback off for the three smaller
    models (artifact calibration only: the planner calibration always rolls back)."""
    from sim.artifact_data import ARTIFACT_MODELS

    if calibration == "artifact" and ARTIFACT_MODELS[model].spot_no_rollback:
        return dict(SPOT_NO_ROLLBACK_OPTIONS.get(system, {}))
    return {}


def notes(table: pd.DataFrame) -> pd.Series:
    """A short text per row for figures: 'OOM' for a system that cannot hold the model,
    'n/a' for a configuration the planner rejected, 'no nodes' for a run that never had
    enough nodes to start, '' otherwise."""
    outcome = table["outcome"] if "outcome" in table else pd.Series("ok", index=table.index)
    text = pd.Series("", index=table.index)
    text[outcome == "infeasible"] = "OOM"
    text[outcome == "error"] = "n/a"
    text[outcome == "never-trained"] = "no nodes"
    return text


def runnable(table: pd.DataFrame) -> pd.DataFrame:
    """Runs that trained (drops out-of-memory systems and rejected configurations)."""
    if "outcome" not in table:
        return table
    return table[table["outcome"].isin(RAN_OUTCOMES)]


def mean_std(table: pd.DataFrame, by: list[str], value: str, *, name: str | None = None) -> pd.DataFrame:
    """Mean of `value` over the rows sharing `by` (e.g. seeds), with `name`_std (the
    standard deviation over those rows) and `name`_sem (the standard error of the mean,
    std / sqrt(runs - 1) with the population std; 0 for a single row)."""
    name = name or value
    grouped = table.groupby(by, sort=False, dropna=False)[value]
    out = grouped.mean().rename(name).to_frame()
    out[f"{name}_std"] = grouped.std(ddof=0).fillna(0.0)
    out["runs"] = grouped.count()
    out[f"{name}_sem"] = (out[f"{name}_std"] / np.sqrt((out["runs"] - 1).clip(lower=1))).where(out["runs"] > 1, 0.0)
    return out.reset_index()


def finite(values) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    return array[np.isfinite(array)]


def run_throughput(table: pd.DataFrame) -> pd.Series:
    """Committed samples over the whole run (trace start to end). The paper's average
    (`avg_samples_per_s`) divides by the time from the first start to the last completed
    iteration, which flatters a run that stalls before the end; the experiments beyond
    the paper use this instead."""
    duration = table["duration_s"].astype(float) if "duration_s" in table else pd.Series(np.nan, index=table.index)
    return table["committed_samples"].astype(float) / duration.where(duration > 0, np.nan)
