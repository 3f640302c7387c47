"""What `ooblab validate` fits is written as a cost profile that a simulation can name,
and naming it gives the run the validation itself would make with those terms."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from experiments.validation.overheads import Overheads
from sim.config import SimConfig
from sim.cost_profiles import load_file
from sim.run import simulate


def test_the_fitted_terms_make_a_profile_that_prices_as_the_validation_does(tmp_path: Path):
    overheads = Overheads(
        1.5, 20.0, 0.02, 5.0, {}, restart_processes=8, restart_per_process_s=0.25, restart_startup_share=0.4,
        loaded_hop_fixed_s=-0.002, loaded_hop_per_process_s=1e-4, startup_cores=2.0, sync_notice=True,
    )  # fmt: skip
    profile = overheads.cost_profile("testhost, 2026-12-06", loaded_sends=True)
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(profile.to_dict()))
    read = load_file(path)
    assert read == profile and read.costs["loaded_hop_fixed_s"].value == -0.002
    assert (
        read.costs["sync_notice"].value is True
        and "fitted by ooblab validate on testhost" in read.costs["restart_fixed_s"].source
    )
    common: dict[str, Any] = dict(policy="oobleck", calibration="planner", model="gpt3-350m", global_batch=64,
                  trace="spot:nodes=12,hours=3,seed=2")  # fmt: skip
    named = simulate(SimConfig.of(**common, costs=str(path))).summary
    direct = simulate(SimConfig.of(**common, **overheads.sim_options(True))).summary
    assert named == direct
    assert named != simulate(SimConfig.of(**common)).summary  # the terms do change the run
