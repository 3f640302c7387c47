"""A real job across namespace hosts, launched with the commands the Slurm recipe prints.

`recipe_commands` runs `deploy/slurm/ooblab.sbatch --dry-run` for an allocation of N nodes
whose first node has address HOST, and returns the coordinator's command and each node's
(`ooblab node ... --coordinator HOST:PORT`), so a namespace job is started exactly as a
Slurm job is: a secret file, `--host`/`--advertise` on the job's network, a connect timeout.
`NetJob` runs them on a `NetCluster`: the coordinator on host 0, node i on host i + 1,
each with its log under the job directory, and waits for lines of the coordinator's log
(to time a fault) and for its end. It owns the links: the coordinator hands it the job's
link faults (`--inject ...:netdown|netup|slow`) through the link-control file
(`real.control.links`), and a thread of NetJob carries each out on the node's host, noting
when (`link_actions`).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..control.links import LinkRequest, read_requests
from .netns import NetCluster

SBATCH = Path(__file__).resolve().parents[2] / "deploy" / "slurm" / "ooblab.sbatch"
OOBLAB = f"{shlex.quote(sys.executable)} -m ooblab.cli"


def recipe_commands(
    nodes: int, host: str, job_dir: Path, job_args: Sequence[str], gpus: int = 1, connect_timeout_s: int = 60
) -> tuple[list[str], list[list[str]]]:
    """(the coordinator's argv, each node's argv with HOST:PORT to fill in), as the Slurm
    recipe's dry run prints them."""
    if not SBATCH.is_file():
        raise FileNotFoundError(f"the Slurm recipe is not at {SBATCH}: run from a checkout of ooblab")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OOBLAB"))}
    env |= {"SLURM_JOB_NUM_NODES": str(nodes), "OOBLAB_GPUS_PER_NODE": str(gpus), "OOBLAB_HOST": host,
            "OOBLAB_JOB_DIR": str(job_dir), "OOBLAB": OOBLAB, "OOBLAB_CONNECT_TIMEOUT": str(connect_timeout_s)}  # fmt: skip
    done = subprocess.run(
        ["bash", str(SBATCH), "--dry-run", *job_args], env=env, capture_output=True, text=True, timeout=30
    )
    if done.returncode != 0:
        raise RuntimeError(f"the Slurm recipe's dry run failed: {done.stderr.strip()}")
    lines = done.stdout.splitlines()
    coordinator = shlex.split(next(line for line in lines if not line.startswith("#")))
    node_lines = [shlex.split(line.split(" runs: ", 1)[1]) for line in lines if line.startswith("# node ")]
    return coordinator, node_lines


class NetJob:
    """The coordinator on host 0 of `cluster` and `nodes` launchers on hosts 1..nodes."""

    def __init__(self, cluster: NetCluster, job_dir: Path, nodes: int, job_args: Sequence[str], gpus: int = 1):
        if len(cluster.hosts) < nodes + 1:
            raise ValueError(
                f"{nodes} nodes and a coordinator need {nodes + 1} hosts, the cluster has {len(cluster.hosts)}"
            )
        self.cluster = cluster
        self.job_dir = Path(job_dir)
        self.net_control = self.job_dir / "net-control"
        self.coordinator_cmd, self.node_cmds = recipe_commands(
            nodes, cluster.hosts[0].address, self.job_dir, [*job_args, "--net-control", str(self.net_control)], gpus
        )
        # node name (the recipe's --name) -> its host
        self.host_of = {argv[argv.index("--name") + 1]: i + 1 for i, argv in enumerate(self.node_cmds)}
        self.log = self.job_dir / "coordinator.log"
        self.coordinator: subprocess.Popen | None = None
        self.launchers: list[subprocess.Popen] = []
        self.address = ""
        self.link_actions: list[tuple[float, LinkRequest]] = []  # (wall-clock time carried out, request)
        self.link_errors: list[str] = []
        self._stop = threading.Event()
        self._links: threading.Thread | None = None

    def start(self, wait_s: float = 60.0) -> str:
        """Start the coordinator, wait for its address file, start every node; HOST:PORT."""
        (self.job_dir / "nodes").mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.job_dir, 0o700)
        env = {"PYTHONUNBUFFERED": "1"}
        self.coordinator = self.cluster.start(0, self.coordinator_cmd, log=self.log, env=env)
        address_file = self.job_dir / "coordinator.addr"
        deadline = time.monotonic() + wait_s
        while not (address_file.exists() and address_file.read_text().strip()):
            if self.coordinator.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the coordinator wrote no address (log: {self.tail()})")
            time.sleep(0.05)
        self.address = address_file.read_text().strip()
        self._links = threading.Thread(target=self._carry_out_links, name="netjob-links", daemon=True)
        self._links.start()
        for i in range(len(self.node_cmds)):
            self.launchers.append(self._launch(i, f"node-{i}.log"))
        return self.address

    def _launch(self, i: int, log_name: str) -> subprocess.Popen:
        argv = [self.address if a == "HOST:PORT" else a for a in self.node_cmds[i]]
        return self.cluster.start(i + 1, argv, log=self.job_dir / "nodes" / log_name, env={"PYTHONUNBUFFERED": "1"})

    def relaunch(self, i: int) -> subprocess.Popen:
        """Start node i's launcher again (its first one has ended: fenced, or crashed), with
        the same command: the node registers anew and joins as a new member."""
        if self.launchers[i].poll() is None:
            raise RuntimeError(f"node {i}'s launcher still runs")
        self.launchers[i] = self._launch(i, f"node-{i}-again.log")
        return self.launchers[i]

    def wait_for(self, text: str, timeout_s: float) -> float:
        """Seconds until `text` appears in the coordinator's log (RuntimeError if it ends or
        the time runs out first)."""
        begin = time.monotonic()
        while True:
            if self.log.exists() and text in self.log.read_text(errors="replace"):
                return time.monotonic() - begin
            if self.coordinator is not None and self.coordinator.poll() is not None:
                raise RuntimeError(f"the coordinator ended before {text!r}: {self.tail()}")
            if time.monotonic() - begin > timeout_s:
                raise RuntimeError(f"no {text!r} within {timeout_s:g} s: {self.tail()}")
            time.sleep(0.05)

    def finish(self, timeout_s: float) -> tuple[int, dict[str, Any]]:
        """Wait for the coordinator; (its exit status, the run's summary or {})."""
        assert self.coordinator is not None, "start() first"
        try:
            code = self.coordinator.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the coordinator did not finish within {timeout_s:g} s: {self.tail()}") from None
        finally:
            self._stop.set()
            if self._links is not None:
                self._links.join(timeout=5)
        summary = self.job_dir / "run" / "summary.json"
        return code, json.loads(summary.read_text()) if summary.exists() else {}

    def _carry_out_links(self) -> None:
        """Read the coordinator's link faults as they come and act on the node's host."""
        offset = 0
        while not self._stop.is_set():
            requests, offset = read_requests(self.net_control, offset)
            for request in requests:
                try:
                    self._link(request)
                    self.link_actions.append((time.time(), request))
                except Exception as exc:  # noqa: BLE001 - kept and reported by the caller
                    self.link_errors.append(f"{request.label}: {exc}")
            self._stop.wait(0.02)

    def _link(self, request: LinkRequest) -> None:
        host = self.host_of.get(request.node)
        if host is None:
            raise ValueError(f"no host runs {request.node} (the job's nodes are {', '.join(self.host_of)})")
        if request.kind == "netdown":
            self.cluster.cut(host)
        elif request.kind == "netup":
            self.cluster.unslow(host)
            self.cluster.restore(host)
        elif request.kind == "slow":
            self.cluster.slow(host, int(request.rate_kbit or 0))
        else:
            raise ValueError(f"unknown link fault {request.kind!r}")

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else "(no log)"
