"""`ooblab run | coordinator | node | worker | profile`: the real backend's commands.

- `run`: a whole job on this machine (this process coordinates, workers are spawned).
- `coordinator`, `node`, `worker`: the same job across machines: one coordinator, then on
  every machine a per-node launcher (`node`, or torchrun running `worker`) whose workers
  connect to the coordinator's address.
- `profile`: measure tiny-gpt layer by layer and write the planner's profile format.

A request that cannot work (bad arguments, a busy port, an unreachable coordinator, a
refused secret) is one line on stderr and exit status 2; anything else is an internal
error: one line saying so, the traceback in the run directory's `error.log`, status 1.

torch is imported inside the handlers only, so `ooblab plan` stays fast.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

from ..config import (
    DEVICES,
    DTYPES,
    TINY_GPT,
    ConfigError,
    RunConfig,
)
from .cli_args import add_client_arguments, add_job_arguments, add_tiny_arguments, config_from_args
from .cli_errors import internal_error, request_error, user_errors
from .profile_cmd import handle_profile


def register(subparsers) -> None:
    fmt = argparse.ArgumentDefaultsHelpFormatter
    run = subparsers.add_parser(
        "run",
        help="train on this machine: a coordinator and one worker process per (emulated) GPU",
        description="Plan with the planner, spawn the coordinator and N x G workers here, train K steps, "
        "write results/real/<run-id>/{config,summary}.json, timeline.csv, events.jsonl.",
        formatter_class=fmt,
    )
    add_job_arguments(run)
    run.add_argument("--out", default=None, help="run directory (default results/real/<run-id>)")
    run.add_argument("--json", action="store_true", help="print the summary as JSON")
    run.set_defaults(handler=handle_run)

    coord = subparsers.add_parser(
        "coordinator",
        help="host a job's coordinator for workers on other machines",
        description="Host the store (port 0 unless --port), print HOST:PORT, wait for nodes x GPUs workers "
        "(`ooblab node` or torchrun + `ooblab worker`), plan, watch, write results.",
        formatter_class=fmt,
    )
    add_job_arguments(coord)
    coord.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on; the default admits this machine only: give this machine's address on the job's private network to admit others",
    )
    coord.add_argument("--port", type=int, default=0, help="port to listen on (0: any free port)")
    coord.add_argument(
        "--secret-file", default=None, help="write the job's secret here, mode 0600 (default: RUN_DIR/secret)"
    )
    coord.add_argument(
        "--use-secret",
        action="store_true",
        help="use the job's secret in --secret-file (read, not written) or $OOBLAB_SECRET instead of drawing one: "
        "for schedulers that hand it out themselves, e.g. a Kubernetes Secret",
    )
    coord.add_argument("--advertise", default=None, help="host name workers use (default: this host's name)")
    coord.add_argument("--address-file", default=None, help="also write HOST:PORT to this file")
    coord.add_argument(
        "--net-control",
        default=None,
        metavar="FILE",
        help="hand --inject's link faults (netdown, netup, slow) to whoever owns the links by appending them to "
        "FILE (the namespace harness, ooblab netns, reads it)",
    )
    coord.add_argument("--out", default=None, help="run directory (default results/real/<run-id>)")
    coord.add_argument("--json", action="store_true", help="print the summary as JSON")
    coord.set_defaults(handler=handle_coordinator)

    from .netns_cmd import register as register_netns

    register_netns(subparsers, fmt)

    node = subparsers.add_parser(
        "node",
        help="per-node launcher: start this node's workers against a coordinator",
        formatter_class=fmt,
    )
    node.add_argument("--coordinator", required=True, help="the coordinator's HOST:PORT")
    node.add_argument("--name", required=True, help="this node's name (unique in the job)")
    node.add_argument("--gpus", type=int, default=1, help="workers (GPUs) on this node")
    node.add_argument("--threads", type=int, default=None, help="intra-op threads per worker")
    add_client_arguments(node)
    node.set_defaults(handler=handle_node)

    worker = subparsers.add_parser(
        "worker",
        help="one worker (e.g. under torchrun --max-restarts=0); connects to a coordinator",
        formatter_class=fmt,
    )
    worker.add_argument("--coordinator", required=True, help="the coordinator's HOST:PORT")
    worker.add_argument("--name", required=True, help="this node's name (unique in the job)")
    worker.add_argument("--gpu", type=int, default=None, help="GPU index on the node (default: $LOCAL_RANK, else 0)")
    worker.add_argument("--threads", type=int, default=None, help="intra-op threads")
    add_client_arguments(worker)
    worker.set_defaults(handler=handle_worker)

    prof = subparsers.add_parser(
        "profile",
        help="measure a model layer by layer and write the planner's profile format",
        description="Per-layer forward/backward time, parameter, optimizer and activation bytes, and "
        "gradient all-reduce time versus participants, written as an Oobleck-format profile directory.",
        formatter_class=fmt,
    )
    prof.add_argument("--model", default=TINY_GPT, help=f"model to measure (built-in: {TINY_GPT})")
    add_tiny_arguments(prof)
    prof.add_argument("--microbatch", type=int, default=1, help="samples per microbatch")
    prof.add_argument("--dtype", default="float32", choices=DTYPES)
    prof.add_argument("--device", default="auto", choices=DEVICES)
    prof.add_argument("--repeats", type=int, default=5, help="timed repetitions per measurement (median)")
    prof.add_argument("--warmup", type=int, default=2, help="untimed repetitions first")
    prof.add_argument(
        "--max-participants", type=int, default=4, help="all-reduce measured for 2..this many processes (1: skip)"
    )
    prof.add_argument("--threads", type=int, default=1, help="intra-op threads (match the workers')")
    prof.add_argument(
        "--busy-neighbours",
        default=None,
        metavar="K,K,...",
        help="also time every layer beside each number of busy neighbour processes (e.g. 0,1,2,3: CPU "
        "workers sharing cores) and write contention.json, factors relative to --reference-neighbours",
    )
    prof.add_argument(
        "--reference-neighbours",
        type=int,
        default=0,
        help="busy neighbour processes beside which the profile's own layer times are measured",
    )
    prof.add_argument("--out", required=True, help="profile directory to write")
    prof.add_argument(
        "--skip-comm",
        action="store_true",
        help="do not measure pipeline communication (p2p latency/bandwidth, per-hop overhead: communication.json)",
    )
    prof.add_argument("--json", action="store_true", help="print the measured layers as JSON")
    prof.set_defaults(handler=handle_profile)


def _exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit so launchers reap their workers on the way out."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _report(summary: dict, directory, as_json: bool) -> None:
    if as_json:
        print(json.dumps({**summary, "run_dir": str(directory)}, indent=2))
        return
    plan = summary.get("plan") or {}
    # an Oobleck pipeline holds its own microbatch count; a Varuna plan one for every replica
    pipes = ", ".join(
        f"{p['num_nodes']} nodes x {p.get('microbatches', plan.get('microbatches'))} mb"
        for p in plan.get("pipelines", [])
    )
    print(f"status {summary['status']}{': ' + summary['reason'] if summary['reason'] else ''}")
    print(f"plan: {pipes}")
    losses = summary["losses"]
    if losses:
        print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} steps")
    steady, predicted = summary.get("steady_iteration_s"), summary.get("predicted_iteration_s")
    print(
        f"throughput {summary['avg_samples_per_s']:.2f} samples/s"
        + (f"; iteration {steady:.4f} s measured (steady), {predicted:.4f} s predicted" if steady and predicted else "")
    )
    if summary.get("recovery_s") or summary.get("num_restarts"):
        recoveries = ", ".join(f"{r['kind']} {r['total_s']:.2f} s" for r in summary.get("recoveries", []))
        print(
            f"{summary['num_reconfigurations']} reconfiguration(s), {summary['num_restarts']} restart(s); recoveries: {recoveries or 'none'}"
        )
    left = summary.get("injections_not_fired") or []
    if left:
        print(
            f"note: {len(left)} --inject entr{'y' if len(left) == 1 else 'ies'} never happened: the run ended first ({'; '.join(left)})"
        )
    print(f"results in {directory}")


def _log_event(event) -> None:
    """One stderr line per coordinator event (progress for people and for tests)."""
    detail = {k: v for k, v in event.detail.items() if k != "plan"}
    print(f"[{event.time_s:8.2f} s] {event.kind} {json.dumps(detail, default=str)}", file=sys.stderr, flush=True)


def check_outputs(run_dir: Path, checkpoint_dir: str | None) -> None:
    """Where the run writes (its directory, its checkpoints), checked before any worker
    starts: a run must not train for minutes and then lose its record."""
    from planner.output_dirs import check_output_dir

    check_output_dir(run_dir, "--out")
    if checkpoint_dir is not None:
        check_output_dir(checkpoint_dir, "--checkpoint-dir")


def handle_run(args) -> int:
    run_dir = None
    try:
        config = config_from_args(args)
        from .local import default_run_dir, run_local

        run_dir = Path(args.out) if args.out else default_run_dir()
        check_outputs(run_dir, config.checkpoint_dir)
        _exit_on_sigterm()
        result = run_local(config, run_dir, on_event=_log_event)
    except KeyboardInterrupt:
        print(f"ooblab run: interrupted; the run so far is in {run_dir}", file=sys.stderr)
        return 130
    except user_errors() as exc:
        return request_error("run", exc)
    except Exception:  # noqa: BLE001 - anything else is a bug: say so, keep the traceback
        return internal_error("run", run_dir)
    _report(result.summary.to_dict(), result.directory, args.json)
    return 0 if result.ok else 1


def handle_coordinator(args) -> int:
    run_dir = None
    try:
        config = config_from_args(args)
        from .local import default_run_dir

        run_dir = Path(args.out) if args.out else default_run_dir()
        check_outputs(run_dir, config.checkpoint_dir)
        return _coordinate(args, config, run_dir)
    except KeyboardInterrupt:
        print(f"ooblab coordinator: interrupted; the run so far is in {run_dir}", file=sys.stderr)
        return 130
    except user_errors() as exc:
        return request_error("coordinator", exc)
    except Exception:  # noqa: BLE001 - anything else is a bug: say so, keep the traceback
        return internal_error("coordinator", run_dir)


def _coordinate(args, config: RunConfig, run_dir: Path) -> int:
    from ..control.coordinator import Coordinator
    from ..control.results import write_results
    from ..protocol.secret import SECRET_ENV, load_secret, write_secret_file
    from ..protocol.transport import is_loopback

    given = load_secret(args.secret_file) if args.use_secret else None
    coordinator = Coordinator(
        config,
        bind_host=args.host,
        advertise_host=args.advertise,
        port=args.port,
        on_event=_log_event,
        run_dir=run_dir,
        local=False,
        secret=given,
        net_control=args.net_control,
    )
    try:
        if coordinator.needs_local_processes:
            raise ConfigError(
                "--trace and time-based --inject entries kill and start processes: use ooblab run (one machine)"
            )
        run_dir.mkdir(parents=True, exist_ok=True)
        if given is None:
            secret_path = write_secret_file(args.secret_file or run_dir / "secret", coordinator.secret)
            where = (
                f"the job's secret is in {secret_path} (give it to every launcher with --secret-file or ${SECRET_ENV})"
            )
        else:
            where = f"using the job's secret from {args.secret_file or '$' + SECRET_ENV}"
        print(f"coordinator listening on {coordinator.address}; {where}", file=sys.stderr, flush=True)
        if is_loopback(args.host):
            print(
                f"listening on {args.host} only: workers on other machines cannot connect; pass --host with this machine's "
                "address on the job's private network to admit them",
                file=sys.stderr,
                flush=True,
            )
        if args.address_file:
            tmp = f"{args.address_file}.tmp"
            with open(tmp, "w") as handle:
                handle.write(coordinator.address + "\n")
            os.replace(tmp, args.address_file)
        _exit_on_sigterm()
        try:
            outcome = coordinator.run()
        except (KeyboardInterrupt, SystemExit) as exc:  # the run so far, marked interrupted
            coordinator.interrupted(exc)
            write_results(coordinator.outcome, run_dir)
            raise
        summary, directory = write_results(outcome, run_dir)
    finally:
        coordinator.close()
    _report(summary.to_dict(), directory, args.json)
    return 0 if outcome.status == "finished" else 1


def _client_secret(args):
    """The secret a launcher or worker presents, after checking its other arguments."""
    from ..protocol.secret import load_secret
    from ..protocol.transport import parse_address

    parse_address(args.coordinator)
    if not args.connect_timeout > 0:
        raise ConfigError(f"--connect-timeout must be > 0 s, got {args.connect_timeout}")
    return load_secret(args.secret_file)


def handle_node(args) -> int:
    try:
        if args.gpus < 1:
            raise ConfigError(f"--gpus must be >= 1, got {args.gpus}")
        secret = _client_secret(args)
        from .local import run_node

        _exit_on_sigterm()
        return run_node(args.coordinator, secret, args.name, args.gpus, args.threads, args.connect_timeout)
    except user_errors() as exc:
        return request_error("node", exc)
    except Exception:  # noqa: BLE001 - anything else is a bug: say so, keep the traceback
        return internal_error("node", None)


def handle_worker(args) -> int:
    try:
        gpu = args.gpu if args.gpu is not None else int(os.environ.get("LOCAL_RANK", "0"))
        if gpu < 0:
            raise ConfigError(f"--gpu must be >= 0, got {gpu}")
        secret = _client_secret(args)
        from ..worker.main import exit_now, run_worker
    except ValueError as exc:  # LOCAL_RANK not a number, or a user error above
        return request_error("worker", exc)
    exit_now(
        run_worker(
            args.coordinator, args.name, gpu, secret, connect_timeout_s=args.connect_timeout, threads=args.threads
        )
    )
