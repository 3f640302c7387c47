"""The published-results experiment: its rows, and what its quick setting already checks."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments import published
from experiments.base import Setting
from experiments.reproduce import reproduce


def test_rows_say_their_role_and_most_are_predictions():
    roles = [row.role for row in published.ROWS]
    assert set(roles) <= {"calibration", "validation", "sanity"}
    assert (len(roles) - roles.count("calibration")) * 2 >= len(roles)
    assert roles.count("validation") >= roles.count("calibration")
    assert len({row.key for row in published.ROWS}) == len(published.ROWS)


def test_closed_form_by_hand():
    # 1,024 nodes at 5 per 1,000 node-days: 5.12 failures a day; each loses a 600 s restart
    # and half an hour; a 30 s write every hour
    lost = 5.12 / 86400 * (600 + 1800)
    assert published.closed_form_ettr(1024, 5.0, 600.0, 3600.0, 30.0) == pytest.approx((1 - lost) / (1 + 30 / 3600))


@pytest.mark.timeout(120)
def test_the_simulator_meets_the_closed_form_at_1024_nodes(tmp_path):
    """The sanity row at full size (seconds): host failures only, Varuna restarting from its
    hourly checkpoint after each (a loss without notice), within the row's 3 points."""
    from experiments.simrun import run_sim
    from experiments.sweep import run_sweep

    row = next(r for r in published.ROWS if r.key == "closed-form-8k")
    spec = next(s for s in published.specs(Setting(False, None)) if s.params["row"] == row.key)
    table = run_sweep([spec], run_sim, tmp_path, processes=1, progress=False)
    frame = published.summary(table)
    assert frame.loc[0, "passes"] and abs(frame.loc[0, "error"]) <= published.ETTR_POINTS


@pytest.mark.timeout(300)
def test_quick_runs_and_the_restart_row_charges_the_profile(tmp_path):
    """The quick setting's ByteRobust row (2,048 GPUs) is a calibration row: the restart the
    simulator charges is the profile's line plus the checkpoint load, within 25% of 454 s."""
    reproduce("published", quick=True, out_dir=tmp_path, progress=False)
    table = pd.read_parquet(tmp_path / "results.parquet")
    frame = published.summary(table)
    assert list(frame["row"]) == [spec.params["row"] for spec in published.specs(Setting(True, None))]
    restart = frame.set_index("row").loc["byterobust-restart-2k"]
    assert restart["passes"] and 441.3 + 0.0207 * 2048 < restart["predicted"] < 454 * 1.25
    assert (tmp_path / "published.png").exists()


def test_reproduce_costs_reaches_every_planner_run_and_no_other():
    from experiments.registry import get
    from experiments.reproduce import with_costs

    specs = get("frequency").specs(Setting(True, None))
    costed = [with_costs(spec, "h100-datacenter") for spec in specs]
    for before, after in zip(specs, costed):
        planner = before.params.get("calibration") == "planner"
        assert after.params.get("costs") == ("h100-datacenter" if planner else None)
        assert (after.key != before.key) == planner  # a run under other costs is another run
    assert any(s.params.get("calibration") == "planner" for s in specs)
    assert any(s.params.get("calibration") != "planner" for s in specs)


@pytest.mark.timeout(120)
def test_the_initialisation_row_charges_the_profile_and_the_copies(tmp_path):
    """MegaScale's row is calibration: Oobleck's one reconfiguration at 12,288 GPUs costs the
    profile's reconfigure overhead (its 30 s) plus the survivors' layer copies, never less."""
    from experiments.simrun import run_sim
    from experiments.sweep import run_sweep
    from sim.cost_profiles import get

    spec = next(s for s in published.specs(Setting(False, None)) if s.params["row"] == "megascale-init-12k")
    table = run_sweep([spec], run_sim, tmp_path, processes=1, progress=False)
    row = published.summary(table).iloc[0]
    overhead = get("h100-datacenter").costs["reconfigure_overhead_s"].value
    assert table.loc[0, "num_reconfigurations"] == 1
    assert overhead < row["predicted"] < overhead * 1.25 and row["passes"]
