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
import traceback
from pathlib import Path
from typing import Any

from designs import cli as design_cli

from ..config import (
    BACKENDS,
    COMPUTE_MODES,
    DEVICES,
    DTYPES,
    TINY_GPT,
    ConfigError,
    RunConfig,
    TinyGptSpec,
)

_DEFAULTS = RunConfig()
_TINY = TinyGptSpec()


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
    coord.add_argument("--out", default=None, help="run directory (default results/real/<run-id>)")
    coord.add_argument("--json", action="store_true", help="print the summary as JSON")
    coord.set_defaults(handler=handle_coordinator)

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


def add_client_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--secret-file", default=None, help="the job's secret, as the coordinator wrote it (else $OOBLAB_SECRET)"
    )
    parser.add_argument(
        "--connect-timeout", type=float, default=60.0, help="seconds to reach the coordinator before giving up"
    )


def add_tiny_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("tiny-gpt size")
    group.add_argument("--blocks", type=int, default=_TINY.blocks, help="transformer blocks (layers = blocks + 2)")
    group.add_argument("--hidden", type=int, default=_TINY.hidden, help="hidden size")
    group.add_argument("--heads", type=int, default=_TINY.heads, help="attention heads")
    group.add_argument("--seq-len", type=int, default=_TINY.seq_len, help="tokens per sample")
    group.add_argument("--vocab", type=int, default=_TINY.vocab, help="vocabulary size")


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    d = _DEFAULTS
    parser.add_argument("--nodes", type=int, default=d.nodes, help="nodes N")
    parser.add_argument("--gpus-per-node", type=int, default=d.gpus_per_node, help="GPUs per node g (one worker each)")
    parser.add_argument("--f", type=int, default=d.fault_tolerance, help="failures to tolerate (>= f + 1 pipelines)")
    parser.add_argument(
        "--model",
        default=d.model,
        help=f"{TINY_GPT}, or for --compute emulated a built-in analytic model or a profile directory",
    )
    parser.add_argument(
        "--compute",
        default=d.compute,
        choices=COMPUTE_MODES,
        help="real: train tiny-gpt; emulated: layers sleep their profiled times",
    )
    parser.add_argument("--steps", type=int, default=d.steps, help="training iterations K")
    parser.add_argument("--global-batch", type=int, default=d.global_batch, help="samples per iteration")
    parser.add_argument("--microbatch", type=int, default=d.microbatch_size, help="samples per microbatch")
    parser.add_argument("--pipelines", default=None, help="force the grouping, e.g. 3,4 (node counts of the pipelines)")
    parser.add_argument(
        "--profile",
        default=None,
        help="measured tiny-gpt profile directory (`ooblab profile`); default: analytic estimate",
    )
    parser.add_argument(
        "--gpu",
        default=None,
        help="planner GPU type for memory/links (default: a CPU device for tiny-gpt, v100-16gb otherwise)",
    )
    parser.add_argument(
        "--gpu-memory-gb", type=float, default=d.gpu_memory_gb, help="memory of the CPU device the planner assumes"
    )
    parser.add_argument("--inter-node-gbps", type=float, default=None, help="network bandwidth the planner assumes")
    parser.add_argument("--dtype", default=d.dtype, choices=DTYPES, help="training dtype (real compute)")
    parser.add_argument("--seed", type=int, default=d.seed, help="seed of weights and data")
    parser.add_argument("--lr", type=float, default=d.lr, help="AdamW learning rate")
    parser.add_argument("--timeout", type=float, default=d.timeout_s, help="process-group timeout, seconds")
    parser.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=d.heartbeat_timeout_s,
        help="seconds without a heartbeat before a worker counts as lost",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="intra-op threads per worker (default: cores / local workers)"
    )
    parser.add_argument(
        "--device",
        default=d.device,
        choices=DEVICES,
        help="auto: CUDA + NCCL when available (real compute), else CPU + gloo",
    )
    parser.add_argument(
        "--backend",
        default=d.backend,
        choices=BACKENDS,
        help="auto: NCCL on CUDA, gloo on CPU; gloo on CUDA lets several ranks share one GPU (one CUDA device per local rank otherwise)",
    )
    parser.add_argument("--save-params", default=None, help="directory where every rank saves its final layers")
    failures = parser.add_argument_group("failures, joins and checkpoints")
    design_cli.add_arguments(failures, d.policy)
    failures.add_argument(
        "--set",
        dest="design_settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the design (repeatable; `ooblab designs` lists them; fault_tolerance and "
        "join_horizon_s are also --f and --join-horizon-s)",
    )
    failures.add_argument(
        "--inject",
        default=None,
        metavar="STEP:WORKER:KIND[:POINT],...",
        help="failures and joins: STEP (e.g. 3) or TIME (e.g. 2.5s after training starts), WORKER (node2 or node2/1), "
        "KIND crash|hang|join, POINT forward|backward|allreduce|optimizer|reconfigure|groups|teardown (step-based crashes and hangs)",
    )
    failures.add_argument(
        "--trace",
        default=None,
        help="replay a trace (file or generator spec): node names become workers; removes kill, adds start",
    )
    failures.add_argument(
        "--time-scale", type=float, default=d.time_scale, help="replay the trace this many times faster"
    )
    failures.add_argument(
        "--checkpoint-every",
        type=int,
        default=d.checkpoint_every,
        help="checkpoint every K steps, asynchronously (0: never)",
    )
    failures.add_argument(
        "--checkpoint-dir", default=None, help="where checkpoints go (default: the run directory's checkpoints/)"
    )
    failures.add_argument(
        "--memory-dir",
        default=None,
        help="where each node keeps in-memory copies (designs that take them, gemini), as DIR/NODE on that node "
        "(default: a fresh directory in /dev/shm)",
    )
    failures.add_argument(
        "--checkpoint-keep",
        type=int,
        default=d.checkpoint_keep,
        help="complete checkpoints kept on disk (the newest first)",
    )
    failures.add_argument(
        "--checkpoint-timeout",
        type=float,
        default=d.checkpoint_timeout_s,
        help="seconds a checkpoint may take to be durable before it counts as failed",
    )
    failures.add_argument(
        "--checkpoint-fault",
        default=None,
        metavar="STEP:full|hang|crash[:NODE],...",
        help="tests: faults the checkpoint writer injects into its own I/O",
    )
    failures.add_argument(
        "--storage-gb-per-s",
        type=float,
        default=None,
        help="checkpoint write bandwidth per node, GB/s, for the checkpoint accounting (default: the GPU type's)",
    )
    failures.add_argument(
        "--restart-load-gb-per-s",
        type=float,
        default=None,
        help="checkpoint read bandwidth per node, GB/s, for the accounting (default: the GPU type's)",
    )
    failures.add_argument(
        "--storage-cap-gb-per-s",
        type=float,
        default=None,
        help="aggregate bandwidth of the checkpoint storage, GB/s, for the accounting (default: no cap)",
    )
    failures.add_argument(
        "--heartbeat-interval", type=float, default=d.heartbeat_interval_s, help="seconds between a worker's heartbeats"
    )
    failures.add_argument(
        "--wait-for-nodes",
        type=float,
        default=d.wait_for_nodes_s,
        help="seconds to wait for nodes when too few are left, then fail",
    )
    failures.add_argument(
        "--join-horizon-s",
        "--join-horizon",
        dest="join_horizon",
        type=float,
        default=d.join_horizon_s,
        help="Oobleck takes joining nodes in when the larger plan pays off within this many seconds",
    )
    failures.add_argument(
        "--no-respawn",
        action="store_true",
        help="never start replacement worker processes (a worker that cannot tear down costs its node)",
    )
    failures.add_argument(
        "--no-sever",
        action="store_true",
        help="gloo: let a failure reach the survivors one teardown at a time instead of severing every "
        "survivor's connections at once on the coordinator's word (to measure the difference)",
    )
    add_tiny_arguments(parser)


def _design_fields(args) -> dict:
    """RunConfig fields from --design and --set: the design's options that have a field here
    (fault_tolerance, join_horizon_s) go there, the others into design_options."""
    from dataclasses import fields

    from designs.options import DesignError

    try:
        design_cli.load_modules(args)
        settings = design_cli.parse_settings(getattr(args, "design_settings", []))
        names = {f.name for f in fields(RunConfig)} & {"fault_tolerance", "join_horizon_s"}
        into_fields, options = design_cli.split_settings(args.policy, settings, names)
    except DesignError as exc:
        raise ConfigError(str(exc)) from None
    return {"policy": args.policy, "design_options": options, **into_fields}


def config_from_args(args) -> RunConfig:
    pipelines = None
    if args.pipelines:
        try:
            pipelines = tuple(int(x) for x in args.pipelines.split(","))
        except ValueError:
            raise ConfigError(f"--pipelines must be comma-separated node counts, got {args.pipelines!r}") from None
    return RunConfig(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        model=args.model,
        tiny=TinyGptSpec(args.vocab, args.seq_len, args.hidden, args.heads, args.blocks),
        compute=args.compute,
        steps=args.steps,
        global_batch=args.global_batch,
        microbatch_size=args.microbatch,
        pipelines=pipelines,
        profile_dir=args.profile,
        gpu=args.gpu,
        gpu_memory_gb=args.gpu_memory_gb,
        inter_node_gbps=args.inter_node_gbps,
        dtype=args.dtype,
        seed=args.seed,
        lr=args.lr,
        timeout_s=args.timeout,
        heartbeat_interval_s=args.heartbeat_interval,
        heartbeat_timeout_s=args.heartbeat_timeout,
        threads_per_worker=args.threads,
        device=args.device,
        backend=args.backend,
        save_params_dir=args.save_params,
        inject=args.inject,
        trace=args.trace,
        time_scale=args.time_scale,
        checkpoint_every=args.checkpoint_every,
        checkpoint_dir=args.checkpoint_dir,
        memory_dir=args.memory_dir,
        checkpoint_keep=args.checkpoint_keep,
        checkpoint_timeout_s=args.checkpoint_timeout,
        checkpoint_fault=args.checkpoint_fault,
        wait_for_nodes_s=args.wait_for_nodes,
        **{
            "join_horizon_s": args.join_horizon,
            "fault_tolerance": args.f,
            **_design_fields(args),
        },
        respawn=not args.no_respawn,
        sever_on_failure=not args.no_sever,
        storage_gb_per_s=args.storage_gb_per_s,
        restart_load_gb_per_s=args.restart_load_gb_per_s,
        storage_cap_gb_per_s=args.storage_cap_gb_per_s,
    )


def _error(command: str, exc: Exception) -> int:
    print(f"ooblab {command}: error: {exc}", file=sys.stderr)
    return 2


def user_errors() -> tuple[type[Exception], ...]:
    """Exceptions that mean the request cannot work (exit 2); every other is a bug."""
    from designs.options import DesignError
    from planner.errors import PlannerError
    from traces.errors import TraceError

    from ..control.trace_replay import TraceScheduleError
    from ..protocol.errors import ConnectError, ListenError, SecretError
    from ..protocol.failures import InjectionError

    return (
        ConfigError,
        DesignError,
        PlannerError,
        TraceError,
        TraceScheduleError,
        InjectionError,
        ListenError,
        ConnectError,
        SecretError,
    )


def _internal_error(command: str, run_dir: Path | None) -> int:
    """One line naming the bug; the traceback goes to RUN_DIR/error.log (else stderr)."""
    text = traceback.format_exc()
    kind, _, message = text.strip().splitlines()[-1].partition(": ")
    where = "below"
    if run_dir is not None:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            with open(run_dir / "error.log", "a") as log:
                log.write(text)
            where = f"in {run_dir / 'error.log'}"
        except OSError:
            pass
    print(
        f"ooblab {command}: internal error: {kind}{': ' + message[:200] if message else ''} (traceback {where})",
        file=sys.stderr,
        flush=True,
    )
    if where == "below":
        print(text, file=sys.stderr, end="")
    return 1


def _exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit so launchers reap their workers on the way out."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _report(summary: dict, directory, as_json: bool) -> None:
    if as_json:
        print(json.dumps({**summary, "run_dir": str(directory)}, indent=2))
        return
    plan = summary.get("plan") or {}
    pipes = ", ".join(f"{p['num_nodes']} nodes x {p['microbatches']} mb" for p in plan.get("pipelines", []))
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
    print(f"results in {directory}")


def _log_event(event) -> None:
    """One stderr line per coordinator event (progress for people and for tests)."""
    detail = {k: v for k, v in event.detail.items() if k != "plan"}
    print(f"[{event.time_s:8.2f} s] {event.kind} {json.dumps(detail, default=str)}", file=sys.stderr, flush=True)


def handle_run(args) -> int:
    run_dir = None
    try:
        config = config_from_args(args)
        from .local import default_run_dir, run_local

        run_dir = Path(args.out) if args.out else default_run_dir()
        _exit_on_sigterm()
        result = run_local(config, run_dir, on_event=_log_event)
    except KeyboardInterrupt:
        print(f"ooblab run: interrupted; the run so far is in {run_dir}", file=sys.stderr)
        return 130
    except user_errors() as exc:
        return _error("run", exc)
    except Exception:  # noqa: BLE001 - anything else is a bug: say so, keep the traceback
        return _internal_error("run", run_dir)
    _report(result.summary.to_dict(), result.directory, args.json)
    return 0 if result.ok else 1


def handle_coordinator(args) -> int:
    run_dir = None
    try:
        config = config_from_args(args)
        from .local import default_run_dir

        run_dir = Path(args.out) if args.out else default_run_dir()
        return _coordinate(args, config, run_dir)
    except KeyboardInterrupt:
        print(f"ooblab coordinator: interrupted; the run so far is in {run_dir}", file=sys.stderr)
        return 130
    except user_errors() as exc:
        return _error("coordinator", exc)
    except Exception:  # noqa: BLE001 - anything else is a bug: say so, keep the traceback
        return _internal_error("coordinator", run_dir)


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
        return _error("node", exc)
    except Exception:  # noqa: BLE001 - anything else is a bug: say so, keep the traceback
        return _internal_error("node", None)


def handle_worker(args) -> int:
    try:
        gpu = args.gpu if args.gpu is not None else int(os.environ.get("LOCAL_RANK", "0"))
        if gpu < 0:
            raise ConfigError(f"--gpu must be >= 0, got {gpu}")
        secret = _client_secret(args)
        from ..worker.main import exit_now, run_worker
    except ValueError as exc:  # LOCAL_RANK not a number, or a user error above
        return _error("worker", exc)
    exit_now(
        run_worker(
            args.coordinator, args.name, gpu, secret, connect_timeout_s=args.connect_timeout, threads=args.threads
        )
    )


def handle_profile(args) -> int:
    try:
        if args.model != TINY_GPT:
            raise ConfigError(f"ooblab profile measures the built-in {TINY_GPT!r}; got {args.model!r}")
        spec = TinyGptSpec(args.vocab, args.seq_len, args.hidden, args.heads, args.blocks)
        from .profiler import ProfilerSettings, profile_tiny_gpt

        settings = ProfilerSettings(
            microbatch_size=args.microbatch,
            dtype=args.dtype,
            device=args.device,
            repeats=args.repeats,
            warmup=args.warmup,
            max_participants=args.max_participants,
            threads=args.threads,
        )
        neighbours = _neighbour_counts(args.busy_neighbours, args.reference_neighbours)
    except (ConfigError, ValueError) as exc:  # the model's shape and the profiler's settings: the user's
        return _error("profile", exc)
    try:  # past here any error, a ValueError included, is the profiler's or the format writer's own
        if neighbours is None:
            profile = profile_tiny_gpt(spec, settings)
        else:
            from .contention import HOP_SETTINGS, profile_with_contention

            hops = None if args.skip_comm else HOP_SETTINGS  # --skip-comm: no communication measured at all
            profile = profile_with_contention(spec, settings, neighbours, args.reference_neighbours, hops=hops)
        from planner.contention import write_contention
        from planner.oobleck_format import write_oobleck_profile

        directory = write_oobleck_profile(profile, args.out)
        if profile.contention is not None:
            write_contention(profile.contention, directory)
    except Exception:
        return _internal_error("profile", None)
    factors = {str(k): v for k, v in profile.contention.compute_factor} if profile.contention else None
    comm = None
    if not args.skip_comm:
        from .comm_fit import FitError
        from .profiler import measure_and_write_communication

        try:
            comm = measure_and_write_communication(directory, settings)
        except FitError as exc:  # the machine was too noisy for the fit: a measurement outcome, not a bug
            print(
                f"ooblab profile: failed: communication measurement: {exc} (the layers are written; --skip-comm skips it)",
                file=sys.stderr,
            )
            return 1
        except Exception:
            return _internal_error("profile", None)
    if args.json:
        printed: dict[str, Any] = {"directory": str(directory), "layers": [_layer_json(l) for l in profile.layers]}
        if factors is not None:
            printed["compute_factor"] = factors
        if comm is not None:
            printed["communication"] = {**comm.to_dict(), "fit": comm.details()}
        print(json.dumps(printed, indent=2))
    else:
        total_ms = sum(l.forward_s + l.backward_s for l in profile.layers) * 1e3
        print(
            f"profiled {profile.num_layers} layers of {TINY_GPT} (forward + backward {total_ms:.2f} ms per microbatch) into {directory}"
        )
        if profile.contention is not None:
            print(profile.contention.summary())
        if comm is not None:
            print(comm.summary())
    return 0


def _neighbour_counts(text: str | None, reference: int) -> list[int] | None:
    """--busy-neighbours "0,1,2,3" as counts (None: not asked); the reference must be >= 0."""
    if reference < 0:
        raise ConfigError(f"--reference-neighbours must be >= 0, got {reference}")
    if text is None:
        if reference:
            raise ConfigError("--reference-neighbours applies with --busy-neighbours")
        return None
    parts = [part.strip() for part in text.split(",")]
    if not parts or not all(part.isdigit() for part in parts):
        raise ConfigError(f"--busy-neighbours must be whole numbers >= 0 separated by commas, got {text!r}")
    return sorted({int(part) for part in parts})


def _layer_json(layer) -> dict:
    return {
        "name": layer.name,
        "forward_s": layer.forward_s,
        "backward_s": layer.backward_s,
        "param_bytes": layer.param_bytes,
        "optimizer_bytes": layer.optimizer_bytes,
        "activation_bytes": layer.activation_bytes,
        "output_bytes": layer.output_bytes,
        "allreduce_across_nodes_s": {str(k): v for k, v in layer.allreduce_across_nodes_s},
    }
