"""The simulator runner and its spec helper."""

from __future__ import annotations

import json
import math

import pytest

from experiments import tracesrc
from experiments.simrun import run_sim, sim_spec


def test_a_run_writes_its_record_and_returns_summary_and_trace_facts(tmp_path):
    spec = sim_spec("t", tracesrc.paper_frequency("1h"), policy="oobleck", model="GPT-3-medium", labels={"group": "a"})
    summary = run_sim(spec, tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"config.json", "summary.json", "timeline.csv", "events.jsonl"}
    assert summary["outcome"] == "ok" and summary["avg_samples_per_s"] > 0
    assert summary["trace_removals_per_hour"] == pytest.approx(1.0, rel=0.1)  # 15 removals in 15 h
    assert summary["trace_max_nodes"] == 30
    assert json.loads((tmp_path / "config.json").read_text())["trace"] == spec.params["trace"]


def test_a_rejected_configuration_is_a_row_not_a_crash(tmp_path):
    # microbatch 2 does not divide a global batch of 3 samples: the planner refuses it
    spec = sim_spec(
        "t",
        tracesrc.paper_frequency("1h"),
        policy="oobleck",
        model="GPT-3-medium",
        calibration="planner",
        global_batch=3,
        microbatch_size=2,
    )
    summary = run_sim(spec, tmp_path)
    assert summary["outcome"] == "error" and "multiple" in summary["infeasible_reason"]
    assert math.isnan(summary["avg_samples_per_s"])


def test_options_and_labels_are_checked():
    trace = tracesrc.paper_frequency("1h")
    with pytest.raises(ValueError, match="unknown simulator option.*fault_tolerence"):
        sim_spec("t", trace, policy="oobleck", fault_tolerence=2)
    with pytest.raises(ValueError, match="shadow"):
        sim_spec("t", trace, policy="oobleck", labels={"model": "x"})
    spec = sim_spec("t", trace, system="varuna-nockpt", policy="varuna")
    assert spec.params["system"] == "varuna-nockpt" and spec.params["trace_label"] == "1h"
