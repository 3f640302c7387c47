"""Checkpoint faults in whole jobs: the job goes on, failed checkpoints are counted, a
restart uses the newest complete checkpoint, and the trained model still equals the
failure-free reference.

Faults: the writer's `--checkpoint-fault` seam (a write that never returns; a worker
killed after its files are durable and before it reports them; a real ENOSPC from
/dev/full in Varuna's save), and the checkpoint directory replaced by a plain file while
the job runs (real I/O errors in every writer and in the manifest; tests run as root, so
permissions would not stop a write).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading

import pytest

from real.protocol.manifest import read_manifest

from .conftest import assert_no_leftovers, start
from .test_real_recovery import FAST, kinds, run_job


@pytest.mark.timeout(300)
def test_a_write_that_never_returns_fails_checkpoints_not_the_job(tmp_path):
    """node1's writer hangs in step 4's write: step 4 fails at its deadline, later ones
    when node1's queue has no room (within the timeout) or its writer is known stalled;
    training never waits longer than the timeout and finishes every step."""
    summary, events = run_job(tmp_path, nodes=4, f=1, pipelines="2,2", steps=12,
                              extra=("--checkpoint-every", "2", "--checkpoint-timeout", "2", "--checkpoint-fault", "4:hang:node1"))  # fmt: skip
    assert [e["step"] for e in kinds(events, "checkpoint")] == [2]
    failed = kinds(events, "checkpoint_failed")
    # each step fails on its own clock (step 6 waits up to 2 s for queue room, 8 and 10 may
    # fail at once on the known stall), so the order they are reported in is not fixed
    assert sorted(e["step"] for e in failed) == [4, 6, 8, 10] == sorted(summary["failed_checkpoint_steps"])
    assert "not durable within 2 s" in next(e for e in failed if e["step"] == 4)["reason"]
    assert summary["num_failed_checkpoints"] == 4 and summary["num_checkpoints"] == 1
    assert read_manifest(tmp_path / "run" / "checkpoints").step == 2


@pytest.mark.timeout(300)
def test_writers_killed_between_their_files_and_the_manifest_restart_from_the_newest_complete_one(tmp_path):
    """Both holders of the first half of the model (stage 0 of each pipeline, f = 1) die
    right after their files of step 4 are durable, before reporting them: the manifest
    never names step 4, no replica of those layers is left, and the job restarts from
    step 2 (the newest complete checkpoint), saying so, and trains on to the reference."""
    summary, events = run_job(tmp_path, nodes=4, f=1, pipelines="2,2", steps=10,
                              extra=("--checkpoint-every", "2", "--checkpoint-fault", "4:crash:node0,4:crash:node2"))  # fmt: skip
    assert sorted(e["node"] for e in kinds(events, "worker_lost")) == ["node0", "node2"]
    assert summary["num_restarts"] == 1
    (rollback,) = kinds(events, "rollback")
    (note,) = kinds(events, "restart_from_checkpoint")
    assert rollback["to_step"] == note["step"] == 2 and note["failed_since"] == [4]
    assert 4 in summary["failed_checkpoint_steps"]
    assert max(e["step"] for e in kinds(events, "checkpoint")) == 8, "later checkpoints go on after the restart"


@pytest.mark.timeout(300)
def test_varuna_save_on_a_full_disk_is_a_failed_checkpoint_and_it_restarts_from_the_last_one(tmp_path):
    """Varuna's save after a crash hits ENOSPC (/dev/full) in every writer: a failed
    checkpoint, not a failed job; it rolls back to the newest durable checkpoint, the
    periodic one of step 2 when its writers finished before the crash. Under load they
    may not have (it is written while steps 2 and 3 run, and node1 is one of them): then
    step 2's checkpoint is abandoned, said so, and the job rolls back to step 0."""
    summary, events = run_job(tmp_path, nodes=4, f=1, steps=7, inject="3:node1:crash:backward",
                              extra=("--policy", "varuna", "--checkpoint-every", "2", "--checkpoint-fault", "3:full"))  # fmt: skip
    (rollback,) = kinds(events, "rollback")
    at = events.index(rollback)
    durable = [e["step"] for e in kinds(events[:at], "checkpoint")]
    assert durable in ([2], []), durable
    to_step = durable[-1] if durable else 0
    assert rollback["to_step"] == to_step and summary["lost_iterations"] == 3 - to_step
    (failed, *abandoned) = kinds(events, "checkpoint_failed")
    assert failed["step"] == 3 and failed["attempt"] >= 1 and "No space left on device" in failed["reason"]
    assert [(e["step"], e["reason"]) for e in abandoned] == (
        [] if durable else [(2, "abandoned: the job rolled back to step 0")]
    )
    assert summary["failed_checkpoint_steps"] == [3, *(e["step"] for e in abandoned)] and summary["num_restarts"] == 1


@pytest.mark.timeout(400)
def test_the_checkpoint_directory_made_unwritable_mid_run(tmp_path):
    """After the first checkpoint the test replaces the checkpoint directory with a plain
    file; once a failure is reported it puts the directory back. Failed checkpoints are
    counted, the next interval succeeds, and the job finishes every step."""
    directory, aside = tmp_path / "ckpt", tmp_path / "ckpt.aside"
    out = tmp_path / "run"
    args = ["run", "--nodes", "2", "--f", "1", "--steps", "60", "--global-batch", "8", *FAST, "--checkpoint-every", "2",
            "--checkpoint-dir", str(directory), "--out", str(out)]  # fmt: skip
    process = start(args, stdout=subprocess.DEVNULL)
    seen: list[tuple[str, dict]] = []
    acted = []

    def follow():
        for line in process.stderr:
            if "] " not in line:
                continue
            kind, _, detail = line.split("] ", 1)[1].partition(" ")
            try:
                seen.append((kind, json.loads(detail)))
            except json.JSONDecodeError:
                continue
            if kind == "checkpoint" and not acted:
                shutil.move(directory, aside)
                directory.write_text("not a directory\n")
                acted.append(("broken", seen[-1][1]["step"]))
            elif kind == "checkpoint_failed" and len(acted) == 1:
                directory.unlink()
                shutil.move(aside, directory)
                acted.append(("restored", seen[-1][1]["step"]))

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    try:
        process.wait(timeout=360)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail("the job did not finish")
    finally:
        reader.join(timeout=10)
        assert_no_leftovers(process.pid)
    assert process.returncode == 0, seen[-3:]
    assert [a for a, _ in acted] == ["broken", "restored"], (
        f"the job ended before the fault could be exercised: {acted}"
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["num_iterations"] == 60
    failed = [d for k, d in seen if k == "checkpoint_failed"]
    first_failed = failed[0]["step"]
    assert summary["num_failed_checkpoints"] == len(failed) >= 1
    assert any(word in failed[0]["reason"] for word in ("FileExistsError", "NotADirectoryError", "manifest")), failed[0]
    later = [d["step"] for k, d in seen if k == "checkpoint" and d["step"] > first_failed]
    assert later, "a later interval wrote a complete checkpoint again"
    manifest = read_manifest(directory)
    assert manifest.step == max(later) and len(manifest.kept) == 2
    steps_on_disk = {int(p.name[4:]) for p in directory.glob("step*")}
    assert {k for k in steps_on_disk if k <= manifest.step} == set(manifest.kept)
