"""The real backend's command-line arguments: the job's (`run`, `coordinator`), a client's
(`node`, `worker`: where the coordinator is and the secret), tiny-gpt's sizes, and the
`RunConfig` they make (`config_from_args`). `real.launch.cli` registers the commands.
"""

from __future__ import annotations

import argparse

from designs import cli as design_cli

from ..config import (
    BACKENDS,
    COMPUTE_MODES,
    DEVICES,
    DTYPES,
    TINY_GPT,
    TOKEN_DTYPE_NAMES,
    ConfigError,
    RunConfig,
    TinyGptSpec,
)

_DEFAULTS = RunConfig()
_TINY = TinyGptSpec()


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
        help=f"{TINY_GPT}, a Hugging Face model (hf:gpt2|llama|mistral|qwen2:tiny|small|base|DIR, needs the [hf] extra), or for "
        "--compute emulated a built-in analytic model or a profile directory",
    )
    parser.add_argument(
        "--data",
        default=None,
        help="a flat binary of token ids to train on (nanoGPT's and Megatron's layout); default: synthetic sequences",
    )
    parser.add_argument(
        "--data-dtype", default=d.data_dtype, choices=TOKEN_DTYPE_NAMES, help="the token ids' type in --data"
    )
    parser.add_argument(
        "--text",
        default=None,
        help="a UTF-8 text file to train on, tokenised with --tokenizer before the workers start (instead of --data)",
    )
    parser.add_argument(
        "--tokenizer", default=None, metavar="DIR", help="a tokenizer saved in a local directory (save_pretrained)"
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
        help="measured profile directory of the model (`ooblab profile [--model hf:...]`); default: analytic estimate",
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
        "KIND crash|hang|stall|join, POINT forward|backward|allreduce|optimizer|reconfigure|groups|teardown (step-based crashes and hangs); "
        "link faults netdown|netup|slow[:KBIT] (and a step-based netdown:recovery) on namespace hosts (ooblab netns)",
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
        # `design.X=V` as `simulate --set` takes it: the option X of the design
        settings = {key.removeprefix("design."): value for key, value in settings.items()}
        names = {f.name for f in fields(RunConfig)} & {"fault_tolerance", "join_horizon_s"}
        into_fields, options = design_cli.split_settings(args.policy, settings, names)
    except DesignError as exc:
        raise ConfigError(str(exc)) from None
    return {"policy": args.policy, "design_options": options, **into_fields}


def config_from_args(args) -> RunConfig:
    if args.text is not None and args.data is not None:
        raise ConfigError("--data and --text are two ways to give the tokens: pass one")
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
        data=args.data,
        data_dtype=args.data_dtype,
        text=args.text,
        tokenizer=args.tokenizer,
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
