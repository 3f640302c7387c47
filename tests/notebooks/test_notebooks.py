"""Every notebook executes on the quick setting (nbclient, a kernel per notebook) and
shows figures; there is one notebook per experiment."""

from __future__ import annotations

from pathlib import Path

import jupytext
import nbformat
import pytest

from experiments.notebook import execute, main
from experiments.registry import all_experiments

from ..conftest import quick_results_dir

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))
TIMEOUT_S = 600  # per cell: a cell may wait for the other test worker's sweep of the same quick setting (the validation: about 4 min)


def test_one_notebook_per_experiment():
    named = {ROOT / e.notebook for e in all_experiments().values()}
    assert named == set(NOTEBOOKS)


def test_no_notebook_shadows_a_package():
    # notebooks run in notebooks/, which is first on the kernel's path
    assert not {p.stem for p in NOTEBOOKS} & {"planner", "sim", "real", "traces", "experiments", "ooblab", "designs"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_quick_and_shows_figures(path, tmp_path_factory, monkeypatch):
    # the session's quick results (test_reproduce fills the same tree; sweeps into it take turns)
    results = quick_results_dir(tmp_path_factory)
    monkeypatch.setenv("OOBLAB_QUICK", "1")
    monkeypatch.setenv("OOBLAB_RESULTS", str(results))
    assert jupytext.read(path).metadata["jupytext"]["text_representation"]["format_name"] == "percent"
    written = execute(path, results / "notebooks" / f"{path.stem}.ipynb", timeout_s=TIMEOUT_S)
    notebook = nbformat.read(written, as_version=4)
    errors = [o for c in notebook.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    images = [o for c in notebook.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "the notebook showed no figure"
    experiment = next(e for e in all_experiments().values() if ROOT / e.notebook == path)
    assert (results / experiment.name / "quick" / "results.parquet").exists()


def test_command_line_names_a_missing_notebook(capsys):
    assert main(["notebooks/nope.py"]) == 2
    assert "no such notebook" in capsys.readouterr().err
