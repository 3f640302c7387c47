"""The table of cost terms is the one place a term is declared: the config record, the flat
keys' checks, the profile format and the `paper` profile all answer from it, and agree."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config import CostConfig, SimConfig
from sim.config_keys import PLANNER_ONLY
from sim.cost_profiles import BUILTIN, CostProfileError, parse
from sim.cost_terms import GROUPS, PRICED, TERMS, within
from sim.errors import SimError
from sim.timing import PlannerCosts

_UNITS = {"s", "s2", "GB/s", "fraction", "cores", "core-s", "$/node-h", "bool", "x"}


def test_every_term_is_one_field_of_the_record_in_the_table_order():
    names = [f.name for f in dataclasses.fields(CostConfig)]
    assert names == ["profile", *TERMS]
    costs = CostConfig(detect_s=5.0)
    assert costs.detect_s == 5.0 and costs.detect_hang_s is None and costs == CostConfig(detect_s=5.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        costs.detect_s = 1.0
    with pytest.raises(TypeError):
        CostConfig(detect_seconds=5.0)  # a key no row declares


def test_each_row_is_complete():
    for key, term in TERMS.items():
        assert term.key == key and term.unit in _UNITS and term.group in GROUPS
        assert term.meaning.strip() and term.source.strip()
        assert term.default is not None or term.default_is.strip(), f"{key}: no default and no word of what applies"
        if term.default is not None:
            assert within(key, term.default), f"{key}: its default is out of its own bounds"
        assert (key in PLANNER_ONLY) == (term.calibrations == ("planner",))


def test_paper_is_the_rows_defaults_and_their_sources():
    paper = BUILTIN["paper"].costs
    expected = {k: t for k, t in PRICED.items() if t.group == "cluster" and t.default is not None}
    assert set(paper) == set(expected)
    for key, cost in paper.items():
        assert (cost.value, cost.unit, cost.source) == (expected[key].default, expected[key].unit, expected[key].source)


def test_the_planner_costs_defaults_are_the_rows():
    costs = PlannerCosts()
    for key in ("reconfigure_overhead_s", "restart_fixed_s", "restart_per_process_s", "restart_startup_share"):
        assert getattr(costs, key) == TERMS[key].default
    assert costs.relaunch_s(1000) == pytest.approx(TERMS["restart_fixed_s"].default + 1000 * 0.003)


def _profile_verdict(key: str, value: object) -> bool:
    data = {
        "format": "ooblab-costs",
        "version": 1,
        "name": "probe",
        "base": "paper",
        "costs": {key: {"value": value, "unit": PRICED[key].unit, "source": "assumed: a probe"}},
    }
    try:
        parse(json.loads(json.dumps(data)), where="probe")
    except CostProfileError:
        return False
    return True


def _config_verdict(key: str, value: object) -> bool:
    extra = {"compute_cores": 1.0, "sample_core_s": 1.0} if key == "sample_core_per_worker_s" else {}
    extra |= (
        {"sample_core_s": 1.0} if key == "compute_cores" else {"compute_cores": 1.0} if key == "sample_core_s" else {}
    )
    try:
        SimConfig.of(calibration="planner", **{key: value, **extra})
    except SimError:
        return False
    return True


VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.sampled_from([0, 0.0, 1, 0.5, 1.0, 1.5, -0.0, -1, True, False, 2000]),
)


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(sorted(PRICED)), value=VALUES)
def test_a_value_is_refused_at_either_door_or_at_neither(key, value):
    """A profile file and --set check a term by the same rule: the row's bound."""
    assert _profile_verdict(key, value) == _config_verdict(key, value) == within(key, value)


def test_the_bounds_say_what_they_mean():
    assert not within("detect_s", -1.0) and within("detect_s", 0.0)
    assert not within("storage_gb_per_s", 0.0) and within("storage_gb_per_s", 0.1)
    assert not within("restart_startup_share", 1.01) and within("restart_startup_share", 1.0)
    assert within("loaded_hop_fixed_s", -3.0) and not within("loaded_hop_fixed_s", math.inf)
    assert within("sync_notice", True) and not within("sync_notice", 1)
    assert not within("detect_s", True)  # a flag is not a number of seconds


def test_ooblab_costs_terms_prints_the_table(capsys):
    from ooblab.cli import main

    assert main(["costs", "--terms", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["key"] for row in rows] == list(TERMS)
    assert all(row["default"] == TERMS[row["key"]].default and row["unit"] == TERMS[row["key"]].unit for row in rows)
    assert main(["costs", "--terms"]) == 0
    text = capsys.readouterr().out
    assert all(f"  {key} " in text for key in TERMS)
    assert main(["costs", "--terms", "paper"]) == 2
    assert "give no profile" in capsys.readouterr().err


def test_the_manual_points_at_the_table():
    manual = (Path(__file__).resolve().parents[2] / "docs" / "simulator.md").read_text()
    assert "sim/cost_terms.py" in manual and "ooblab costs --terms" in manual
