"""One construction of the policies for both engines (planner/policies/build.py)."""

from __future__ import annotations

import pytest

from planner.errors import PlannerError
from planner.policies import CheckpointSchedule, OobleckPolicy
from planner.policies.build import PolicyOptions, build_policy
from planner.reconfigure import DEFAULT_JOIN_HORIZON_S


def test_options_reach_the_policy_and_the_join_horizon_has_one_default():
    schedule = CheckpointSchedule(every_iterations=7)
    oobleck = build_policy(
        "oobleck", PolicyOptions(schedule, join_horizon_s=60.0, reconfigure_pause_s=2.5), planner=object()
    )
    assert isinstance(oobleck, OobleckPolicy)
    assert (oobleck.join_horizon_s, oobleck.reconfigure_pause_s, oobleck.checkpoints) == (60.0, 2.5, schedule)
    assert build_policy("oobleck", PolicyOptions(schedule), planner=object()).join_horizon_s == DEFAULT_JOIN_HORIZON_S


def test_the_simulator_and_the_real_backend_get_the_same_default():
    from real.config import RunConfig
    from sim.config import SimConfig

    assert RunConfig().join_horizon_s == DEFAULT_JOIN_HORIZON_S
    assert SimConfig.__dataclass_fields__["join_horizon_s"].default is None  # None: the planner's default


@pytest.mark.parametrize(
    "name, inputs", [("oobleck", {}), ("varuna", {}), ("bamboo", {}), ("nonesuch", {"planner": object()})]
)
def test_missing_inputs_and_unknown_names_are_one_line_errors(name, inputs):
    with pytest.raises(PlannerError, match=name if name == "nonesuch" else "needs"):
        build_policy(name, PolicyOptions(CheckpointSchedule()), **inputs)
