"""Time every layer of a model inside whole-model passes, as a worker runs them.

`profiler.measure_layer` times one layer alone, the same module over and over: its
weights and activations stay in the cache. A worker runs its layers one after another,
each evicting the last, so on a CPU a layer costs it more than alone. On the 2-core
testbed (tiny-gpt, 4 blocks of hidden 256, one thread per process; CHANGELOG.md)
the model's forward + backward per microbatch, measured at the same hour:

| | alone, layer by layer | inside a pass (this module) | in a data-parallel job |
|---|---|---|---|
| 1 busy neighbour | 43-46 ms | 50-51 ms | 47.5-55 ms (2 workers) |
| 3 busy neighbours | 90-99 ms | 101-105 ms | 92-99 ms (4 workers) |

The layer-by-layer figure is 15-20% short with few neighbours and close with many (all
caches are cold then), so factors from it promised a 2-worker phase 1.35x the speed the
job got. Inside a pass the two ends keep the job's ratio (0.49 against its 0.5).

`time_passes` runs `settings.warmup` untimed then `settings.repeats` timed passes of one
microbatch: forward through every layer (the head's with the loss), backward through
them in reverse (each layer's input detached, so each backward is timed alone), then
one AdamW step per layer, and returns each layer's median forward, backward and step.
"""

from __future__ import annotations

import statistics
import time

import torch

from ..models.family import Trained
from ..models.tinygpt import DTYPES, lm_loss
from .profiler import ProfilerSettings


def time_passes(model: Trained, settings: ProfilerSettings) -> tuple[tuple[float, float, float], ...]:
    """Each layer's median (forward_s, backward_s, optimizer_step_s) inside whole passes, on CPU."""
    dtype = DTYPES[settings.dtype]
    layers = list(model.build(0, model.num_layers, settings.seed, dtype))
    optimizers = [torch.optim.AdamW(layer.parameters()) for layer in layers]
    ids, targets = model.batch(settings.seed, 0, settings.microbatch_size)
    last = model.num_layers - 1

    def one_pass() -> list[tuple[float, float, float]]:
        forward, backward, step = [0.0] * len(layers), [0.0] * len(layers), [0.0] * len(layers)
        inputs: list[torch.Tensor] = []
        outputs: list[torch.Tensor] = []
        x = ids
        for i, layer in enumerate(layers):
            inp = x if i == 0 else x.detach().requires_grad_(True)
            begin = time.perf_counter()
            out = layer(inp)
            if i == last:
                out = lm_loss(out, targets)
            forward[i] = time.perf_counter() - begin
            inputs.append(inp)
            outputs.append(out)
            x = out
        grad: torch.Tensor | None = None
        for i in reversed(range(len(layers))):
            begin = time.perf_counter()
            torch.autograd.backward(outputs[i], grad)
            backward[i] = time.perf_counter() - begin
            grad = inputs[i].grad if i > 0 else None
        for i, optimizer in enumerate(optimizers):
            begin = time.perf_counter()
            optimizer.step()
            step[i] = time.perf_counter() - begin
            optimizer.zero_grad(set_to_none=False)
        return list(zip(forward, backward, step, strict=True))

    for _ in range(max(1, settings.warmup)):  # at least one: the optimizers' first step allocates their state
        one_pass()
    runs = [one_pass() for _ in range(settings.repeats)]

    def median(i: int, j: int) -> float:
        return statistics.median(run[i][j] for run in runs)

    return tuple((median(i, 0), median(i, 1), median(i, 2)) for i in range(len(layers)))
