"""The coordinator's store: JSON values, orders, registration, heartbeats.

Listening and connecting are `transport`'s; everything else goes through keys of the
job's store, all of them named in `keys` (which documents each one). Registrations and
the published job are signed with the job's secret, and a registration that does not
parse or verify is refused (`parse_registration`), never trusted.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

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
from .secret import JobSecret, SecretError
from .transport import connect, parse_address  # noqa: F401  (re-exported: the old home of both)


@dataclass(frozen=True)
class WorkerInfo:
    """A registered worker: which GPU of which node, and where its process lives."""

    worker_id: int
    node: str
    gpu: int
    host: str
    pid: int


_INFO_TYPES = {"worker_id": int, "node": str, "gpu": int, "host": str, "pid": int}


class RegistrationRefused(ValueError):
    """A registration entry that does not parse or does not carry the job's proof."""


def put_json(store: dist.Store, key: str, value: Any) -> None:
    store.set(key, json.dumps(value))


def get_json(store: dist.Store, key: str) -> Any:
    """Blocks until `key` exists (up to the store's timeout)."""
    return json.loads(store.get(key).decode())


def has(store: dist.Store, key: str) -> bool:
    return store.check([key])


def publish_order(store: dist.Store, order: dict, secret: JobSecret) -> int:
    """Append an order to the sequence every worker follows, signed under its key (so an
    order cannot be forged, nor replayed under another number); returns its number."""
    n = store.add(ORDER_NEXT, 1) - 1
    put_signed(store, order_key(n), order, secret)
    return n


def read_order(raw: bytes, n: int, secret: JobSecret) -> dict:
    """Order `n` as read from the store; SecretError if it is not the coordinator's."""
    key = order_key(n)
    try:
        record = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError):
        raise SecretError(f"the store's {key!r} record is not JSON") from None
    if not isinstance(record, dict) or not secret.verify({"key": key, "value": record.get("value")}, record.get("mac")):
        raise SecretError(f"the store's {key!r} record is not signed with the job's secret")
    return record["value"]


def put_signed(store: dist.Store, key: str, value: Any, secret: JobSecret) -> None:
    """`value` with the job's MAC, so a reader can tell it came from a secret holder."""
    put_json(store, key, {"value": value, "mac": secret.sign({"key": key, "value": value})})


def get_signed(store: dist.Store, key: str, secret: JobSecret) -> Any:
    """The value `put_signed` wrote under `key`; SecretError if it does not verify."""
    record = get_json(store, key)
    if not isinstance(record, dict) or not secret.verify({"key": key, "value": record.get("value")}, record.get("mac")):
        raise SecretError(f"the store's {key!r} record is not signed with the job's secret")
    return record["value"]


def register(store: dist.Store, node: str, gpu: int, secret: JobSecret) -> WorkerInfo:
    worker_id = store.add(WORKER_COUNT, 1) - 1
    info = WorkerInfo(worker_id, node, gpu, socket.gethostname(), os.getpid())
    body = asdict(info)
    put_json(store, worker_key(worker_id), {**body, "proof": secret.sign(body)})
    return info


def parse_registration(raw: bytes, slot: int, secret: JobSecret) -> WorkerInfo:
    """The WorkerInfo in registration slot `slot`, or RegistrationRefused saying why not."""
    try:
        entry = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError):
        raise RegistrationRefused(f"{worker_key(slot)}: not JSON") from None
    if not isinstance(entry, dict):
        raise RegistrationRefused(f"{worker_key(slot)}: not an object")
    body = {k: v for k, v in entry.items() if k != "proof"}
    if set(body) != set(_INFO_TYPES):
        raise RegistrationRefused(f"{worker_key(slot)}: fields {sorted(body)}, expected {sorted(_INFO_TYPES)}")
    for name, kind in _INFO_TYPES.items():
        if type(body[name]) is not kind:
            raise RegistrationRefused(f"{worker_key(slot)}: {name} must be {kind.__name__}, got {body[name]!r:.60}")
    if body["worker_id"] != slot or body["gpu"] < 0:
        raise RegistrationRefused(
            f"{worker_key(slot)}: worker id {body['worker_id']} or gpu {body['gpu']} out of place"
        )
    if not secret.verify(body, entry.get("proof")):
        raise RegistrationRefused(f"{worker_key(slot)}: no valid proof of the job's secret")
    return WorkerInfo(**{f.name: body[f.name] for f in fields(WorkerInfo)})


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
        secret: JobSecret,
        worker_id: int,
        interval_s: float,
        timeout_s: float = 60.0,
        on_abort: Callable[[str], None] | None = None,
    ):
        self._store = connect(address, secret, timeout_s)
        self._key = heartbeat_key(worker_id)
        self._watch = [ABORT, fence_key(worker_id)]
        self._interval_s = interval_s
        self._on_abort = on_abort or _exit_now
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{worker_id}", daemon=True)

    def start(self) -> Heartbeat:
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
