"""A worker: one process per GPU (on CPU, per emulated GPU).

It knows only the coordinator's address, the job's secret, its node name and its GPU
index. It connects (bounded by `connect_timeout_s`; an unreachable coordinator or a
refused secret is a one-line error and exit status 2), pins its collectives' sockets to
the interface that faces the coordinator (`pin_collectives`), registers, reads the job, and then follows the coordinator's orders in sequence (`orders/<n>`):
run generation g (`session.WorkerSession`: join its groups if the directive names this
worker, restore its layers, train, survive a failure), save layers to a checkpoint, or
end. A heartbeat thread bumps its counter in the store meanwhile and ends the process if
the coordinator aborts the job, fences this worker or disappears. A fatal error (one
outside a generation's training, e.g. no CUDA) is written to `error/<id>` for the
coordinator to report, and the process exits with status 1.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from typing import NoReturn

import torch

from ..config import RunConfig
from ..models.emulated import EmulatedLayerTimes
from ..protocol import keys, transport
from ..protocol import rendezvous as rv
from ..protocol.failures import injections_from_json
from ..protocol.secret import JobSecret, SecretError
from .devices import select_device
from .nccl import apply_nccl_environment
from .probe import FailureProbe
from .session import WorkerSession, wait_key

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_REQUEST = 2
CONNECT_TIMEOUT_S = 60.0
STORE_TIMEOUT_S = 300.0  # each store operation once connected (long waits loop on it)
IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def pin_collectives(address: str) -> str | None:
    """Make gloo (and NCCL's bootstrap) listen on the interface this machine uses to reach
    the coordinator (loopback for a local job) rather than wherever the host name
    resolves; an operator's own GLOO_/NCCL_SOCKET_IFNAME wins. Returns the interface."""
    host, port = transport.parse_address(address)
    try:
        name = transport.interface_of(transport.local_address_towards(host, port))
    except OSError:
        name = None
    if name is not None:
        for variable in IFNAME_VARIABLES:
            os.environ.setdefault(variable, name)
    return name


def choose_device(config: RunConfig, local_rank: int) -> tuple[torch.device, str]:
    """(device, backend) of the worker of local rank `local_rank` (`devices.select_device`);
    selects the CUDA device and, for NCCL, puts its environment in force."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    choice = select_device(config.device, config.backend, config.compute, local_rank, count)
    if choice.kind == "cuda":
        torch.cuda.set_device(choice.index)
    if choice.backend == "nccl":
        apply_nccl_environment()
    return torch.device(choice.name), choice.backend


def exit_now(code: int) -> NoReturn:
    """End the worker process with `code` without the interpreter's finalisation.

    Everything the worker owes is done when `run_worker` returns (results committed,
    checkpoints drained, copies cleared). What finalisation would add is destructors of
    torch.distributed objects (process groups, store clients) whose peers and store may
    already be gone, and such a destructor can crash the process with a signal after a
    clean end (seen as a launcher reporting status 1 with nothing printed). So flush the
    streams and leave with the status we chose."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def run_worker(
    address: str,
    node: str,
    gpu: int,
    secret: JobSecret,
    *,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    threads: int | None = None,
    local_rank: int | None = None,
) -> int:
    """Register with the coordinator at `address` as GPU `gpu` of `node`, then follow its
    orders until it ends the job. `local_rank` (default `gpu`) picks the CUDA device:
    a launcher playing several nodes on one machine numbers its workers across them."""
    try:
        store = transport.connect(address, secret, connect_timeout_s, STORE_TIMEOUT_S)
    except (transport.ConnectError, SecretError) as exc:
        print(f"ooblab worker: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_REQUEST
    pin_collectives(address)
    first_order = store.add(keys.ORDER_NEXT, 0)  # orders published before registering cannot name this worker
    if first_order > 0:
        # A worker starting into a running job (a join, a restart's fresh process) imports
        # the stage runner (about 2 CPU-s here, near torch's own) before registering, so
        # that its node is ready when it can join a generation at once: imported at the
        # first stage, it stalled every running rank of the generation the node joined
        # (real joins paused 2.4-3.0 s against 0.2-0.4 s simulated on an 8-node generated
        # trace; 0.37 s with it). The job's first workers import it at their first stage,
        # while the others start, and pay nothing if they never get one.
        # (importlib: an `import torch.distributed...` statement would make torch local here)
        importlib.import_module("torch.distributed.pipelining")
    info = rv.register(store, node, gpu, secret)
    heartbeat = None
    try:
        job = rv.get_signed(store, keys.JOB, secret)
        config = RunConfig.from_dict(job["config"])
        heartbeat = rv.Heartbeat(
            address, secret, info.worker_id, config.heartbeat_interval_s, timeout_s=connect_timeout_s
        ).start()
        threads = threads or config.threads_per_worker
        if threads:
            torch.set_num_threads(threads)
        emulation = [EmulatedLayerTimes.from_list(values) for values in job.get("emulation") or []] or None
        device, backend = choose_device(config, gpu if local_rank is None else local_rank)
        probe = FailureProbe(store, node, gpu, injections_from_json(job.get("injections")))
        writes = config.checkpoint_every or (job.get("design") or {}).get("saves_on_demand", False)
        checkpoint_store = transport.connect(address, secret, connect_timeout_s, STORE_TIMEOUT_S) if writes else None
        watched = backend == "nccl" or config.sever_on_failure  # gloo severs, NCCL aborts (`session`)
        watch_store = transport.connect(address, secret, connect_timeout_s, STORE_TIMEOUT_S) if watched else None
        session = WorkerSession(
            store, config, info, device, backend, emulation, probe, checkpoint_store, watch_store, secret
        )
        number = first_order
        while True:
            order = rv.read_order(wait_key(store, keys.order_key(number)), number, secret)
            number += 1
            if order["kind"] == "end":
                if config.memory_dir:
                    session.memory.clear()  # the node's in-memory copies end with the job
                store.add(keys.ENDED, 1)  # the coordinator may close now
                return EXIT_OK
            if order["kind"] == "generation":
                session.run_generation(int(order["generation"]))
            elif order["kind"] == "save":
                session.save(order)
    except Exception:
        text = traceback.format_exc()
        try:
            rv.report_error(
                store, info.worker_id, f"worker {info.worker_id} ({node} gpu {gpu}, pid {os.getpid()}):\n{text}"
            )
        except Exception:
            pass
        print(text, file=sys.stderr, flush=True)
        return EXIT_FAILED
    finally:
        if heartbeat is not None:
            heartbeat.stop()
