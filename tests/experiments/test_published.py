"""The published-results experiment: its rows, and what its quick setting already checks."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments import published
from experiments.base import Setting
from experiments.reproduce import reproduce


def test_rows_say_their_role_and_most_are_predictions():
    roles = [row.role for row in published.ROWS]
    assert set(roles) <= {"calibration", "validation"}
    assert roles.count("validation") * 2 >= len(roles)
    assert len({row.key for row in published.ROWS}) == len(published.ROWS)


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
