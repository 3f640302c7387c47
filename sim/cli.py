"""`ooblab simulate`: replay a trace against one policy and report where the time went.

    ooblab simulate [--design NAME] [--design-module FILE.py] [--model NAME]
                    [--trace FILE_OR_SPEC] [--calibration artifact|planner|artifact-as-run] [--seed N]
                    [--set KEY=VALUE ...] [--out DIR | --no-write] [--json]

Defaults: Oobleck, GPT-3-medium, the paper's 1-hour trace (`fixed:interval=1h`: 30 nodes,
one removed every hour, 15 times), artifact calibration. `--design` (or `--policy`) names
any registered design (`ooblab designs`). Every config key (flat, as `sim/config_keys.py`
lists them, or `group.field`) and every option of the design can be set with `--set` (or its
own flag where there is one); unknown keys are errors. The run's files go to `results/sim/<run id>/` unless `--no-write`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from designs import cli as design_cli
from designs import registry
from designs.options import DesignError

from . import cli_costs
from .config import CALIBRATIONS, FLAT_KEYS, SimConfig
from .errors import SimError

FLAGS = {  # flag: (type, help); unset flags take the calibration's default
    "global_batch": (int, "samples per iteration (planner; default: the artifact's batch for its models)"),
    "microbatch_size": (int, "samples per microbatch (planner; default 1)"),
    "fault_tolerance": (int, "Oobleck's f, failures to survive without restart (planner; default 1)"),
    "gpu": (str, "GPU type (planner; default v100-16gb)"),
    "gpus_per_node": (int, "GPUs per node (planner; default 1)"),
    "inter_node_gbps": (float, "network bandwidth per node, Gb/s (planner; default: the GPU type's, 10 for the V100)"),
    "bamboo_depth": (int, "Bamboo's pipeline depth (default 12)"),
    "checkpoint_every_iterations": (
        int,
        "periodic checkpoint interval in iterations (default: Varuna 10, unless checkpoint_every_s is given)",
    ),
    "checkpoint_every_s": (
        float,
        "periodic checkpoint interval in training seconds (planner; default: Oobleck and Bamboo 3600)",
    ),
    "checkpoint_adaptive": (
        str,
        "young or daly: the checkpoint interval from the checkpoints charged and the failures seen so far (planner; any design that checkpoints)",
    ),
    "duration_s": (
        float,
        "simulate this long from the trace's first event (default: until its last event; longer keeps the last membership)",
    ),
    "costs": (
        str,
        "a cost profile: a built-in's name (`ooblab costs` lists them) or a .json file; it fills the costs not set (planner)",
    ),
}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="replay a trace against a fault-tolerance design: Oobleck, Bamboo, Varuna, ... (simpy)",
        description="Replay a spot-instance trace against one fault-tolerance policy and report throughput, time breakdown and cost.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    d = SimConfig()
    design_cli.add_arguments(parser, d.design.name)
    parser.add_argument(
        "--model",
        default=d.job.model,
        help="artifact calibration: BERT-large, GPT-2-ours, GPT-3-medium, GPT-3-2_7b, GPT-3-6_7b; planner calibration: those, a built-in planner model, or a profile directory",
    )
    parser.add_argument(
        "--trace",
        default=d.job.trace,
        help="a trace file, or a generator spec (fixed:interval=1h, spot:nodes=30,hours=24, ...)",
    )
    parser.add_argument(
        "--calibration",
        default=d.run.calibration,
        choices=CALIBRATIONS,
        help="artifact: the published tables and constants; planner: the planner's cost model",
    )
    parser.add_argument("--seed", type=int, default=d.run.seed, help="seed for generated traces and count-log victims")
    for name, (kind, text) in FLAGS.items():
        parser.add_argument("--" + name.replace("_", "-"), dest=name, type=kind, default=argparse.SUPPRESS, help=text)
    parser.add_argument(
        "--no-rollback",
        dest="varuna_rollback",
        action="store_false",
        default=argparse.SUPPRESS,
        help="artifact Varuna: keep the work since the last checkpoint on a restart (the paper's spot figures, small models)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other config key (flat, or group.field: job.global_batch, costs.detect_s, design.depth), or an option of the design (repeatable; `ooblab designs` lists them)",
    )
    parser.add_argument(
        "--timeline",
        default=d.run.timeline,
        choices=("changes", "iterations"),
        help="timeline rows at state changes only, or also one per iteration",
    )
    parser.add_argument("--out", default=None, help="directory for the run's files (default results/sim/<run id>)")
    parser.add_argument("--no-write", action="store_true", help="do not write the run's files")
    parser.add_argument("--json", action="store_true", help="print one JSON object (the summary) instead of text")
    parser.set_defaults(handler=run)
    cli_costs.register(subparsers)


def config_from_args(args) -> SimConfig:
    data = {
        "policy": args.policy,
        "model": args.model,
        "trace": args.trace,
        "calibration": args.calibration,
        "seed": args.seed,
        "timeline": args.timeline,
    }
    for name in FLAGS:
        if hasattr(args, name):
            data[name] = getattr(args, name)
    if hasattr(args, "varuna_rollback"):
        data["varuna_rollback"] = args.varuna_rollback
    try:
        settings = design_cli.parse_settings(args.overrides)
    except DesignError as exc:
        raise SimError(str(exc)) from None
    if "policy" in settings or "design" in settings:
        data["policy"] = settings.pop("design", settings.pop("policy", None))
    dotted = {key: settings.pop(key) for key in list(settings) if "." in key}  # group.field: SimConfig reads them
    names = set(FLAT_KEYS)
    if data["policy"] in _registered():
        into_fields, options = design_cli.split_settings(data["policy"], settings, names)
    else:  # SimConfig names the unknown design
        into_fields, options = settings, {}
    unknown = sorted(key for key in options if key not in _option_names())
    if unknown:  # neither a config key nor any design's option
        mine = ", ".join(s.name for s in _registered()[data["policy"]].option_specs) or "none"
        raise SimError(
            f"unknown config key(s) {', '.join(unknown)}: not a SimConfig field nor an option of design "
            f"{data['policy']} (its options: {mine}); known config keys: {', '.join(sorted(names))}"
        )
    data.update(into_fields)
    data.update(dotted)
    if options:
        data["design_options"] = {**(data.get("design_options") or {}), **options}
    return SimConfig.from_mapping(data)


def _registered() -> dict:
    from designs import registry

    return {d.name: d for d in registry.all_designs()}


def _option_names() -> set[str]:
    from designs import registry

    return {n for d in registry.all_designs() for s in d.option_specs for n in (s.name, s.legacy) if n}


def check_output_dir(path: Path) -> None:
    """Refuse, before the run, a directory its files cannot be written into."""
    from planner.output_dirs import OutputError
    from planner.output_dirs import check_output_dir as check

    try:
        check(path, "--out")
    except OutputError as exc:
        raise SimError(str(exc)) from None
    if (path / "summary.json").exists():
        print(f"ooblab simulate: note: {path} holds an earlier run; its files are replaced", file=sys.stderr)


def run(args) -> int:
    from .run import simulate  # simpy and the planner load only when simulating

    try:
        design_cli.load_modules(args)
        config = config_from_args(args)
        if not args.no_write and args.out is not None:
            check_output_dir(Path(args.out))
        result = simulate(config)
    except ValueError as exc:  # SimError, TraceError, PlannerError: all name the problem
        print(f"ooblab simulate: error: {exc}", file=sys.stderr)
        return 2
    where = None
    if not args.no_write:
        where = result.write(args.out)
    if args.json:
        data = result.summary.to_dict()
        if where is not None:
            data["results_dir"] = str(where)
        print(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        print(render(result, where))
    return 0


def render(result, where) -> str:
    s = result.summary
    b = s.breakdown
    c = result.config
    lines = [
        f"{registry.shown(s.policy)} on {s.model} ({s.calibration} calibration), trace {s.trace}",
        f"  {c['trace_events']} trace events over {s.duration_s / 3600:.2f} h",
    ]
    if c.get("costs"):
        lines.append(f"  costs from profile {c['costs']} (`ooblab costs {c['costs']}` says where each comes from)")
    detection = s.extra.get("detection")
    if detection:
        said = ", ".join(
            f"{kind.replace('_', ' ')} {entry['s']:g} s ({entry['by']})" for kind, entry in detection.items()
        )
        lines.append(f"  a loss is declared after: {said}")
    for line in s.extra.get("extrapolated_terms") or ():
        lines.append(f"  note: {line}")
    last = c.get("trace_last_instant_events", 0)
    if last:
        lines.append(f"  its last instant ends the run: the {last} event(s) there are not processed")
    held = s.duration_s - c.get("trace_span_s", s.duration_s)
    if held > 1e-9:
        lines.append(f"  the trace's last membership held for the last {held / 3600:.2f} h (past its last event)")
    if s.extra.get("outcome") == "infeasible":
        lines.append(f"  cannot run: {s.extra.get('infeasible_reason')}")
    elif s.extra.get("outcome") != "ok":
        lines.append(f"  {s.extra.get('infeasible_reason')}")
    lines += [
        "",
        f"average throughput   {s.avg_samples_per_s:10.2f} samples/s",
        f"committed samples    {s.committed_samples:10d} ({s.num_iterations} iterations)",
        f"reconfigurations     {s.num_reconfigurations:10d}",
        f"restarts             {s.num_restarts:10d}",
        f"checkpoints          {s.num_checkpoints:10d}",
        f"failures survived    {s.failures_survived:10d} of {s.extra['working_nodes_removed']} working nodes lost",
        f"node-hours           {s.node_hours:10.2f}  (${s.cost_usd:.2f})",
        "",
        "where the time went",
    ]
    total = b.total_s() or 1.0
    for label, value in (
        ("useful compute", b.useful_compute_s),
        ("redundant compute", b.redundant_compute_s),
        ("reconfiguration", b.reconfiguration_s),
        ("restart", b.restart_s),
        ("checkpoint", b.checkpoint_s),
        ("lost work", b.lost_work_s),
        ("waiting for nodes", b.waiting_s),
    ):
        lines.append(f"  {label:<18} {value / 3600:9.2f} h  {100 * value / total:5.1f} %")
    lines.append(
        f"  {'effective training':<18} {100 * b.effective_training_time():9.1f} %  (useful compute / wall-clock)"
    )
    lines.append(f"  {'idle GPUs':<18} {s.idle_gpu_s / 3600:9.2f} GPU-h (GPUs present outside the plan)")
    if where is not None:
        lines += ["", f"run files: {where}"]
    return "\n".join(lines)
