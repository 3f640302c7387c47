"""The simulator's configuration in groups: every flat key reaches one field, old records and
`--set` keys keep meaning what they meant, and the groups hold what their names say."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config import CostConfig, DesignConfig, JobConfig, RunControl, SimConfig
from sim.config_keys import BY_FIELD, KEYS
from sim.cost_terms import PRICED
from sim.errors import SimError


def test_every_field_has_one_flat_key_and_every_key_one_place():
    groups = {"job": JobConfig, "design": DesignConfig, "costs": CostConfig, "run": RunControl}
    places = {(g, f.name) for g, kind in groups.items() for f in dataclasses.fields(kind)}
    assert set(BY_FIELD) == places  # each field named by exactly one flat key
    assert len(set(BY_FIELD.values())) == len(BY_FIELD)
    from designs import registry

    # a design's option is no flat key: it keeps its own name in design_options
    assert not set(KEYS) & set(registry.legacy_fields())
    assert all(KEYS[key][0] == "costs" for key in PRICED)  # what a profile prices is a cost


def test_the_record_of_an_old_run_reads_as_it_was_written():
    """A config.json as written before the groups (flat, every key, `effective_*` beside,
    the options under their older flat names) reads back into the same run; it is written
    again with the option under its own name."""
    from designs import registry

    old = {key: None for key in (*KEYS, *registry.legacy_fields())} | {
        "policy": "bamboo", "model": "gpt3-1.3b", "trace": "fixed:interval=1h", "calibration": "planner", "seed": 3,
        "costs": "h100-datacenter", "global_batch": 512, "bamboo_depth": 4, "checkpoint_every_s": 600.0,
        "design_options": None, "timeline": "changes", "effective_bamboo_depth": 4, "trace_name": "x",
    }  # fmt: skip
    config = SimConfig.from_record(old)
    assert config.design == DesignConfig("bamboo", {"depth": 4}, checkpoint_every_s=600.0)
    assert config.costs.profile == "h100-datacenter" and config.job.global_batch == 512 and config.run.seed == 3
    assert config.to_dict() == {k: v for k, v in old.items() if k in KEYS} | {"design_options": {"depth": 4}}
    assert SimConfig.from_record(config.to_dict()) == config


def test_flat_dotted_and_grouped_keys_build_the_same_config():
    flat = SimConfig.of(policy="bamboo", calibration="planner", global_batch=64, bamboo_depth=3, detect_s=5.0)
    dotted = SimConfig.from_mapping(
        {"design.name": "bamboo", "run.calibration": "planner", "job.global_batch": 64, "design.depth": 3,
         "costs.detect_s": 5.0}
    )  # fmt: skip
    grouped = SimConfig.from_mapping(
        {"design": {"name": "bamboo", "options": {"depth": 3}}, "run": {"calibration": "planner"},
         "job": {"global_batch": 64}, "costs": {"detect_s": 5.0}}
    )  # fmt: skip
    direct = SimConfig(
        JobConfig(global_batch=64), DesignConfig("bamboo", {"depth": 3}), CostConfig(detect_s=5.0),
        RunControl(calibration="planner"),
    )  # fmt: skip
    assert flat == dotted == grouped == direct
    assert flat.to_dict()["design_options"] == {"depth": 3} and "bamboo_depth" not in flat.to_dict()


def test_bad_keys_and_values_are_named_whichever_way_they_come():
    with pytest.raises(SimError, match="unknown config key.*job.speed"):
        SimConfig.from_mapping({"job.speed": 3})
    with pytest.raises(SimError, match="bamboo_depth applies to bamboo, not oobleck"):
        SimConfig.of(calibration="planner", bamboo_depth=2)
    with pytest.raises(SimError, match="global_batch must be a whole number >= 1"):
        SimConfig(JobConfig(global_batch=0), run=RunControl(calibration="planner"))
    with pytest.raises(SimError, match="fault_tolerance has no effect in the artifact calibration"):
        SimConfig(design=DesignConfig("oobleck", {"fault_tolerance": 2}))
    with pytest.raises(SimError, match="internal: SimConfig.job must be a JobConfig"):
        SimConfig(job={"model": "x"})


_VALUES = {
    "global_batch": st.integers(1, 4096), "microbatch_size": st.integers(1, 8), "gpus_per_node": st.integers(1, 8),
    "restart_fixed_s": st.floats(0, 1e4), "detect_hang_s": st.floats(0, 1e4), "node_startup_s": st.floats(0, 1e3),
    "checkpoint_every_s": st.floats(1, 1e5), "seed": st.integers(0, 2**31), "duration_s": st.floats(1, 1e6),
    "reconfigure_cost_factor": st.floats(0, 10),
}  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries({}, optional=_VALUES), st.sampled_from(["oobleck", "varuna", "bamboo"]))
def test_flat_records_round_trip(values, design):
    """Any flat setting reads back from its own record unchanged, key by key."""
    config = SimConfig.of(policy=design, calibration="planner", **values)
    record = config.to_dict()
    assert SimConfig.from_record(json.loads(json.dumps(record))) == config
    assert all(record[key] == value for key, value in values.items())


def test_set_takes_the_dotted_form_on_the_command_line(capsys):
    from ooblab.cli import main

    argv = ["simulate", "--calibration", "planner", "--model", "gpt3-1.3b", "--json", "--no-write"]
    dotted = ["--set", "job.global_batch=64", "--set", "design.fault_tolerance=0", "--set", "costs.detect_s=1"]
    assert main([*argv, *dotted]) == 0
    by_dots = json.loads(capsys.readouterr().out)
    flat = ["--set", "global_batch=64", "--set", "fault_tolerance=0", "--set", "detect_s=1"]
    assert main([*argv, *flat]) == 0
    assert json.loads(capsys.readouterr().out) == by_dots
    assert main(["simulate", "--no-write", "--set", "job.nope=1"]) == 2
    err = capsys.readouterr().err
    assert "unknown config key(s) job.nope" in err and err.count("\n") == 1
