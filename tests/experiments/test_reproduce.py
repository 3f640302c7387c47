"""`ooblab reproduce`: every experiment's quick setting writes its table and its figures
as PNG and PDF; finished runs are not run again; bad input is named."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments import tracesrc
from experiments.base import Setting
from experiments.paths import shared_dir
from experiments.registry import all_experiments
from experiments.reproduce import reproduce
from ooblab.cli import main

from ..conftest import quick_results_dir


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setenv("OOBLAB_RESULTS", str(tmp_path))
    return tmp_path


@pytest.fixture
def session_results(tmp_path_factory, monkeypatch):
    """One results tree per test session, shared with the notebook tests (which then load
    the quick runs instead of repeating them)."""
    path = quick_results_dir(tmp_path_factory)
    monkeypatch.setenv("OOBLAB_RESULTS", str(path))
    return path


def test_reproduce_all_quick_writes_every_table_and_figure(session_results, capsys):
    results = session_results
    assert main(["reproduce", "all", "--quick", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    for name, experiment in all_experiments().items():
        out = results / name / "quick"
        table = pd.read_parquet(out / "results.parquet")
        assert len(table) == len(experiment.specs(Setting(quick=True, shared=shared_dir())))
        pngs = sorted(out.glob("*.png"))
        assert pngs, name
        assert all(p.with_suffix(".pdf").exists() and p.stat().st_size > 5000 for p in pngs)
        assert f"{name}: {len(table)} runs" in printed
    # the paper's figures, each in both calibrations
    for figure in ("fig01", "fig09", "fig10", "fig12", "fig13", "fig14", "fig15"):
        for calibration in ("artifact", "planner"):
            assert list(results.glob(f"*/quick/{figure}-{calibration}*.png")), (figure, calibration)


def test_finished_runs_are_skipped(results):
    first = reproduce("cost", quick=True, progress=False)
    stamps = {p: p.stat().st_mtime_ns for p in first.out_dir.glob("runs/*/summary.json")}
    second = reproduce("cost", quick=True, progress=False)
    assert {p: p.stat().st_mtime_ns for p in second.out_dir.glob("runs/*/summary.json")} == stamps
    pd.testing.assert_frame_equal(first.table, second.table)


def test_spot_without_shared_uses_labelled_lookalikes(results, monkeypatch):
    monkeypatch.setenv("OOBLAB_SHARED", "")
    tracesrc.resolve.cache_clear()
    done = reproduce("spot", quick=True, progress=False)
    tracesrc.resolve.cache_clear()
    assert done.table["trace_label"].str.contains("generated look-alike").all()
    assert (done.out_dir / "fig15-planner.png").exists()


def test_list_names_every_experiment(capsys):
    assert main(["reproduce", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(all_experiments())
    assert any("[paper Figures 9, 13]" in line for line in lines)


def test_bad_input_is_named(capsys, results):
    assert main(["reproduce", "nosuch"]) == 2
    assert "unknown experiment 'nosuch'; known: frequency" in capsys.readouterr().err
    assert main(["reproduce"]) == 2
    assert "name an experiment" in capsys.readouterr().err
    assert main(["reproduce", "all", "--out", "x"]) == 2
    assert main(["reproduce", "cost", "--processes", "0"]) == 2


def test_a_truncated_summary_is_run_again(results):
    first = reproduce("cost", quick=True, progress=False)
    victim = sorted(first.out_dir.glob("runs/*/summary.json"))[0]
    victim.write_text(victim.read_text()[:40])  # cut short, as by a full disk or a kill
    second = reproduce("cost", quick=True, progress=False)
    pd.testing.assert_frame_equal(first.table, second.table)
    assert victim.read_text().endswith("}\n")
