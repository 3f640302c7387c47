"""Recovery time on the real backend: Oobleck's live reconfiguration vs Varuna's restart.
Prints figures; asserts nothing.

For 8 and 16 emulated workers (one per node, emulated compute: layers sleep their
profiled time, so the machine's cores are not the bottleneck) and 1..f simultaneous
crashes (`--inject STEP:NODE:crash:backward`, victims in different pipelines of the
plan, so a replica of every layer survives), each job runs twice in this invocation:
with the Oobleck policy (live: survivors reconfigure from the replicas in their memory)
and with the Varuna policy (the baseline: checkpoint the survivors' state, stop every
process, start fresh ones, restart from the checkpoint). Recovery time runs from the
failure (the victim's own timestamp) to the completion of the iteration it interrupted,
split into detection, rebuild (survivors unwinding and tearing down, then joining the
new generation's process groups), planning (policy, layout, layer sources), checkpoint,
respawn, copy (layer state in, from peers or from the checkpoint) and redo (the
interrupted iteration again). Targets: live recovery under 3 s, at least 10x faster
than the restart.

The model: a synthetic profile of 16 layers, 5 ms forward + 10 ms backward each,
64 KiB activations and 1 MiB of parameters per layer, global batch 8 (about 0.3-0.5 s
per iteration), f = 2.

    python benchmarks/real_recovery.py [--sizes 8,16] [--f 2] [--rounds 1]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from planner.oobleck_format import write_oobleck_profile
from planner.policies import NodesReady
from planner.profile import LayerProfile, ModelProfile
from real.config import RunConfig
from real.control.planning import make_planner, resolve_run_profile
from real.control.policies import make_policy, view
from real.launch.local import run_local

PHASES = ("detection", "rebuild", "planning", "checkpoint", "respawn", "copy", "redo")


def synthetic_profile(directory: Path, layers: int = 16) -> Path:
    profile = tuple(
        LayerProfile(f"l{i}", 0.005, 0.010, 1 << 20, 1 << 20, 2 << 20, 1 << 16, 1 << 16) for i in range(layers)
    )
    return write_oobleck_profile(ModelProfile("synthetic-16x15ms", 1, profile), directory)


def victims(config: RunConfig, count: int) -> list[str]:
    """The last node of each of the first `count` pipelines of the plan the Oobleck
    policy starts with (the same call the coordinator makes)."""
    profile = resolve_run_profile(config)
    policy = make_policy(config, make_planner(config, profile), profile)
    nodes = config.node_names()
    plan = policy.decide(view(nodes, "waiting", 0, 0, 0.0), NodesReady(tuple(nodes)), None).plan
    if count > plan.num_pipelines - 1:
        raise ValueError(f"{count} crashes would take out a whole layer on {plan.num_pipelines} pipelines")
    return [pipe.nodes[-1] for pipe in plan.pipelines[:count]]


def run_case(base: RunConfig, policy: str, count: int, out: Path) -> dict | None:
    names = victims(base, count)
    inject = ",".join(f"{base.steps // 2}:{name}:crash:backward" for name in names)
    config = base.with_(policy=policy, inject=inject)
    start = time.perf_counter()
    result = run_local(config, out)
    summary = result.summary.to_dict()
    wall = time.perf_counter() - start
    if summary["status"] != "finished" or len(summary["recoveries"]) != 1:
        print(
            f"  {policy:<8} {count} crash(es): {summary['status']} {summary['reason']} recoveries {summary['recovery_s']} (wall {wall:.0f} s)"
        )
        return None
    recovery = summary["recoveries"][0]
    steady = summary["steady_iteration_s"] or 0.0
    parts = "  ".join(f"{p} {recovery[f'{p}_s']:6.3f}" for p in PHASES)
    print(
        f"  {policy:<8} {count} crash(es) of {','.join(names):<14} total {recovery['total_s']:7.3f} s = {parts}   "
        f"(iteration {steady:.3f} s, start-up {summary['startup_s']:.0f} s, wall {wall:.0f} s)"
    )
    return recovery


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,16", help="emulated workers (nodes of one GPU)")
    parser.add_argument("--f", type=int, default=2, help="failures tolerated; crashes of 1..f workers at once")
    parser.add_argument("--rounds", type=int, default=1, help="runs per case (figures: median)")
    parser.add_argument("--steps", type=int, default=8, help="iterations per run; the crash is in the middle one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        model = str(synthetic_profile(tmp / "profile"))
        rows = []
        for nodes in (int(x) for x in args.sizes.split(",")):
            base = RunConfig(
                nodes=nodes, fault_tolerance=args.f, model=model, compute="emulated", global_batch=8, steps=args.steps,
                checkpoint_every=2, threads_per_worker=1, timeout_s=60,
            )  # fmt: skip
            print(f"{nodes} workers, f = {args.f}:")
            for count in range(1, args.f + 1):
                figures: dict[str, list[float]] = {"oobleck": [], "varuna": []}
                for index in range(args.rounds):
                    for policy in figures:
                        recovery = run_case(base, policy, count, tmp / f"{nodes}-{count}-{policy}-{index}")
                        if recovery is not None:
                            figures[policy].append(recovery["total_s"])
                if figures["oobleck"] and figures["varuna"]:
                    live, restart = statistics.median(figures["oobleck"]), statistics.median(figures["varuna"])
                    rows.append((nodes, count, live, restart))
        print("\nsummary (median per case): live reconfiguration vs restart from a checkpoint")
        print(
            f"{'workers':>8} {'crashes':>8} {'live (s)':>10} {'restart (s)':>12} {'restart / live':>15}   targets: live < 3 s, ratio >= 10"
        )
        for nodes, count, live, restart in rows:
            print(f"{nodes:>8} {count:>8} {live:>10.3f} {restart:>12.3f} {restart / live:>14.1f}x")


if __name__ == "__main__":
    main()
