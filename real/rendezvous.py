"""The coordinator's store: its address, the keys both sides use, registration, heartbeats.

The coordinator hosts a `TCPStore` on port 0 (the OS picks a free port) and publishes
`host:port`. Everything else goes through keys of that store:

    job                      the RunConfig (JSON) and, for emulated compute, layer times
    workers/count            registration counter; workers/<id> = WorkerInfo (JSON)
    hb/<id>                  the worker's last heartbeat (wall-clock seconds)
    error/<id>               a worker's traceback when it fails (errors/count counts them)
    abort                    set by the coordinator: workers exit at once
    gen/latest               the newest published generation g
    gen<g>/layout            the Layout of generation g
    gen<g>/ready/<rank>      rank built its groups (wall-clock seconds)
    gen<g>/step<k>/<rank>    rank finished step k: {"t": seconds, "loss_sum": float|null}
    gen<g>/done/<rank>       rank finished training, saved and tore its groups down
    gen<g>/pg/...            torch.distributed's own rendezvous (PrefixStore "gen<g>/pg")

A new generation gets a fresh key prefix, so part 2's reconfiguration can rebuild process
groups without stale keys colliding.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any, Callable

import torch.distributed as dist

JOB = "job"
WORKER_COUNT = "workers/count"
ERROR_COUNT = "errors/count"
ABORT = "abort"
LATEST = "gen/latest"


def worker_key(worker_id: int) -> str:
    return f"workers/{worker_id}"


def heartbeat_key(worker_id: int) -> str:
    return f"hb/{worker_id}"


def error_key(worker_id: int) -> str:
    return f"error/{worker_id}"


def layout_key(generation: int) -> str:
    return f"gen{generation}/layout"


def ready_key(generation: int, rank: int) -> str:
    return f"gen{generation}/ready/{rank}"


def step_key(generation: int, step: int, rank: int) -> str:
    return f"gen{generation}/step{step}/{rank}"


def done_key(generation: int, rank: int) -> str:
    return f"gen{generation}/done/{rank}"


def pg_prefix(generation: int) -> str:
    return f"gen{generation}/pg"


@dataclass(frozen=True)
class WorkerInfo:
    """A registered worker: which GPU of which node, and where its process lives."""

    worker_id: int
    node: str
    gpu: int
    host: str
    pid: int


def parse_address(address: str) -> tuple[str, int]:
    """'host:port' -> (host, port), with a clear error for anything else."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"coordinator address must be HOST:PORT, got {address!r}")
    return host, int(port)


def host_store(bind_host: str = "0.0.0.0", port: int = 0, timeout_s: float = 300.0) -> dist.TCPStore:
    """The coordinator's store, listening on `port` (0: any free port, read `.port`)."""
    return dist.TCPStore(bind_host, port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=timeout_s))


def connect(address: str, timeout_s: float = 300.0) -> dist.TCPStore:
    host, port = parse_address(address)
    return dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=timeout_s))


def put_json(store: dist.Store, key: str, value: Any) -> None:
    store.set(key, json.dumps(value))


def get_json(store: dist.Store, key: str) -> Any:
    """Blocks until `key` exists (up to the store's timeout)."""
    return json.loads(store.get(key).decode())


def has(store: dist.Store, key: str) -> bool:
    return store.check([key])


def register(store: dist.Store, node: str, gpu: int) -> WorkerInfo:
    worker_id = store.add(WORKER_COUNT, 1) - 1
    info = WorkerInfo(worker_id, node, gpu, socket.gethostname(), os.getpid())
    put_json(store, worker_key(worker_id), asdict(info))
    return info


def report_error(store: dist.Store, worker_id: int, text: str) -> None:
    store.set(error_key(worker_id), text)
    store.add(ERROR_COUNT, 1)


def reported_errors(store: dist.Store) -> list[str]:
    """Tracebacks workers have reported so far (cheap when there are none)."""
    if store.add(ERROR_COUNT, 0) == 0:
        return []
    count = store.add(WORKER_COUNT, 0)
    keys = [error_key(i) for i in range(count)]
    return [store.get(key).decode() for key in keys if store.check([key])]


def registered(store: dist.Store) -> list[WorkerInfo]:
    count = store.add(WORKER_COUNT, 0)
    infos = []
    for worker_id in range(count):
        key = worker_key(worker_id)
        if has(store, key):
            infos.append(WorkerInfo(**get_json(store, key)))
    return infos


class Heartbeat:
    """A daemon thread that stamps hb/<id> every `interval_s` on its own store connection,
    and calls `on_abort` (default: exit the process) when the coordinator sets `abort` or
    the coordinator's store goes away.

    `timeout_s` bounds connecting and each store operation; keep it generous (a loaded
    machine can take seconds to accept a connection). A vanished coordinator is noticed
    at once anyway: its connection resets."""

    def __init__(
        self,
        address: str,
        worker_id: int,
        interval_s: float,
        timeout_s: float = 60.0,
        on_abort: Callable[[str], None] | None = None,
    ):
        self._store = connect(address, timeout_s=timeout_s)
        self._key = heartbeat_key(worker_id)
        self._interval_s = interval_s
        self._on_abort = on_abort or _exit_now
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{worker_id}", daemon=True)

    def start(self) -> "Heartbeat":
        self._beat()
        self._thread.start()
        return self

    def _beat(self) -> None:
        self._store.set(self._key, repr(time.time()))

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._beat()
                if self._store.check([ABORT]):
                    self._on_abort(self._store.get(ABORT).decode())
                    return
            except Exception as exc:  # the coordinator is gone: nothing left to train for
                if not self._stop.is_set():
                    self._on_abort(f"lost the coordinator's store: {exc}")
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * self._interval_s + 1)


def _exit_now(reason: str) -> None:
    print(f"ooblab worker {os.getpid()}: exiting: {reason}", file=sys.stderr, flush=True)
    os._exit(3)
