"""Durable checkpoints in one process: fsync order, retention, the writer's faults.

The writer runs for real (its thread, queue and `save_layer`); faults come from the
`checkpoint_fault` seam, whose "full" kind is a real ENOSPC from /dev/full.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from real.config import CheckpointFault, ConfigError, RunConfig, parse_checkpoint_faults  # noqa: E402
from real.protocol.manifest import MANIFEST, layer_path, read_manifest  # noqa: E402
from real.state import checkpoint as ckpt  # noqa: E402
from real.state.checkpoint import load_layer, newest_usable, save_layer, write_manifest  # noqa: E402
from real.state.layer_state import LayerState  # noqa: E402
from real.state.writer import CheckpointWriter  # noqa: E402

from .conftest import REPO  # noqa: E402

LAYERS = 3


def state(layer: int, step: int) -> LayerState:
    w = {"w": torch.full((4,), float(step * 10 + layer), dtype=torch.float64)}
    return LayerState(
        layer, step, step, w, {"w": torch.zeros(4, dtype=torch.float64)}, {"w": torch.zeros(4, dtype=torch.float64)}
    )


def checkpoint(directory: Path, step: int, keep: int = 2):
    for layer in range(LAYERS):
        save_layer(directory, state(layer, step))
    return write_manifest(directory, step, LAYERS, keep)


class Reports:
    """What the writer reports (`CheckpointReports`), recorded."""

    def __init__(self):
        self.wrote, self.fails = [], []

    def written(self, job, layer):
        self.wrote.append((job.generation, job.attempt, job.step, layer))

    def failed(self, job, reason):
        self.fails.append((job.step, reason))


def wait_until(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.time() + timeout_s
    while not condition() and time.time() < deadline:
        time.sleep(0.01)
    return condition()


def test_every_file_and_its_directory_are_fsynced_before_the_manifest_names_them(tmp_path, monkeypatch):
    """The order of the durable steps, as the OS sees them: a layer file's data, its rename,
    its directory's entry, all before the manifest's rename."""
    log = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        log.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst):
        log.append(("replace", str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(ckpt.os, "fsync", fsync)
    monkeypatch.setattr(ckpt.os, "replace", replace)
    checkpoint(tmp_path, 3)
    manifest_at = log.index(("replace", str(tmp_path / MANIFEST)))
    before = log[:manifest_at]
    step_dir = str(tmp_path / "step3")
    assert ("fsync", str(tmp_path)) in before, "the new step directory's entry is durable in its parent"
    for layer in range(LAYERS):
        path = str(tmp_path / layer_path(3, layer))
        renamed = before.index(("replace", path))
        assert any(kind == "fsync" and ".layer" in p and p.startswith(step_dir) for kind, p in before[:renamed]), (
            "data before rename"
        )
        assert ("fsync", step_dir) in before[renamed + 1 :], f"layer {layer}'s rename is fsynced in its directory"
    assert log[manifest_at + 1 :].count(("fsync", str(tmp_path))) >= 1, "the manifest's rename is fsynced too"


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=6), st.integers(1, 3), st.sets(st.integers(0, 5)))
def test_the_last_keep_complete_checkpoints_stay_and_nothing_else(gaps, keep, incomplete):
    """Steps in increasing order, some left incomplete (a layer missing, as a failed
    write leaves them): on disk are exactly the `keep` newest complete ones (plus
    incomplete ones newer than the manifest, which a later manifest may still need)."""
    import tempfile

    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        steps = [sum(gaps[: i + 1]) for i in range(len(gaps))]
        complete = []
        for i, step in enumerate(steps):
            if i in incomplete:
                save_layer(directory, state(0, step))  # layer 0 only: never a manifest
                continue
            manifest = checkpoint(directory, step, keep)
            complete.append(step)
            assert manifest.kept == tuple(complete[-keep:])
        on_disk = sorted(int(p.name[4:]) for p in directory.glob("step*"))
        newest = complete[-1] if complete else None
        if newest is None:
            assert read_manifest(directory) is None
            return
        assert read_manifest(directory).kept == tuple(complete[-keep:])
        assert on_disk == sorted(complete[-keep:] + [s for s in steps if s > newest])


def test_a_restart_skips_a_kept_checkpoint_with_a_missing_file(tmp_path):
    checkpoint(tmp_path, 2)
    newest = checkpoint(tmp_path, 4)
    assert newest_usable(newest) == (newest, [])
    (tmp_path / layer_path(4, 2)).unlink()
    usable, skipped = newest_usable(newest)
    assert usable.step == 2 and skipped == [(4, [2])]
    assert torch.equal(load_layer(usable, 1).params["w"], state(1, 2).params["w"])


def test_a_full_disk_fails_that_checkpoint_only_and_the_next_one_is_written(tmp_path):
    reports = Reports()
    writer = CheckpointWriter(tmp_path, reports, [CheckpointFault(2, "full")])
    assert writer.submit(0, 0, 2, [state(l, 2) for l in range(LAYERS)], timeout_s=5) is None
    assert writer.flush(10)
    (failed,) = reports.fails
    assert failed[0] == 2 and "No space left on device" in failed[1], failed
    assert not reports.wrote and not list(tmp_path.glob("step2/.*tmp*")), "no temporary file is left behind"
    assert writer.submit(1, 0, 4, [state(l, 4) for l in range(LAYERS)], timeout_s=5) is None
    assert writer.flush(10)
    assert sorted(reports.wrote) == [(1, 0, 4, l) for l in range(LAYERS)]
    assert write_manifest(tmp_path, 4, LAYERS).step == 4


def test_a_write_that_never_returns_fails_later_checkpoints_within_the_timeout(tmp_path):
    """The writer hangs in step 2's write: step 4 waits in the queue, step 6 finds no room
    within the timeout and fails at once; later ones fail without waiting at all."""
    reports = Reports()
    writer = CheckpointWriter(tmp_path, reports, [CheckpointFault(2, "hang", "node1")], node="node1")
    layers = lambda step: [state(l, step) for l in range(LAYERS)]  # noqa: E731
    assert writer.submit(0, 0, 2, layers(2), timeout_s=0.3) is None
    assert wait_until(lambda: writer._busy_since is not None)
    assert writer.submit(0, 0, 4, layers(4), timeout_s=0.3) is None
    t0 = time.time()
    reason = writer.submit(0, 0, 6, layers(6), timeout_s=0.3)
    waited = time.time() - t0
    assert reason and "no room" in reason and 0.25 < waited < 2.0, (reason, waited)
    t0 = time.time()
    reason = writer.submit(0, 0, 8, layers(8), timeout_s=0.3)
    assert reason and "busy" in reason and time.time() - t0 < 0.2
    assert not writer.flush(0.2) and not reports.wrote and not reports.fails


def test_a_fault_for_another_node_does_nothing(tmp_path):
    reports = Reports()
    writer = CheckpointWriter(tmp_path, reports, [CheckpointFault(2, "full", "node1")], node="node0")
    writer.submit(0, 0, 2, [state(0, 2)], timeout_s=5)
    assert writer.flush(10) and reports.wrote == [(0, 0, 2, 0)] and not reports.fails


KILLED = """
import sys, torch
sys.path.insert(0, {repo!r})
from real.config import CheckpointFault
from real.state.layer_state import LayerState
from real.state.writer import CheckpointWriter
class Reports:
    def written(self, job, layer): print("reported", layer, flush=True)
    def failed(self, job, reason): print("failed", reason, flush=True)
w = {{"w": torch.zeros(4, dtype=torch.float64)}}
writer = CheckpointWriter({directory!r}, Reports(), [CheckpointFault(6, "crash")])
writer.submit(0, 0, 6, [LayerState(l, 6, 6, w, w, w) for l in range({layers})], timeout_s=5)
writer.flush(30)
print("survived", flush=True)
"""


@pytest.mark.timeout(120)
def test_a_writer_killed_between_its_files_and_the_manifest_leaves_the_last_checkpoint(tmp_path):
    """The "crash" fault kills the real writer's process after its files are durable and
    before it reports them: the manifest still names step 3; the orphaned step-6 files are
    never named, and the next manifest clears them."""
    checkpoint(tmp_path, 3)
    code = KILLED.format(repo=str(REPO), directory=str(tmp_path), layers=LAYERS)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100)
    assert child.returncode == -9 and "reported" not in child.stdout and "survived" not in child.stdout, child
    assert sorted(p.name for p in (tmp_path / "step6").iterdir()) == [f"layer{l}.pt" for l in range(LAYERS)]
    manifest = read_manifest(tmp_path)
    assert (manifest.step, manifest.kept) == (3, (3,))
    assert load_layer(manifest, 0).ready_step == 3
    checkpoint(tmp_path, 9)
    assert not (tmp_path / "step6").exists() and read_manifest(tmp_path).kept == (3, 9)


@pytest.mark.parametrize("text", ["x:full", "3:melt", "3", "3:hang:", "3:full:n:extra"])
def test_bad_checkpoint_faults_name_the_entry(text):
    with pytest.raises(ConfigError, match="checkpoint_fault entry"):
        RunConfig(checkpoint_fault=text)


def test_checkpoint_settings_are_validated_and_parsed():
    assert parse_checkpoint_faults("4:hang:node1,6:full") == (
        CheckpointFault(4, "hang", "node1"),
        CheckpointFault(6, "full"),
    )
    with pytest.raises(ConfigError, match="checkpoint_keep"):
        RunConfig(checkpoint_keep=0)
    with pytest.raises(ConfigError, match="checkpoint_timeout_s"):
        RunConfig(checkpoint_timeout_s=0)
    assert RunConfig(timeout_s=4.0, checkpoint_timeout_s=30.0).checkpoint_queue_timeout_s == 2.0
