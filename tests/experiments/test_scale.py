"""The scale experiment: Young's interval by hand and as the minimum of its waste model,
the runs it lists, and its quick setting end to end (the runs, what the runner adds, the
derived measures, the figures)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from experiments import scale
from experiments.base import Setting
from experiments.reproduce import results
from planner.checkpoint_interval import young_interval_s
from sim.config import FLAT_KEYS, SimConfig

from ..conftest import session_quick_results

matplotlib.use("Agg")
QUICK = Setting(quick=True, shared=None)
FULL = Setting(quick=False, shared=None)


# -- Young's interval ------------------------------------------------------------------------
def test_young_interval_by_hand():
    assert young_interval_s(100.0, 5000.0) == pytest.approx(1000.0)  # sqrt(2 * 100 * 5000) = sqrt(1e6)
    assert young_interval_s(8.0, 1.0) == pytest.approx(4.0)  # sqrt(16)
    # GPT-3 175B on 64 nodes today: C = 3067.38 s, M = 356,322.7 s -> 46,754 s (13 h)
    assert young_interval_s(3067.381804, 356322.673031) == pytest.approx(46754.2, abs=0.1)


@pytest.mark.parametrize("c, m", [(0.0, 10.0), (-1.0, 10.0), (5.0, 0.0), (5.0, math.inf), (math.nan, 3.0)])
def test_young_interval_rejects_bad_input(c, m):
    with pytest.raises(ValueError):
        young_interval_s(c, m)


@given(st.floats(0.1, 1e4), st.floats(10.0, 1e7), st.floats(0.05, 20.0))
def test_young_interval_minimises_first_order_waste(c, m, scale_by):
    # waste per second of training: C / tau (checkpoints) + tau / (2 M) (half an interval
    # lost per failure); Young's interval is its minimum
    def waste(tau):
        return c / tau + tau / (2.0 * m)

    best = young_interval_s(c, m)
    assert waste(best) <= waste(best * scale_by) * (1 + 1e-12)


# -- the runs --------------------------------------------------------------------------------
def test_specs_cover_sizes_traces_and_designs():
    full = scale.specs(FULL)
    assert len(full) == 2 * 5 * 3 * 3
    assert sorted({s.params["nodes"] for s in full}) == [64, 256, 1024, 4096, 12500]
    quick = scale.specs(QUICK)
    assert len(quick) == 2 * 2 * 1 * 3
    for spec in full + quick:
        p = spec.params
        config = SimConfig.of(**{k: v for k, v in p.items() if k in FLAT_KEYS})
        assert (
            config.job.global_batch == 24 * p["nodes"]
            and config.job.gpus_per_node == 8
            and config.job.gpu == "a100-80gb"
        )
        assert config.design.option("fault_tolerance") == (3 if p["policy"] == "oobleck" else None)
        assert p["young_daly"] == (p["policy"] == "varuna")
        window = scale.DAYS * 86400 if p["trace_kind"] == "datacenter" else scale.HOURS * 3600
        if spec in full:
            assert config.run.duration_s == window
    planned = [s for s in full if s.params["measure_planning"]]
    assert len(planned) == 5 and {s.params["policy"] for s in planned} == {"oobleck"}


def test_mtbf_is_the_generators_expected_rate():
    # Llama 3: 419 unexpected interruptions on 16,384 GPUs in 54 days; 64 hosts = 512 GPUs
    _, mtbf = scale.datacenter_trace(64, 2, 0)
    assert mtbf == pytest.approx(54 * 86400 * (16384 / 512) / 419, rel=1e-3)
    # gcp-a100: 1.35593 bursts per hour at its 64-node capacity; 128 nodes: twice that
    _, mtbf = scale.spot_trace(128, 2, 0)
    assert mtbf == pytest.approx(3600 / (1.35593 * 2), rel=1e-6)


# -- the quick setting, end to end -----------------------------------------------------------
@pytest.fixture(scope="module")
def quick_results(tmp_path_factory):
    # the session's quick tree, shared with test_reproduce and the notebook tests
    with session_quick_results(tmp_path_factory):
        table, out = results("scale", quick=True, progress=False)
    return table, out


def _events(out: Path, key: str) -> list[dict]:
    return [json.loads(line) for line in (out / "runs" / key / "events.jsonl").read_text().splitlines()]


def test_quick_runs_all_train(quick_results):
    table, _ = quick_results
    assert len(table) == len(scale.specs(QUICK))
    assert (table["outcome"] == "ok").all(), table.loc[table["outcome"] != "ok", "infeasible_reason"].tolist()
    assert (table["checkpoint_cost_s"] > 0).all() and (table["plan_samples_per_s"] > 0).all()


def test_varuna_checkpoints_at_youngs_interval(quick_results):
    table, out = quick_results
    varuna = table[table["system"] == "varuna"]
    assert len(varuna) == 4
    for _, run in varuna.iterrows():
        assert run["checkpoint_interval_s"] == pytest.approx(math.sqrt(2 * run["checkpoint_cost_s"] * run["mtbf_s"]))
        config = json.loads((out / "runs" / run["key"] / "config.json").read_text())
        assert config["checkpoint_every_s"] == pytest.approx(run["checkpoint_interval_s"])
        assert config["checkpoint_every_iterations"] is None  # every_s alone: by time only
    # the failure-free run (datacenter, 64 nodes, seed 0 sees no failure in 2 days): the
    # checkpoints come every round(interval / iteration time) iterations
    quiet = varuna[(varuna["trace_kind"] == "datacenter") & (varuna["nodes"] == 64)].iloc[0]
    assert quiet["trace_removals_per_hour"] == 0 and quiet["num_restarts"] == 0
    iteration_s = quiet["samples_per_iteration"] / quiet["plan_samples_per_s"]
    marks = [e["iterations"] for e in _events(out, quiet["key"]) if e["kind"] == "checkpoint"]
    assert len(marks) >= 2
    step = round(quiet["checkpoint_interval_s"] / iteration_s)
    assert all(b - a == step for a, b in zip([0] + marks, marks))


def test_measures_against_the_breakdown(quick_results):
    table, out = quick_results
    ran = scale.measures(table)
    assert len(ran) == len(table)
    assert ((ran["effective_training"] >= 0) & (ran["effective_training"] <= 1 + 1e-9)).all()
    # failure-free runs on one plan: progress at full speed is exactly the useful compute
    quiet = ran[(ran["trace_kind"] == "datacenter") & (ran["nodes"] == 64) & (ran["system"] != "bamboo")]
    assert len(quiet) == 2
    for _, run in quiet.iterrows():
        assert run["effective_training"] == pytest.approx(
            run["breakdown_useful_compute_s"] / run["duration_s"], rel=1e-6
        )
        assert run["samples_per_s_per_gpu"] == pytest.approx(
            run["committed_samples"] / run["duration_s"] / (64 * 8), rel=1e-9
        )
    # copy volume: the CopyLayers bytes of the run's decisions, read back from its events
    for _, run in ran.iterrows():
        moved = sum(
            a.get("bytes", 0)
            for e in _events(out, run["key"])
            if e["kind"] == "decision"
            for a in e["actions"]
            if a["action"] == "CopyLayers"
        )
        assert run["copy_bytes"] == moved
    assert ran.loc[ran["system"] == "oobleck", "copy_bytes"].sum() > 0
    planning = ran[ran["measure_planning"].astype(bool)]
    assert len(planning) == 2 and (planning["planning_s"] > 0).all()
    summary = scale.summary(table)
    assert len(summary) == 2 * 2 * 3 and summary["planning_s"].notna().sum() == 2


def test_figures_from_the_quick_results(quick_results):
    import matplotlib.pyplot as plt

    table, out = quick_results
    figs = scale.figures(table, out)
    assert set(figs) == {
        "scale-effective-training",
        "scale-throughput-per-gpu",
        "scale-copy-volume",
        "scale-checkpoint",
        "scale-planning",
    }
    ett = figs["scale-effective-training"]
    panels = [ax for ax in ett.axes if ax.get_visible() and ax.lines]
    assert len(panels) == 2 and all(len(ax.lines) == 3 for ax in panels)
    for ax in panels:
        for line in ax.lines:
            assert list(line.get_xdata()) == [32, 64]
    for fig in figs.values():
        plt.close(fig)
    nothing = scale.figures(table.assign(outcome="error"), out)
    assert list(nothing) == ["scale"]
    plt.close(nothing["scale"])


def test_summary_table_is_one_row_per_cell(quick_results):
    table, _ = quick_results
    summary = scale.summary(table)
    assert isinstance(summary, pd.DataFrame)
    assert not summary.duplicated(["trace_kind", "nodes", "system"]).any()
