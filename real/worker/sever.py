"""Severing a gloo generation's connections from outside the thread blocked on them.

A gloo rank blocked on a dead peer fails within milliseconds, but a rank blocked on a
live peer that is itself blocked fails only once that peer has failed, torn down and
closed its sockets: the failure walks the ring of blocked ranks one teardown at a time.
Measured here: 5.4 and 9.2 s for the nodes of ranks 0 and 1 of a 32-node job,
3.6 and 7.0 s for ranks 16 and 8 at the same moments, and shorter for two nodes lost at
once, whose cascades run side by side. Neither `destroy_process_group` nor
`_abort_process_group` called from another thread helps: the blocked operation's pending
work keeps the pairs open, and the call returns while the operation stays blocked
(measured, torch 2.13).

`shutdown(2)` on the generation's own TCP sockets does: gloo's event loop sees the stream
end, this rank's blocked operation raises "Connection closed by peer" at once, and so does
every peer's operation on those pairs. A gloo generation's abort watch
(`nccl.AbortWatch`, on the coordinator's `resume` key) calls it, so every survivor enters
its fault path within one poll of the coordinator's decision rather than one teardown per
rank: the pause no longer depends on where the lost ranks sit in the ring.

Which sockets: those connected while the generation's groups were built (`snapshot`
before and after `build_generation`, only where severing is on), less any to the
coordinator's store port, named by inode, so a descriptor number reused later by the
store's connections or a file is never touched. Linux only (`/proc`); elsewhere the snapshot is empty and the cascade is what it
was.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from ..protocol import gate

PROC = Path("/proc")
TCP_FAMILIES = (socket.AF_INET, socket.AF_INET6)


def _socket_fds() -> dict[int, int]:
    """This process's socket descriptors by inode."""
    out: dict[int, int] = {}
    fd_dir = PROC / "self" / "fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return out
    for name in names:
        try:
            link = os.readlink(fd_dir / name)
        except OSError:  # closed since the listing
            continue
        if link.startswith("socket:["):
            out[int(link[8:-1])] = int(name)
    return out


@contextlib.contextmanager
def _duplicate(fd: int) -> Iterator[socket.socket | None]:
    """A socket object on a duplicate of descriptor `fd` (None if it closed meanwhile);
    closing it closes the duplicate only, never the owner's descriptor."""
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        yield None
        return
    try:
        yield sock
    finally:
        sock.close()


def _connected_peer_port(fd: int) -> int | None:
    """The remote port of a connected TCP socket `fd`, else None (a listener, a UDP or
    Unix socket, one closed meanwhile)."""
    with _duplicate(fd) as sock:
        if sock is None or sock.family not in TCP_FAMILIES or sock.type != socket.SOCK_STREAM:
            return None
        try:
            return int(sock.getpeername()[1])
        except OSError:  # not connected
            return None


def snapshot(skip_remote_port: int | None = None) -> frozenset[int]:
    """The inodes of this process's connected TCP sockets now, less those to
    `skip_remote_port` (the coordinator's store). Only this process's descriptors are
    read (not the system's connection table, which a 32-rank job on one machine fills
    with every rank's pairs)."""
    ports, inodes = gate.guarded()  # the store reached through the gate: never severed
    out = set()
    for inode, fd in _socket_fds().items():
        if inode in inodes:
            continue
        port = _connected_peer_port(fd)
        if port is not None and port != skip_remote_port and port not in ports:
            out.add(inode)
    return frozenset(out)


def sever(inodes: frozenset[int]) -> int:
    """Shut down (both ways) those of `inodes` this process still holds; returns how
    many. The descriptors stay open: their owner (gloo) closes them on teardown."""
    held = _socket_fds()
    count = 0
    for inode in inodes:
        fd = held.get(inode)
        if fd is None:
            continue
        with _duplicate(fd) as sock:
            if sock is None:
                continue
            try:
                sock.shutdown(socket.SHUT_RDWR)
                count += 1
            except OSError:  # already shut by the peer's side
                pass
    return count
