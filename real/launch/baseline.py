"""The overhead baseline: plain torch.distributed.pipelining with DDP-style averaging.

What one would write by hand for P identical pipelines of S stages: ranks p * S + s, a
process group per pipeline, one per stage index across pipelines, each stage under
`Schedule1F1B` with mean-reduced losses (`scale_grads=True`), then each stage's gradients
flattened into one bucket, all-reduced over its data-parallel group and divided by P
(as DistributedDataParallel averages), then AdamW. No coordinator, no plan, no heartbeats,
no per-step reports. The benchmark runs it on the same layer split and microbatches as the
backend's plan to measure the backend's overhead.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import timedelta

import torch

from ..config import RunConfig
from ..models.emulated import (
    EmulatedLayerTimes,
    EmulatedStage,
    emulated_input,
    emulated_loss,
)
from ..models.tinygpt import DTYPES, batch, build_layers, lm_loss
from ..worker.gradsync import grad_of


def _baseline_worker(rank: int, port: int, config: RunConfig, ranges: list[tuple[int, int]], num_pipelines: int,
                     emulation: list[EmulatedLayerTimes] | None, threads: int, queue) -> None:  # fmt: skip
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    from .local import die_with_parent

    die_with_parent()
    torch.set_num_threads(threads)
    num_stages = len(ranges)
    world = num_pipelines * num_stages
    timeout = timedelta(seconds=config.timeout_s)
    from ..worker.main import pin_collectives

    pin_collectives(f"127.0.0.1:{port}")  # gloo on loopback too
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
    dist.init_process_group(
        "gloo", store=dist.PrefixStore("baseline", store), rank=rank, world_size=world, timeout=timeout
    )
    pipe, s = divmod(rank, num_stages)
    pipe_groups = [
        dist.new_group([p * num_stages + i for i in range(num_stages)], timeout=timeout) for p in range(num_pipelines)
    ]
    dp_groups = [
        dist.new_group([p * num_stages + i for p in range(num_pipelines)], timeout=timeout) for i in range(num_stages)
    ]
    first, end = ranges[s]
    module: torch.nn.Module
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    if emulation is not None:
        module = EmulatedStage(emulation[first:end], config.microbatch_size, last=s == num_stages - 1)
        loss_fn = emulated_loss
    else:
        module = build_layers(config.tiny, first, end, config.seed, DTYPES[config.dtype])
        loss_fn = lm_loss
    stage = PipelineStage(module, s, num_stages, torch.device("cpu"), group=pipe_groups[pipe])
    per_pipe = config.global_batch // config.microbatch_size // num_pipelines
    schedule = Schedule1F1B(stage, per_pipe, loss_fn=loss_fn, scale_grads=True)
    optimizer = torch.optim.AdamW(module.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    params = list(module.parameters())
    lo, hi = pipe * per_pipe * config.microbatch_size, (pipe + 1) * per_pipe * config.microbatch_size
    dist.barrier()
    ends = [time.time()]
    for step in range(config.steps):
        if emulation is not None:
            inputs = targets = emulated_input(hi - lo)
        else:
            inputs, targets = batch(config.tiny, config.seed, step, config.global_batch)
            inputs, targets = inputs[lo:hi], targets[lo:hi]
        optimizer.zero_grad(set_to_none=False)
        if s == 0:
            schedule.step(inputs, return_outputs=False)
        elif s == num_stages - 1:
            schedule.step(target=targets, return_outputs=False)
        else:
            schedule.step(return_outputs=False)
        if num_pipelines > 1:
            grads = [grad_of(p) for p in params]
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, group=dp_groups[s])
            flat /= num_pipelines
            offset = 0
            for g in grads:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()
        optimizer.step()
        ends.append(time.time())
    queue.put((rank, ends))
    dist.destroy_process_group()


def run_baseline(config: RunConfig, ranges: Sequence[tuple[int, int]], num_pipelines: int,
                 emulation: Sequence[EmulatedLayerTimes] | None = None, threads: int = 1) -> list[float]:  # fmt: skip
    """Iteration times (slowest rank per step) of the baseline on `num_pipelines` copies of
    the stage split `ranges`, with the job's global batch split evenly."""

    world = num_pipelines * len(ranges)
    from ..protocol.transport import loopback_store

    store = loopback_store(config.timeout_s)  # loopback only: torch's own server binds every interface
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    args = (store.port, config, list(ranges), num_pipelines, list(emulation) if emulation else None, threads, queue)
    processes = [ctx.Process(target=_baseline_worker, args=(rank, *args), daemon=True) for rank in range(world)]
    for p in processes:
        p.start()
    try:
        reports = dict(queue.get(timeout=config.startup_timeout_s) for _ in processes)
    finally:
        for p in processes:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join()
    ends = [max(reports[r][k] for r in reports) for k in range(config.steps + 1)]
    return [b - a for a, b in zip(ends, ends[1:])]


def steady(times: Sequence[float], skip: int = 1) -> float:
    """Median iteration time after the first `skip` (warm-up) iterations."""
    return statistics.median(times[skip:])
