"""The "designs" experiment: which runs it lists, and its measures on a hand-made table."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import matplotlib
import pandas as pd
import pytest

from designs import SIMULATOR, registry
from experiments import designs, tracesrc
from experiments.base import Setting
from sim.config import FLAT_KEYS, SimConfig

matplotlib.use("Agg")
ROOT = Path(__file__).resolve().parents[2]
QUICK = Setting(quick=True, shared=None)
FULL = Setting(quick=False, shared=None)
FIELDS = set(FLAT_KEYS)


def _simulated() -> list[str]:
    return [d.name for d in registry.all_designs() if SIMULATOR in d.runs_on]


def _checkpointing(name: str) -> bool:
    s = registry.get(name).default_checkpoints
    return bool(s.every_iterations or s.every_s)


def test_full_specs_cover_every_design_on_every_trace():
    specs = designs.specs(FULL)
    names = _simulated()
    assert {s.params["policy"] for s in specs} == set(names)
    assert {s.params["calibration"] for s in specs} == {"planner"}
    thirty = len(tracesrc.FREQUENCIES) + len(tracesrc.ARTIFACT_SPOT) + len(tracesrc.real_traces(None))
    runs_per_cell = len(names) + sum(_checkpointing(n) for n in names)
    assert len(specs) == (thirty * 5 + len(designs.DC_SIZES)) * runs_per_cell
    dc = [s for s in specs if s.params["family"] == "datacenter"]
    assert {s.params["global_batch"] for s in dc} == {24 * n for n in designs.DC_SIZES}
    assert {s.params["trace"] for s in dc} == {f"datacenter:gpus={8 * n},days=7,seed=0" for n in designs.DC_SIZES}
    # every (trace, model) cell holds each design once with its default schedule
    cells = Counter((s.params["trace"], s.params["model"]) for s in specs if s.params["schedule"] == "default")
    assert set(cells.values()) == {len(names)}
    adaptive = [s for s in specs if s.params["schedule"] != "default"]
    assert adaptive and all(s.params["checkpoint_adaptive"] == "daly" for s in adaptive)
    assert all(s.params["system"] == f"{s.params['policy']}+daly" for s in adaptive)
    for spec in specs:
        SimConfig.of(**{k: v for k, v in spec.params.items() if k in FIELDS})  # a valid config


@pytest.fixture
def isolated_registry(monkeypatch):
    """The design registry as it is, restored after the test: a design loaded here would
    otherwise join every later experiment in this worker (the session's quick `designs`
    table then held 32 runs where a fresh process, a notebook's kernel, makes 28)."""
    registry.all_designs()  # the built-in ones loaded before the copy
    monkeypatch.setattr(registry, "_designs", dict(registry._designs))
    monkeypatch.setattr(registry, "_files", dict(registry._files))


def test_a_design_loaded_from_a_file_joins_the_experiment(isolated_registry):
    registry.load_file(ROOT / "examples" / "designs" / "restart")
    assert "restart" in {s.params["policy"] for s in designs.specs(QUICK)}


def test_quick_specs_are_few():
    specs = designs.specs(QUICK)
    names = _simulated()
    # 1h and P3 with GPT-3-medium, the 16-node datacenter job; adaptive variants on 1h only
    assert len(specs) == 3 * len(names) + sum(_checkpointing(n) for n in names)
    assert len(specs) <= 60


def _row(policy, trace, samples, cost, schedule="default", outcome="ok", **breakdown):
    system = policy if schedule == "default" else f"{policy}+daly"
    parts = {f"breakdown_{k}": breakdown.get(k, 0.0) for k, _, _ in designs.plots.BREAKDOWN_FIELDS}
    parts["breakdown_useful_compute_s"] = breakdown.get("useful_compute_s", 100.0)
    return {
        "policy": policy,
        "system": system,
        "schedule": schedule,
        "family": "frequency",
        "trace_key": trace,
        "trace_label": trace,
        "model": "GPT-3-medium",
        "outcome": outcome,
        "committed_samples": samples,
        "duration_s": 100.0,
        "cost_usd": cost,
        **parts,
    }


def test_measures_and_summary_by_hand(capsys):
    table = pd.DataFrame(
        [
            _row("oobleck", "1h", 1000.0, 10.0, checkpoint_s=5.0),
            _row("varuna", "1h", 500.0, 10.0, restart_s=20.0, checkpoint_s=2.0),
            _row("oobleck", "10m", 400.0, 10.0, lost_work_s=30.0),
            _row("varuna", "10m", 800.0, 4.0, restart_s=1.0),
            _row("varuna", "10m", 1200.0, 4.0, schedule="adaptive (daly)"),
            _row("bamboo", "10m", 0.0, 10.0, outcome="infeasible"),
        ]
    )
    m = designs.measures(table).set_index(["system", "trace_key"])
    # samples/s over 100 s; the best default design per trace: oobleck 10/s on 1h, varuna 8/s on 10m
    assert m.loc[("varuna", "1h"), "share_of_best"] == pytest.approx(0.5)
    assert m.loc[("oobleck", "10m"), "share_of_best"] == pytest.approx(0.5)
    assert m.loc[("varuna+daly", "10m"), "share_of_best"] == pytest.approx(1.5)  # not its own reference
    assert m.loc[("varuna", "10m"), "usd_per_m"] == pytest.approx(4.0 / 800.0 * 1e6)
    assert m.loc[("bamboo", "10m"), "note"] == "OOM" and pd.isna(m.loc[("bamboo", "10m"), "share_of_best"])
    s = designs.summary(table).set_index("design")
    assert s.loc["oobleck", "frequency"] == pytest.approx(0.75)  # (1 + 0.5) / 2
    assert s.loc["oobleck", "wins"] == 1 and s.loc["varuna", "wins"] == 1
    # cost per sample vs the cheapest design of the run: oobleck 1h 1.0, 10m (10/400)/(4/800) = 5
    assert s.loc["oobleck", "cost_vs_cheapest"] == pytest.approx(3.0)
    assert s.loc["oobleck", "largest_loss"] == "lost work"  # 30 s over checkpoints' 5 s
    assert s.loc["varuna", "largest_loss"] == "restart"
    assert s.loc["varuna", "adaptive_gain"] == pytest.approx(1.5)  # 12/s against 8/s on 10m
    assert s.loc["bamboo", "untrained"] == 1
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("| design |") and len(printed) == 2 + 3
    assert printed[2].startswith("| Oobleck | 0.75 |")  # the registry's display name


def test_figures_from_a_hand_table(tmp_path):
    table = pd.DataFrame(
        [
            _row("oobleck", "1h", 1000.0, 10.0),
            _row("varuna", "1h", 500.0, 10.0),
            _row("varuna", "1h", 600.0, 10.0, schedule="adaptive (daly)"),
        ]
    )
    figs = designs.figures(table, tmp_path)
    assert set(figs) == {"designs-throughput", "designs-cost", "designs-breakdown", "designs-adaptive"}


def _texts(fig) -> list[str]:
    """Every piece of text a figure draws (titles, tick labels, legend entries, notes)."""
    return [t.get_text() for t in fig.findobj(matplotlib.text.Text) if t.get_text()]


def test_every_quick_figure_names_each_design_by_its_display_name_only(tmp_path, monkeypatch):
    from experiments.reproduce import reproduce

    monkeypatch.setenv("OOBLAB_RESULTS", str(tmp_path))
    done = reproduce("designs", quick=True, progress=False)
    figs = designs.figures(done.table, done.out_dir)
    simulated = [d for d in registry.all_designs() if SIMULATOR in d.runs_on]
    raw = {d.name for d in simulated if d.label != d.name}
    assert raw, "the check needs designs whose display name differs from the registry's"
    for name, fig in figs.items():
        words = {w for text in _texts(fig) for w in re.findall(r"[A-Za-z_]+", text)}
        assert not words & raw, (name, sorted(words & raw))
    shown = " ".join(_texts(figs["designs-throughput"]))
    assert all(d.label in shown for d in simulated), shown
