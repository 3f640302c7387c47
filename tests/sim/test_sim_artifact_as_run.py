"""`--calibration artifact-as-run` against the artifact's own outputs, and its switches.

The reference table (tests/sim/data/artifact_as_run_reference.csv) is the public artifact
run as published: SymbioticLab/Oobleck, branch sosp23-artifact, commit 7966556, its
tools/simulator/ extracted to /tmp/artifact (`git archive sosp23-artifact tools/simulator`),
and a driver run from tools/simulator/ with this project's venv Python (the simulators
need only the standard library; the eval scripts' plotting imports were bypassed). The
driver builds, for each model and trace, the three simulators exactly as
eval_tput_vs_freq.py does for traces/{6h,3h,1h,30m,10m}.csv (seed=None, start_hour=0,
generate_addition_probabilities=None, removal_probability=None, generate_graphs=False,
steps_per_run=200000, time_hard_stop=True; Varuna no_small_model_fallback=False) and as
eval_gcp_ec2.py does for traces/scaled/scale_{gcp,p3}-trace.csv (time_hard_stop=True,
detail_res=True; Varuna and Oobleck steps_per_run=2000000000, Varuna
no_small_model_fallback=True; Bamboo steps_per_run unset), calls `simulate()` with stdout
discarded, and writes `result.average_performance` and `num_steps_complete`. The 105 runs
took 50 s.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

import traces
from sim.artifact_quirks import AS_RUN, STATED, ArtifactQuirks, is_paper_spot_trace
from sim.artifact_replay import Replay
from sim.config import SimConfig
from sim.errors import SimError
from sim.run import simulate

REFERENCE = Path(__file__).with_name("data") / "artifact_as_run_reference.csv"
FILES = {f: f"{f}.csv" for f in ("6h", "3h", "1h", "30m", "10m")} | {
    "gcp": "scaled/scale_gcp-trace.csv",
    "p3": "scaled/scale_p3-trace.csv",
}


def reference() -> list[dict[str, str]]:
    with open(REFERENCE, newline="") as handle:
        return list(csv.DictReader(line for line in handle if not line.startswith("#")))


@pytest.fixture(scope="module")
def artifact_traces(shared_dir):
    folder = shared_dir / "traces" / "oobleck-artifact"
    return {label: (str(folder / name), traces.load(folder / name)) for label, name in FILES.items()}


def test_the_reference_table_covers_the_105_published_cells():
    rows = reference()
    cells = {(r["system"], r["model"], r["trace"]) for r in rows}
    assert len(rows) == len(cells) == 105
    headline = {(r["system"], r["trace"]): float(r["samples_per_s"]) for r in rows if r["model"] == "GPT-3-6_7b"}
    assert headline[("oobleck", "10m")] / headline[("varuna", "10m")] == pytest.approx(13.9, abs=0.05)


def test_every_published_cell_within_one_percent(artifact_traces):
    misses = []
    for r in reference():
        path, trace = artifact_traces[r["trace"]]
        config = SimConfig.of(policy=r["system"], model=r["model"], trace=path, calibration="artifact-as-run")
        got = simulate(config, trace=trace).summary.avg_samples_per_s
        want = float(r["samples_per_s"])
        if abs(got - want) > 0.01 * want + (1e-9 if want == 0 else 0):
            misses.append((r["system"], r["model"], r["trace"], want, got))
    assert not misses, misses


def test_the_replay_with_every_switch_off_is_the_stated_model(artifact_traces):
    """Two independent implementations: the event-heap replay with all ten off against
    the simpy engine's `artifact` calibration within 0.35% on the cells of the 1h, 10m and
    both spot traces (measured on all 105: 104 within 0.3%, Bamboo GPT-2 on p3 0.32%; the
    long traces are left out to keep this test at about 2 s)."""
    worst = 0.0
    for r in (r for r in reference() if r["trace"] in ("1h", "10m", "gcp", "p3")):
        path, trace = artifact_traces[r["trace"]]
        stated = simulate(SimConfig.of(policy=r["system"], model=r["model"], trace=path), trace=trace)
        rollback = (stated.config.get("effective_design_options") or {}).get("rollback", True)
        replay = Replay(
            trace, r["system"], r["model"], STATED, rollback=rollback, node_startup_s=45, price_per_node_hour=0.91
        )
        got, want = replay.run().avg_samples_per_s(), stated.summary.avg_samples_per_s
        worst = max(worst, abs(got - want) / want if want else abs(got))
    assert worst < 0.0035


@pytest.mark.parametrize(
    "quirk, system, model, label",
    [
        ("stale_timeouts", "oobleck", "BERT-large", "p3"),
        ("train_through_pause", "varuna", "GPT-3-6_7b", "10m"),
        ("varuna_checkpoint_scan", "varuna", "GPT-3-6_7b", "gcp"),
        ("bamboo_slow_on_any_removal", "bamboo", "BERT-large", "p3"),
        ("eval_spot_no_rollback", "varuna", "GPT-2-ours", "p3"),
    ],
)
def test_each_switch_moves_a_published_cell(artifact_traces, quirk, system, model, label):
    path, trace = artifact_traces[label]
    base = SimConfig.of(policy=system, model=model, trace=path, calibration="artifact-as-run")
    on = simulate(base, trace=trace).summary.avg_samples_per_s
    off = simulate(base.with_(artifact_quirks=f"-{quirk}"), trace=trace).summary.avg_samples_per_s
    assert abs(on - off) > 0.01 * max(on, off), (on, off)


def test_the_run_records_its_quirks_and_rollback(artifact_traces):
    path, trace = artifact_traces["gcp"]
    result = simulate(SimConfig.of(policy="varuna", model="BERT-large", trace=path), trace=trace)
    assert result.config["effective_artifact_quirks"] == "eval_spot_no_rollback"
    assert result.config["effective_design_options"]["rollback"] is False
    assert "spot" in result.config["varuna_rollback_why"]
    big = simulate(SimConfig.of(policy="varuna", model="GPT-3-6_7b", trace=path), trace=trace)
    assert big.config["effective_design_options"]["rollback"] is True
    path, trace = artifact_traces["10m"]
    freq = simulate(SimConfig.of(policy="varuna", model="BERT-large", trace=path), trace=trace)
    assert freq.config["effective_design_options"]["rollback"] is True
    given = simulate(
        SimConfig.of(
            policy="varuna", model="BERT-large", trace=path, calibration="artifact-as-run", varuna_rollback=False
        ),
        trace=trace,
    )
    assert given.config["effective_design_options"]["rollback"] is False
    assert len(given.config["effective_artifact_quirks"].split(",")) == 10


def test_quirk_names_parse_and_bad_ones_are_rejected():
    assert ArtifactQuirks.parse("all", STATED) == AS_RUN
    assert ArtifactQuirks.parse(None, STATED) == STATED
    assert not ArtifactQuirks.parse("none", AS_RUN).any()
    assert ArtifactQuirks.parse("-stale_timeouts", STATED) == AS_RUN.without("stale_timeouts")
    assert ArtifactQuirks.parse("bamboo_heap_order", STATED).on() == ("bamboo_heap_order",)
    with pytest.raises(SimError, match="unknown artifact quirk"):
        ArtifactQuirks.parse("stale", STATED)
    with pytest.raises(SimError, match="not both"):
        ArtifactQuirks.parse("stale_timeouts,-bamboo_heap_order", STATED)
    with pytest.raises(SimError, match="no effect in the planner calibration"):
        SimConfig.of(calibration="planner", artifact_quirks="all")
    with pytest.raises(SimError, match="cannot be set when the artifact's code is replayed"):
        simulate(SimConfig.of(policy="varuna", calibration="artifact-as-run", checkpoint_every_iterations=5))
    assert is_paper_spot_trace("../shared/traces/oobleck-artifact/scaled/scale_p3-trace.csv")
    assert not is_paper_spot_trace("fixed:interval=10m")


def test_an_as_run_simulation_is_deterministic_and_accounts_for_its_time():
    config = SimConfig.of(
        policy="bamboo", model="BERT-large", trace="fixed:interval=30m", calibration="artifact-as-run"
    )
    a, b = simulate(config), simulate(config)
    assert a.summary == b.summary and a.timeline == b.timeline and a.events == b.events
    assert a.summary.breakdown.total_s() == pytest.approx(a.summary.duration_s, rel=1e-9)
    assert a.summary.avg_samples_per_s > 0 and a.timeline[-1].state == "finished"
