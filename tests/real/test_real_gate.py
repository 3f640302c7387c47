"""The store's gate: only a holder of the job's secret gets a byte of the store through."""

from __future__ import annotations

import socket
import time
from datetime import timedelta

import pytest

pytest.importorskip("torch")
import torch.distributed as dist

from real.protocol import gate, transport
from real.protocol.secret import JobSecret, SecretError


@pytest.fixture
def hosted():
    """A store behind its gate (on loopback here, where a job's default is no gate)."""
    secret = JobSecret.generate()
    store = transport.host_store("127.0.0.1", 0, secret, timeout_s=10.0, gated=True)
    yield store, secret
    store.close()


def test_a_holder_reaches_the_store_and_nobody_else_gets_a_byte_of_it(hosted):
    store, secret = hosted
    address = f"127.0.0.1:{store.port}"
    friend = transport.connect(address, secret, 5.0, gated=True)
    friend.set("x", "1")
    assert store.store.get("x") == b"1"  # the same keys, under the job's prefix
    with pytest.raises(SecretError, match="refused this job secret"):
        transport.connect(address, JobSecret.generate(), 5.0, gated=True)
    sock = socket.create_connection(("127.0.0.1", store.port), timeout=5)
    greeting = sock.recv(64)
    assert greeting.startswith(gate.MAGIC) and len(greeting) == len(gate.MAGIC) + gate.NONCE_BYTES
    sock.sendall(b"\x00" * gate.MAC_BYTES)  # a guess
    assert sock.recv(1) == gate.REFUSED and sock.recv(1) == b""  # refused, then closed
    with pytest.raises((RuntimeError, OSError)):  # torch's own client gets no store reply
        dist.TCPStore("127.0.0.1", store.port, is_master=False, timeout=timedelta(seconds=3)).list_keys()


def test_a_recorded_answer_is_worth_nothing_on_the_next_connection(hosted):
    store, secret = hosted
    first = socket.create_connection(("127.0.0.1", store.port), timeout=5)
    nonce = first.recv(64)[len(gate.MAGIC) :]
    recorded = secret.gate_answer(nonce)
    second = socket.create_connection(("127.0.0.1", store.port), timeout=5)
    other = second.recv(64)[len(gate.MAGIC) :]
    assert other != nonce
    second.sendall(recorded)
    assert second.recv(1) == gate.REFUSED
    first.sendall(recorded)
    assert first.recv(1) == gate.ACCEPTED


def test_a_silent_connection_is_dropped_after_the_handshake_bound(hosted):
    store, _ = hosted
    sock = socket.create_connection(("127.0.0.1", store.port), timeout=gate.HANDSHAKE_S + 5)
    sock.recv(64)
    t0 = time.monotonic()
    assert sock.recv(1) == b""  # closed by the gate, never relayed
    assert gate.HANDSHAKE_S - 0.5 <= time.monotonic() - t0 <= gate.HANDSHAKE_S + 3


def test_the_door_of_a_client_admits_one_connection_and_is_guarded_from_severing(hosted):
    store, secret = hosted
    upstream = gate.handshake("127.0.0.1", store.port, secret, 5.0)
    door = gate.GateClient(upstream)
    ports, inodes = gate.guarded()
    assert door.port in ports
    client = dist.TCPStore("127.0.0.1", door.port, is_master=False, timeout=timedelta(seconds=5))
    client.set("y", "2")
    assert store.server.get("y") == b"2"
    time.sleep(0.2)
    with pytest.raises(OSError):  # the door closed behind the store client
        socket.create_connection(("127.0.0.1", door.port), timeout=2)
