"""`ooblab validate`: the simulator against the real backend on one trace.

    ooblab validate [--trace FILE|SPEC] [--window START:END] [--model NAME] [--nodes N]
                    [--compute emulated|real] [--quick] [--json] [--out DIR]

Profiles the model, measures the backend's fixed overheads once (two short calibration
jobs, no trace; with real compute, a profile the two jobs together ran more than 20% off
is measured again, up to twice, and the one nearest them kept), runs the trace
time-compressed on the real backend for each policy (Oobleck, and Varuna as the
baseline), simulates the same, and reports per run and per
phase the throughput error in steady state, the error in committed samples at the end
and the error in each recovery's duration; the headline figures are median absolute
relative errors. `--quick`: 4 emulated nodes, two removals, about 40 s of trace per policy
(a few minutes in all).
"""

from __future__ import annotations

import argparse
import json
import sys

QUICK = dict(trace="fixed:interval=1h,nodes=4,removals=2", nodes=4, global_batch=8, target_duration_s=40.0, tail_s=8.0)


def register(subparsers) -> None:
    from .spec import DESIGNS, POLICIES, ValidationSpec

    d = ValidationSpec()
    p = subparsers.add_parser(
        "validate",
        help="measure the simulator against the real backend on a trace",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--trace", default=None, help=f"a trace file or generator spec (default {d.trace}; --quick: {QUICK['trace']})"
    )
    p.add_argument(
        "--window",
        default=None,
        metavar="START:END",
        help="replay only this slice of the trace (durations, e.g. 10h:12h)",
    )
    p.add_argument(
        "--model",
        default=d.model,
        help="synthetic (a built-in emulated profile), a planner model name or profile directory (emulated), or tiny-gpt or a Hugging Face model hf:FAMILY:PRESET|DIR (profiled here; the ones for --compute real)",
    )
    p.add_argument(
        "--nodes",
        type=int,
        default=None,
        help=f"peak node count; the trace is rescaled onto it when its peak differs (default {d.nodes}; --quick: {QUICK['nodes']})",
    )
    p.add_argument("--compute", default=d.compute, choices=("emulated", "real"))
    p.add_argument("--f", dest="fault_tolerance", type=int, default=d.fault_tolerance, help="Oobleck's f")
    p.add_argument(
        "--global-batch",
        type=int,
        default=None,
        help=f"samples per iteration (default {d.global_batch}; --quick: {QUICK['global_batch']})",
    )
    p.add_argument(
        "--policies",
        default=",".join(POLICIES),
        help=f"comma-separated, among {', '.join(DESIGNS)} (default: %(default)s)",
    )
    p.add_argument(
        "--duration-s",
        type=float,
        default=None,
        help=f"the compressed trace's length in seconds (sets the time scale; default {d.target_duration_s:g})",
    )
    p.add_argument(
        "--time-scale", type=float, default=None, help="compress the trace by this factor instead of --duration-s"
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=d.checkpoint_every,
        help="checkpoint interval in steps, both policies and both sides",
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=d.heartbeat_timeout_s,
        help="seconds of missed heartbeats before the real backend declares a worker hung; raise it where "
        "starting many processes on few cores stalls some for longer (32 emulated nodes on 2 cores: over 10 s)",
    )
    p.add_argument(
        "--communication",
        default=None,
        help="a measured communication.json (or a profile directory with one) for the synthetic/tiny-gpt profile; "
        "default: measured here once per output directory",
    )
    p.add_argument(
        "--loaded-sends",
        action="store_true",
        help="also calibrate pipeline sends that slow with the job's own send rate (emulated, 8+ nodes: two more "
        "short jobs) and simulate with them; experimental (docs/validation.md)",
    )
    p.add_argument(
        "--quick", action="store_true", help="the small setting (4 emulated nodes, two removals, about 40 s of trace)"
    )
    p.add_argument(
        "--out", default=None, help="output directory (default results/validate/<trace>-<model>-<compute>-<nodes>)"
    )
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.set_defaults(handler=run)


def spec_from_args(args):
    from .spec import ValidationSpec

    if args.duration_s is not None and args.time_scale is not None:
        from .spec import ValidationError

        raise ValidationError("--duration-s and --time-scale both set how fast the trace is replayed: give one")
    values = dict(QUICK) if args.quick else {}
    for key, arg in (
        ("trace", args.trace),
        ("nodes", args.nodes),
        ("global_batch", args.global_batch),
        ("target_duration_s", args.duration_s),
    ):
        if arg is not None:
            values[key] = arg
    return ValidationSpec(
        model=args.model,
        window=args.window,
        compute=args.compute,
        fault_tolerance=args.fault_tolerance,
        policies=tuple(p.strip() for p in args.policies.split(",") if p.strip()),
        time_scale=args.time_scale,
        checkpoint_every=args.checkpoint_every,
        seed=args.seed,
        heartbeat_timeout_s=args.heartbeat_timeout,
        communication=args.communication,
        loaded_sends=args.loaded_sends,
        **values,
    )


def default_out(spec) -> str:
    import re
    from pathlib import Path

    slug = re.sub(
        r"[^A-Za-z0-9._=-]+",
        "_",
        f"{Path(spec.trace).stem if Path(spec.trace).suffix else spec.trace}-{Path(spec.model).name}-{spec.compute}-{spec.nodes}",
    )
    return str(Path("results") / "validate" / slug[:100])


def run(args) -> int:
    from .spec import ValidationError

    try:
        spec = spec_from_args(args)
    except (ValidationError, ValueError) as exc:
        print(f"ooblab validate: error: {exc}", file=sys.stderr)
        return 2
    out = args.out or default_out(spec)
    from planner.output_dirs import OutputError, check_output_dir

    try:
        check_output_dir(out, "--out")  # before the calibration's minutes
    except OutputError as exc:
        print(f"ooblab validate: error: {exc}", file=sys.stderr)
        return 2
    from .report import validate

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    try:
        report = validate(spec, out, progress=log)
    except ValidationError as exc:
        print(f"ooblab validate: error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"ooblab validate: failed: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        e = report["errors"]
        fmt = lambda v: "n/a" if v is None else f"{100 * v:.1f}%"  # noqa: E731
        print(f"validation in {report['wall_s']:.0f} s -> {out}")
        print(
            f"  steady-state throughput error (median |rel|): {fmt(e['throughput_error'])} over {e['phases_compared']} phases"
        )
        print(
            f"  committed samples error (median |rel|):       {fmt(e['samples_error'])} over {e['runs_compared']} runs"
        )
        print(
            f"  recovery duration error (median |rel|):       {fmt(e['recovery_error'])} over {e['recoveries_compared']} recoveries"
        )
        if e.get("joins_compared"):
            print(
                f"  join pause error (median |rel|):              {fmt(e['join_error'])} over {e['joins_compared']} joins"
            )
    return 0
