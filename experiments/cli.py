"""`ooblab reproduce`: regenerate the paper's figures (and the testbed's own).

    ooblab reproduce --list
    ooblab reproduce NAME [--quick] [--out DIR] [--processes N] [--force] [--no-progress]
    ooblab reproduce all [--quick]
    ooblab reproduce NAME --backend ray [--address ADDR] [--chunk-size N]

Results and figures go to `results/NAME/` (`results/NAME/quick/` with `--quick`; set
`OOBLAB_RESULTS` to move the tree); finished runs are skipped, so a second call only
redraws. Reference traces are read from ../shared (`OOBLAB_SHARED`); without them the
spot-trace experiments use labelled generated look-alikes.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "reproduce",
        help="run an experiment and write its figures (the paper's and beyond)",
        description="Run one experiment end to end: its runs (finished ones skipped), results/NAME/results.parquet, and its figures as PNG and PDF.",
    )
    parser.add_argument("name", nargs="?", help="experiment name, or 'all' (see --list)")
    parser.add_argument("--list", action="store_true", help="name every experiment with a one-line description")
    parser.add_argument("--quick", action="store_true", help="the small setting: seconds, into results/NAME/quick/")
    parser.add_argument("--out", default=None, help="results directory (default results/NAME, or results/NAME/quick)")
    parser.add_argument(
        "--processes", type=int, default=None, help="worker processes (default: one per CPU; 1 for timing experiments)"
    )
    parser.add_argument("--force", action="store_true", help="rerun finished runs too")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="local: a process pool here; ray: chunks of runs as Ray tasks (pip install -e '.[ray]')",
    )
    parser.add_argument(
        "--address", default=None, help="with --backend ray: the cluster to join (default: start a local instance)"
    )
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=None,
        help="with --backend ray: runs per task (default: about 4 chunks per CPU, at most 200 runs each)",
    )
    parser.add_argument(
        "--costs",
        default=None,
        help="a cost profile (`ooblab costs`) for every planner-calibration run that names none; "
        "results go to results/NAME[/quick]/costs-PROFILE unless --out says otherwise",
    )
    parser.set_defaults(handler=run)


def run(args) -> int:
    from .registry import UnknownExperiment, all_experiments

    experiments = all_experiments()
    if args.list:
        width = max(len(name) for name in experiments)
        for name, experiment in experiments.items():
            plural = "s" if len(experiment.paper_figures) > 1 else ""
            figures = (
                f"  [paper Figure{plural} {', '.join(experiment.paper_figures)}]"
                if experiment.paper_figures
                else f"  [{experiment.family}]"
            )
            print(f"{name:<{width}}  {experiment.description}{figures}")
        return 0
    if not args.name:
        print("ooblab reproduce: error: name an experiment (or all); --list shows them", file=sys.stderr)
        return 2
    if args.processes is not None and args.processes < 1:
        print(f"ooblab reproduce: error: --processes must be >= 1, got {args.processes}", file=sys.stderr)
        return 2
    problem = _backend_problem(args) or _costs_problem(args.costs)
    if problem:
        print(f"ooblab reproduce: error: {problem}", file=sys.stderr)
        return 2
    names = list(experiments) if args.name == "all" else [args.name]
    if args.name == "all" and args.out:
        print(
            "ooblab reproduce: error: --out names one experiment's directory; it cannot be used with all",
            file=sys.stderr,
        )
        return 2
    if args.out:
        from planner.output_dirs import OutputError, check_output_dir

        out = Path(args.out)
        try:
            check_output_dir(out, "--out")
        except OutputError as exc:
            print(f"ooblab reproduce: error: {exc}", file=sys.stderr)
            return 2
    from .sweep_ray import SweepBackendError

    with contextlib.ExitStack() as stack:
        try:
            if args.backend == "ray":  # one Ray session for every experiment named
                from .sweep_ray import ray_session

                stack.enter_context(ray_session(args.address, args.processes))
            for name in names:
                _reproduce_one(name, args)
        except (UnknownExperiment, SweepBackendError) as exc:
            print(f"ooblab reproduce: error: {exc}", file=sys.stderr)
            return 2
    return 0


def _reproduce_one(name: str, args) -> None:
    from .reproduce import reproduce

    done = reproduce(
        name,
        quick=args.quick,
        out_dir=args.out,
        processes=args.processes,
        progress=not args.no_progress,
        force=args.force,
        backend=args.backend,
        address=args.address,
        chunk_size=args.chunk_size,
        costs=args.costs,
    )
    pngs = [p for p in done.figures if p.suffix == ".png"]
    print(f"{name}: {len(done.table)} runs, {len(pngs)} figures in {done.seconds:.1f} s -> {done.out_dir}")
    for path in pngs:
        print(f"  {path} (+ .pdf)")
    for line in done.errors[:5]:
        print(f"  rejected: {line}")
    if len(done.errors) > 5:
        print(f"  ... {len(done.errors) - 5} more rejected runs (outcome 'error' in results.parquet)")


def _costs_problem(costs: str | None) -> str | None:
    """What is wrong with `--costs` (None: nothing): the profile is read before any run."""
    if costs is None:
        return None
    from sim.cost_profiles import CostProfileError, get

    try:
        get(costs)
    except CostProfileError as exc:
        return str(exc)
    return None


def _backend_problem(args) -> str | None:
    """What is wrong with the backend options (None: nothing), before any run starts."""
    if args.backend != "ray" and (args.address is not None or args.chunk_size is not None):
        return "--address and --chunk-size apply to --backend ray only"
    if args.chunk_size is not None and args.chunk_size < 1:
        return f"--chunk-size must be >= 1, got {args.chunk_size}"
    if args.backend == "ray":
        from .sweep_ray import SweepBackendError, import_ray

        try:
            import_ray()
        except SweepBackendError as exc:
            return str(exc)
    return None
