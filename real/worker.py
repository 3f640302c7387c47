"""A worker: one process per GPU (on CPU, per emulated GPU).

It knows only the coordinator's address, its node name and its GPU index. It registers,
reads the job, waits for the layout of generation g, joins that generation's process
groups as its rank, trains, reporting every step to the store, and exits. A heartbeat
thread stamps the store meanwhile and ends the process if the coordinator aborts the job
or disappears. Any exception is written to `error/<id>` for the coordinator to report.

The per-generation part (`_train_generation`) is separate from registration so that part 2
can loop over generations (tear down, wait for g + 1, rebuild, resume).
"""

from __future__ import annotations

import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

from . import rendezvous as rv
from .config import RunConfig
from .emulated import EmulatedLayerTimes
from .groups import Generation, build_generation
from .layout import Layout
from .stage_runner import StageRunner

EXIT_OK = 0
EXIT_FAILED = 1


def choose_device(config: RunConfig, gpu: int) -> tuple[torch.device, str]:
    """(device, backend): NCCL on a CUDA device when real compute may use one, else gloo
    on CPU (emulated compute always sleeps on CPU)."""
    want_cuda = config.device == "cuda" or (config.device == "auto" and config.compute == "real" and torch.cuda.is_available())
    if want_cuda:
        if not torch.cuda.is_available():
            raise RuntimeError("device 'cuda' requested but CUDA is not available on this worker")
        index = gpu % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index), "nccl"
    return torch.device("cpu"), "gloo"


def run_worker(address: str, node: str, gpu: int, *, connect_timeout_s: float = 300.0, threads: int | None = None) -> int:
    """Register with the coordinator at `address` as GPU `gpu` of `node` and train."""
    store = rv.connect(address, timeout_s=connect_timeout_s)
    info = rv.register(store, node, gpu)
    heartbeat = None
    generation: Generation | None = None
    try:
        job = rv.get_json(store, rv.JOB)
        config = RunConfig.from_dict(job["config"])
        heartbeat = rv.Heartbeat(address, info.worker_id, config.heartbeat_interval_s, timeout_s=connect_timeout_s).start()
        threads = threads or config.threads_per_worker
        if threads:
            torch.set_num_threads(threads)
        emulation = [EmulatedLayerTimes.from_list(values) for values in job.get("emulation") or []] or None
        number = 0
        store.wait([rv.layout_key(number)])
        layout = Layout.from_dict(rv.get_json(store, rv.layout_key(number)))
        rank = layout.rank_of(node, gpu)
        if rank is None:  # a spare in this plan (part 2 keeps spares for later generations)
            return EXIT_OK
        device, backend = choose_device(config, gpu)
        generation = build_generation(store, layout, rank, backend, config.timeout_s)
        _train_generation(store, config, generation, device, emulation)
        generation.teardown()
        store.set(rv.done_key(number, rank), repr(time.time()))
        return EXIT_OK
    except Exception:
        text = traceback.format_exc()
        try:
            rv.report_error(store, info.worker_id, f"worker {info.worker_id} ({node} gpu {gpu}, pid {os.getpid()}):\n{text}")
        except Exception:
            pass
        print(text, file=sys.stderr, flush=True)
        return EXIT_FAILED
    finally:
        if heartbeat is not None:
            heartbeat.stop()
        if generation is not None:
            generation.teardown()


def _train_generation(store: dist.Store, config: RunConfig, generation: Generation, device: torch.device, emulation) -> None:
    runner = StageRunner(config, generation, device, emulation)
    rank, number = generation.rank, generation.number
    dist.barrier()
    rv.put_json(store, rv.ready_key(number, rank), {"t": time.time(), "schedule": runner.schedule_name})
    for step in range(config.steps):
        loss_sum = runner.step(step)
        rv.put_json(store, rv.step_key(number, step, rank), {"t": time.time(), "loss_sum": loss_sum})
    if config.save_params_dir:
        runner.save(config.save_params_dir)
