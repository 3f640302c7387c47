"""Where the coordinator's store listens, and how a worker or launcher reaches it.

torch's `TCPStore(is_master=True)` binds every interface (IPv4 and IPv6) whatever host it
is given, so the coordinator binds its listening sockets itself and hands the store's
descriptor to it (`master_listen_fd`). The store itself listens on loopback only: TCPStore
authenticates no one and lists its keys to any client. The job's address is served by
the store's `gate.Gate`, which relays a connection to the store only after it answered a
challenge with the job's secret; a client reaches the store through a `gate.GateClient`
of its own. The job's keys live under the secret's prefix (`JobSecret.key_prefix`), apart
from other jobs'. Connecting is bounded by `connect_timeout_s`; every failure is a
one-line `ConnectError` or `SecretError` (a wrong secret is refused at the challenge).
"""

from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist

from . import gate
from .errors import ConnectError, ListenError
from .keys import CHECK
from .secret import JobSecret, SecretError

LOOPBACK = "127.0.0.1"
BACKLOG = 512


def parse_address(address: str) -> tuple[str, int]:
    """'host:port' (or '[v6]:port') -> (host, port), with a clear error for anything else."""
    host, sep, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConnectError(f"coordinator address must be HOST:PORT, got {address!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket listening on `host`:`port` only (0: a free port the OS picks)."""
    if not 0 <= port < 65536:
        raise ListenError(f"--port must be 0..65535, got {port}")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise ListenError(f"cannot listen on {host!r}: not an address of this machine ({exc})") from None
    family, _, _, _, sockaddr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(sockaddr)
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        what = "is in use" if exc.errno == 98 else f"cannot be bound ({exc.strerror or exc})"
        raise ListenError(f"port {port} on {host} {what}") from None
    return sock


@dataclass
class HostedStore:
    """The coordinator's side: the server store (which owns its listening socket: on
    loopback behind the gate, or on the job's loopback address itself), the job's view of
    it, and the gate on the job's address when there is one."""

    server: dist.TCPStore
    store: dist.Store  # PrefixStore(secret.key_prefix, server): every key of the job
    host: str
    port: int  # the job's address: the gate's, else the store's
    door: gate.Gate | None = None

    def close(self) -> None:
        """Close the gate and drop both stores (a second call does nothing); the server
        closes its socket when the last reference goes. Using either afterwards is an
        AttributeError."""
        if self.door is not None:
            self.door.close()
            self.door = None
        for name in ("store", "server"):
            self.__dict__.pop(name, None)


def host_store(host: str, port: int, secret: JobSecret, timeout_s: float, gated: bool | None = None) -> HostedStore:
    """Serve the job's keys under the secret's prefix on `host`:`port` only: through a gate
    (the store itself on loopback) when `gated`, which by default means unless `host` is a
    loopback address (a local job: only this machine's users can reach it, and the relay
    would cost every store operation two hops)."""
    if gated is None:
        gated = not is_loopback(host)
    public = listen_socket(host, port)
    bound = public.getsockname()[1]
    if not gated:
        server = _serve_on(public, host, timeout_s)
        server.set(CHECK, secret.check)
        return HostedStore(server, dist.PrefixStore(secret.key_prefix, server), host, bound)
    try:
        server = loopback_store(timeout_s)
    except Exception:
        public.close()
        raise
    door = gate.Gate(public, server.port, secret)
    return HostedStore(server, dist.PrefixStore(secret.key_prefix, server), host, bound, door)


def _serve_on(sock: socket.socket, host: str, timeout_s: float) -> dist.TCPStore:
    """A server store on the listening socket `sock`, which it then owns (and closes); the
    socket is closed here if the store cannot be made."""
    try:
        store = dist.TCPStore(host, sock.getsockname()[1], is_master=True, wait_for_workers=False,
                              timeout=timedelta(seconds=timeout_s), master_listen_fd=sock.fileno())  # fmt: skip
    except Exception:
        sock.close()
        raise
    sock.detach()
    return store


def loopback_store(timeout_s: float) -> dist.TCPStore:
    """A server store on a free loopback port, for helpers of one machine (the baseline)."""
    return _serve_on(listen_socket(LOOPBACK, 0), LOOPBACK, timeout_s)


def connect(
    address: str,
    secret: JobSecret,
    connect_timeout_s: float,
    timeout_s: float | None = None,
    gated: bool | None = None,
) -> dist.Store:
    """The job's keys at the coordinator `address`, once it has accepted `secret`: through
    its gate when `gated` (by default: unless the address is loopback, as `host_store`).

    Connecting and the secret check together take at most `connect_timeout_s`; store
    operations afterwards wait up to `timeout_s` (default: the same)."""
    host, port = parse_address(address)
    deadline = time.monotonic() + connect_timeout_s
    _wait_until_reachable(host, port, address, deadline, connect_timeout_s)
    if gated is None:
        gated = not is_loopback(host)
    if not gated:
        return _connect_local(host, port, address, secret, deadline, connect_timeout_s, timeout_s)
    try:
        upstream = gate.handshake(host, port, secret, max(1.0, min(deadline - time.monotonic(), gate.HANDSHAKE_S)))
    except gate.GateRefused as exc:
        raise SecretError(str(exc)) from None
    except gate.NotAGate:
        raise ConnectError(f"{address} does not answer as an ooblab coordinator") from None
    except OSError as exc:
        raise ConnectError(
            f"cannot reach the coordinator at {address} within {connect_timeout_s:g} s ({_first_line(exc)})"
        ) from None
    door = gate.GateClient(upstream)
    try:
        raw = dist.TCPStore(
            LOOPBACK, door.port, is_master=False, timeout=timedelta(seconds=max(1.0, deadline - time.monotonic()))
        )
    except (RuntimeError, OSError) as exc:  # DistNetworkError, DistStoreError
        raise ConnectError(f"cannot open the store through the coordinator at {address} ({_first_line(exc)})") from None
    raw.set_timeout(timedelta(seconds=timeout_s or connect_timeout_s))
    return dist.PrefixStore(secret.key_prefix, raw)


def _connect_local(
    host: str,
    port: int,
    address: str,
    secret: JobSecret,
    deadline: float,
    connect_timeout_s: float,
    timeout_s: float | None,
) -> dist.Store:
    """A loopback coordinator's store, straight (no gate): the secret is checked against the
    public check value, so a wrong one is refused at once."""
    try:
        raw = dist.TCPStore(
            host, port, is_master=False, timeout=timedelta(seconds=max(1.0, deadline - time.monotonic()))
        )
    except (RuntimeError, OSError) as exc:  # DistNetworkError, DistStoreError
        raise ConnectError(
            f"cannot reach the coordinator at {address} within {connect_timeout_s:g} s ({_first_line(exc)})"
        ) from None
    try:
        raw.wait([CHECK], timedelta(seconds=max(0.1, deadline - time.monotonic())))
        check = raw.get(CHECK).decode(errors="replace")
    except RuntimeError:
        raise ConnectError(
            f"{address} does not answer as an ooblab coordinator within {connect_timeout_s:g} s"
        ) from None
    if check != secret.check:
        raise SecretError(f"the coordinator at {address} refused this job secret (it belongs to another job)")
    raw.set_timeout(timedelta(seconds=timeout_s or connect_timeout_s))
    return dist.PrefixStore(secret.key_prefix, raw)


def advertised_address(bind_host: str, advertise_host: str | None, port: int) -> str:
    """HOST:PORT for workers: `advertise_host`, else the bound address (this host's name
    when bound to every interface); IPv6 literals in brackets."""
    host = advertise_host or (bind_host if bind_host not in ("0.0.0.0", "::", "") else socket.gethostname())
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass
    return f"{host}:{port}"


def _wait_until_reachable(host: str, port: int, address: str, deadline: float, timeout_s: float) -> None:
    """Plain TCP connects until one succeeds (the coordinator may start after its
    workers) or the deadline passes; torch's own client would retry as long, but logs
    a C++ traceback per attempt."""
    last = "no attempt"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ConnectError(f"cannot reach the coordinator at {address} within {timeout_s:g} s ({last})")
        try:
            socket.create_connection((host, port), timeout=min(left, 5.0)).close()
            return
        except socket.gaierror as exc:
            raise ConnectError(f"cannot resolve the coordinator's host {host!r} ({exc.strerror or exc})") from None
        except OSError as exc:
            last = exc.strerror or str(exc) or type(exc).__name__
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def local_address_towards(host: str, port: int) -> str:
    """This machine's address on the route to `host` (no packet is sent)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((host, port))
        return probe.getsockname()[0]


def interface_of(address: str) -> str | None:
    """The name of the network interface that carries IPv4 `address` (Linux), or None."""
    import fcntl
    import struct

    SIOCGIFADDR = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            if socket.inet_ntoa(raw[20:24]) == address:
                return name
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
