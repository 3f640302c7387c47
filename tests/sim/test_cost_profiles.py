"""Cost profiles: the built-ins parse, `paper` changes no result, a profile fills only
the costs a run does not set, and a bad profile file is one line naming the key."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ooblab.cli import main
from sim.config import SimConfig
from sim.cost_profiles import BUILTIN, CostProfileError, apply, get, load_file, parse
from sim.cost_terms import PRICED
from sim.run import simulate
from traces.model import Trace, TraceEvent


def test_every_builtin_has_a_source_and_a_known_key_for_each_value():
    assert {"paper", "h100-datacenter"} <= set(BUILTIN)
    for profile in BUILTIN.values():
        for key, cost in profile.costs.items():
            assert key in PRICED and cost.unit == PRICED[key].unit and cost.source
        assert parse(profile.to_dict(), where="x") == profile  # the file form reads back


@pytest.mark.parametrize("design", ["oobleck", "varuna", "gemini", "bamboo"])
def test_paper_changes_no_result(design):
    """`paper` holds the planner calibration's defaults: naming it gives the same summary."""
    options = {"design_options": {"depth": 4}} if design == "bamboo" else {}
    base = dict(policy=design, calibration="planner", trace="spot:nodes=30,hours=6", **options)
    assert simulate(SimConfig.of(**base)).summary == simulate(SimConfig.of(**base, costs="paper")).summary


def test_a_profile_fills_only_what_the_run_leaves_unset():
    config = apply(SimConfig.of(calibration="planner", costs="h100-datacenter", restart_fixed_s=5.0))
    assert config.costs.restart_fixed_s == 5.0  # the run's own value wins
    assert config.costs.restart_per_process_s == BUILTIN["h100-datacenter"].costs["restart_per_process_s"].value
    assert config.costs.checkpoint_fixed_s == 10.0 and config.costs.storage_cap_gb_per_s == 2000.0
    older = apply(SimConfig.of(calibration="planner", costs="h100-datacenter", restart_overhead_s=7.0))
    assert older.costs.restart_fixed_s is None and older.costs.restart_overhead_s == 7.0


def test_the_datacenter_profile_prices_a_restart_as_the_field_reports():
    """Varuna on 256 nodes of 8 H100s (2,048 GPUs) loses a node: its restart, the relaunch
    and the checkpoint load, takes within 25% of ByteRobust's requeued restart at 2,048
    GPUs (Table 7: 454 s) under h100-datacenter, and under a minute under `paper`."""
    from .tiny import make_trace

    rows = [(0.0, "add", [f"n{i}" for i in range(256)]), (7200.0, "remove", "n3"), (14400.0, "add", "late")]
    common = dict(policy="varuna", calibration="planner", model="gpt3-1.3b", gpu="h100-80gb", gpus_per_node=8,
                  global_batch=2048, trace="hand")  # fmt: skip
    restart = {}
    for name in ("paper", "h100-datacenter"):
        result = simulate(SimConfig.of(**common, costs=name), trace=make_trace(rows))
        times = [e.time_s for e in result.events if e.kind == "decision"]
        at = times.index(7200.0)
        restart[name] = times[at + 1] - times[at]
    assert 40 + 0.003 * 2048 < restart["paper"] < 60
    assert restart["h100-datacenter"] == pytest.approx(454, rel=0.25)


def test_the_artifact_calibration_refuses_a_profile_that_prices_the_planner():
    with pytest.raises(CostProfileError, match="use --calibration planner"):
        apply(SimConfig.of(costs="h100-datacenter"))


GOOD = {
    "format": "ooblab-costs",
    "version": 1,
    "name": "mine",
    "base": "paper",
    "costs": {"restart_fixed_s": {"value": 60, "unit": "s", "source": "assumed: a guess"}},
}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (("costs", "restart_fixd_s"), "unknown cost 'restart_fixd_s'"),
        (("unit", None), "restart_fixed_s: no unit (it is in s)"),
        (("unit", "min"), "restart_fixed_s: unit 'min', but restart_fixed_s is in s"),
        (("value", -3), "restart_fixed_s: value must be a finite number >= 0, got -3"),
        (("value", "ten"), "restart_fixed_s: value must be a finite number"),
        (("source", " "), "restart_fixed_s: no source"),
        (("version", 7), "version 7 is not one this ooblab reads"),
    ],
)
def test_a_bad_profile_file_is_one_line_naming_the_key(tmp_path: Path, capsys, change, words):
    data = json.loads(json.dumps(GOOD))
    what, value = change
    entry = data["costs"]["restart_fixed_s"]
    if what == "costs":
        data["costs"] = {value: entry}
    elif what == "version":
        data["version"] = value
    elif value is None:
        del entry[what]
    else:
        entry[what] = value
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data))
    with pytest.raises(CostProfileError) as caught:
        load_file(path)
    assert words in str(caught.value) and str(path) in str(caught.value)
    code = main(["simulate", "--calibration", "planner", "--costs", str(path), "--no-write"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and words in err


def test_costs_lists_and_round_trips_through_its_json(tmp_path: Path, capsys):
    assert main(["costs"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in BUILTIN) and "ByteRobust (arXiv 2509.16293) Table 7" in out
    assert main(["costs", "h100-datacenter", "--json"]) == 0
    path = tmp_path / "copy.json"
    path.write_text(capsys.readouterr().out)
    assert get(str(path)) == BUILTIN["h100-datacenter"]
    assert main(["costs", "nope"]) == 2
    assert "unknown cost profile 'nope'" in capsys.readouterr().err


def caused_trace(cause: str | None, victim: str = "n3") -> Trace:
    events = [TraceEvent(0.0, "add", f"n{i}") for i in range(16)]
    events += [TraceEvent(7200.0, "remove", victim, cause), TraceEvent(14400.0, "add", "late")]
    return Trace(tuple(events), "caused")


def recovery_s(result, at_s: float = 7200.0) -> float:
    """From the removal's decision to the next one (training goes on)."""
    times = [e.time_s for e in result.events if e.kind == "decision"]
    return times[times.index(at_s) + 1] - at_s


@pytest.mark.parametrize(("cause", "detect_s"), [("gpu", 60.0), ("switch", 60.0), ("software", 600.0), (None, 0.0)])
@pytest.mark.parametrize("design", ["oobleck", "varuna"])
def test_a_failure_waits_for_its_detection_by_cause(design, cause, detect_s):
    """Under h100-datacenter a lost working node is declared after its cause's detection
    time (a crash 60 s, a hang 600 s); the recovery starts only then. Without a cause,
    `detect_s` (0); a cause of no known kind is refused with the trace."""
    common = dict(policy=design, calibration="planner", model="gpt3-350m", global_batch=64, trace="hand")
    quick = simulate(SimConfig.of(**common, costs="h100-datacenter", detect_crash_s=0.0, detect_network_s=0.0,
                               detect_hang_s=0.0), trace=caused_trace(cause))  # fmt: skip
    slow = simulate(SimConfig.of(**common, costs="h100-datacenter"), trace=caused_trace(cause))
    assert recovery_s(slow) - recovery_s(quick) == pytest.approx(detect_s)
    if detect_s:
        detected = [e for e in slow.events if e.kind == "decision" and e.time_s == 7200.0]
        assert detected and recovery_s(slow) >= detect_s


@pytest.mark.parametrize(("cause", "costs", "expected_s"), [
    ("software", "h100-datacenter", 120.0),  # its own timeout beats the hang's 600 s
    ("gpu", "h100-datacenter", 60.0),  # the crash is declared by the cluster in 60 s
    (None, "h100-datacenter", 0.0),  # a preemption with notice: known at once
    ("gpu", "paper", 120.0),  # costs that price no detection: its own timeout
    ("software", "paper", 120.0),
])  # fmt: skip
def test_a_design_that_detects_itself_pays_the_sooner_detector(cause, costs, expected_s):
    """Replica groups price their own Detect (the quorum's timeout, 120 s here): the loss is
    declared by whichever detector fires first, its own or the profile's for the cause,
    never both one after the other."""
    common = dict(calibration="planner", model="gpt3-350m", global_batch=64, trace="hand", costs=costs)
    options = {"detection_timeout_s": 120.0}
    groups = simulate(
        SimConfig.of(policy="replica_groups", design_options=options, **common), trace=caused_trace(cause)
    )
    instant = simulate(
        SimConfig.of(policy="replica_groups", design_options={"detection_timeout_s": 0.0}, **common),
        trace=caused_trace(cause),
    )
    taken = [e for e in groups.events if e.kind == "decision" and e.time_s == 7200.0][0]
    assert [a["action"] for a in taken.detail["actions"]][0] == "Detect"
    assert recovery_s(groups) - recovery_s(instant) == pytest.approx(expected_s)


def test_detection_is_charged_to_the_recovery_it_delays():
    """Varuna checkpoints then restarts after a loss with notice (no cause): 60 s of
    detection are restart time, not checkpoint time."""
    common = dict(policy="varuna", calibration="planner", model="gpt3-350m", global_batch=64, trace="hand")
    quick = simulate(SimConfig.of(**common, costs="h100-datacenter"), trace=caused_trace(None))
    slow = simulate(SimConfig.of(**common, costs="h100-datacenter", detect_s=60.0), trace=caused_trace(None))
    taken = [e for e in slow.events if e.kind == "decision" and e.time_s == 7200.0][0]
    assert [a["action"] for a in taken.detail["actions"]][:2] == ["Checkpoint", "Restart"]
    assert slow.summary.breakdown.restart_s - quick.summary.breakdown.restart_s == pytest.approx(60.0)
    # (the later run has a little less time left for periodic checkpoints, never 60 s more)
    assert slow.summary.breakdown.checkpoint_s - quick.summary.breakdown.checkpoint_s < 1.0


def test_a_loss_without_notice_sends_varuna_back_to_its_checkpoint():
    """The same loss with a hardware cause: no save from the survivors, the work since the
    last checkpoint is lost; with notice it is saved and nothing is lost."""
    common = dict(policy="varuna", calibration="planner", model="gpt3-350m", global_batch=64, trace="hand")
    sudden = simulate(SimConfig.of(**common, costs="paper"), trace=caused_trace("gpu"))
    warned = simulate(SimConfig.of(**common, costs="paper"), trace=caused_trace(None))
    taken = [e for e in sudden.events if e.kind == "decision" and e.time_s == 7200.0][0]
    assert [a["action"] for a in taken.detail["actions"]] == ["RestartFromCheckpoint"]
    assert sudden.summary.breakdown.lost_work_s > warned.summary.breakdown.lost_work_s


# -- the range a value's source measured -----------------------------------------------------
def _at(gpus: int, **extra):
    """A Varuna run on `gpus` H100s (8 a node) under h100-datacenter, one crash."""
    nodes = gpus // 8
    events = [TraceEvent(0.0, "add", f"n{i}") for i in range(nodes)]
    events += [TraceEvent(3600.0, "remove", "n1", "gpu"), TraceEvent(7200.0, "add", "late")]
    config = SimConfig.of(
        policy="varuna", calibration="planner", model="gpt3-1.3b", gpu="h100-80gb", gpus_per_node=8,
        global_batch=4096, costs="h100-datacenter", **extra,
    )  # fmt: skip
    return simulate(config, trace=Trace(tuple(events), "sized"))


def test_a_value_used_outside_its_measured_range_says_so():
    """ByteRobust measured its relaunch line at 2,048-16,384 GPUs: at 32,768 GPUs the run
    names each such term, its range and the job's size; inside the range, nothing."""
    inside, outside = _at(4096), _at(32768)
    assert "extrapolated_terms" not in inside.summary.extra
    lines = outside.summary.extra["extrapolated_terms"]
    restart = [line for line in lines if line.startswith("restart_fixed_s")]
    assert restart == [
        "restart_fixed_s = 441.3 s from h100-datacenter was measured at 2,048-16,384 gpus; "
        "this job has 32,768 gpus: extrapolated"
    ]
    # a value set by hand is the user's own: no range to be outside of
    mine = _at(32768, restart_fixed_s=441.3).summary.extra["extrapolated_terms"]
    assert not any(line.startswith("restart_fixed_s") for line in mine)


def test_a_profiles_range_is_read_checked_and_written_back(tmp_path: Path):
    data = json.loads(json.dumps(GOOD))
    data["costs"]["restart_fixed_s"]["range"] = {"over": "nodes", "low": 16, "high": 64}
    path = tmp_path / "ranged.json"
    path.write_text(json.dumps(data))
    profile = load_file(path)
    assert profile.costs["restart_fixed_s"].measured is not None
    assert profile.to_dict()["costs"]["restart_fixed_s"]["range"] == {"over": "nodes", "low": 16.0, "high": 64.0}
    for bad, words in (
        ({"over": "racks", "low": 1, "high": 2}, "range over 'racks'"),
        ({"over": "gpus", "low": 64, "high": 16}, "range low 64 is above high 16"),
        ({"over": "gpus", "low": 0, "high": 16}, "range bounds must be finite numbers >= 1"),
        ({"over": "gpus", "low": 1}, "range must be {over: gpus or nodes, low, high}"),
    ):
        data["costs"]["restart_fixed_s"]["range"] = bad
        path.write_text(json.dumps(data))
        with pytest.raises(CostProfileError, match=re.escape(words)):
            load_file(path)


def test_the_cli_prints_the_extrapolated_terms(capsys):
    from sim.cli import render

    text = render(_at(32768), None)
    assert "note: restart_fixed_s = 441.3 s from h100-datacenter was measured at 2,048-16,384 gpus" in text


# -- complete profiles: a base, or every term a run needs ---------------------------------
def test_a_profile_without_a_base_must_price_what_a_run_needs(tmp_path: Path):
    """Pricing only the crash detection, with no base: one line naming what is missing,
    instead of the calibration's 0 s for the rest (losses without a cause noticed at once)."""
    data = {"format": "ooblab-costs", "version": 1, "name": "crash-only",
            "costs": {"detect_crash_s": {"value": 60, "unit": "s", "source": "assumed: a watchdog"}}}  # fmt: skip
    path = tmp_path / "crash-only.json"
    path.write_text(json.dumps(data))
    with pytest.raises(CostProfileError) as caught:
        load_file(path)
    message = str(caught.value)
    assert "\n" not in message and "prices no node_startup_s" in message and "detect_s" in message
    assert 'name a base to inherit them from ("base": one of paper, h100-datacenter)' in message
    data["base"] = "h100-datacenter"
    path.write_text(json.dumps(data))
    profile = load_file(path)
    assert profile.costs["detect_crash_s"].value == 60.0 and profile.costs["detect_hang_s"].value == 600.0
    assert "detect_crash_s" not in profile.inherited and "detect_hang_s" in profile.inherited
    assert profile.to_dict()["costs"].keys() == {"detect_crash_s"}  # written back as given
    assert load_file(path) == profile
    data["base"] = "llama"
    path.write_text(json.dumps(data))
    with pytest.raises(CostProfileError, match="base 'llama' is not a built-in profile"):
        load_file(path)


def test_a_based_profile_prices_the_run_as_its_base_where_it_says_nothing(tmp_path: Path):
    data = {"format": "ooblab-costs", "version": 1, "name": "slower-restarts", "base": "h100-datacenter",
            "costs": {"restart_fixed_s": {"value": 600, "unit": "s", "source": "assumed: a slow queue"}}}  # fmt: skip
    path = tmp_path / "slower.json"
    path.write_text(json.dumps(data))
    common = dict(policy="varuna", calibration="planner", model="gpt3-350m", global_batch=64, trace="hand")
    mine = simulate(SimConfig.of(**common, costs=str(path)), trace=caused_trace("gpu"))
    by_hand = simulate(
        SimConfig.of(**common, costs="h100-datacenter", restart_fixed_s=600.0), trace=caused_trace("gpu")
    )
    said = ("extrapolated_terms", "detection")  # they name the profile the values came from
    plain = [{k: v for k, v in r.summary.to_dict().items() if k not in said} for r in (mine, by_hand)]
    assert plain[0] == plain[1]
    assert mine.summary.extra["detection"]["crash"]["by"] == "profile slower-restarts (from its base h100-datacenter)"


def test_ooblab_costs_marks_what_a_profile_inherits(tmp_path: Path, capsys):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(GOOD))
    assert main(["costs", str(path)]) == 0
    out = capsys.readouterr().out
    assert "(on base paper: what it leaves out comes from there, marked <- paper)" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ") and len(line.split()) > 1}
    assert lines["detect_hang_s"].endswith("<- paper") and not lines["restart_fixed_s"].endswith("<- paper")
