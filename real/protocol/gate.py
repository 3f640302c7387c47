"""An authenticated door in front of the coordinator's store.

torch's TCPStore authenticates no one and lists its keys to any client, so the coordinator's
store listens on loopback only, and the job's address is served by a `Gate`: for every
connection it sends a fresh nonce, and forwards the connection's bytes to the store only
once the client has answered with the nonce's MAC under the job's secret:

    gate   -> client   b"OOBLAB-GATE-1" + 32-byte nonce
    client -> gate     HMAC-SHA256(secret, "ooblab gate" | nonce)    (32 bytes)
    gate   -> client   b"\\x01" then the store's bytes, or b"\\x00" and close (wrong secret)

A party without the secret gets no byte of the store: it can neither list, read, write nor
delete a key, and holding connections open costs the job nothing but a thread each while
they last (each must answer within `HANDSHAKE_S`). The client half (`GateClient`) runs in
each process that reaches the store: a listener on 127.0.0.1 that accepts one connection,
the TCPStore client's, dials the gate, answers the challenge and then relays. What this
does not give: privacy or integrity of the bytes after the handshake (plaintext TCP; an
on-path party can read them, or inject into the stream); that needs TLS.
"""

from __future__ import annotations

import hmac
import os
import socket
import threading

from .secret import JobSecret

MAGIC = b"OOBLAB-GATE-1"
NONCE_BYTES = 32
MAC_BYTES = 32
ACCEPTED, REFUSED = b"\x01", b"\x00"
HANDSHAKE_S = 5.0  # a client must answer the challenge within this
CHUNK = 1 << 16

# this process's doors to the gate: their ports and the inodes of their relay sockets, which
# a worker tearing a generation down must never sever (`real.worker.sever.snapshot`)
_guard = threading.Lock()
_guarded_ports: set[int] = set()
_guarded_inodes: set[int] = set()


def guarded() -> tuple[frozenset[int], frozenset[int]]:
    """(ports, socket inodes) of this process's connections to the store."""
    with _guard:
        return frozenset(_guarded_ports), frozenset(_guarded_inodes)


def _guard_socket(sock: socket.socket) -> None:
    with _guard:
        _guarded_inodes.add(os.fstat(sock.fileno()).st_ino)


class GateRefused(ConnectionError):
    """The gate refused this secret."""


class NotAGate(ConnectionError):
    """The address did not answer as an ooblab gate."""


def answer(secret: JobSecret, nonce: bytes) -> bytes:
    return secret.gate_answer(nonce)


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("closed during the handshake")
        data += chunk
    return data


def _relay(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes a -> b until either side closes; then close both (the other relay ends)."""
    try:
        while True:
            data = a.recv(CHUNK)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (a, b):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


def splice(a: socket.socket, b: socket.socket, name: str) -> None:
    for src, dst in ((a, b), (b, a)):
        threading.Thread(target=_relay, args=(src, dst), name=name, daemon=True).start()


class Gate:
    """Serve `listener` (bound on the job's address): relay authenticated connections to
    the store at 127.0.0.1:`store_port`."""

    def __init__(
        self,
        listener: socket.socket,
        store_port: int,
        secret: JobSecret,
    ):
        self.listener = listener
        self.store_port = store_port
        self.secret = secret
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="ooblab-gate", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._admit, args=(conn,), name="ooblab-gate-in", daemon=True).start()

    def _admit(self, conn: socket.socket) -> None:
        nonce = os.urandom(NONCE_BYTES)
        try:
            conn.settimeout(HANDSHAKE_S)
            conn.sendall(MAGIC + nonce)
            mac = _read_exactly(conn, MAC_BYTES)
            if not hmac.compare_digest(mac, answer(self.secret, nonce)):
                conn.sendall(REFUSED)
                raise PermissionError("wrong secret")
            inner = socket.create_connection(("127.0.0.1", self.store_port), timeout=HANDSHAKE_S)
            conn.sendall(ACCEPTED)
        except (OSError, PermissionError):
            conn.close()
            return
        conn.settimeout(None)
        inner.settimeout(None)
        for sock in (conn, inner):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        splice(conn, inner, "ooblab-gate-relay")

    def close(self) -> None:
        self._closed = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()


def handshake(host: str, port: int, secret: JobSecret, timeout_s: float) -> socket.socket:
    """A connection to the gate at `host`:`port`, past its challenge (GateRefused: a wrong
    secret; NotAGate: something else answers there)."""
    sock = socket.create_connection((host, port), timeout=timeout_s)
    try:
        greeting = _read_exactly(sock, len(MAGIC) + NONCE_BYTES)
        if not greeting.startswith(MAGIC):
            raise NotAGate(f"{host}:{port} is not an ooblab coordinator")
        sock.sendall(answer(secret, greeting[len(MAGIC) :]))
        verdict = _read_exactly(sock, 1)
    except TimeoutError:
        sock.close()
        raise NotAGate(f"{host}:{port} did not answer as an ooblab coordinator within {timeout_s:g} s") from None
    except (ConnectionError, OSError):
        sock.close()
        raise
    if verdict != ACCEPTED:
        sock.close()
        raise GateRefused(f"the coordinator at {host}:{port} refused this job secret (it belongs to another job)")
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class GateClient:
    """A one-connection local door to the gate: `port` on 127.0.0.1 accepts the store
    client's connection, relays it over `upstream` (already past the challenge), then stops
    listening, so no other local process can ride on this process's credentials."""

    def __init__(self, upstream: socket.socket):
        self.upstream = upstream
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.port = self.listener.getsockname()[1]
        with _guard:
            _guarded_ports.add(self.port)  # the store client's connection ends here
        _guard_socket(upstream)
        threading.Thread(target=self._accept_one, name="ooblab-gate-client", daemon=True).start()

    def _accept_one(self) -> None:
        try:
            local, _ = self.listener.accept()
        except OSError:
            self.upstream.close()
            return
        finally:
            self.listener.close()
        local.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _guard_socket(local)
        splice(local, self.upstream, "ooblab-gate-client-relay")
