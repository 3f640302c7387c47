"""`ooblab plan`: templates and the chosen plan for a model on a cluster."""

from __future__ import annotations

import argparse
import json
import sys

from . import cli_reconf
from .analytic import MODEL_SHAPES
from .catalog import resolve_profile
from .errors import PlannerError
from .hardware import DEFAULT_GPU, GPUS, make_cluster
from .plan import ExecutionPlan, JobSpec
from .planner import Planner
from .templates import TemplateSet
from .units import size_text

DEFAULTS = {"model": "gpt3-1.3b", "nodes": 16, "gpus_per_node": 1, "f": 1, "global_batch": 512, "microbatch": 1}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="pipeline templates and the execution plan for a model on a cluster",
        description="Generate the exact pipeline templates and instantiate the fastest plan with at least f + 1 pipelines.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--model",
        default=DEFAULTS["model"],
        help=f"built-in model ({', '.join(MODEL_SHAPES)}) or an Oobleck profile directory",
    )
    parser.add_argument(
        "--gpu",
        default=DEFAULT_GPU,
        choices=sorted(GPUS),
        help="GPU type (also the memory limit of a measured profile)",
    )
    parser.add_argument("--nodes", type=int, default=DEFAULTS["nodes"], help="number of nodes N")
    parser.add_argument("--gpus-per-node", type=int, default=DEFAULTS["gpus_per_node"], help="GPUs per node g")
    parser.add_argument("--f", type=int, default=DEFAULTS["f"], help="simultaneous node failures to tolerate")
    parser.add_argument("--global-batch", type=int, default=DEFAULTS["global_batch"], help="samples per iteration")
    parser.add_argument("--microbatch", type=int, default=DEFAULTS["microbatch"], help="samples per microbatch")
    parser.add_argument(
        "--inter-node-gbps", type=float, default=None, help="override the GPU type's default network bandwidth (Gb/s)"
    )
    parser.add_argument(
        "--no-pipeline-comm",
        action="store_true",
        help="charge nothing for stage-boundary sends (the paper's Eq. 1-4)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    cli_reconf.register_arguments(parser)
    parser.set_defaults(handler=run)


def plan_from_args(args) -> tuple[Planner, TemplateSet, ExecutionPlan]:
    profile = resolve_profile(args.model, args.gpu, args.microbatch)
    cluster = make_cluster(
        args.gpu,
        args.nodes,
        args.gpus_per_node,
        inter_node_gbps=args.inter_node_gbps,
        pipeline_comm=not getattr(args, "no_pipeline_comm", False),
    )
    planner = Planner(profile, cluster, JobSpec(args.global_batch, args.microbatch, args.f))
    templates = planner.template_set()
    plan = planner.instantiate([f"node{i}" for i in range(args.nodes)])
    return planner, templates, plan


def run(args) -> int:
    try:
        cli_reconf.check_arguments(args)
        planner, templates, plan = plan_from_args(args)
        change = None
        if args.remove is not None or args.add is not None or args.throughput_tolerance is not None:
            change = cli_reconf.reconfigure(planner, plan, args)
    except PlannerError as exc:
        print(f"ooblab plan: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        out = to_json(planner, templates, plan)
        if change is not None:
            out["reconfiguration"] = cli_reconf.to_json(*change)
        print(json.dumps(out, indent=2))
    else:
        text = render(planner, templates, plan)
        if change is not None:
            text += "\n" + "\n".join(cli_reconf.render(*change))
        print(text)
    return 0


def to_json(planner: Planner, templates: TemplateSet, plan: ExecutionPlan) -> dict:
    return {
        "model": planner.profile.name,
        "profile_source": planner.profile.source,
        "gpu": planner.cluster.gpu.name,
        "num_nodes": planner.cluster.num_nodes,
        "gpus_per_node": planner.cluster.gpus_per_node,
        "fault_tolerance": planner.job.fault_tolerance,
        "min_nodes": templates.min_nodes,
        "stage_gpu_counts": list(templates.stage_gpu_counts),
        "pipeline_comm": _comm_line(planner),
        "templates": [t.to_dict() for t in templates.templates],
        "plan": plan.to_dict(),
    }


def _comm_line(planner: Planner) -> str | None:
    comm = planner.tables.comm
    if comm is None:
        return None
    return (
        f"in node {comm.in_node.latency_s * 1e6:.1f} us + B / {comm.in_node.bytes_per_s / 1e9:.3g} GB/s, "
        f"across {comm.across_nodes.latency_s * 1e6:.1f} us + B / {comm.across_nodes.bytes_per_s / 1e9:.3g} GB/s, "
        f"hop overhead {comm.hop_overhead_s * 1e3:.3g} ms ({comm.source})"
    )


def _layers(stages) -> str:
    text = " ".join(f"{s.first_layer}-{s.end_layer - 1}" + (f"x{s.num_gpus}" if s.num_gpus > 1 else "") for s in stages)
    return text if len(text) <= 60 else text[:57] + "..."


def render(planner: Planner, templates: TemplateSet, plan: ExecutionPlan) -> str:
    p, c, j = planner.profile, planner.cluster, planner.job
    lines = [
        f"model {p.name} ({p.num_layers} layers, {size_text(p.state_bytes)} of model state, source {p.source})",
        f"cluster {c.num_nodes} nodes x {c.gpus_per_node} {c.gpu.name}; f = {j.fault_tolerance}; "
        f"global batch {j.global_batch} = {j.num_microbatches} microbatches of {j.microbatch_size}",
        f"n0 = {templates.min_nodes}; stage widths {list(templates.stage_gpu_counts)} GPUs",
        f"pipeline sends: {_comm_line(planner) or 'not charged (Eq. 1-4)'}",
        "",
        f"{'nodes':>5} {'stages':>6} {'T (N_b=4S) s':>13} {'bottleneck s':>12}  layers per stage",
    ]
    for t in templates.templates:
        lines.append(
            f"{t.num_nodes:>5} {t.num_stages:>6} {t.iteration_time_s:>13.3f} {t.bottleneck_s:>12.4f}  {_layers(t.stages)}"
        )
    lines += [
        "",
        f"plan: {plan.num_pipelines} pipelines",
        f"{'#':>3} {'nodes':>5} {'microbatches':>12} {'time s':>9}  node names",
    ]
    for index, pipe in enumerate(plan.pipelines):
        names = ", ".join(pipe.nodes)
        if len(names) > 50:
            names = names[:47] + "..."
        lines.append(
            f"{index:>3} {pipe.template.num_nodes:>5} {pipe.num_microbatches:>12} {pipe.iteration_time_s:>9.3f}  {names}"
        )
    lines += [
        "",
        f"iteration {plan.iteration_time_s:.3f} s (slowest pipeline {plan.compute_time_s:.3f} s + exposed all-reduce {plan.allreduce_exposed_s:.3f} s)",
        f"throughput {plan.samples_per_s:.2f} samples/s",
    ]
    return "\n".join(lines)
