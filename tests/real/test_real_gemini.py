"""GEMINI on the real backend: restart from copies in peers' memory, or from the checkpoint.

Each case runs `ooblab run --design gemini` (coordinator + spawned workers, gloo on CPU,
float64) on 3 nodes with in-memory copies every step and a persistent checkpoint every 3
steps. node0 crashes in step 5's forward and another node crashes while tearing down
after it: two nodes lost in one recovery (more than the f = 0 the job plans for). Every worker process is then restarted and loads its
layers from wherever the design's placement says a copy survived:

- m = 2 (every node holds every node's state): node1 alone holds the copy of step 4 (the
  newest the design counts as complete, one step of traffic behind), the job resumes
  there on node1 (rolls back 1 step, not 2);
- m = 1 (3 nodes: a ring): node0 and node1 are neighbours, so one of them held the other's
  state with no third holder, no copy is whole: the job falls back to the checkpoint of
  step 3 on node2.

Either way the losses of every step and the trained parameters equal the failure-free
single-process reference's (same tolerance as `test_real_recovery`).
"""

from __future__ import annotations

import json

import pytest

from real.config import RunConfig
from real.models.reference import gather_params, max_relative_difference, train_reference

from .conftest import ooblab

TOLERANCE = 1e-5
STEPS = 6
FAST = ["--timeout", "15", "--heartbeat-timeout", "3", "--heartbeat-interval", "0.25"]


def run_gemini(tmp_path, replicas: int, second: str) -> tuple[dict, list[dict]]:
    params = tmp_path / "params"
    memory = tmp_path / "memory"
    args = ["run", "--design", "gemini", "--set", f"replicas={replicas}", "--set", "placement=ring", "--nodes", "3",
            "--f", "0", "--steps", str(STEPS), "--global-batch", "16", "--dtype", "float64", "--checkpoint-every", "3",
            "--inject", f"5:node0:crash:forward,5:{second}:crash:teardown", *FAST, "--save-params", str(params),
            "--memory-dir", str(memory), "--out", str(tmp_path / "run"), "--json"]  # fmt: skip
    result = ooblab(args, timeout_s=240)
    summary = result.json()
    assert result.returncode == 0 and summary["status"] == "finished", summary.get("reason") or result.stderr[-4000:]
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    reference = train_reference(RunConfig(nodes=3, fault_tolerance=0, steps=STEPS, global_batch=16, dtype="float64"))
    assert summary["losses"] == pytest.approx(reference.losses, rel=1e-9)
    replicas_saved = gather_params(params)
    worst = max(max_relative_difference(p, reference.params) for p in replicas_saved.values())
    assert worst <= TOLERANCE, f"parameters differ from the failure-free reference by {worst:.3e}"
    assert not memory.exists() or not any(memory.iterdir()), "the nodes' memory is cleared when the job ends"
    return summary, events


def kinds(events, kind):
    return [e for e in events if e["kind"] == kind]


@pytest.mark.timeout(300)
def test_two_failures_restart_from_the_copy_in_the_survivors_memory(tmp_path):
    summary, events = run_gemini(tmp_path, replicas=2, second="node2")
    assert sorted(e["node"] for e in kinds(events, "worker_lost")) == ["node0", "node2"]
    (recovery,) = summary["recoveries"]
    assert sorted(recovery["nodes"]) == ["node0", "node2"]
    (decision,) = kinds(events, "decision")
    (action,) = decision["actions"]
    assert action["action"] == "RestartFromSnapshot" and sorted(decision["nodes"]) == ["node0", "node2"]
    (restored,) = kinds(events, "restart_from_memory")
    (rollback,) = kinds(events, "rollback")
    assert rollback["source"] == "memory" and rollback["to_step"] == restored["step"]
    assert action["iteration"] == 4, "the design counts the copy of step 4 complete by step 5"
    assert restored["step"] >= 3, "a copy no older than the checkpoint of step 3 was restored"
    if restored["step"] != action["iteration"]:  # a copy the design counted on did not complete in time
        assert kinds(events, "memory_copy_unusable")
    assert all(h == ["node1"] for h in restored["holders"].values()), "only node1's memory is left"
    assert kinds(events, "processes_restarted")[0]["nodes"] == ["node1"]
    assert not kinds(events, "restart_from_checkpoint") and not kinds(events, "checkpoint_load")
    assert summary["plan"]["pipelines"][0]["nodes"] == ["node1"]


@pytest.mark.timeout(300)
def test_a_state_with_no_holder_left_falls_back_to_the_checkpoint(tmp_path):
    # node1's crash is injected into its teardown after node0's loss; once in CI (two workers
    # on 2 cores) node1 left the step without passing that point, so the job saw one loss.
    # The premise is retried once; every assertion below still holds for the run kept.
    for attempt in range(2):
        (tmp_path / f"try{attempt}").mkdir()
        summary, events = run_gemini(tmp_path / f"try{attempt}", replicas=1, second="node1")
        if len(kinds(events, "worker_lost")) == 2:
            break
    assert sorted(e["node"] for e in kinds(events, "worker_lost")) == ["node0", "node1"]
    (decision,) = kinds(events, "decision")
    (action,) = decision["actions"]
    assert action["action"] == "RestartFromCheckpoint" and "every holder" in action["reason"]
    assert not kinds(events, "restart_from_memory")
    (rollback,) = kinds(events, "rollback")
    assert rollback["to_step"] == 3 and "source" not in rollback
    (restart,) = kinds(events, "restart_from_checkpoint")
    assert restart["step"] == 3
    assert summary["plan"]["pipelines"][0]["nodes"] == ["node2"]
