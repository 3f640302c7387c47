"""The parts of a real tiny-gpt training step on this machine, per rank. Prints; asserts nothing.

Runs P pipelines x S stages of tiny-gpt (the validation's shape: 4 blocks of hidden 256,
sequence 128, vocabulary 256; microbatch 1) on P x S gloo processes, as a rank of the real
backend runs its step (`real.worker.stage_runner`: `Schedule1F1B`, then the gradient
all-reduce across the pipelines, then AdamW), without the coordinator, and prints each
rank's median over the steps of: the schedule (forward + backward + pipeline hops), the
gradient sync, the optimizer step, the whole step, the schedule's CPU seconds, and the same
microbatches' forward + backward alone, with no communication ("local"). It is the probe
behind the real-compute figures in CHANGELOG.md: whether the job pays beyond its layer
profile, and where.

    python benchmarks/step_parts.py --pipelines 2 --stages 2 --microbatches 8
    python benchmarks/step_parts.py --pipelines 4 --stages 1 --microbatches 4
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

SHAPE = dict(vocab=256, seq_len=128, hidden=256, heads=4, blocks=4)
PARTS = ("schedule", "sync", "optimizer", "step", "schedule_cpu", "local")


def _bounds(num_layers: int, stages: int) -> list[int]:
    return [round(i * num_layers / stages) for i in range(stages + 1)]


def _rank(rank: int, world: int, port: int, args: argparse.Namespace, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    from real.config import TinyGptSpec
    from real.models.tinygpt import batch, build_layers, lm_loss

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    spec = TinyGptSpec(**SHAPE)
    p, s, S, P, m = rank // args.stages, rank % args.stages, args.stages, args.pipelines, args.microbatches
    pipeline_groups = [dist.new_group([q * S + t for t in range(S)]) for q in range(P)]
    stage_groups = [dist.new_group([q * S + t for q in range(P)]) for t in range(S)]
    bounds = _bounds(spec.num_layers, S)
    layers = build_layers(spec, bounds[s], bounds[s + 1], 0)
    stage = PipelineStage(layers, s, S, torch.device("cpu"), group=pipeline_groups[p])
    total = P * m
    schedule = Schedule1F1B(stage, m, loss_fn=lambda o, t: lm_loss(o, t) / total, scale_grads=False)
    optimizer = torch.optim.AdamW(layers.parameters())
    rec: dict[str, list[float]] = {k: [] for k in PARTS}
    for step in range(args.steps):
        inputs, targets = batch(spec, 0, step, total)
        inputs, targets = inputs[p * m : (p + 1) * m], targets[p * m : (p + 1) * m]
        dist.barrier()
        optimizer.zero_grad(set_to_none=False)
        t0, c0 = time.perf_counter(), time.process_time()
        if S == 1:
            schedule.step(inputs, target=targets, losses=[], return_outputs=False)
        elif s == 0:
            schedule.step(inputs, return_outputs=False)
        elif s == S - 1:
            schedule.step(target=targets, losses=[], return_outputs=False)
        else:
            schedule.step(return_outputs=False)
        t1, c1 = time.perf_counter(), time.process_time()
        if P > 1:
            grads = [q.grad for q in layers.parameters() if q.grad is not None]
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, group=stage_groups[s])
        t2 = time.perf_counter()
        optimizer.step()
        t3 = time.perf_counter()
        dist.barrier()
        l0 = time.perf_counter()
        for i in range(m):  # the same microbatches' compute with no communication
            x = inputs[i : i + 1] if s == 0 else torch.randn(1, spec.seq_len, spec.hidden, requires_grad=True)
            y = layers(x)
            (lm_loss(y, targets[i : i + 1]) if s == S - 1 else y.sum()).backward()
        l1 = time.perf_counter()
        for key, value in zip(PARTS, (t1 - t0, t2 - t1, t3 - t2, t3 - t0, c1 - c0, l1 - l0), strict=True):
            rec[key].append(value)
    warm = min(3, args.steps - 1)
    Path(out, f"rank{rank}.json").write_text(
        json.dumps({"pipeline": p, "stage": s, **{k: statistics.median(v[warm:]) for k, v in rec.items()}})
    )
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", type=int, default=2)
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--microbatches", type=int, default=8, help="per pipeline")
    parser.add_argument("--steps", type=int, default=25)
    args = parser.parse_args(argv)
    if min(args.pipelines, args.stages, args.microbatches) < 1 or args.steps < 2:
        print("step_parts: --pipelines, --stages, --microbatches must be >= 1 and --steps >= 2", file=sys.stderr)
        return 2
    if args.stages > SHAPE["blocks"] + 2:
        print(f"step_parts: --stages must be <= {SHAPE['blocks'] + 2} (tiny-gpt's layers)", file=sys.stderr)
        return 2
    import torch.multiprocessing as mp

    with socket.socket() as probe:  # an OS-chosen port, released for the rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    world = args.pipelines * args.stages
    with tempfile.TemporaryDirectory() as out:
        mp.start_processes(_rank, args=(world, port, args, out), nprocs=world, start_method="spawn")
        print(
            f"{args.pipelines} pipeline(s) x {args.stages} stage(s), {args.microbatches} microbatches each; ms, medians"
        )
        print("rank pipeline stage " + " ".join(f"{k:>12s}" for k in PARTS))
        for rank in range(world):
            row = json.loads(Path(out, f"rank{rank}.json").read_text())
            values = " ".join(f"{1e3 * row[k]:12.1f}" for k in PARTS)
            print(f"{rank:4d} {row['pipeline']:8d} {row['stage']:5d} {values}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
