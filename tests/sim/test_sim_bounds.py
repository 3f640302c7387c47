"""A per-iteration timeline stops at its row bound with a one-line error, in both engines,
instead of taking the machine's memory."""

from __future__ import annotations

import pytest

import sim.bounds
from ooblab.cli import main
from sim.config import SimConfig
from sim.errors import SimError
from sim.run import simulate


@pytest.mark.parametrize("calibration", ["planner", "artifact"])
def test_iteration_rows_stop_at_the_bound(monkeypatch, calibration):
    config = SimConfig.of(calibration=calibration, timeline="iterations", duration_s=6 * 3600.0)
    rows = len(simulate(config).timeline)
    monkeypatch.setattr(sim.bounds, "MAX_TIMELINE_ROWS", rows // 2)
    with pytest.raises(SimError, match=f"passed {rows // 2:,} rows at .* h of the 6.0 h run"):
        simulate(config)
    changes = simulate(SimConfig.of(calibration=calibration, duration_s=6 * 3600.0))
    assert len(changes.timeline) < rows // 2  # state changes alone stay under it


def test_the_cli_says_it_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(sim.bounds, "MAX_TIMELINE_ROWS", 100)
    assert main(["simulate", "--calibration", "planner", "--timeline", "iterations", "--no-write"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "use --timeline changes or a shorter --duration-s" in err
