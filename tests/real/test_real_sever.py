"""Severing a gloo generation's sockets (`real.worker.sever`): only the sockets named,
never the store's, and a blocked gloo operation, this rank's and its peer's, fails at once
instead of when the dead rank's failure has walked the ring to it."""

from __future__ import annotations

import datetime
import multiprocessing
import os
import socket
import sys
import threading
import time

import pytest

from real.worker.groups import Generation, tcp_store_port
from real.worker.sever import sever, snapshot

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="severing reads /proc (Linux)")


def _pair() -> tuple[socket.socket, socket.socket, socket.socket]:
    """(listener, client, accepted) on 127.0.0.1, an OS-chosen port."""
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    return listener, client, accepted


def test_only_the_sockets_opened_between_snapshots_are_severed():
    keep_listener, keep_client, keep_accepted = _pair()
    before = snapshot()
    listener, client, accepted = _pair()
    opened = snapshot() - before
    try:
        assert len(opened) == 2  # both ends of the new connection are this process's
        assert sever(opened) == 2
        accepted.settimeout(5)
        assert accepted.recv(1) == b""  # the stream ended at once
        keep_accepted.settimeout(0.2)
        keep_client.sendall(b"x")
        assert keep_accepted.recv(1) == b"x"  # the older connection still works
        sever(opened)  # shutting down twice raises nothing
    finally:
        for s in (keep_listener, keep_client, keep_accepted, listener, client, accepted):
            s.close()


def test_connections_to_the_skipped_port_are_never_taken():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    before = snapshot(port)
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    try:
        opened = snapshot(port) - before
        assert len(opened) == 1  # the accepted end (its remote port is the client's); not the client
        assert sever(opened) == 1
        client.settimeout(5)
        assert client.recv(1) == b""
    finally:
        for s in (listener, client, accepted):
            s.close()


def test_listeners_and_other_kinds_of_socket_are_not_taken():
    before = snapshot()
    listener = socket.create_server(("127.0.0.1", 0))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.connect(("127.0.0.1", listener.getsockname()[1]))  # a connected UDP socket has a peer, but is no stream
    unix_a, unix_b = socket.socketpair()
    try:
        assert snapshot() - before == frozenset()
    finally:
        for s in (listener, udp, unix_a, unix_b):
            s.close()


def test_closed_sockets_are_skipped():
    before = snapshot()
    listener, client, accepted = _pair()
    opened = snapshot() - before
    for s in (listener, client, accepted):
        s.close()
    assert sever(opened) == 0


ECHO = """
import socket, sys
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
while data := conn.recv(16):
    conn.sendall(data)
"""


def test_a_straggling_generation_severs_every_connection_but_the_stores_and_notes_the_stack():
    import subprocess

    store = subprocess.Popen(
        [sys.executable, "-c", ECHO], stdout=subprocess.PIPE, text=True
    )  # the store's end lives elsewhere
    listener, client, accepted = _pair()
    store_client = None
    try:
        assert store.stdout is not None
        store_port = int(store.stdout.readline())
        store_client = socket.create_connection(("127.0.0.1", store_port), timeout=5)
        generation = Generation(3, None, 0, "gloo", None, {}, frozenset(), store_port)
        noted = generation.straggle()
        assert noted["resevered"] >= 2  # both ends of the other connection (not opened at build), not the store's
        assert "test_a_straggling_generation" in noted["stack"]  # the main thread is this test
        accepted.settimeout(5)
        assert accepted.recv(1) == b""
        store_client.sendall(b"s")
        assert store_client.recv(1) == b"s"  # the store's connection still works
    finally:
        for s in (listener, client, accepted, store_client):
            if s is not None:
                s.close()
        store.kill()
        store.wait(10)


def test_no_connection_is_taken_when_the_store_port_is_unknown_or_the_generation_aborts():
    listener, client, accepted = _pair()
    try:
        for generation in (
            Generation(3, None, 0, "gloo", None, {}),
            Generation(3, None, 0, "nccl", None, {}, frozenset(), 1),
        ):
            assert generation.straggle()["resevered"] is None
        client.sendall(b"x")
        accepted.settimeout(1)
        assert accepted.recv(1) == b"x"
    finally:
        for s in (listener, client, accepted):
            s.close()


def test_the_store_port_is_found_through_prefixes():
    import torch.distributed as dist

    server = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=5), wait_for_workers=False)
    inner = dist.PrefixStore("a", server)
    assert tcp_store_port(dist.PrefixStore("b", inner)) == server.port
    assert tcp_store_port(dist.HashStore()) is None


# -- gloo: rank 0 waits on rank 1, which waits on rank 2, which is silent (hung) ---------
SILENT_S = 20.0


def _chain(rank: int, port: int, severs: bool, out) -> None:
    import torch
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", port, 3, rank == 0, timeout=datetime.timedelta(seconds=30))
    before = snapshot(port)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=3, timeout=datetime.timedelta(seconds=60))
    groups = [dist.new_group([0, 1]), dist.new_group([1, 2])]
    opened = snapshot(port) - before
    dist.barrier()
    if rank == 2:
        time.sleep(SILENT_S)
        os._exit(0)
    if rank == 1 and severs:
        threading.Timer(1.0, sever, args=(opened,)).start()
    t0 = time.time()
    try:
        dist.recv(torch.zeros(2), rank + 1, group=groups[rank])
        out.put((rank, "returned", time.time() - t0))
    except RuntimeError as exc:
        out.put((rank, str(exc).splitlines()[0][-40:], time.time() - t0))
    out.close()
    out.join_thread()  # flushed before the hard exit (which skips gloo's teardown of a hung peer)
    os._exit(0)


@pytest.mark.timeout(120)
def test_a_severed_rank_and_its_peer_fail_at_once_while_the_hung_rank_is_still_silent():
    ctx = multiprocessing.get_context("spawn")
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    out = ctx.Queue()
    procs = [ctx.Process(target=_chain, args=(r, port, True, out)) for r in range(3)]
    for p in procs:
        p.start()
    try:
        results = {rank: (what, after_s) for rank, what, after_s in (out.get(timeout=90) for _ in range(2))}
    finally:
        for p in procs:
            p.join(timeout=5 if p is not procs[2] else 0)
            if p.is_alive():
                p.kill()
                p.join()
    assert set(results) == {0, 1}
    for rank, (what, after_s) in results.items():
        assert what != "returned", rank
        assert after_s < SILENT_S / 2, (rank, what, after_s)  # not when rank 2 finally exits
