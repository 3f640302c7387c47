"""Failures at awkward moments, for every registered design (the registry's, plug-ins
included): a loss during a start, a restart or a checkpoint, and the run files across
processes.

Properties (hypothesis, on traces whose removals are placed a few seconds after nodes
become ready, inside the launch that follows, as well as at random):
- the summary holds: wall-clock buckets add up to the run's span, effective training time
  is theirs, samples are whole batches and never come faster than the fastest failure-free
  run's, and `outcome` says whether the run trained;
- a launch (start, restart, restart from a checkpoint or a snapshot) completes before
  training goes on, or begins again: while one is under way a design may only wait, go on
  with it or launch again, never reconfigure live state that the launch has not built yet;
- state lives only where it was held: after every node leaves at once, training resumes
  from the last completed checkpoint, whatever copies a design counted as held;
- no decision depends on a later event: two traces equal up to t (and with the same peak,
  the cluster the job may ever get, which the simulator sizes the cluster by) give the same
  decisions before t.

Regressions, each the smallest trace that showed a wrong price.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from designs import SIMULATOR, registry
from sim.config import SimConfig
from sim.errors import SimError
from sim.run import simulate
from sim.timing import PlannerCosts
from traces.model import Trace

from .tiny import make_trace

ROOT = Path(__file__).resolve().parents[2]
LAUNCHES = {"Start", "Restart", "RestartFromCheckpoint", "RestartFromSnapshot"}
WHILE_LAUNCHING = LAUNCHES | {"Continue", "WaitForNodes"}
STARTUP_S = 45.0  # the planner calibration's default node start-up
# a few seconds of CI; OOBLAB_PROPERTY_EXAMPLES=500 for a longer search (40 s on 2 cores)
EXAMPLES = int(os.environ.get("OOBLAB_PROPERTY_EXAMPLES", "12"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def simulated() -> list[str]:
    return [d.name for d in registry.all_designs() if SIMULATOR in d.runs_on]


def with_artifact() -> list[str]:
    return [d.name for d in registry.all_designs() if SIMULATOR in d.runs_on and d.artifact is not None]


# options that let a design train on the traces' 4-12 nodes (Bamboo's default depth is 12)
SMALL = {"bamboo": {"depth": 4}}


def planner_config(design: str, **extra) -> SimConfig:
    values = {"policy": design, "model": "gpt3-350m", "global_batch": 64, "calibration": "planner", "trace": "hand"}
    if design in SMALL and "design_options" not in extra:
        values["design_options"] = SMALL[design]
    return SimConfig.of(**{**values, **extra})


@st.composite
def awkward_traces(draw, pool_size: int = 12) -> Trace:
    """Traces whose removals often land inside a launch: nodes are added, and a few seconds
    to a minute after they become ready (start-up 45 s) working nodes leave."""
    pool = [f"n{i}" for i in range(pool_size)]
    initial = draw(st.integers(4, pool_size))
    present, absent = pool[:initial], pool[initial:]
    rows = [(0.0, "add", n) for n in present]
    t = STARTUP_S + draw(st.sampled_from([0.5, 5.0, 20.0, 39.0]))
    for _ in range(draw(st.integers(1, 6))):
        if absent and draw(st.booleans()):
            node = absent.pop(draw(st.integers(0, len(absent) - 1)))
            present.append(node)
            rows.append((t, "add", node))
        if len(present) > 1:
            for _ in range(draw(st.integers(1, min(3, len(present) - 1)))):
                node = present.pop(draw(st.integers(0, len(present) - 1)))
                absent.append(node)
                rows.append((t, "remove", node))
        t += draw(st.sampled_from([0.5, 3.0, 10.0, 30.0, 50.0, 70.0, 1800.0]) | st.floats(0.5, 4000.0))
    rows.append((t + 600.0, "add", "end-marker"))
    return make_trace(rows, "awkward")


def decisions(result) -> list:
    return [e for e in result.events if e.kind == "decision"]


def launch_violations(result) -> list[str]:
    """Decisions taken while a launch was under way that neither wait, go on nor launch."""
    pending, bad = False, []
    for e in decisions(result):
        if e.detail.get("event") == "PauseEnded":
            pending = False
        names = {a["action"] for a in e.detail["actions"]}
        # a checkpoint before the launch saves what the last one had not (Varuna's, cut short
        # by the loss, taken again): it may come with a launch
        allowed = WHILE_LAUNCHING | ({"Checkpoint"} if names & LAUNCHES else set())
        if pending and not names <= allowed:
            bad.append(f"{e.time_s:.1f} s: {sorted(names)} while a launch was under way")
        if names & LAUNCHES:
            pending = True
        elif "WaitForNodes" not in names and names - {"Continue"}:
            pending = False
    return bad


RATES: dict[tuple[str, int], float] = {}


def fastest_rate(config: SimConfig, most_nodes: int) -> float:
    """Samples per second of useful compute of the fastest failure-free run on 1 to
    `most_nodes` nodes: an upper bound on what any run of `config` may commit per second."""
    key = (repr(config), most_nodes)
    if key not in RATES:
        RATES[key] = _fastest_rate(config, most_nodes)
    return RATES[key]


def _fastest_rate(config: SimConfig, most_nodes: int) -> float:
    best = 0.0
    for n in range(1, most_nodes + 1):
        free = config.with_(trace=f"fixed:nodes={n},removals=0,interval=1h", duration_s=4 * 3600.0)
        try:
            s = simulate(free).summary
        except SimError:  # too few nodes for the design to be built at all
            continue
        if s.breakdown.useful_compute_s > 0:
            best = max(best, s.committed_samples / s.breakdown.useful_compute_s)
    return best


def summary_holds(result, trace: Trace, config: SimConfig | None = None) -> None:
    """Wall-clock buckets, each >= 0, add up to the trace's span; the ratio is theirs;
    samples are whole iterations' batches (or the part of it a partial plan trains), and
    (with `config`) never more per second of useful compute than the fastest failure-free
    run of it on as many nodes as the trace ever has."""
    s = result.summary
    if config is not None:
        peak = int(trace.live_counts()["live_nodes"].max())
        bound = fastest_rate(config, peak) * s.breakdown.useful_compute_s
        assert s.committed_samples <= bound * (1 + 1e-9) + 1e-6, (s.committed_samples, bound)
        assert s.breakdown.useful_compute_s <= trace.duration_s
    buckets = vars(s.breakdown)
    assert all(v >= -1e-9 for v in buckets.values()), buckets
    assert sum(buckets.values()) == pytest.approx(trace.duration_s, rel=1e-9, abs=1e-6)
    assert s.to_dict()["effective_training_time"] == pytest.approx(s.breakdown.useful_compute_s / trace.duration_s)
    assert (
        0 <= s.committed_samples <= s.num_iterations * s.extra["samples_per_iteration"]
        or s.extra.get("samples_per_iteration") is None
    )
    assert s.extra["outcome"] in ("ok", "never-trained", "infeasible")
    # ok: it started and committed something; a start with nothing committed trained nothing
    assert (s.extra["outcome"] == "ok") == (s.extra["first_start_s"] is not None and s.num_iterations > 0)


@pytest.mark.parametrize("design", simulated())
@SETTINGS
@given(trace=awkward_traces())
def test_a_launch_completes_or_begins_again_before_training(design, trace):
    config = planner_config(design)
    result = simulate(config, trace=trace)
    assert not launch_violations(result)
    summary_holds(result, trace, config)


@pytest.mark.parametrize("design", with_artifact())
@SETTINGS
@given(trace=awkward_traces())
def test_a_launch_completes_or_begins_again_in_the_artifact_calibration(design, trace):
    config = SimConfig.of(policy=design, model="GPT-3-medium", trace="hand")
    result = simulate(config, trace=trace)
    assert not launch_violations(result)
    summary_holds(result, trace, config)


def cut(trace: Trace, at_s: float) -> Trace:
    """`trace` up to (not including) `at_s`, then nodes added at `at_s` up to its peak, so
    both have the same peak: the same cluster, a different future."""
    rows = [(e.time_s, e.kind, e.node) for e in trace.events if e.time_s < at_s]
    live = len(trace.nodes_at(max(e.time_s for e in trace.events if e.time_s < at_s)))
    peak = int(trace.live_counts()["live_nodes"].max())
    rows += [(at_s, "add", f"x{i}") for i in range(peak - live)]
    rows.append((at_s + 3000.0, "add", "end-marker-2"))
    return make_trace(rows, "cut")


@pytest.mark.parametrize("design", simulated())
@SETTINGS
@given(trace=awkward_traces(), which=st.floats(0.0, 1.0))
def test_no_decision_depends_on_a_later_event(design, trace, which):
    times = sorted({e.time_s for e in trace.events if e.time_s > 0})
    at_s = times[min(int(which * len(times)), len(times) - 1)]
    config = planner_config(design)
    whole, short = simulate(config, trace=trace), simulate(config, trace=cut(trace, at_s))

    def before(result) -> list:
        return [(e.time_s, e.kind, dict(e.detail)) for e in result.events if e.time_s < at_s]

    assert before(whole) == before(short)


@pytest.mark.parametrize("design", simulated())
@SETTINGS
@given(trace=awkward_traces(), gap_s=st.sampled_from([0.5, 5.0, 20.0, 39.0, 300.0]) | st.floats(0.5, 4000.0))
def test_state_lives_only_where_it_was_held(design, trace, gap_s):
    """Every node leaves at once (fresh ones arrive): nothing in memory survives, so training
    goes on from the last checkpoint completed before the loss, whatever copies, replicas
    or snapshots a design counted on, and whatever launch, copy or checkpoint was under way."""
    rows = [(e.time_s, e.kind, e.node) for e in trace.events if e.node != "end-marker"]
    loss_s = rows[-1][0] + gap_s
    present = list(trace.nodes_at(rows[-1][0]))
    rows += [(loss_s, "remove", present), (loss_s, "add", [f"fresh{i}" for i in range(8)])]
    rows.append((loss_s + 3000.0, "add", "end-marker"))
    result = simulate(planner_config(design), trace=make_trace(rows, "total-loss"))
    saved = [e.detail["iterations"] for e in result.events if e.kind == "checkpoint" and e.time_s < loss_s]
    resumed = [row for row in result.timeline if row.time_s > loss_s and row.state == "running"]
    if resumed:
        assert resumed[0].iterations_done == max(saved, default=0)


# -- regressions -------------------------------------------------------------------------------------
def sixteen_lose_one_at(time_s: float) -> Trace:
    rows = [(0.0, "add", [f"n{i}" for i in range(16)]), (time_s, "remove", "n0"), (7200.0, "add", "late")]
    return make_trace(rows)


@pytest.mark.parametrize("design", ["replica_groups", "gemini", "oobleck"])
def test_a_loss_during_the_first_start_starts_again_in_full(design):
    """5 s into the first start (nodes ready at 45 s, n0 lost at 50 s) nothing is live, no
    collective runs and no checkpoint exists: the start begins again on the 15 nodes left,
    charged in full, with no detection timeout and no restart."""
    result = simulate(planner_config(design, global_batch=512, model="gpt3-1.3b"), trace=sixteen_lose_one_at(50.0))
    relaunch_s = PlannerCosts().relaunch_s(15)
    assert result.summary.breakdown.restart_s == pytest.approx(5.0 + relaunch_s)
    assert result.summary.breakdown.reconfiguration_s == 0.0
    assert result.summary.num_restarts == 0
    taken = [[a["action"] for a in e.detail["actions"]] for e in decisions(result) if e.time_s in (45.0, 50.0)]
    assert taken == [["Start"], ["Start"]]


def test_replica_groups_restart_from_a_checkpoint_interrupted_begins_again():
    """Three groups of two; every group loses a node at 1,800 s, three nodes arrive (ready at
    1,845 s: a restart from the checkpoint), and n1 leaves 10 s into that restart: it
    begins again, and training resumes only once the second restart has run in full."""
    rows = [
        (0.0, "add", [f"n{i}" for i in range(6)]),
        (1800.0, "remove", ["n0", "n2", "n4"]),
        (1800.0, "add", ["n6", "n7", "n8"]),
        (1855.0, "remove", "n1"),
        (7200.0, "add", "n9"),
    ]
    config = planner_config("replica_groups", global_batch=512, model="gpt3-1.3b", design_options={"group_nodes": 2})
    result = simulate(config, trace=make_trace(rows))
    taken = {e.time_s: [a["action"] for a in e.detail["actions"]] for e in decisions(result)}
    assert taken[1845.0] == ["RestartFromCheckpoint"] and taken[1855.0] == ["RestartFromCheckpoint"]
    ended = [e.time_s for e in decisions(result) if e.detail.get("event") == "PauseEnded" and e.time_s > 1855.0]
    first = [e.time_s for e in decisions(result) if e.detail.get("event") == "PauseEnded"][0]
    # the second restart relaunches 5 nodes and loads the checkpoint: longer than the first start's relaunch of 6
    assert ended and ended[0] - 1855.0 > first - STARTUP_S
    assert not launch_violations(result)


def test_replica_groups_size_the_job_at_launch_not_from_the_trace_peak():
    """A node added at the run's last instant (never processed) changes nothing."""
    base = [(0.0, "add", [f"n{i}" for i in range(10)]), (3600.0, "remove", "n3")]
    config = planner_config("replica_groups", global_batch=512, model="gpt3-1.3b")
    ends = [simulate(config, trace=make_trace([*base, (7200.0, kind, node)])) for kind, node in
            (("add", "n10"), ("remove", "n4"))]  # fmt: skip
    assert ends[0].summary == ends[1].summary
    assert ends[0].summary.committed_samples > 0


def test_gemini_says_it_cannot_run_where_the_model_does_not_fit():
    config = SimConfig.of(
        policy="gemini", model="GPT-3-2_7b", calibration="planner", trace="fixed:interval=1h,nodes=2,removals=1"
    )
    result = simulate(config)
    assert result.summary.extra["outcome"] == "infeasible"
    assert "does not fit on 2 node(s)" in result.summary.extra["infeasible_reason"]


HASH_SCRIPT = """
import json, sys
from designs import SIMULATOR, registry
from sim.config import SimConfig
from sim.errors import SimError
from sim.run import simulate
for d in registry.all_designs():
    if SIMULATOR in d.runs_on:
        r = simulate(SimConfig.of(policy=d.name, model="gpt3-350m", global_batch=64, calibration="planner",
                               trace="spot:nodes=16,hours=4,seed=3"))
        r.write(sys.argv[1] + "/" + d.name)
"""


@pytest.mark.timeout(300)
def test_every_design_writes_the_same_run_files_under_any_hash_seed(tmp_path):
    outs = []
    for seed in ("1", "2"):
        out = tmp_path / seed
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-c", HASH_SCRIPT, str(out)], cwd=ROOT, env=env, check=True, timeout=280)
        outs.append(out)
    files = sorted(p.relative_to(outs[0]) for p in outs[0].rglob("*") if p.is_file())
    assert {f.parts[0] for f in files} == set(simulated())
    for f in files:
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), f
    assert json.loads((outs[0] / "gemini" / "summary.json").read_text())["committed_samples"] > 0


@pytest.mark.parametrize("second_s", [1800.5, 1802.0])
def test_recycle_loss_during_the_replan_checkpoint_keeps_the_work(second_s):
    """16 nodes; n0 lost at 1,800 s makes ReCycle checkpoint, then re-plan. n15 lost 0.5 s
    later, while that checkpoint is written, leaves every stage a live worker: the
    checkpoint is written again from the survivors, and the loss costs what it costs 1.5 s
    later (when the checkpoint is done), not the 1,800 s back to the run's start."""
    rows = [(0.0, "add", [f"n{i}" for i in range(16)]), (1800.0, "remove", "n0"), (second_s, "remove", "n15")]
    result = simulate(SimConfig.of(policy="recycle", model="GPT-3-medium", calibration="planner", trace="hand"),
                      trace=make_trace([*rows, (7200.0, "add", "late")]))  # fmt: skip
    taken = {e.time_s: [a["action"] for a in e.detail["actions"]] for e in decisions(result)}
    assert taken[1800.0] == ["Checkpoint", "Restart"]
    assert taken[second_s] == (["Checkpoint", "Restart"] if second_s < 1801 else ["RestartFromCheckpoint"])
    assert result.summary.breakdown.lost_work_s < 60.0


def test_a_run_that_never_trains_says_so_and_why():
    never = simulate(SimConfig.of(policy="oobleck", model="GPT-3-medium", min_nodes=1000))
    assert never.summary.committed_samples == 0
    assert never.summary.extra["outcome"] == "never-trained"
    assert never.summary.extra["infeasible_reason"] == "never trained: 30 usable nodes, the artifact's model needs 1000"
    trained = simulate(SimConfig.of(policy="oobleck", model="GPT-3-medium"))
    assert trained.summary.extra["outcome"] == "ok" and trained.summary.extra["infeasible_reason"] is None


@pytest.mark.parametrize("second_s", [1810.0, 1830.0])
def test_bamboo_judges_a_loss_during_a_reconfiguration_on_the_grid_that_holds_the_state(second_s):
    """16 nodes; n0 leaves at 1,800 s and its predecessor n11 covers its stage; at 1,825.6 s
    a reconfiguration starts (copies to a spare). n11, the last holder of that stage, lost
    before it (1,810 s) or during it (1,830 s): fatal both times, back to the checkpoint,
    since the copies to the new grid had not completed."""
    rows = [(0.0, "add", [f"n{i}" for i in range(16)]), (1800.0, "remove", "n0"), (second_s, "remove", "n11")]
    result = simulate(SimConfig.of(policy="bamboo", model="GPT-3-medium", calibration="planner", trace="hand"),
                      trace=make_trace([*rows, (7200.0, "add", "late")]))  # fmt: skip
    taken = {e.time_s: [a["action"] for a in e.detail["actions"]] for e in decisions(result)}
    assert taken[second_s] == ["RestartFromCheckpoint"]
    if second_s > 1825.6:
        assert any("Reinstantiate" in a for t, a in taken.items() if 1800.0 < t < second_s)
    assert result.summary.breakdown.lost_work_s > 1700.0


@SETTINGS
@given(f=st.integers(1, 3), data=st.data())
def test_oobleck_with_f_survives_any_f_simultaneous_losses_without_a_restart(f, data):
    """16 nodes hold at least f + 1 pipelines (GPT-3 1.3B needs two V100s a replica); any f
    of them lost at the same instant leave a live replica of every layer: a live
    reconfiguration, no restart, no rollback."""
    lost = data.draw(st.lists(st.integers(0, 15), min_size=f, max_size=f, unique=True))
    rows = [(0.0, "add", [f"n{i}" for i in range(16)]), (1800.0, "remove", [f"n{i}" for i in lost])]
    config = planner_config("oobleck", model="gpt3-1.3b", global_batch=512, fault_tolerance=f)
    result = simulate(config, trace=make_trace([*rows, (5400.0, "add", "late")]))
    at = [e for e in decisions(result) if e.time_s == 1800.0]
    assert at and {a["action"] for a in at[0].detail["actions"]} <= {"Reinstantiate", "CopyLayers"}
    assert result.summary.num_restarts == 0 and result.summary.extra["rollbacks"] == 0
    assert result.summary.failures_survived == f


@pytest.mark.parametrize("spec", ["spot:hours=3,nodes=8,seed=1", "spot:profile=gcp-a100,nodes=4,hours=1,seed=0"])
def test_a_generated_trace_runs_for_the_hours_it_was_asked_for(spec):
    """A spot trace ends at its horizon, not at its last event: `hours=3` is 10,800 s even
    when the last burst comes at 10,620 s, and a quiet hour (no burst at all) is an hour."""
    hours = float(spec.split("hours=")[1].split(",")[0])
    result = simulate(planner_config("oobleck", trace=spec))
    assert result.summary.duration_s == hours * 3600
    assert result.summary.committed_samples > 0


def test_a_run_whose_launches_failures_always_cut_says_so():
    """A relaunch of 441 s and a working node lost every 200 s: the job never trains, and
    says that failures cut every launch short, with both figures, not the last wait's
    bookkeeping."""
    from traces.model import TraceEvent

    events = [TraceEvent(0.0, "add", f"n{i}") for i in range(32)]
    events += [TraceEvent(200.0 * k, "remove", f"n{k}", "gpu") for k in range(1, 20)]
    events.append(TraceEvent(4000.0, "add", "late"))
    config = SimConfig.of(
        policy="varuna", calibration="planner", model="gpt3-350m", global_batch=64, costs="h100-datacenter"
    )
    result = simulate(config, trace=Trace(tuple(events), "every-200s"))
    extra = result.summary.extra
    assert extra["outcome"] == "never-trained" and result.summary.num_iterations == 0
    reason = extra["infeasible_reason"]
    assert reason.startswith("never trained: failures cut every launch short (")
    launches = int(reason.split("(")[1].split(" launch")[0])
    assert launches == result.summary.extra["starts"] + result.summary.num_restarts and launches >= 2
    assert "of 44" in reason or "of 45" in reason  # 441.3 s + 0.0207 s a process: about 442 s
    assert "a working node was lost every 2" in reason


def test_a_run_that_started_but_committed_nothing_is_not_ok():
    """An iteration longer than the time between failures: the job starts, every iteration
    is lost, and the run says it never trained (and why), not "ok" with 0 samples."""
    from traces.model import TraceEvent

    events = [TraceEvent(0.0, "add", f"n{i}") for i in range(16)]
    events += [TraceEvent(100.0 + 60.0 * k, "remove", f"n{k}") for k in range(1, 9)]
    events.append(TraceEvent(700.0, "add", "late"))
    config = SimConfig.of(policy="oobleck", calibration="planner", model="gpt3-1.3b", global_batch=8192)
    result = simulate(config, trace=Trace(tuple(events), "every-minute"))
    summary = result.summary
    assert summary.num_iterations == 0 and summary.extra["first_start_s"] is not None
    assert summary.extra["outcome"] == "never-trained"
    reason = summary.extra["infeasible_reason"]
    assert reason.startswith("never trained: no iteration was committed (one takes ")
    assert "a working node was lost every 8" in reason  # 700 s over 8 losses: 87.5 s
