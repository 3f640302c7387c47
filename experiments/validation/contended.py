"""Profile tiny-gpt as its workers will run: with the other workers computing beside it.

On this testbed's machines the "GPUs" are CPU processes that share the cores, so a
layer's time inside a job of N workers is not its time alone. The validation profiles
with N - 1 load processes (spawned, each timing the same layers over and over, one
thread each, as a worker runs) beside the profiler. It is still a measurement of the
model, made before and apart from any trace; on real GPUs (one per worker) the load
would be pointless and `ooblab profile` alone is the profile.
"""

from __future__ import annotations

import multiprocessing as mp


def _load(spec_fields: dict, stop, started) -> None:
    import torch

    from real.config import TinyGptSpec
    from real.launch.profiler import ProfilerSettings, measure_layer

    torch.set_num_threads(1)
    spec = TinyGptSpec(**spec_fields)
    settings = ProfilerSettings(repeats=1, warmup=0)
    device = torch.device("cpu")
    started.set()
    while not stop.is_set():
        for index in range(spec.num_layers):
            measure_layer(spec, index, settings, device)
            if stop.is_set():
                break


def profile_with_neighbours(spec, settings, neighbours: int, timeout_s: float = 60.0):
    """`real.launch.profiler.profile_tiny_gpt(spec, settings)` with `neighbours` load processes."""
    from dataclasses import asdict

    from real.launch.profiler import profile_tiny_gpt

    context = mp.get_context("spawn")
    stop = context.Event()
    procs, flags = [], []
    try:
        for _ in range(neighbours):
            started = context.Event()
            proc = context.Process(target=_load, args=(asdict(spec), stop, started), daemon=True)
            proc.start()
            procs.append(proc)
            flags.append(started)
        for flag in flags:
            if not flag.wait(timeout_s):
                raise RuntimeError("a profiling load process did not start")
        return profile_tiny_gpt(spec, settings)
    finally:
        stop.set()
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
