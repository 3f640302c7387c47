"""The profiler: measure tiny-gpt layer by layer, as the planner wants it (DESIGN 3.1, 5).

Per layer, for one microbatch: forward and backward time (median of `repeats` timed runs
after `warmup` untimed ones, timed with CUDA events on a GPU, `time_once`; the head's
forward includes the loss, as on the last stage), parameter bytes, optimizer bytes
(AdamW's state after one step, measured) and the time of one AdamW step after that
(`optimizer.json`, `planner.optimizer_step`), the bytes the layer keeps for its backward
(autograd's saved tensors, parameters excluded, each storage once) and the bytes it hands
on. Then the gradient all-reduce time of every layer versus
the number of participants 2..P: P processes on gloo (NCCL on GPUs), one subgroup per
count, the median over repeats, each distinct gradient size measured once.

Pipeline communication is measured apart, by `real.launch.comm_profile`:
`measure_and_write_communication` writes `communication.json` (point-to-point latency and
bandwidth, the per-hop runtime overhead of the real 1F1B schedule) into the profile
directory; `ooblab profile` runs it unless `--skip-comm`.

No in-node (d > 1) all-reduce is recorded: the backend runs one-GPU stages only, and a
profile without those times makes the planner plan exactly that. The result is a
`ModelProfile`; `ooblab profile` writes it in the Oobleck format the planner reads.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from planner.optimizer_step import OptimizerProfile
from planner.profile import LayerProfile, ModelProfile

if TYPE_CHECKING:
    from .comm_profile import CommMeasurement, CommSettings

from ..config import TINY_GPT, TinyGptSpec
from ..models.family import Trained, named
from ..models.tinygpt import DTYPES, lm_loss


@dataclass(frozen=True)
class ProfilerSettings:
    microbatch_size: int = 1
    dtype: str = "float32"
    device: str = "auto"
    repeats: int = 5
    warmup: int = 2
    max_participants: int = 4
    threads: int = 1
    seed: int = 0
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.microbatch_size < 1 or self.repeats < 1 or self.warmup < 0 or self.threads < 1:
            raise ValueError("profiler settings: microbatch, repeats and threads must be >= 1, warmup >= 0")
        if self.max_participants < 1:
            raise ValueError(f"max participants must be >= 1, got {self.max_participants}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}")


@dataclass(frozen=True)
class LayerMeasurement:
    name: str
    forward_s: float
    backward_s: float
    param_bytes: int
    optimizer_bytes: int
    activation_bytes: int
    output_bytes: int
    optimizer_step_s: float = 0.0  # one AdamW step over the layer's parameters


def _device(name: str) -> torch.device:
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def time_once(device: torch.device) -> Callable[[Callable[[], None]], float]:
    """A timer of one call on `device`: CUDA events around it on a GPU (the kernels'
    time on the stream, not the host's launch time; one synchronisation per call, after
    the end event), the wall clock on the CPU."""
    if device.type == "cuda":

        def cuda_timer(fn: Callable[[], None]) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(device)  # nothing earlier inside the window
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0

        return cuda_timer

    def wall_timer(fn: Callable[[], None]) -> float:
        begin = time.perf_counter()
        fn()
        return time.perf_counter() - begin

    return wall_timer


def _median_time(fn: Callable[[], None], repeats: int, warmup: int, device: torch.device) -> float:
    timer = time_once(device)
    for _ in range(warmup):
        fn()
    return statistics.median(timer(fn) for _ in range(repeats))


def _tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def measure_layer(spec: Trained, index: int, settings: ProfilerSettings, device: torch.device) -> LayerMeasurement:
    """Time and size one layer of a model the backend trains (tiny-gpt, a Hugging Face one)
    on one microbatch."""
    dtype = DTYPES[settings.dtype]
    layer = spec.build(index, index + 1, settings.seed, dtype).to(device)
    params = list(layer.parameters())
    param_ptrs = {p.data_ptr() for p in params}
    ids, targets = spec.batch(settings.seed, 0, settings.microbatch_size)
    ids, targets = ids.to(device), targets.to(device)
    is_head = index == spec.num_layers - 1
    if index == 0:
        make_input = lambda: ids  # noqa: E731
    else:
        hidden = torch.randn(settings.microbatch_size, spec.seq_len, spec.hidden, dtype=dtype, device=device)
        make_input = lambda: hidden.detach().requires_grad_(True)  # noqa: E731

    def forward():
        out = layer(make_input())
        return lm_loss(out, targets) if is_head else out

    saved: dict[int, int] = {}

    def pack(t: torch.Tensor):
        if t.data_ptr() not in param_ptrs:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = forward()
    activation_bytes = sum(saved.values())
    output_bytes = _tensor_bytes(out)
    grad = torch.ones_like(out)

    forward_s = _median_time(lambda: forward(), settings.repeats, settings.warmup, device)
    outputs: list[torch.Tensor] = []

    def prepare():
        outputs.append(forward())

    def backward():
        torch.autograd.backward(outputs.pop(), grad)

    backward_times = []
    for i in range(settings.warmup + settings.repeats):
        prepare()
        t = _median_time(backward, 1, 0, device)
        if i >= settings.warmup:
            backward_times.append(t)
    optimizer = torch.optim.AdamW(params)
    optimizer.step()  # the first step allocates the state: its bytes, not its time
    optimizer_step_s = _median_time(optimizer.step, settings.repeats, settings.warmup, device)
    optimizer_bytes = sum(
        _tensor_bytes(v) for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)
    )
    names = ["embedding"] + [f"block{i}" for i in range(spec.num_layers - 2)] + ["head"]
    return LayerMeasurement(
        name=names[index],
        forward_s=forward_s,
        backward_s=statistics.median(backward_times),
        param_bytes=sum(_tensor_bytes(p) for p in params),
        optimizer_bytes=optimizer_bytes,
        activation_bytes=activation_bytes,
        output_bytes=output_bytes,
        optimizer_step_s=optimizer_step_s,
    )


def _allreduce_worker(
    rank: int, world: int, port: int, sizes: list[int], dtype: str, repeats: int, warmup: int, timeout_s: float, queue
) -> None:
    import torch.distributed as dist

    from .local import die_with_parent

    die_with_parent()
    torch.set_num_threads(1)
    timeout = timedelta(seconds=timeout_s)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
    cuda = torch.cuda.is_available() and torch.cuda.device_count() >= world
    if cuda:
        torch.cuda.set_device(rank)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(
        backend, store=dist.PrefixStore("allreduce", store), rank=rank, world_size=world, timeout=timeout
    )
    try:
        element = torch.tensor([], dtype=DTYPES[dtype]).element_size()
        results: dict[int, dict[int, float]] = {}
        for k in range(2, world + 1):
            group = dist.new_group(list(range(k)), timeout=timeout)
            for size in sizes:
                if rank < k:
                    buffer = torch.ones(max(1, size // element), dtype=DTYPES[dtype], device=device)

                    def reduce(buffer: torch.Tensor = buffer, group: dist.ProcessGroup = group) -> None:
                        dist.all_reduce(buffer, group=group)  # defaults bind this iteration's buffer and group

                    results.setdefault(k, {})[size] = _median_time(reduce, repeats, warmup, device)
                dist.barrier()
        if rank == 0:
            queue.put(results)
    finally:
        dist.destroy_process_group()


def measure_allreduce(sizes: list[int], settings: ProfilerSettings) -> dict[int, dict[int, float]]:
    """{participants: {bytes: seconds}} for participants 2..max_participants (spawned
    processes, ports from the OS, reaped on the way out)."""
    world = settings.max_participants
    if world < 2 or not sizes:
        return {}
    from ..protocol.transport import loopback_store

    store = loopback_store(settings.timeout_s)  # loopback only: torch's own server binds every interface
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    args = (
        world,
        store.port,
        sorted(set(sizes)),
        settings.dtype,
        settings.repeats,
        settings.warmup,
        settings.timeout_s,
        queue,
    )
    processes = [ctx.Process(target=_allreduce_worker, args=(rank, *args), daemon=True) for rank in range(world)]
    for p in processes:
        p.start()
    try:
        results = queue.get(timeout=settings.timeout_s)
    finally:
        for p in processes:
            p.join(settings.timeout_s)
            if p.is_alive():
                p.kill()
                p.join()
    failed = [p.exitcode for p in processes if p.exitcode != 0]
    if failed:
        raise RuntimeError(f"all-reduce measurement processes failed with exit codes {failed}")
    return results


def profile_tiny_gpt(spec: TinyGptSpec, settings: ProfilerSettings = ProfilerSettings()) -> ModelProfile:
    """Measure every layer of tiny-gpt, then the all-reduce of every gradient size."""
    return profile_model(named(TINY_GPT, spec), settings)


def profile_model(spec: Trained, settings: ProfilerSettings = ProfilerSettings()) -> ModelProfile:
    """Measure every layer of a model the backend trains (tiny-gpt, a Hugging Face one),
    then the all-reduce of every gradient size."""
    previous = torch.get_num_threads()
    torch.set_num_threads(settings.threads)
    try:
        device = _device(settings.device)
        layers = [measure_layer(spec, index, settings, device) for index in range(spec.num_layers)]
    finally:
        torch.set_num_threads(previous)
    allreduce = measure_allreduce([m.param_bytes for m in layers], settings)
    profiles = tuple(
        LayerProfile(
            name=m.name,
            forward_s=m.forward_s,
            backward_s=m.backward_s,
            param_bytes=m.param_bytes,
            grad_bytes=m.param_bytes,
            optimizer_bytes=m.optimizer_bytes,
            activation_bytes=m.activation_bytes,
            output_bytes=m.output_bytes,
            allreduce_across_nodes_s=tuple((k, table[m.param_bytes]) for k, table in allreduce.items()),
        )
        for m in layers
    )
    source = f"measured:{spec.name}@{device.type},mb{settings.microbatch_size},{settings.dtype}"
    optimizer = OptimizerProfile(
        tuple(m.optimizer_step_s for m in layers),
        f"ooblab profile, {spec.name} AdamW on {device.type}, {settings.threads} thread(s), median of {settings.repeats}",
    )
    return ModelProfile(spec.name, settings.microbatch_size, profiles, source=source, optimizer=optimizer)


def measure_and_write_communication(
    directory: str | Path, settings: ProfilerSettings = ProfilerSettings(), comm: CommSettings | None = None
) -> CommMeasurement:
    """Measure pipeline communication on this machine (`comm_profile.CommSettings`, its
    timeout the profiler's) and write `communication.json` and its fit details into the
    profile `directory` (re-measured up to three times while noisy,
    `comm_profile.measure_quietest`; each retry said on stderr); returns the measurement."""
    from dataclasses import replace

    from .comm_profile import CommSettings, measure_quietest

    comm = replace(comm or CommSettings(), timeout_s=settings.timeout_s)
    measured = measure_quietest(comm, progress=lambda line: print(line, file=sys.stderr))
    measured.write(directory)
    return measured
