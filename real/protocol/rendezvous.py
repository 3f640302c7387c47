"""The coordinator's store: its address, JSON values, orders, registration, heartbeats.

The coordinator hosts a `TCPStore` on port 0 (the OS picks a free port) and publishes
`host:port`. Everything else goes through keys of that store, all of them named in
`keys` (which documents each one).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any, Callable

import torch.distributed as dist

from .keys import (
    ABORT,
    ERROR_COUNT,
    ORDER_NEXT,
    WORKER_COUNT,
    error_key,
    fence_key,
    heartbeat_key,
    order_key,
    worker_key,
)


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


def get_json_bytes(raw: bytes) -> Any:
    return json.loads(raw.decode())


def has(store: dist.Store, key: str) -> bool:
    return store.check([key])


def publish_order(store: dist.Store, order: dict) -> int:
    """Append an order to the sequence every worker follows; returns its number."""
    n = store.add(ORDER_NEXT, 1) - 1
    put_json(store, order_key(n), order)
    return n


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
    """A daemon thread that bumps hb/<id> every `interval_s` on its own store connection
    (the coordinator judges liveness by the counter changing, on its own clock, so clocks
    need not agree), and calls `on_abort` (default: exit the process) when the coordinator
    sets `abort`, fences this worker, or its store goes away.

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
        self._watch = [ABORT, fence_key(worker_id)]
        self._interval_s = interval_s
        self._on_abort = on_abort or _exit_now
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{worker_id}", daemon=True)

    def start(self) -> "Heartbeat":
        self._beat()
        self._thread.start()
        return self

    def _beat(self) -> None:
        self._store.add(self._key, 1)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._beat()
                for key in self._watch:
                    if self._store.check([key]):
                        self._on_abort(f"{key}: {self._store.get(key).decode()}")
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
