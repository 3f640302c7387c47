"""Emulated compute: layers that take their profiled time and pass tensors of their profiled size.

A stage of emulated layers sleeps, in forward, layer after layer for each layer's profiled
forward time, and returns a float32 tensor of the last layer's profiled output size (so
the pipeline moves as many bytes as the real model would); in backward it sleeps for the
backward times and returns gradients of the right shapes. Deadlines accumulate from the
stage's start, so per-layer sleep overshoot does not add up. Each layer has one scalar
parameter, so gradient synchronisation and the optimizer run their real code paths on
tiny tensors; the cross-pipeline all-reduce's *duration* is emulated separately
(`EmulatedLayerTimes.allreduce_s`, the planner's per-layer model), as the profile's
gradient bytes would not fit many "nodes" on one machine.

Sleeping processes use no CPU, so dozens of emulated GPUs run on a few cores.

What is emulated and what is real:
- emulated: compute (the sleeps; a sleep overshoots its deadline a little, 0.4-0.9 ms
  per microbatch and stage, forward and backward together, on the loaded 2-core machine:
  `compute_overshoot_s` in `communication_fit.json`; the cost model does not charge it)
  and the all-reduce's duration;
- real: the pipeline's boundary traffic. A stage's output is a tensor of the last layer's
  profiled `output_bytes` and its gradient comes back at the same size, sent by
  `PipelineStage` over the pipeline's process group (gloo over loopback on one machine),
  so the transfer and the runtime's own per-hop cost are paid, not charged: the same
  costs `communication.json` measures (`real.launch.comm_profile` runs these stages under
  the backend's `Schedule1F1B`; 4 MiB boundaries made its 3-stage, 6-microbatch iteration
  20-60 ms slower than 64 KiB ones here). Emulation and simulation therefore agree on
  communication only as far as the cost model's term fits the runtime (the fit's
  residuals), which is the point of validating against it.
- links that differ from the measured loopback (an across-node link slower than the
  machine's own) are not emulated: to emulate one, the sending stage would sleep, after
  the compute of each boundary send (forward and backward), the difference between that
  link's transfer and loopback's, `(latency_link - latency_loopback) + bytes x (1 /
  bandwidth_link - 1 / bandwidth_loopback)`, which is where the cost model charges it (the
  sender's stage weight). The validation instead plans with the loopback figures for both
  links, so there is nothing to add.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn

FLOAT_BYTES = 4


@dataclass(frozen=True)
class EmulatedLayerTimes:
    """One layer as the emulation sees it (from the planner's profile)."""

    forward_s: float
    backward_s: float
    output_bytes: int
    allreduce_s: float = 0.0
    optimizer_step_s: float = 0.0  # the profile's optimizer step (`optimizer.json`), slept after the real one

    def to_list(self) -> list[float]:
        return [self.forward_s, self.backward_s, self.output_bytes, self.allreduce_s, self.optimizer_step_s]

    @classmethod
    def from_list(cls, values: Sequence[float]) -> EmulatedLayerTimes:
        forward_s, backward_s, output_bytes, allreduce_s, optimizer_step_s = values
        return cls(float(forward_s), float(backward_s), int(output_bytes), float(allreduce_s), float(optimizer_step_s))


def sleep_until(deadline: float) -> None:
    """Sleep until `time.perf_counter()` reaches `deadline` (no-op if already past)."""
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            return
        time.sleep(left)


def output_shape(output_bytes: int, microbatch_size: int) -> tuple[int, int]:
    """A [microbatch, n] float32 shape of at least `output_bytes` (at least one element)."""
    per_sample = max(1, -(-output_bytes // (FLOAT_BYTES * microbatch_size)))
    return (microbatch_size, per_sample)


class _SleepThrough(torch.autograd.Function):
    """forward: sleep the layers' forward times; backward: their backward times."""

    @staticmethod
    def forward(ctx, x, weights, forward_s, backward_s, shape):  # noqa: D401 - autograd API
        ctx.backward_s = backward_s
        ctx.input_shape = x.shape
        ctx.input_dtype = x.dtype
        ctx.num_weights = weights.numel()
        start = time.perf_counter()
        deadline = start
        for seconds in forward_s:
            deadline += seconds
            sleep_until(deadline)
        # Contents are never read (only sizes matter), so skip the memset: empty, not zeros.
        return x.new_empty(shape, dtype=torch.float32)  # autograd links it to x and weights

    @staticmethod
    def backward(ctx, grad):
        deadline = time.perf_counter()
        for seconds in reversed(ctx.backward_s):
            deadline += seconds
            sleep_until(deadline)
        grad_x = grad.new_empty(ctx.input_shape, dtype=ctx.input_dtype) if ctx.needs_input_grad[0] else None
        grad_w = grad.new_zeros(ctx.num_weights)
        return grad_x, grad_w, None, None, None


class EmulatedStage(nn.Module):
    """Layers [first, end) of an emulated model as one pipeline stage; `weights[i]` is local
    layer i's (scalar) parameter."""

    def __init__(self, layers: Sequence[EmulatedLayerTimes], microbatch_size: int, last: bool = False):
        super().__init__()
        if not layers:
            raise ValueError("an emulated stage needs at least one layer")
        self.times = tuple(layers)
        self.weights = nn.ParameterList(nn.Parameter(torch.zeros(1)) for _ in layers)
        # The model's last stage hands its output to the loss only: one value per sample.
        self.shape = (
            output_shape(FLOAT_BYTES, microbatch_size)
            if last
            else output_shape(layers[-1].output_bytes, microbatch_size)
        )

    def layer_parameters(self, index: int) -> list[nn.Parameter]:
        return [self.weights[index]]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _SleepThrough.apply(
            x,
            torch.cat(list(self.weights)),
            tuple(layer.forward_s for layer in self.times),
            tuple(layer.backward_s for layer in self.times),
            (x.shape[0], *self.shape[1:]),
        )


def emulated_input(num_samples: int) -> torch.Tensor:
    """What the first stage receives per sample (token ids stand-in; content unused)."""
    return torch.zeros(num_samples, 1)


def emulated_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """A scalar that depends on the last stage's output, so backward runs (the output's
    contents are uninitialised: multiply by zero, then make any NaN zero)."""
    return torch.nan_to_num(output.sum() * 0.0) + target.sum() * 0
