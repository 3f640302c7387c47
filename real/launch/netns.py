"""A small cluster on one machine: hosts in network namespaces on one bridge, and link faults.

`NetCluster(hosts)` makes `hosts` Linux network namespaces, each joined to one bridge by a
veth pair and given its own address (10.77.X.2, .3, ... on a /24). The bridge has no address
in the machine's own namespace, so the hosts reach each other and nothing else, and nothing
outside reaches them. Processes started with `NetCluster.start(i, argv)` run inside host i's
namespace (`ip netns exec`), each in a session of its own so that it can be killed with
everything it spawned.

The network's faults act on a host's link from the bridge side, where the host cannot undo
them: `cut(i)` takes it down (the host stays alive, with its state, and its packets go
nowhere), `restore(i)` brings it back, `slow(i, kbit_s)` shapes it with a token bucket
(`tc ... tbf`; netem is not needed).

`close()` (also on leaving a `with` block, and at interpreter exit for one never closed)
kills the processes, deletes the namespaces (which deletes their veth ends) and the bridge.
It needs root and iproute2: `unavailable()` says in one line why a cluster cannot be made.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SUBNET_PREFIX = "10.77"
# variables naming this machine's interfaces: a namespace host has its own (a worker there
# pins its collectives to the interface facing its coordinator, `real.worker.main`)
HOST_SPECIFIC = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
_counter = itertools.count()


class NetnsError(RuntimeError):
    """An `ip` or `tc` command failed; the message names it and what it printed."""


@dataclass(frozen=True)
class Host:
    """One namespace host: its namespace, its address and the bridge-side end of its link."""

    index: int
    namespace: str
    address: str
    link: str  # the veth end on the bridge: where cuts and shaping act
    interface: str = "eth0"  # its own end, inside the namespace


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise NetnsError(f"{' '.join(argv)} failed: {(done.stderr or done.stdout).strip()}")
    return done


def unavailable() -> str | None:
    """Why namespace hosts cannot be made here (None: they can)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"network namespaces need iproute2 ({tool} not found)"
    probe = f"obprobe{os.getpid()}"
    made = _run(["ip", "netns", "add", probe], check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    _run(["ip", "netns", "del", probe], check=False)
    return None


class NetCluster:
    """`hosts` namespace hosts on one bridge (see the module docstring)."""

    def __init__(self, hosts: int):
        if hosts < 1 or hosts > 200:
            raise ValueError(f"a namespace cluster has 1..200 hosts, got {hosts}")
        reason = unavailable()
        if reason is not None:
            raise NetnsError(reason)
        n = next(_counter)
        self.prefix = f"ob{os.getpid() % 100000}{chr(ord('a') + n % 26)}"  # <= 8 chars: link names stay <= 15
        self.bridge = f"{self.prefix}br"
        self.subnet = f"{SUBNET_PREFIX}.{(os.getpid() + n) % 250}"
        self.hosts: list[Host] = []
        self.processes: list[subprocess.Popen] = []
        self._closed = False
        atexit.register(self.close)
        try:
            _run(["ip", "link", "add", self.bridge, "type", "bridge"])
            _run(["ip", "link", "set", self.bridge, "up"])
            for i in range(hosts):
                self._add_host(i)
        except BaseException:
            self.close()
            raise

    def _add_host(self, i: int) -> None:
        host = Host(i, f"{self.prefix}h{i}", f"{self.subnet}.{i + 2}", f"{self.prefix}v{i}")
        self.hosts.append(host)
        ns = host.namespace
        _run(["ip", "netns", "add", ns])
        _run(["ip", "link", "add", host.link, "type", "veth", "peer", "name", host.interface, "netns", ns])
        _run(["ip", "link", "set", host.link, "master", self.bridge, "up"])
        _run(["ip", "-n", ns, "addr", "add", f"{host.address}/24", "dev", host.interface])
        _run(["ip", "-n", ns, "link", "set", host.interface, "up"])
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])

    def __enter__(self) -> NetCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- processes --------------------------------------------------------------------------
    def start(self, i: int, argv: Sequence[str], log: Path | None = None, env: dict | None = None) -> subprocess.Popen:
        """`argv` inside host i's namespace, in a session of its own; output to `log`
        (stdout and stderr together) or to pipes."""
        handle = open(log, "w") if log is not None else None  # noqa: SIM115 - the child keeps its own copy
        process = subprocess.Popen(
            ["ip", "netns", "exec", self.hosts[i].namespace, *argv],
            stdout=handle if handle is not None else subprocess.PIPE,
            stderr=subprocess.STDOUT if handle is not None else subprocess.PIPE,
            text=True,
            start_new_session=True,
            env={**{k: v for k, v in os.environ.items() if k not in HOST_SPECIFIC}, **(env or {})},
        )
        if handle is not None:
            handle.close()
        self.processes.append(process)
        return process

    # -- faults -----------------------------------------------------------------------------
    def cut(self, i: int) -> None:
        """Take host i's link down: it stays alive and reaches no one."""
        _run(["ip", "link", "set", self.hosts[i].link, "down"])

    def restore(self, i: int) -> None:
        """Bring host i's link back up."""
        _run(["ip", "link", "set", self.hosts[i].link, "up"])

    def slow(self, i: int, kbit_s: int) -> None:
        """Shape host i's traffic both ways to `kbit_s` kbit/s: a token bucket on the
        bridge side (towards the host) and on the host's own interface (from it)."""
        if kbit_s < 8:
            raise ValueError(f"a shaped link needs at least 8 kbit/s, got {kbit_s}")
        burst = max(16, kbit_s // 8)  # kbit: at least a few frames
        bucket = ["root", "tbf", "rate", f"{kbit_s}kbit", "burst", f"{burst}kbit", "latency", "200ms"]
        host = self.hosts[i]
        _run(["tc", "qdisc", "replace", "dev", host.link, *bucket])
        _run(["tc", "-n", host.namespace, "qdisc", "replace", "dev", host.interface, *bucket])

    def unslow(self, i: int) -> None:
        """Host i's link at full rate again (both ways)."""
        host = self.hosts[i]
        _run(["tc", "qdisc", "del", "dev", host.link, "root"], check=False)
        _run(["tc", "-n", host.namespace, "qdisc", "del", "dev", host.interface, "root"], check=False)

    # -- teardown ---------------------------------------------------------------------------
    def close(self) -> None:
        """Kill every process started here (with their sessions), then delete the namespaces
        and the bridge; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for process in self.processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()
        for host in self.hosts:
            _kill_namespace_processes(host.namespace)
            _run(["ip", "link", "del", host.link], check=False)  # both ends of the pair, now
            _run(["ip", "netns", "del", host.namespace], check=False)
        _run(["ip", "link", "del", self.bridge], check=False)
        atexit.unregister(self.close)

    def leftovers(self) -> list[str]:
        """Namespaces and links of this cluster that still exist (empty after `close`)."""
        names = _run(["ip", "netns", "list"], check=False).stdout.split()
        links = _run(["ip", "-o", "link", "show"], check=False).stdout
        found = [n for n in names if n.startswith(self.prefix + "h")]
        found += [
            f"link {name}"
            for name in (self.bridge, *(h.link for h in self.hosts))
            if f" {name}:" in links or f" {name}@" in links
        ]
        return found


def _kill_namespace_processes(namespace: str) -> None:
    """SIGKILL whatever still runs in `namespace` (a process that left its session)."""
    pids = _run(["ip", "netns", "pids", namespace], check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    if pids:
        time.sleep(0.1)
