"""Failures survived: the trained model equals a failure-free run over the same batches.

Every case runs `ooblab run` (coordinator + spawned workers, gloo on CPU, float64) with
failures injected at named points of a worker's step (`--inject STEP:WORKER:KIND:POINT`:
the victim kills or freezes itself when it gets there, so runs are reproducible), saves
every rank's final layers and compares every pipeline's replica with a plain
single-process run of tiny-gpt over the same global batches: max relative difference
<= 1e-5 (per tensor) and the same loss at every step. Victims, points and steps are
drawn from a seeded generator (the seed is in the test id), constrained only so that the
case means what it says (at most f at once, or more than f wiping out a layer).

With `--pipelines 2,2[,2]` the plan is known: pipeline p runs on node(2p) (stage 0, the
first half of the layers) and node(2p + 1).
"""

from __future__ import annotations

import json
import random

import pytest

from real.config import RunConfig
from real.models.reference import (
    gather_params,
    max_relative_difference,
    train_reference,
)
from real.protocol.failures import POINTS

from .conftest import ooblab

TOLERANCE = 1e-5
STEP_POINTS = [p for p in POINTS if p not in ("reconfigure", "teardown")]
HEARTBEAT_TIMEOUT_S = 3.0
FAST = ["--timeout", "15", "--heartbeat-timeout", str(HEARTBEAT_TIMEOUT_S), "--heartbeat-interval", "0.25"]


def run_job(
    tmp_path,
    *,
    nodes: int,
    f: int,
    steps: int,
    inject: str | None = None,
    pipelines: str | None = None,
    extra: tuple[str, ...] = (),
    timeout_s: float = 240,
):
    params_dir = tmp_path / "params"
    args = ["run", "--nodes", str(nodes), "--f", str(f), "--steps", str(steps), "--global-batch", "16", "--dtype", "float64",
            *FAST, "--save-params", str(params_dir), "--out", str(tmp_path / "run"), "--json", *extra]  # fmt: skip
    if pipelines:
        args += ["--pipelines", pipelines]
    if inject:
        args += ["--inject", inject]
    result = ooblab(args, timeout_s=timeout_s)
    summary = result.json()
    assert result.returncode == 0 and summary["status"] == "finished", summary.get("reason") or result.stderr[-4000:]
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    reference = train_reference(
        RunConfig(nodes=nodes, fault_tolerance=f, steps=steps, global_batch=16, dtype="float64")
    )
    replicas = gather_params(params_dir)
    assert len(replicas) == len(summary["plan"]["pipelines"]), "every pipeline of the final plan saved its replica"
    worst = max(max_relative_difference(params, reference.params) for params in replicas.values())
    assert worst <= TOLERANCE, f"parameters differ from the failure-free reference by {worst:.3e}"
    print(f"max relative difference {worst:.2e} after {inject or extra}")
    assert summary["num_iterations"] == steps
    assert summary["losses"] == pytest.approx(reference.losses, rel=1e-9)
    return summary, events


def kinds(events, kind):
    return [e for e in events if e["kind"] == kind]


def all_fired(summary, count):
    assert summary["injections_fired"] == list(range(count)), "every scheduled failure struck"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [7])
def test_crashes_at_every_point_one_after_another(tmp_path, seed):
    """6 nodes as 3 pipelines (f = 2); four crashes, one every other step, each at a
    different point (forward, backward, all-reduce, optimizer step, in random order),
    victims drawn at random: four live reconfigurations, no restart."""
    rng = random.Random(seed)
    points = rng.sample(STEP_POINTS, len(STEP_POINTS))
    victims = rng.sample([f"node{i}" for i in range(6)], 4)
    inject = ",".join(f"{1 + 2 * i}:{v}:crash:{p}" for i, (v, p) in enumerate(zip(victims, points)))
    summary, events = run_job(tmp_path, nodes=6, f=2, pipelines="2,2,2", steps=9, inject=inject)
    all_fired(summary, 4)
    assert summary["num_reconfigurations"] == 4 and summary["num_restarts"] == 0
    assert summary["failures_survived"] == 4 and len(summary["recovery_s"]) == 4
    assert sorted(e["node"] for e in kinds(events, "worker_lost")) == sorted(victims)
    left = sorted(n for p in summary["plan"]["pipelines"] for n in p["nodes"])
    assert left == sorted(set(f"node{i}" for i in range(6)) - set(victims))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [3])
def test_f_simultaneous_crashes_then_one_during_the_reconfiguration(tmp_path, seed):
    """f = 2 workers of different pipelines crash at the same random point of the same
    step; a third dies inside the state copy of the reconfiguration that follows. One
    recovery (three failures), live: the untouched pipeline and the survivors still hold
    every layer."""
    rng = random.Random(seed)
    point = rng.choice(STEP_POINTS)
    a, b = rng.randrange(2), rng.randrange(2)
    first, second = f"node{a}", f"node{2 + b}"  # pipelines 0 and 1
    during = f"node{1 - a}"  # the rest of pipeline 0: pipeline 2 still holds its layers
    step = rng.randrange(1, 4)
    inject = f"{step}:{first}:crash:{point},{step}:{second}:crash:{point},{step}:{during}:crash:reconfigure"
    summary, events = run_job(tmp_path, nodes=6, f=2, pipelines="2,2,2", steps=7, inject=inject)
    all_fired(summary, 3)
    assert summary["num_restarts"] == 0 and summary["num_reconfigurations"] == 2
    (recovery,) = summary["recoveries"]
    assert recovery["failures"] == 2 and sorted(recovery["nodes"]) == sorted([first, second, during])
    assert sorted(kinds(events, "decision")[0]["nodes"]) == sorted([first, second])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [5])
def test_hangs_are_detected_fenced_and_survived(tmp_path, seed):
    """Frozen workers (SIGSTOP keeps their sockets open): two of different pipelines at
    once, then a third later, at random points; heartbeats reveal them, the coordinator
    fences them (SIGKILL) and reconfigures."""
    rng = random.Random(seed)
    p1, p2 = rng.sample(STEP_POINTS, 2)
    a, b, c = (2 * p + rng.randrange(2) for p in rng.sample(range(3), 3))
    inject = f"1:node{a}:hang:{p1},1:node{b}:hang:{p1},4:node{c}:hang:{p2}"
    summary, events = run_job(tmp_path, nodes=6, f=2, pipelines="2,2,2", steps=7, inject=inject)
    all_fired(summary, 3)
    lost = kinds(events, "worker_lost")
    assert sorted(e["node"] for e in lost) == sorted(f"node{i}" for i in (a, b, c))
    assert all("missed heartbeats" in e["reason"] for e in lost)
    assert summary["num_restarts"] == 0 and summary["failures_survived"] == 3


@pytest.mark.timeout(300)
def test_a_worker_that_cannot_tear_down_is_replaced_from_a_replica(tmp_path):
    """node3 crashes; node0's main thread then stalls in its teardown while its
    heartbeat goes on. Past the straggler bound the coordinator fences it and starts
    a fresh process for node0, which receives all its layers from node2 (the other
    pipeline's replica of the same stage) and training goes on."""
    summary, events = run_job(
        tmp_path,
        nodes=4,
        f=1,
        pipelines="2,2",
        steps=8,
        inject="2:node3:crash:forward,2:node0:stall:teardown",
        extra=("--timeout", "10"),
    )  # fmt: skip  (5 s expired on a send once with the machine overloaded)
    all_fired(summary, 2)
    (unclean,) = kinds(events, "worker_unclean")
    (replaced,) = kinds(events, "worker_replaced")
    assert replaced["node"] == "node0" and replaced["worker"] == unclean["worker"]
    # It was training (ready), so it was fenced once past the straggler bound (6 s here),
    # not at the teardown timeout (10 + 10 + 5 s).
    assert unclean["after_s"] < 15, unclean
    assert "probe.py" in unclean["straggled"]["stack"]  # its watch noted where it was blocked: the stall
    assert [e["node"] for e in kinds(events, "worker_lost")] == ["node3"]
    assert summary["num_restarts"] == 0 and summary["num_reconfigurations"] == 1
    (recovery,) = summary["recoveries"]
    assert recovery["respawn_s"] > 0
    assert "node0" in [n for p in summary["plan"]["pipelines"] for n in p["nodes"]]


@pytest.mark.timeout(300)
def test_more_than_f_failures_restart_from_the_last_checkpoint(tmp_path):
    """f = 1, two pipelines; both holders of the first half of the model (stage 0 of each
    pipeline) die in the optimizer step of step 7. No replica of those layers is left:
    the job restarts from the last checkpoint (every 3 steps: step 6) on the two nodes
    left and loses exactly the steps after it."""
    summary, events = run_job(tmp_path, nodes=4, f=1, pipelines="2,2", steps=10, inject="7:node0:crash:optimizer,7:node2:crash:optimizer",
                              extra=("--checkpoint-every", "3"))  # fmt: skip
    all_fired(summary, 2)
    assert summary["num_restarts"] == 1 and summary["num_reconfigurations"] == 0
    decision = kinds(events, "decision")[0]
    assert decision["actions"][0]["action"] == "RestartFromCheckpoint"
    (rollback,) = kinds(events, "rollback")
    checkpoints = [e["step"] for e in kinds(events, "checkpoint") if e["time_s"] < rollback["time_s"]]
    assert rollback["to_step"] == checkpoints[-1] == 6
    assert rollback["iterations_undone"] == 8 - 6 == summary["lost_iterations"]  # step 7 was committed, then both died
    assert sorted(n for p in summary["plan"]["pipelines"] for n in p["nodes"]) == ["node1", "node3"]


@pytest.mark.timeout(300)
def test_varuna_checkpoints_stops_everything_and_restarts(tmp_path):
    """The Varuna baseline: a crash makes it save the survivors' state, kill every
    worker, start fresh processes and restart from that checkpoint; no step is lost."""
    summary, events = run_job(
        tmp_path, nodes=4, f=1, steps=7, inject="3:node1:crash:backward", extra=("--policy", "varuna")
    )
    all_fired(summary, 1)
    assert summary["num_restarts"] == 1 and summary["num_reconfigurations"] == 0 and summary["lost_iterations"] == 0
    decision = kinds(events, "decision")[0]
    assert [a["action"] for a in decision["actions"]] == ["Checkpoint", "Restart"]
    assert [e["step"] for e in kinds(events, "checkpoint")][-1] >= 3
    (restarted,) = kinds(events, "processes_restarted")
    assert sorted(restarted["nodes"]) == ["node0", "node2", "node3"]
    (recovery,) = summary["recoveries"]
    assert recovery["kind"] == "restart" and recovery["respawn_s"] > 0


@pytest.mark.timeout(300)
def test_a_trace_removes_and_adds_nodes_and_the_plan_grows_back(tmp_path):
    """Trace replay (the simulator's event-CSV format, node names become workers): four
    nodes, one removed by a cable fault (its processes stopped, as a cut link leaves them:
    declared lost on missed heartbeats, a heartbeat timeout after the removal), then a new
    one added (started, registered, taken in at an iteration boundary). The node count
    returns to four and the plan grows back."""
    trace = tmp_path / "trace.csv"
    trace.write_text("0,add,a\n0,add,b\n0,add,c\n0,add,d\n400,remove,c,cable\n900,add,e\n")
    summary, events = run_job(tmp_path, nodes=4, f=1, steps=150, extra=("--trace", str(trace), "--time-scale", "1"))
    lost = kinds(events, "worker_lost")
    assert [e["node"] for e in lost] == ["c"] and "missed heartbeats" in lost[0]["reason"], lost
    (injected,) = [e for e in kinds(events, "injected") if "remove c" in e["what"]]
    assert injected["applied"] and "(cable)" in injected["what"]
    # noticed at the heartbeat timeout, not at once as a kill is: the last beat seen may
    # precede the stop by up to a beat interval and a poll (0.25 s each here)
    detection = summary["recoveries"][0]["detection_s"]
    assert HEARTBEAT_TIMEOUT_S - 1.0 <= detection <= HEARTBEAT_TIMEOUT_S + 2.0, detection
    nodes = sorted(n for p in summary["plan"]["pipelines"] for n in p["nodes"])
    assert nodes == ["a", "b", "d", "e"] and summary["world_size"] == 4
    joins = [
        e
        for e in kinds(events, "decision")
        if e["event"] in ("NodesReady", "PauseEnded") and e["actions"][0]["action"] == "Reinstantiate"
    ]
    assert len(joins) == 1 and summary["num_reconfigurations"] == 2 and summary["num_restarts"] == 0


@pytest.mark.timeout(300)
def test_a_node_removed_while_varuna_restarts_is_dropped_not_awaited(tmp_path):
    """A trace removes a second node while Varuna's restart is starting fresh processes:
    its new worker dies before registering. The restart goes on without it at once
    (it used to wait for the node until the start-up timeout), and training is correct."""
    trace = tmp_path / "trace.csv"
    trace.write_text("0,add,a\n0,add,b\n0,add,c\n0,add,d\n400,remove,c\n1400,remove,d\n")
    summary, events = run_job(
        tmp_path, nodes=4, f=1, steps=12, extra=("--trace", str(trace), "--time-scale", "1", "--policy", "varuna")
    )
    restarted = kinds(events, "processes_restarted")
    assert restarted and sorted(restarted[0]["nodes"]) == ["a", "b", "d"]
    failed = kinds(events, "node_start_failed") + [e for e in kinds(events, "worker_lost") if e["node"] == "d"]
    assert [e["node"] for e in failed] == ["d"]
    assert sorted(n for p in summary["plan"]["pipelines"] for n in p["nodes"]) == ["a", "b"]
    # the policy re-planned once every node left had started, not with the first to register
    assert [sorted(e["nodes"]) for e in restarted[1:]] == [["a", "b"]]
    # recovered within seconds of the second removal, not after the 300 s start-up timeout,
    # and both removals are one recovery (the second struck during the first)
    assert summary["duration_s"] < 120
    (recovery,) = summary["recoveries"]
    assert recovery["failures"] == 2 and sorted(recovery["nodes"]) == ["c", "d"]


@pytest.mark.timeout(300)
def test_a_node_lost_while_varuna_creates_its_groups_is_not_waited_for(tmp_path):
    """A worker dies as it enters its generation's process-group creation: the others
    wait for it in the rendezvous. Varuna stops every process on a restart anyway, so the
    coordinator restarts at once instead of collecting their reports after the group
    timeout (set to 120 s here, so a recovery that waited for it would take 2 minutes)."""
    summary, events = run_job(
        tmp_path,
        nodes=4,
        f=1,
        steps=6,
        inject="0:node1:crash:groups",
        extra=("--policy", "varuna", "--timeout", "120"),
    )
    all_fired(summary, 1)
    (skipped,) = kinds(events, "survivors_not_awaited")
    assert skipped["generation"] == 0 and skipped["ranks"], "the survivors were blocked in the rendezvous"
    (restarted,) = kinds(events, "processes_restarted")
    assert sorted(restarted["nodes"]) == ["node0", "node2", "node3"]
    assert not kinds(events, "worker_unclean")
    (recovery,) = summary["recoveries"]
    assert recovery["kind"] == "restart" and recovery["total_s"] < 60
