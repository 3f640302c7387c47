"""The loaded-send calibration's arithmetic (`experiments.validation.loaded_hops`): the
groupings it forces, the bisection against the simulator's own timing, and the line."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.validation.loaded_hops import HopProbe, fit_line, probe, probe_groupings, solve_hop_extra_s
from experiments.validation.spec import synthetic_profile
from planner.oobleck_format import write_oobleck_profile
from planner.plan import JobSpec
from planner.planner import Planner
from sim.loaded_hops import LoadedHops, send_rate_per_s
from sim.setup import build

from ..sim.profile_runs import profile_run_config


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        (4, []),
        (8, [(2, 2), (2, 2, 2, 2)]),
        (16, [(4, 4), (4, 4, 4, 4)]),
        (30, [(7, 7), (7, 7, 7, 7)]),
        (32, [(8, 8), (8, 8, 8, 8)]),
        (48, [(8, 8), (8,) * 6]),
    ],
)
def test_groupings_force_two_and_then_all_pipelines_of_a_quarter_of_the_nodes(nodes, expected):
    assert probe_groupings(nodes) == expected
    for groups in expected:
        assert sum(groups) <= nodes and len(groups) >= 2  # f = 1 holds on each


@settings(max_examples=50, deadline=None)
@given(base=st.floats(0.1, 1.0), per=st.floats(1.0, 50.0), target=st.floats(-0.002, 0.05))
def test_the_bisection_finds_the_extra_of_a_linear_timing(base, per, target):
    floor = 0.0015
    measured = base + per * max(target, -floor)
    found = solve_hop_extra_s(lambda x: base + per * max(x, -floor), measured, floor)
    assert found == pytest.approx(max(target, -floor), abs=1e-6)


def test_a_measurement_faster_than_free_sends_is_held_at_the_floor():
    assert solve_hop_extra_s(lambda x: 1.0 + x, 0.5, 0.002) == -0.002


def test_the_line_passes_through_two_probes_by_processes_and_never_slopes_down():
    a = HopProbe((2, 2), 0.5, 0.45, 100.0, 0.001, processes=4)
    b = HopProbe((2, 2, 2, 2), 0.6, 0.45, 300.0, 0.005, processes=8)
    fixed, per_process = fit_line([a, b])
    assert per_process == pytest.approx(0.004 / 4) and fixed + per_process * 4 == pytest.approx(0.001)
    # the send rate plays no part (the evening's fit used it)
    assert fit_line([replace(a, sends_per_s=900.0), b]) == (pytest.approx(fixed), pytest.approx(per_process))
    assert fit_line([b, replace(a, processes=12)]) == (pytest.approx(0.003), 0.0)
    assert fit_line([a, replace(b, processes=4)]) == (pytest.approx(0.003), 0.0)
    assert fit_line([a]) == (0.001, 0.0) and fit_line([]) == (0.0, 0.0)


def test_a_probe_solves_the_extra_that_makes_the_simulator_take_the_measured_time(tmp_path):
    """A 'measurement' made by the simulator itself with a known extra comes back out."""
    directory = tmp_path / "profile"
    write_oobleck_profile(synthetic_profile(), directory)
    config = profile_run_config(directory)

    def timing_for(extra_s):
        return build(config.with_(loaded_hop_fixed_s=extra_s or None)).timing

    twin = timing_for(0.001)
    while not isinstance(twin, LoadedHops):
        twin = twin.inner
    planner = Planner(twin.scaler.profile, twin.scaler.cluster, JobSpec(16, 1, 1))
    plan = planner.build_plan([["a", "b"], ["c", "d"]])
    known = 0.0031
    measured = timing_for(known).iteration(plan).total_s
    found = probe(plan, measured, timing_for, floor_s=0.0)
    assert found.extra_s == pytest.approx(known, abs=1e-6)
    assert found.pipelines == (2, 2) and found.sends_per_s == pytest.approx(send_rate_per_s(plan))
    assert found.processes == 4
    assert found.simulated_s == pytest.approx(plan.iteration_time_s)


def test_the_simulator_gets_the_constants_only_where_the_validation_asked_for_them():
    from experiments.validation.overheads import Overheads

    o = Overheads(1.0, 20.0, 0.01, 5.0, {}, loaded_hop_fixed_s=-0.002, loaded_hop_per_process_s=1e-4)
    assert not any(k.startswith("loaded_hop") for k in o.sim_options())
    options = o.sim_options(True)
    assert options["loaded_hop_fixed_s"] == -0.002 and options["loaded_hop_per_process_s"] == 1e-4
    assert options["loaded_hop_slope_s2"] == 0.0


def test_the_option_is_for_emulated_compute_and_reaches_the_spec_from_the_command_line():
    import argparse

    from experiments.validation.cli import register, spec_from_args
    from experiments.validation.spec import TINY_GPT, ValidationError, ValidationSpec

    with pytest.raises(ValidationError, match="loaded_sends calibrates emulated compute"):
        ValidationSpec(compute="real", model=TINY_GPT, loaded_sends=True)
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["validate", "--nodes", "16", "--loaded-sends"])
    assert spec_from_args(args).loaded_sends is True
    assert spec_from_args(parser.parse_args(["validate"])).loaded_sends is False
