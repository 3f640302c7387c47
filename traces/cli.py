"""``ooblab traces``: inspect, convert, generate, plot and fit traces.

Every SOURCE is a trace file of any supported format or a generator spec (see
`traces.spec`); ``--format`` and ``--repair`` apply to files. Errors print one line to
stderr (file:line: problem) and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from planner.input_files import exists

from .errors import TraceError
from .load import FORMATS

EXIT_BAD_INPUT = 2


def _source_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SOURCE", help="trace file, or generator spec such as spot:nodes=30,hours=24")
    parser.add_argument(
        "--format", dest="fmt", metavar="F", help=f"file format instead of auto-detection: {', '.join(FORMATS)}"
    )
    parser.add_argument(
        "--repair",
        action="store_true",
        help="sort rows that are out of time order and drop exact duplicates (reported)",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="seed for count-series victims and generators without seed= (default 0)"
    )


def _seeded(seed: int | None, default: int | None = None) -> np.random.Generator | None:
    """The generator of `--seed` (or of `default` without one), refusing a negative seed."""
    seed = default if seed is None else seed
    if seed is None:
        return None
    if seed < 0:
        raise TraceError(f"--seed must be a whole number >= 0, got {seed}")
    return np.random.default_rng(seed)


def _read(args: argparse.Namespace):
    """(trace, load report or None), printing the report's notes to stderr."""
    from .load import load_with_report
    from .spec import from_spec

    rng = _seeded(args.seed)
    if exists(args.source):
        trace, report = load_with_report(args.source, args.fmt, repair=args.repair, rng=rng)
        for line in report.describe()[1:]:
            print(line, file=sys.stderr)
        return trace, report
    return from_spec(args.source, rng=rng, fmt=args.fmt, repair=args.repair), None


# what `traces plot -o` can write (matplotlib's common formats)
PLOT_SUFFIXES = (".png", ".pdf", ".svg", ".eps", ".ps", ".jpg", ".jpeg", ".tif", ".tiff", ".webp")


def check_output(path: str, suffixes: tuple[str, ...] | None = None) -> None:
    """Refuse, before any work, an output file that cannot be written: a directory, a
    missing or unwritable parent directory, or (for figures) an unknown format."""
    from planner.output_dirs import OutputError, check_output_file

    try:
        check_output_file(path, "-o")
    except OutputError as exc:
        raise TraceError(str(exc)) from None
    out = Path(path)
    if suffixes is not None and out.suffix.lower() not in suffixes:
        raise TraceError(
            f"-o {path}: unknown figure format {out.suffix or '(none)'!r}; use one of {', '.join(suffixes)}"
        )


def _guard(handler):
    def run(args: argparse.Namespace) -> int:
        try:
            if getattr(args, "output", None) and args.output != "-":  # "-": standard output
                check_output(args.output, PLOT_SUFFIXES if args.traces_command == "plot" else None)
            return handler(args)
        except TraceError as exc:
            print(f"ooblab traces {args.traces_command}: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except OSError as exc:  # written after the checks, yet refused (a full disk, a race)
            where = getattr(args, "output", None) or exc.filename or "standard output"
            print(f"ooblab traces {args.traces_command}: error: {where}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_BAD_INPUT

    return run


def _info(args: argparse.Namespace) -> int:
    from .spec import info_rows

    trace, report = _read(args)
    s = trace.stats()
    extra = [] if report else info_rows(args.source)
    if args.json:
        out = s.as_dict()
        out["source"] = args.source
        out["format"] = report.fmt if report else "generator"
        out["notes"] = list(report.notes) if report else []
        for label, _, value in extra:
            out[label.replace("/day", "_per_day")] = value
        print(json.dumps(out, indent=2))
        return 0
    life = (
        "n/a (no node was removed)"
        if s.median_lifetime_s != s.median_lifetime_s
        else (f"{s.median_lifetime_s / 3600:.2f} h ({s.median_lifetime_s:g} s)")
    )
    rate = "undefined (zero duration)" if s.removals_per_hour != s.removals_per_hour else f"{s.removals_per_hour:.2f}"
    fmt = f"{report.fmt} ({'detected' if report.detected else 'given'})" if report else "generator spec"
    rows = [
        ("trace", f"{s.name}  [{fmt}]"),
        ("duration", f"{s.duration_s / 3600:.2f} h ({s.duration_s:g} s, from {s.start_s:g} s to {s.end_s:g} s)"),
        ("events", f"{s.num_events}: {s.num_adds} adds, {s.num_removes} removes, {s.num_nodes} distinct nodes"),
        (
            "live nodes",
            f"min {s.min_nodes} / mean {s.mean_nodes:.2f} (time-weighted) / max {s.max_nodes}; "
            f"initial {s.initial_nodes}, final {s.final_nodes}",
        ),
        ("removals/hour", rate),
        ("bursts", f"{s.num_bursts} (removals sharing a timestamp), largest {s.largest_burst}"),
        (
            "bursts/day",
            "undefined (zero duration)"
            if s.bursts_per_day != s.bursts_per_day
            else f"{s.bursts_per_day:.2f} (interruptions per day in a failure trace)",
        ),
        ("lifetime", f"median {life}, completed lifetimes only"),
        *((label, text) for label, text, _ in extra),
    ]
    for key, text in rows:
        print(f"{key:<14}{text}")
    return 0


def _write(trace, out: str) -> None:
    from .events_csv import save_events_csv, write_events_csv

    if out == "-":
        write_events_csv(trace, sys.stdout)
    else:
        save_events_csv(trace, Path(out))
        print(f"wrote {out}: {len(trace)} events, {trace.stats().max_nodes} nodes at most", file=sys.stderr)


def _convert(args: argparse.Namespace) -> int:
    from .generators import parse_duration_s
    from .transform import cap, compress, rescale, window

    trace, _ = _read(args)
    if args.window:
        trace = window(trace, parse_duration_s(args.window[0]), parse_duration_s(args.window[1]))
    if args.rescale:
        rng = _seeded(args.seed, 0)
        trace = rescale(trace, args.rescale[0], args.rescale[1], rng=rng)
    if args.cap is not None:
        trace = cap(trace, args.cap)
    if args.compress is not None:
        trace = compress(trace, args.compress)
    if not len(trace):
        raise TraceError(
            "the transformations leave no event (a cap of 0, or a window past the trace): nothing to write"
        )
    _write(trace, args.output)
    return 0


def _generate(args: argparse.Namespace) -> int:
    from .spec import generate

    trace = generate(args.spec, rng=_seeded(args.seed))
    _write(trace, args.output)
    return 0


def _plot(args: argparse.Namespace) -> int:
    from .plot import plot_live_nodes

    trace, _ = _read(args)
    path = plot_live_nodes(trace, args.output, title=args.title)
    print(f"wrote {path}", file=sys.stderr)
    return 0


def _fit(args: argparse.Namespace) -> int:
    from .spot_fit import report

    folder = Path(args.shared) if args.shared else Path(os.environ.get("OOBLAB_SHARED", "../shared")) / "traces"
    if not folder.is_dir():
        raise TraceError("folder of real traces not found (pass --shared DIR)", source=str(folder))
    print(report(folder))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``traces`` and its sub-commands to the ``ooblab`` parser."""
    parser = subparsers.add_parser(
        "traces", help="inspect, convert, generate and plot node traces", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="traces_command", metavar="ACTION")
    sub.required = True

    info = sub.add_parser("info", help="summary statistics of a trace")
    _source_args(info)
    info.add_argument("--json", action="store_true", help="one JSON object instead of text")
    info.set_defaults(handler=_guard(_info))

    convert = sub.add_parser(
        "convert",
        help="write a trace as the canonical time_ms,event,node CSV",
        description="Transformations apply in this order: window, rescale, cap, compress.",
    )
    _source_args(convert)
    convert.add_argument("-o", "--output", required=True, metavar="OUT", help="output CSV ('-' for stdout)")
    convert.add_argument(
        "--window", nargs=2, metavar=("START", "END"), help="keep START..END (durations such as 2h 8h), rebased to 0"
    )
    convert.add_argument(
        "--rescale", nargs=2, type=int, metavar=("LO", "HI"), help="map the live count min-max onto LO..HI"
    )
    convert.add_argument("--cap", type=int, metavar="N", help="at most N live nodes (late arrivals wait)")
    convert.add_argument("--compress", type=float, metavar="FACTOR", help="divide all times by FACTOR")
    convert.set_defaults(handler=_guard(_convert))

    gen = sub.add_parser(
        "generate",
        help="generate a trace from a spec",
        description="SPEC: fixed:interval=1h[,nodes=30,removals=15,hour_decimals=N,seed=S,start=0s], "
        "spot[:nodes=N,hours=H,profile=p3|g4dn|gcp-a100,seed=S] "
        "or datacenter[:gpus=16384,days=54,profile=llama3|llama3-hardware,seed=S,spares=K,...]",
    )
    gen.add_argument("spec", metavar="SPEC")
    gen.add_argument("-o", "--output", default="-", metavar="OUT", help="output CSV (default stdout)")
    gen.add_argument("--seed", type=int, default=None, help="seed when the spec has no seed= (default 0)")
    gen.set_defaults(handler=_guard(_generate))

    plot = sub.add_parser("plot", help="plot live nodes over time")
    _source_args(plot)
    plot.add_argument("-o", "--output", required=True, metavar="PNG", help="image file (.png, .svg, .pdf)")
    plot.add_argument("--title", help="figure title")
    plot.set_defaults(handler=_guard(_plot))

    fit = sub.add_parser("fit", help="refit the spot generator to the real traces and compare")
    fit.add_argument(
        "--shared", metavar="DIR", help="folder of real traces (default $OOBLAB_SHARED/traces or ../shared/traces)"
    )
    fit.set_defaults(handler=_guard(_fit))
