"""Layer states, commits and checkpoints, in one process (no process groups)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from real.config import TinyGptSpec
from real.control.recovery import Recovery
from real.models.tinygpt import batch, build_layers, lm_loss
from real.protocol.commit import ABORT, OK, STOP, ack, resolve, verdict
from real.protocol.keys import stop_request_key
from real.protocol.manifest import read_manifest
from real.state.checkpoint import (
    load_layer,
    save_layer,
    write_manifest,
)
from real.state.layer_state import capture, flatten, install, unflatten
from real.state.writer import CheckpointWriter

from .conftest import REPO

SPEC = TinyGptSpec(blocks=2, hidden=16, heads=2, seq_len=8, vocab=32)


def trained(steps: int, seed: int = 0):
    model = build_layers(SPEC, 0, SPEC.num_layers, seed, torch.float64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(steps):
        inputs, targets = batch(SPEC, seed, step, 4)
        optimizer.zero_grad()
        lm_loss(model(inputs), targets).backward()
        optimizer.step()
    return model, optimizer


def states_of(model, optimizer, ready_step, copy=True):
    return {
        i: capture(i, dict(layer.named_parameters()), optimizer, ready_step, copy=copy) for i, layer in enumerate(model)
    }


def test_a_restored_model_trains_on_exactly_like_the_original():
    """Capture after 2 AdamW steps, install into freshly built layers and a fresh
    optimizer, train one more step on both: bit-identical (the copy carries exp_avg,
    exp_avg_sq and the step count)."""
    model, optimizer = trained(2)
    states = {l: unflatten(flatten(s), s) for l, s in states_of(model, optimizer, 2).items()}
    assert all(s.ready_step == 2 and s.adam_step == 2 for s in states.values())
    fresh = build_layers(SPEC, 0, SPEC.num_layers, seed=99, dtype=torch.float64)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    for i, layer in enumerate(fresh):
        install(states[i], dict(layer.named_parameters()), fresh_opt)
    for m, o in ((model, optimizer), (fresh, fresh_opt)):
        inputs, targets = batch(SPEC, 0, 2, 4)
        o.zero_grad()
        lm_loss(m(inputs), targets).backward()
        o.step()
    for a, b in zip(model.parameters(), fresh.parameters()):
        assert torch.equal(a, b)


def test_install_refuses_a_state_of_another_shape():
    model, optimizer = trained(1)
    state = states_of(model, optimizer, 1)[1]
    other = build_layers(TinyGptSpec(blocks=2, hidden=32, heads=2, seq_len=8, vocab=32), 1, 2, 0, torch.float64)
    with pytest.raises(ValueError, match="shape"):
        install(state, dict(other[0].named_parameters()), torch.optim.AdamW(other.parameters()))
    with pytest.raises(ValueError, match="received"):
        unflatten(torch.zeros(3, dtype=torch.float64), state)


def test_checkpoint_files_manifest_and_cleanup(tmp_path):
    model, optimizer = trained(3)
    for state in states_of(model, optimizer, 3).values():
        save_layer(tmp_path, state)
    with pytest.raises(FileNotFoundError, match="lacks layers"):
        write_manifest(tmp_path, 6, SPEC.num_layers)  # nothing of step 6 on disk: no manifest
    assert read_manifest(tmp_path) is None
    manifest = write_manifest(tmp_path, 3, SPEC.num_layers)
    model, optimizer = trained(6)
    for state in states_of(model, optimizer, 6).values():
        save_layer(tmp_path, state)
    newer = write_manifest(tmp_path, 6, SPEC.num_layers, keep=1)
    assert read_manifest(tmp_path).step == 6 and not (tmp_path / "step3").exists() and manifest.step == 3
    restored = load_layer(newer, 1)
    assert torch.equal(restored.params["qkv.weight"], dict(model[1].named_parameters())["qkv.weight"].detach())


WRITER = """
import sys, torch
sys.path.insert(0, {repo!r})
from real.state.checkpoint import save_layer
from real.state.layer_state import LayerState
big = {{"w": torch.randn(1_000_000, dtype=torch.float64)}}
print("writing", flush=True)
i = 0
while True:  # the manifest's own step, over and over (a redone step checkpointed again)
    save_layer({directory!r}, LayerState(i % {layers}, 3, 3, big, big, big))
    i += 1
"""


@pytest.mark.timeout(120)
def test_a_crash_while_writing_leaves_the_last_checkpoint_intact(tmp_path):
    """A writer SIGKILLed while it rewrites the very files the manifest names (large
    layers, over and over) never leaves a damaged one: each file is the old one or a
    complete new one (written aside, renamed into place)."""
    model, optimizer = trained(3)
    for state in states_of(model, optimizer, 3).values():
        save_layer(tmp_path, state)
    write_manifest(tmp_path, 3, SPEC.num_layers)
    code = WRITER.format(repo=str(REPO), directory=str(tmp_path), layers=SPEC.num_layers)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "writing"
        time.sleep(1.5)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    manifest = read_manifest(tmp_path)
    assert manifest.step == 3
    rewritten = 0
    for layer in range(SPEC.num_layers):
        state = load_layer(manifest, layer)  # a torn file would not load
        assert state.ready_step == 3 and state.adam_step == 3
        if "w" in state.params:
            rewritten += 1
            assert state.params["w"].numel() == 1_000_000
    assert rewritten > 0, "the writer got to replace some files before it was killed"


def test_the_background_writer_saves_copies_and_reports_each_layer(tmp_path):
    model, optimizer = trained(2)
    states = states_of(model, optimizer, 2, copy=False)
    reported = []

    class Reports:
        def written(self, job, layer):
            reported.append((job.step, layer))

        def failed(self, job, reason):
            raise AssertionError(reason)

    writer = CheckpointWriter(tmp_path, Reports())
    assert writer.submit(0, 0, 2, states.values(), timeout_s=5.0) is None
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # training goes on: the queued copies must not change
    writer.flush()
    assert sorted(reported) == [(2, l) for l in range(SPEC.num_layers)]
    manifest = write_manifest(tmp_path, 2, SPEC.num_layers)
    saved = load_layer(manifest, 0).params["tokens.weight"]
    assert torch.equal(saved + 1.0, dict(model[0].named_parameters())["tokens.weight"].detach())


@pytest.fixture
def store():
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10))
    yield master


def test_the_last_ack_commits_and_a_later_abort_cannot_undo_it(store):
    for _ in range(3):
        ack(store, 0, 0, world_size=3)
    assert verdict(store, 0, 0) == OK
    assert resolve(store, 0, 0, steps=10) == 1  # step 0 committed: the first uncommitted is 1
    assert verdict(store, 0, 1) == ABORT
    ack(store, 0, 1, world_size=1)  # a straggler's ack after the abort changes nothing
    assert verdict(store, 0, 1) == ABORT


def test_an_abort_before_the_last_ack_wins_for_everyone(store):
    ack(store, 1, 4, world_size=2)
    assert resolve(store, 1, 4, steps=10) == 4
    ack(store, 1, 4, world_size=2)
    assert verdict(store, 1, 4) == ABORT


def test_a_stop_request_makes_the_next_commit_a_stop(store):
    store.set(stop_request_key(2), "1")
    ack(store, 2, 0, world_size=1)
    assert verdict(store, 2, 0) == STOP
    assert resolve(store, 2, 0, steps=10) == 1
    assert resolve(store, 3, 9, steps=9) == 9  # every step committed


def test_a_recovery_phases_add_up_to_its_total():
    rec = Recovery(0, t_fail_s=10.0)
    rec.enter("rebuild", 10.2)
    rec.enter("planning", 10.5)
    rec.enter("rebuild", 10.4)  # a worker clock slightly behind: never negative
    rec.enter("copy", 10.9)
    rec.enter("redo", 11.0)
    rec.finish(11.6)
    d = rec.to_dict()
    assert d["total_s"] == pytest.approx(1.6)
    assert sum(
        v for k, v in d.items() if k.endswith("_s") and k not in ("total_s", "t_fail_s", "t_done_s")
    ) == pytest.approx(1.6)
    assert d["detection_s"] == pytest.approx(0.2) and d["redo_s"] == pytest.approx(0.6)
