"""`ooblab netns`: a job across namespace hosts of this machine, to watch or to break.

    sudo ooblab netns [--nodes 4] [--out DIR] -- JOB_ARGS...

Makes N + 1 namespace hosts on one bridge (`real.launch.netns`), runs the coordinator on
host 0 and one `ooblab node` on each other host with the commands the Slurm recipe prints
(`real.launch.netns_job`), streams the coordinator's log, carries out the job's link
faults (`--inject ...:netdown|netup|slow`, with --nodes' names node0..nodeN-1) and
prints each as it happens, and tears every namespace, link and process down on any exit,
Ctrl-C included. JOB_ARGS, after `--`, are the coordinator's job arguments (`ooblab run`'s),
checked before anything is made. Exit status: the coordinator's.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from datetime import datetime
from pathlib import Path

from ..protocol.failures import parse_injections
from .cli_args import add_job_arguments, config_from_args

POLL_S = 0.1


def register(subparsers, formatter) -> None:
    netns = subparsers.add_parser(
        "netns",
        help="run a job across network namespaces of this machine (root): hosts of their own, link faults",
        description=__doc__.split("\n\n")[2].replace("\n", " "),
        formatter_class=formatter,
    )
    netns.add_argument("--nodes", type=int, default=4, help="nodes (hosts 1..N; the coordinator is on host 0)")
    netns.add_argument("--gpus", type=int, default=1, help="(emulated) GPUs per node")
    netns.add_argument("--out", default=None, help="job directory (default results/netns/<time>)")
    netns.add_argument("--timeout", type=float, default=3600.0, help="give up on the job after this many seconds")
    netns.add_argument(
        "job_args", nargs=argparse.REMAINDER, help="after --: the coordinator's job arguments (ooblab run's)"
    )
    netns.set_defaults(handler=handle_netns)


def check_job_args(job_args: list[str], nodes: int, gpus: int) -> None:
    """Parse JOB_ARGS as the coordinator will (raises what `ooblab run` would)."""
    from ooblab.cli import OneLineParser

    parser = OneLineParser(prog="ooblab netns JOB_ARGS")
    add_job_arguments(parser)
    args = parser.parse_args(["--nodes", str(nodes), "--gpus", str(gpus), *job_args])
    config = config_from_args(args)
    parse_injections(config.inject, config.node_names(), config.gpus_per_node, config.steps)


def handle_netns(args) -> int:
    from .cli_errors import request_error, user_errors
    from .netns import NetCluster, unavailable

    job_args = [a for a in args.job_args if a != "--"]
    for flag in ("--nodes", "--gpus"):
        if flag in job_args:
            return request_error("netns", ValueError(f"give {flag} before the job's arguments (it sizes the hosts)"))
    if args.nodes < 1:
        return request_error("netns", ValueError(f"--nodes must be at least 1, got {args.nodes}"))
    try:
        check_job_args(job_args, args.nodes, args.gpus)
    except user_errors() as exc:
        return request_error("netns", exc)
    reason = unavailable()
    if reason is not None:
        return request_error("netns", RuntimeError(f"namespace hosts cannot be made here: {reason}"))
    job_dir = Path(args.out or f"results/netns/{datetime.now():%Y%m%d-%H%M%S}").resolve()
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # tear down on a plain kill too
    with NetCluster(args.nodes + 1) as cluster:
        return _watch(cluster, job_dir, args, job_args)


def _watch(cluster, job_dir: Path, args, job_args: list[str]) -> int:
    from .netns_job import NetJob

    job = NetJob(cluster, job_dir, args.nodes, job_args, gpus=args.gpus)
    print(f"ooblab netns: {args.nodes} nodes on hosts {cluster.hosts[1].address}..{cluster.hosts[-1].address}, "
          f"coordinator on {cluster.hosts[0].address}; job directory {job_dir}", file=sys.stderr, flush=True)  # fmt: skip
    try:
        address = job.start()
        print(f"ooblab netns: coordinator at {address}", file=sys.stderr, flush=True)
        shown, acted, failed = 0, 0, 0  # what has been printed (NetJob's thread appends meanwhile)
        deadline = time.monotonic() + args.timeout
        assert job.coordinator is not None
        while True:
            done = job.coordinator.poll() is not None
            text = job.log.read_text(errors="replace") if job.log.exists() else ""
            sys.stderr.write(text[shown:])
            shown = len(text)
            actions, errors = job.link_actions[acted:], job.link_errors[failed:]
            for t, request in actions:
                print(f"ooblab netns: {time.strftime('%H:%M:%S', time.localtime(t))} carried out {request.label}",
                      file=sys.stderr, flush=True)  # fmt: skip
            for error in errors:
                print(f"ooblab netns: a link fault failed: {error}", file=sys.stderr, flush=True)
            acted, failed = acted + len(actions), failed + len(errors)
            if done:
                break
            if time.monotonic() > deadline:
                print(f"ooblab netns: the job ran past --timeout {args.timeout:g} s; stopping it", file=sys.stderr)
                return 124
            time.sleep(POLL_S)
        code, summary = job.finish(timeout_s=5)
    except KeyboardInterrupt:
        print(f"ooblab netns: interrupted; the job so far is in {job_dir}", file=sys.stderr)
        return 130
    if summary:
        print(f"ooblab netns: status {summary.get('status')}, {len(summary.get('losses', []))} steps, "
              f"{summary.get('failures_survived', 0)} failures survived; nodes' logs in {job_dir / 'nodes'}",
              file=sys.stderr)  # fmt: skip
    return code
