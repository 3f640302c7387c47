"""`ooblab plan --remove K|NODE,NODE` and `--add K`: the reconfigured plan and its copies.

The initial plan is the one `ooblab plan` prints (nodes named node0..node{N-1}). `--remove K`
takes the last node of each of the first K pipelines (then the second-last, and so on, when
K exceeds the pipelines); `--remove NODE,NODE` names them. `--add K` offers K new nodes
node{N}..node{N+K-1} to the join rule (taken only when the larger plan pays for its copies
within `--join-horizon-s`). Bad input raises `PlannerError` with a one-line reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .errors import PlannerError
from .plan import ExecutionPlan
from .planner import Planner
from .reconfigure import DEFAULT_JOIN_HORIZON_S, Reconfiguration, lost_layers, on_addition, on_removal

GIB = 2**30


def register_arguments(parser) -> None:
    change = parser.add_mutually_exclusive_group()
    change.add_argument(
        "--remove",
        metavar="K|NODE,NODE",
        default=None,
        help="reconfigure after losing K nodes (the last of each of the first K pipelines) or the named nodes",
    )
    change.add_argument("--add", metavar="K", type=int, default=None, help="offer K new nodes to the plan (join rule)")
    parser.add_argument(
        "--throughput-tolerance",
        type=float,
        default=None,
        metavar="T",
        help="with --remove: let a plan up to the fraction T slower than the fastest option win if it copies fewer bytes (off by default: Oobleck's rules)",
    )
    parser.add_argument(
        "--join-horizon-s",
        type=float,
        default=None,
        help=f"with --add: seconds over which a join must pay for its copies (default {DEFAULT_JOIN_HORIZON_S:g})",
    )


def check_arguments(args) -> None:
    """Refuse, before any planning, the change options that would be ignored or are out of range."""
    if args.throughput_tolerance is not None and args.remove is None:
        raise PlannerError("--throughput-tolerance applies to --remove only")
    if args.join_horizon_s is not None:
        if args.add is None:
            raise PlannerError("--join-horizon-s applies to --add only")
        if not (math.isfinite(args.join_horizon_s) and args.join_horizon_s > 0):
            raise PlannerError(f"--join-horizon-s must be a number of seconds > 0, got {args.join_horizon_s:g}")
    if args.add is not None and args.add < 1:
        raise PlannerError(f"--add {args.add}: give a positive number of nodes")


def _ranges(layers) -> str:
    """[3, 4, 5, 9] -> '3-5, 9'."""
    spans: list[list[int]] = []
    for layer in layers:
        if spans and layer == spans[-1][1] + 1:
            spans[-1][1] = layer
        else:
            spans.append([layer, layer])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)


def removal_targets(plan: ExecutionPlan, spec: str) -> list[str]:
    """The nodes `--remove` names: a count or a comma-separated list of node names."""
    spec = spec.strip()
    if spec.isdigit():
        count = int(spec)
        total = len(plan.nodes)
        if not 1 <= count < total:
            raise PlannerError(f"--remove {count}: the plan has {total} nodes, remove between 1 and {total - 1}")
        picked: list[str] = []
        depth = 1
        while len(picked) < count:
            for pipe in plan.pipelines:
                if depth <= len(pipe.nodes) and len(picked) < count:
                    picked.append(pipe.nodes[-depth])
            depth += 1
        return picked
    names = [name.strip() for name in spec.split(",") if name.strip()]
    if not names:
        raise PlannerError(f"--remove {spec!r}: give a node count or node names separated by commas")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise PlannerError(f"--remove names {duplicates} more than once")
    unknown = [n for n in names if n not in plan.node_set]
    if unknown:
        raise PlannerError(
            f"--remove names nodes not in the plan: {unknown} (its nodes are node0..node{len(plan.nodes) - 1})"
        )
    return names


def reconfigure(planner: Planner, plan: ExecutionPlan, args) -> tuple[dict, Reconfiguration]:
    """The event the arguments describe and its outcome; raises on an outcome that leaves
    no plan (too few nodes, a layer wiped out), saying what the job would do."""
    if args.throughput_tolerance is not None and args.remove is None:
        raise PlannerError("--throughput-tolerance applies to --remove only")
    if args.remove is not None:
        removed = removal_targets(plan, args.remove)
        left = len(plan.nodes) - len(removed)
        wiped = lost_layers(plan, set(plan.nodes) - set(removed))
        if left < planner.min_nodes:
            then = (
                f" and then restart from its last checkpoint (no replica of layers {_ranges(wiped)} is left)"
                if wiped
                else ", the survivors keeping their layers"
            )
            raise PlannerError(
                f"removing {len(removed)} of {len(plan.nodes)} nodes leaves {left}, fewer than n0 = {planner.min_nodes} "
                f"for one replica: the job would wait for nodes{then}; no reconfigured plan"
            )
        if wiped:
            raise PlannerError(
                f"removing {len(removed)} node(s) leaves no replica of layers {_ranges(wiped)}: "
                "the job would restart from its last checkpoint; no reconfigured plan"
            )
        result = on_removal(planner, plan, removed, throughput_tolerance=args.throughput_tolerance)
        if result.plan is None:  # pragma: no cover - both reasons are checked above
            raise PlannerError(f"internal error: no plan after removing {removed}: {'; '.join(result.notes)}")
        return {"remove": removed}, result
    if args.add < 1:
        raise PlannerError(f"--add {args.add}: give a positive number of nodes")
    start = len(plan.nodes)
    added = [f"node{start + i}" for i in range(args.add)]
    horizon_s = DEFAULT_JOIN_HORIZON_S if args.join_horizon_s is None else args.join_horizon_s
    result = on_addition(planner, plan, added, horizon_s=horizon_s)
    return {"add": added}, result


def to_json(event: dict, result: Reconfiguration) -> dict:
    return {
        **event,
        "plan": result.plan.to_dict() if result.plan is not None else None,
        "copies": [
            {
                "dst_node": c.dst_node,
                "src_node": c.src_node,
                "layers": list(c.layers),
                "param_bytes": c.param_bytes,
                "optimizer_bytes": c.optimizer_bytes,
            }
            for c in result.copies
        ],
        "copied_bytes": result.copy_bytes,
        "busiest_node_bytes": result.busiest_node_bytes,
        "lower_bound_bytes": result.lower_bound_bytes,
        "keep_order_bytes": result.keep_order_bytes,
        "notes": list(result.notes),
    }


def render(event: dict, result: Reconfiguration) -> Sequence[str]:
    what = (
        f"removed {len(event['remove'])} node(s)" if "remove" in event else f"offered {len(event['add'])} new node(s)"
    )
    plan = result.plan
    if plan is None:  # `reconfigure` raises before a change without a plan gets here
        raise PlannerError("internal error: a reconfiguration without a plan to render")
    lines = [
        "",
        f"reconfiguration: {what} -> {plan.num_pipelines} pipelines {sorted(len(p.nodes) for p in plan.pipelines)}, {plan.samples_per_s:.2f} samples/s",
    ]
    lines.append(
        f"copies: {len(result.copies)}, {result.copy_bytes / GIB:.1f} GiB (busiest node receives {result.busiest_node_bytes / GIB:.1f} GiB; "
        f"lower bound {result.lower_bound_bytes / GIB:.1f} GiB; nodes kept in order: {result.keep_order_bytes / GIB:.1f} GiB)"
    )
    lines += [f"note: {note}" for note in result.notes]
    return lines
