"""Each experiment produces the runs it claims: counts, parameters, and valid configs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from experiments import cost, fault_tolerance, frequency, planning, rates, real_traces, sensitivity, spot
from experiments.base import Setting
from experiments.registry import UnknownExperiment, all_experiments, get
from experiments.tracesrc import REAL_TRACES
from sim.config import FLAT_KEYS, SimConfig

SHARED = Path(__file__).resolve().parents[3] / "shared"
HAVE_SHARED = (SHARED / "traces").is_dir()
FULL = Setting(quick=False, shared=SHARED if HAVE_SHARED else None)
QUICK = Setting(quick=True, shared=None)
CONFIG_FIELDS = set(FLAT_KEYS)
MODELS = {"BERT-large", "GPT-2-ours", "GPT-3-medium", "GPT-3-2_7b", "GPT-3-6_7b"}


def config_of(spec) -> SimConfig:
    return SimConfig.of(**{k: v for k, v in spec.params.items() if k in CONFIG_FIELDS})


@pytest.mark.parametrize("setting", [FULL, QUICK], ids=["full", "quick"])
def test_every_experiment_lists_distinct_valid_runs(setting):
    for experiment in all_experiments().values():
        specs = experiment.specs(setting)
        assert specs, experiment.name
        assert len({s.key for s in specs}) == len(specs), f"{experiment.name}: the same run twice"
        assert {s.experiment for s in specs} == {experiment.name}
        for spec in specs:
            if spec.kind == "sim":
                config_of(spec)  # raises on any invalid option


def test_quick_settings_are_small():
    for experiment in all_experiments().values():
        assert len(experiment.specs(QUICK)) <= 60, experiment.name


def test_frequency_runs_figure_9_and_13():
    specs = frequency.specs(FULL)
    assert len(specs) == 2 * 5 * 5 * 4
    cells = Counter((s.params["calibration"], s.params["model"], s.params["trace"]) for s in specs)
    assert set(cells.values()) == {4} and len(cells) == 50
    assert {s.params["model"] for s in specs} == MODELS
    assert {s.params["trace"] for s in specs} == {
        f"fixed:interval={f},hour_decimals=3" for f in ("6h", "3h", "1h", "30m", "10m")
    }
    nockpt = [s for s in specs if s.params["system"] == "varuna-nockpt"]
    assert len(nockpt) == 50
    assert all(
        s.params["policy"] == "varuna"
        and s.params["checkpoint_cost_factor"] == 0.0
        and s.params["checkpoint_every_iterations"] == 2
        for s in nockpt
    )
    plain = [s for s in specs if s.params["system"] != "varuna-nockpt"]
    assert all("checkpoint_cost_factor" not in s.params and s.params["system"] == s.params["policy"] for s in plain)
    assert len(frequency.specs(QUICK)) == 2 * 2 * 3 * 4


def test_spot_uses_the_paper_traces_and_settings():
    specs = spot.specs(FULL)
    assert len(specs) == 2 * 5 * 2 * 3
    assert all(s.params["timeline"] == "iterations" for s in specs)

    def rollback(s):  # Varuna's option, under its own name in the design's options
        return (s.params.get("design_options") or {}).get("rollback")

    no_rollback = {(s.params["model"]) for s in specs if rollback(s) is False}
    assert no_rollback == {"BERT-large", "GPT-2-ours", "GPT-3-medium"}
    assert all(
        s.params["calibration"] == "artifact" and s.params["policy"] == "varuna"
        for s in specs
        if rollback(s) is not None
    )
    if HAVE_SHARED:
        assert {s.params["trace"] for s in specs} == {
            "shared:oobleck-artifact/scaled/scale_gcp-trace.csv",
            "shared:oobleck-artifact/scaled/scale_p3-trace.csv",
        }


def test_without_shared_the_spot_traces_are_labelled_lookalikes():
    specs = spot.specs(QUICK)
    refs = {s.params["spot"]: (s.params["trace"], s.params["trace_label"]) for s in specs}
    assert refs["gcp"][0] == "spot:profile=g4dn,seed=0|rescale=15-30"
    assert refs["p3"][0] == "spot:profile=p3,seed=0|rescale=15-30"
    assert all("generated look-alike" in label for _, label in refs.values())


def test_cost_adds_an_on_demand_cluster_per_model_and_system():
    specs = cost.specs(FULL)
    ondemand = [s for s in specs if s.params["market"] == "on-demand"]
    assert len(ondemand) == 2 * 5 * 3
    assert all(
        s.params["price_per_node_hour"] == 3.06 and s.params["trace"] == "fixed:interval=12h,nodes=30,removals=1"
        for s in ondemand
    )
    spot_runs = [s for s in specs if s.params["market"] == "spot"]
    assert len(spot_runs) == 2 * 5 * 5 * 3 and all("price_per_node_hour" not in s.params for s in spot_runs)


def test_sensitivity_scales_one_pause_kind_at_a_time():
    specs = sensitivity.specs(FULL)
    assert len(specs) == 2 * 2 * 2 * 3 * 7 * 3
    for spec in specs:
        set_factors = {k: v for k, v in spec.params.items() if k.endswith("_cost_factor")}
        if spec.params["factor"] == 1.0:
            assert set_factors == {}
        else:
            assert set_factors == {f"{spec.params['knob']}_cost_factor": spec.params["factor"]}


def test_fault_tolerance_sweeps_f_and_burst_sizes_in_the_planner_calibration():
    specs = fault_tolerance.specs(FULL)
    assert {s.params["calibration"] for s in specs} == {"planner"} and {s.params["policy"] for s in specs} == {
        "oobleck"
    }
    generated = [s for s in specs if s.params["burst"] > 0]
    assert len(generated) == 3 * 4 * 6 * 5
    assert {s.params["design_options"]["fault_tolerance"] for s in specs} == {0, 1, 2, 3}
    assert all(
        f"burst={s.params['burst']:g}" in s.params["trace"] and f"seed={s.params['trace_seed']}" in s.params["trace"]
        for s in generated
    )
    assert len(specs) - len(generated) == 3 * 4 * 2  # the paper's two spot traces


def test_rates_sweep_seeds_and_rates():
    specs = rates.specs(FULL)
    assert len(specs) == 2 * 3 * 5 * 5 * 3
    assert {s.params["rate"] for s in specs} == set(rates.RATES)
    assert {s.params["trace_seed"] for s in specs} == set(range(5))


def test_real_traces_cover_every_usable_shared_trace():
    specs = real_traces.specs(FULL)
    traces = {s.params["trace"] for s in specs}
    if HAVE_SHARED:
        assert traces == {f"shared:{t.path}|peak=30" for t in REAL_TRACES}
    assert len(specs) == 2 * 5 * 3 * len(traces)
    lookalikes = {s.params["trace"] for s in real_traces.specs(Setting(quick=False, shared=None))}
    assert lookalikes == {f"spot:profile={t.lookalike},seed=0|peak=30" for t in REAL_TRACES if t.lookalike}


def test_planner_parts():
    counts = Counter(s.params["part"] for s in planning.specs(FULL))
    assert counts == {"templates": 5, "throughput": 3 * 4, "timing": 6 * 4}
    assert get("planner").processes == 1  # timings run one at a time


def test_unknown_experiment_is_named():
    with pytest.raises(UnknownExperiment, match="unknown experiment 'nope'; known: frequency, spot"):
        get("nope")
