"""The design registry: the paper's designs as its first entries, options checked by name,
type and value, designs from files and from entry points, and one-line errors (exit 2)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from designs import BuildContext, Design, DesignError, PolicyBuild, option, registry
from designs.oobleck.policy import OobleckPolicy
from designs.options import as_dict, make_options, specs
from ooblab.cli import main
from planner.policies import CheckpointSchedule
from planner.reconfigure import DEFAULT_JOIN_HORIZON_S

REPO = Path(__file__).resolve().parents[2]


def test_the_paper_designs_come_first_and_say_where_they_run():
    assert registry.names()[:3] == ("oobleck", "bamboo", "varuna")
    where = {d.name: d.runs_on for d in registry.all_designs()}
    assert where["oobleck"] == where["varuna"] == ("simulator", "real") and where["bamboo"] == ("simulator",)
    assert registry.legacy_fields() == {
        "fault_tolerance": ("oobleck",),
        "join_horizon_s": ("oobleck",),
        "min_nodes": ("oobleck", "varuna"),
        "bamboo_depth": ("bamboo",),
        "varuna_max_microbatch": ("varuna",),
        "varuna_rollback": ("varuna",),
    }


def test_ooblab_designs_json_lists_every_option_with_type_default_unit_and_doc(capsys):
    assert main(["designs", "--json"]) == 0
    listed = {d["name"]: d for d in json.loads(capsys.readouterr().out)}
    horizon = {o["name"]: o for o in listed["oobleck"]["options"]}["join_horizon_s"]
    assert (horizon["type"], horizon["default"], horizon["unit"]) == ("float", DEFAULT_JOIN_HORIZON_S, "s")
    assert horizon["doc"] and horizon["where"] == ["planner", "real"]
    assert listed["bamboo"]["runs_on"] == ["simulator"] and listed["varuna"]["calibrations"] == ["planner", "artifact"]
    assert main(["designs"]) == 0
    assert "depth (int, default 12" in capsys.readouterr().out


@dataclass(frozen=True)
class FakePlanner:
    """Stands in for the job's planner at fault tolerance f: what a design's build asks of it."""

    f: int
    min_nodes: int = 1
    job: Any = field(default_factory=lambda: SimpleNamespace(num_microbatches=8))


def context(**changes) -> BuildContext:
    values = dict(
        profile=None,
        cluster=None,
        global_batch=8,
        microbatch_size=1,
        gpus_per_node=1,
        max_nodes=4,
        checkpoints=CheckpointSchedule(every_iterations=7),
        reconfigure_pause_s=2.5,
        profile_for=lambda b: None,
        profiled_microbatch=None,
        planner_for=FakePlanner,
        cached=lambda key, make: make(),
    )
    return BuildContext(**{**values, **changes})


def test_options_and_the_context_reach_the_oobleck_policy():
    design, options = registry.resolve("oobleck", {"join_horizon_s": 60, "fault_tolerance": 2}, "planner")
    built = design.build(context(), options)
    assert isinstance(built.policy, OobleckPolicy) and built.policy.planner == FakePlanner(2)
    policy = built.policy
    assert (policy.join_horizon_s, policy.reconfigure_pause_s, policy.checkpoints) == (60.0, 2.5, CheckpointSchedule(7))


def test_the_simulator_and_the_real_backend_share_the_join_horizon_default():
    from real.config import RunConfig

    oobleck = registry.get("oobleck").options()
    assert RunConfig().join_horizon_s == oobleck.join_horizon_s == DEFAULT_JOIN_HORIZON_S


@settings(max_examples=60, deadline=None)
@given(depth=st.integers(-5, 40), text=st.booleans())
def test_integer_options_are_checked_against_their_minimum(depth, text):
    bamboo = registry.get("bamboo")
    value = str(depth) if text else depth
    if depth >= 1:
        assert make_options("bamboo", bamboo.options, {"depth": value}).depth == depth
        assert make_options("bamboo", bamboo.options, {"bamboo_depth": value}).depth == depth  # the legacy name
    else:
        with pytest.raises(DesignError, match="bamboo option depth must be >= 1"):
            make_options("bamboo", bamboo.options, {"depth": value})


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"depth": 2.5}, "bamboo option depth must be a whole number, got 2.5"),
        ({"depth": True}, "must be a whole number"),
        ({"colour": 1}, "unknown option 'colour' of design bamboo; its options: depth"),
        ({"depth": 3, "bamboo_depth": 4}, "given twice"),
    ],
)
def test_bad_options_are_one_line_errors(settings, message):
    with pytest.raises(DesignError, match=message):
        make_options("bamboo", registry.get("bamboo").options, settings)


def test_resolve_names_the_owner_of_another_designs_option_and_where_an_option_applies():
    with pytest.raises(DesignError, match="depth is an option of bamboo, not of oobleck; oobleck's options: fault"):
        registry.resolve("oobleck", {"depth": 3}, "planner")
    with pytest.raises(DesignError, match="varuna option rollback has no effect in the real backend"):
        registry.resolve("varuna", {"rollback": False}, "real")
    with pytest.raises(DesignError, match="design bamboo does not run on the real backend; designs that do: oobleck"):
        registry.resolve("bamboo", {}, "real")
    _, options = registry.resolve("oobleck", {"join_horizon_s": "90"}, "real")
    assert as_dict(options)["join_horizon_s"] == 90.0


def test_a_design_must_declare_frozen_documented_typed_options():
    @dataclass
    class Loose:
        k: int = option(1, doc="k")

    @dataclass(frozen=True)
    class Undocumented:
        k: int = 1

    @dataclass(frozen=True)
    class Listy:
        k: list = option((), doc="k")

    for options, message in ((Loose, "not frozen"), (Undocumented, "needs a doc"), (Listy, "bool, int, float or str")):
        with pytest.raises(DesignError, match=message):
            specs(options)
    with pytest.raises(DesignError, match="a design name must be a word"):
        Design("two words", "", registry.get("bamboo").options, build=lambda ctx, o: PolicyBuild(None, o))
    with pytest.raises(DesignError, match="registered twice"):
        registry.register(
            Design("oobleck", "", registry.get("bamboo").options, build=lambda c, o: PolicyBuild(None, o))
        )
    with pytest.raises(DesignError, match="would show as 'OOBLECK', as design 'oobleck' does"):
        registry.register(
            Design(
                "oobleck2",
                "",
                registry.get("bamboo").options,
                build=lambda c, o: PolicyBuild(None, o),
                display="OOBLECK",
            )
        )
    with pytest.raises(DesignError, match="display must be one line"):
        Design("x", "", registry.get("bamboo").options, build=lambda c, o: PolicyBuild(None, o), display=" X")


def test_every_built_in_design_has_one_display_name_used_by_the_listing(capsys):
    shown = {d.name: d.label for d in registry.all_designs()}
    assert shown["oobleck"] == "Oobleck" and shown["gemini"] == "GEMINI" and shown["replica_groups"] == "Replica groups"
    assert len({v.casefold() for v in shown.values()}) == len(shown)
    assert main(["designs"]) == 0
    out = capsys.readouterr().out
    for name, text in shown.items():
        assert f"{text} (--design {name}): " in out
        assert registry.shown(name) == text
    assert registry.shown("a-design-since-removed") == "a-design-since-removed"  # saved runs still print


# -- command lines: one line, exit 2 -----------------------------------------------------------
EMPTY = "X = 1\n"
BROKEN = "from designs import Design\nD = Design('x', 'y', dict, build=print)\n"  # options not a dataclass


@pytest.mark.parametrize(
    "argv, message",
    [
        (["simulate", "--design", "nope"], "unknown design 'nope'; known designs: oobleck, bamboo, varuna"),
        (["simulate", "--design", "bamboo", "--set", "colour=1"], "not a SimConfig field nor an option of design bamboo (its options: depth)"),
        (["simulate", "--design", "oobleck", "--set", "depth=3"], "depth is an option of bamboo, not of oobleck"),
        (["simulate", "--design", "bamboo", "--set", "depth=0"], "bamboo option depth must be >= 1, got 0"),
        (["simulate", "--design", "bamboo", "--set", "depth=deep"], "bamboo option depth must be a whole number, got 'deep'"),
        (["simulate", "--design", "oobleck", "--set", "join_horizon_s=fast"], "oobleck option join_horizon_s must be a finite number (s), got 'fast'"),
        (["simulate", "--policy", "varuna", "--calibration", "planner", "--set", "rollback=false"], "varuna option rollback has no effect in the planner calibration"),
        (["simulate", "--design-module", "EMPTY"], "defines no design (a module-level designs.Design); known designs: oobleck"),
        (["simulate", "--design-module", "BROKEN"], "a design's options must be a dataclass"),
        (["simulate", "--design-module", "no/such/file.py"], "design module no/such/file.py: no such file"),
        (["run", "--design", "nope"], "unknown design 'nope'; known designs: oobleck"),
        (["run", "--design", "oobleck", "--set", "rollback=false"], "rollback is an option of varuna, not of oobleck"),
        (["run", "--design", "oobleck", "--set", "speed=3"], "unknown option 'speed' of design oobleck; its options: fault_tolerance"),
        (["run", "--design", "oobleck", "--set", "join_horizon_s=-1"], "join_horizon_s must be positive"),
        (["designs", "--design-module", "EMPTY"], "defines no design"),
    ],
)  # fmt: skip
def test_bad_design_requests_exit_2_with_one_line(argv, message, tmp_path, capsys):
    files = {"EMPTY": EMPTY, "BROKEN": BROKEN}
    for name, text in files.items():
        (tmp_path / f"{name.lower()}.py").write_text(text)
    argv = [str(tmp_path / f"{a.lower()}.py") if a in files else a for a in argv]
    extra = ["--no-write"] if argv[0] == "simulate" else ["--out", str(tmp_path / "run")] if argv[0] == "run" else []
    assert main([*argv, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


# -- entry points: a fake installed distribution ---------------------------------------------
PLUGIN = """
from dataclasses import dataclass, replace
from designs import Design, option, registry

@dataclass(frozen=True)
class CalmOptions:
    join_horizon_s: float = option(60.0, unit="s", doc="Oobleck's gain test, shorter", minimum=0, positive=True)

def build(ctx, options):
    oobleck = registry.get("oobleck")
    base = oobleck.options(join_horizon_s=options.join_horizon_s)
    return replace(oobleck.build(ctx, base), options=options)

CALM = Design("calm", "Oobleck with a short join horizon", CalmOptions, build=build,
              default_checkpoints=registry.get("oobleck").default_checkpoints)
"""


def test_an_entry_point_of_an_installed_distribution_registers_its_design(tmp_path):
    (tmp_path / "calm_design.py").write_text(PLUGIN)
    info = tmp_path / "calm_design-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: calm-design\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[ooblab.designs]\ncalm = calm_design\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", str(REPO))])}

    def ooblab(*args):
        return subprocess.run([sys.executable, "-m", "ooblab.cli", *args], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip

    listed = ooblab("designs", "--json")
    assert listed.returncode == 0, listed.stderr
    names = [d["name"] for d in json.loads(listed.stdout)]
    builtin = [d.name for m in registry.BUILTIN for d in registry.designs_in(importlib.import_module(m))]
    assert names == [*builtin, "calm"]
    ran = ooblab("simulate", "--design", "calm", "--calibration", "planner", "--trace", "fixed:interval=1h,removals=2",
                 "--set", "join_horizon_s=30", "--json", "--no-write")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    summary = json.loads(ran.stdout)
    twin = ooblab("simulate", "--design", "oobleck", "--calibration", "planner", "--trace", "fixed:interval=1h,removals=2",
                  "--set", "join_horizon_s=30", "--json", "--no-write")  # fmt: skip
    assert summary["policy"] == "calm" and summary["num_reconfigurations"] >= 1
    assert {**summary, "policy": "oobleck"} == json.loads(twin.stdout)  # Oobleck's policy, by another name
    (info / "entry_points.txt").write_text("[ooblab.designs]\ncalm = calm_design:CalmOptions\n")
    bad = ooblab("designs")
    assert (
        bad.returncode == 2 and "entry point calm = calm_design:CalmOptions (ooblab.designs) defines no" in bad.stderr
    )
