"""tiny-gpt, its data and the emulated layers (one process)."""

from __future__ import annotations

import time

import pytest
import torch

from real.config import TinyGptSpec
from real.models.emulated import (
    EmulatedLayerTimes,
    EmulatedStage,
    output_shape,
    sleep_until,
)
from real.models.tinygpt import batch, build_layer, build_layers, lm_loss

SPEC = TinyGptSpec(vocab=40, seq_len=10, hidden=16, heads=2, blocks=3)


def test_stages_built_separately_equal_the_whole_model():
    whole = build_layers(SPEC, 0, SPEC.num_layers, seed=5)
    parts = [build_layers(SPEC, 0, 2, seed=5), build_layers(SPEC, 2, 4, seed=5), build_layers(SPEC, 4, 5, seed=5)]
    ids, _ = batch(SPEC, 5, 0, 3)
    x = ids
    for part in parts:
        x = part(x)
    assert torch.equal(x, whole(ids))
    assert x.shape == (3, SPEC.seq_len, SPEC.vocab)


def test_layers_depend_on_seed_and_index():
    a, b = build_layer(SPEC, 1, seed=0), build_layer(SPEC, 2, seed=0)
    c = build_layer(SPEC, 1, seed=1)
    assert not torch.equal(a.qkv.weight, b.qkv.weight)
    assert not torch.equal(a.qkv.weight, c.qkv.weight)
    assert torch.equal(a.qkv.weight, build_layer(SPEC, 1, seed=0).qkv.weight)
    with pytest.raises(IndexError):
        build_layer(SPEC, SPEC.num_layers, 0)


def test_batches_are_deterministic_per_step_and_learnable():
    x0, y0 = batch(SPEC, 1, 0, 4)
    x0b, _ = batch(SPEC, 1, 0, 4)
    x1, _ = batch(SPEC, 1, 1, 4)
    assert torch.equal(x0, x0b) and not torch.equal(x0, x1)
    assert torch.equal(x0[:, 1:], y0[:, :-1])  # targets are the inputs shifted by one
    stride = (x0[:, 1] - x0[:, 0]) % SPEC.vocab
    assert torch.equal((x0[:, 0] + stride * 2) % SPEC.vocab, x0[:, 2])


def test_training_lowers_the_loss():
    model = build_layers(SPEC, 0, SPEC.num_layers, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for step in range(30):
        x, y = batch(SPEC, 0, step, 16)
        loss = lm_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.8 * losses[0]


def test_emulated_stage_sleeps_its_profiled_times_and_moves_its_bytes():
    times = [EmulatedLayerTimes(0.02, 0.04, 1000), EmulatedLayerTimes(0.03, 0.05, 4096)]
    stage = EmulatedStage(times, microbatch_size=2)
    x = torch.zeros(2, 7, requires_grad=True)
    start = time.perf_counter()
    out = stage(x)
    forward_s = time.perf_counter() - start
    assert out.shape == (2, 512) and out.dtype == torch.float32  # 4096 bytes per microbatch
    start = time.perf_counter()
    out.sum().backward()
    backward_s = time.perf_counter() - start
    assert 0.05 <= forward_s < 0.05 + 0.03
    assert 0.09 <= backward_s < 0.09 + 0.03
    assert x.grad.shape == x.shape
    assert [p.grad.shape for p in stage.layer_parameters(0) + stage.layer_parameters(1)] == [(1,), (1,)]


def test_output_shape_rounds_up_and_sleep_until_waits():
    assert output_shape(4, 1) == (1, 1)
    assert output_shape(1, 4) == (4, 1)
    assert output_shape(4097, 1) == (1, 1025)
    start = time.perf_counter()
    sleep_until(start + 0.02)
    assert time.perf_counter() - start >= 0.02
    sleep_until(start)  # in the past: returns at once
    assert EmulatedLayerTimes.from_list(EmulatedLayerTimes(1.0, 2.0, 3, 0.5, 0.25).to_list()) == EmulatedLayerTimes(
        1.0, 2.0, 3, 0.5, 0.25
    )
