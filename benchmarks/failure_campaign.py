"""A randomized failure campaign on the real backend: a script, not CI.

Draws N scenarios from one seed (scenario i depends only on the seed and i, so a shorter
campaign is a prefix of a longer one), runs each as `ooblab run` (coordinator + spawned
workers, gloo on CPU, real tiny-gpt in float64) in its own session with a wall-clock
limit, and compares it with its failure-free reference (the single-process run over the
same global batches, `real.models.reference`): the same loss at every step (rel 1e-9)
and every pipeline's final parameters within 1e-5 (max relative difference per tensor).

Kinds, cycled in a seeded order so every 7 consecutive runs hold one of each:

- `crash`, `hang`: 1..f victims in distinct pipelines at one step, each at a random point
  (forward, backward, all-reduce, optimizer): live reconfiguration;
- `stall`: a crash, and a survivor's main thread stalls in its teardown (fenced, then
  replaced by a fresh process that receives its layers from replicas);
- `join`: a crash, and the node comes back two steps later (taken in at a step boundary);
- `beyond_f`: f + 1 random victims at once at one point: live when a replica of every
  layer survives, else a restart from the last checkpoint (every 2 steps);
- `during_recovery`: 1..f crashes, and one more survivor crashes inside the state copy of
  the reconfiguration that follows;
- `varuna`: the Varuna policy (checkpoint, stop everything, restart) after a crash or hang.

With `--pipelines 2,2[,2]` (4 nodes and f = 1, or 6 nodes and f = 2) the first plan is
known: pipeline p runs on node(2p) (stage 0) and node(2p + 1) (stage 1).

A run is a *hang* when it outlives its limit (its session is killed), a *mismatch* when it
finished but differs from the reference, a *failure* when it did not finish. Prints one
row per run as it ends, then the totals; `--log` keeps one JSON line per run.

    python benchmarks/failure_campaign.py [--runs 50] [--seed 17] [--log campaign.jsonl]
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import campaign_cli
from campaign_cli import kind_of

REPO = Path(__file__).resolve().parents[1]
KINDS = ("crash", "hang", "stall", "join", "beyond_f", "during_recovery", "varuna")
STEP_POINTS = ("forward", "backward", "allreduce", "optimizer")
STEPS = 8
GLOBAL_BATCH = 16
CHECKPOINT_EVERY = 2
TOLERANCE = 1e-5
FAST = ("--heartbeat-timeout", "3", "--heartbeat-interval", "0.25")


@dataclass(frozen=True)
class Scenario:
    """One run of the campaign: a job and its failure schedule (`--inject`)."""

    index: int
    kind: str
    nodes: int
    f: int
    inject: str
    policy: str = "oobleck"
    pipelines: str | None = None
    timeout_s: float = 15.0

    def args(self, out: Path, params: Path) -> list[str]:
        args = ["run", "--nodes", str(self.nodes), "--f", str(self.f), "--steps", str(STEPS), "--global-batch", str(GLOBAL_BATCH),
                "--dtype", "float64", *FAST, "--timeout", f"{self.timeout_s:g}", "--checkpoint-every", str(CHECKPOINT_EVERY),
                "--policy", self.policy, "--inject", self.inject, "--save-params", str(params), "--out", str(out), "--json"]  # fmt: skip
        if self.pipelines:
            args += ["--pipelines", self.pipelines]
        return args


def _kind(seed: int, index: int) -> str:
    return kind_of(seed, index, KINDS)


def _node(pipeline: int, stage: int) -> str:
    return f"node{2 * pipeline + stage}"


def draw(seed: int, index: int) -> Scenario:
    """Scenario `index` of the campaign `seed` (a function of both only)."""
    kind = _kind(seed, index)
    rng = random.Random(f"{seed}/scenario/{index}")
    nodes = rng.choice((4, 4, 6))
    f = nodes // 2 - 1
    pipelines: str | None = ",".join(["2"] * (f + 1))
    everyone = [f"node{i}" for i in range(nodes)]
    step = rng.randrange(1, STEPS - 3)

    def distinct(count: int) -> list[str]:
        return [_node(p, rng.randrange(2)) for p in rng.sample(range(f + 1), count)]

    def entries(victims: list[str], what: str, same_point: bool = False) -> list[str]:
        point = rng.choice(STEP_POINTS)
        return [f"{step}:{v}:{what}:{point if same_point else rng.choice(STEP_POINTS)}" for v in victims]

    timeout_s = 15.0
    policy = "oobleck"
    if kind in ("crash", "hang"):
        items = entries(distinct(rng.randint(1, f)), kind)
    elif kind == "stall":
        (victim,) = distinct(1)
        survivor = rng.choice([n for n in everyone if n != victim])
        items = entries([victim], "crash") + [f"{step}:{survivor}:stall:teardown"]
        timeout_s = 10.0  # the stalled worker is fenced after timeout + heartbeat timeout + 5 s
    elif kind == "join":
        (victim,) = distinct(1)
        items = entries([victim], "crash") + [f"{step + 2}:{victim}:join"]
    elif kind == "beyond_f":
        items = entries(rng.sample(everyone, f + 1), "crash", same_point=True)
    elif kind == "during_recovery":
        victims = distinct(rng.randint(1, f))
        during = rng.choice([n for n in everyone if n not in victims])
        items = entries(victims, "crash") + [f"{step}:{during}:crash:reconfigure"]
    elif kind == "varuna":
        policy, pipelines = "varuna", None  # Varuna plans its own grid: any single victim
        items = entries([rng.choice(everyone)], rng.choice(("crash", "hang")))
    else:  # pragma: no cover - KINDS is closed
        raise AssertionError(f"internal error: unknown campaign kind {kind!r}")
    return Scenario(index, kind, nodes, f, ",".join(items), policy, pipelines, timeout_s)


def campaign(seed: int, runs: int) -> list[Scenario]:
    return [draw(seed, i) for i in range(runs)]


# -- running ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    scenario: Scenario
    verdict: str  # "ok" | "mismatch" | "failed" | "hang"
    wall_s: float
    detail: str = ""
    worst_difference: float | None = None
    fired: int = 0
    reconfigurations: int = 0
    restarts: int = 0
    recovery_s: tuple[float, ...] = ()


def _kill_session(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _events(out: Path) -> list[dict]:
    """The run's events (joins and other injections the coordinator carries out are there)."""
    path = out / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def run_one(scenario: Scenario, work: Path, limit_s: float, references: dict) -> Outcome:
    from real.config import RunConfig
    from real.models.reference import (
        gather_params,
        max_relative_difference,
        train_reference,
    )

    out, params = work / f"run{scenario.index}", work / f"params{scenario.index}"
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "ooblab.cli", *scenario.args(out, params)]
    start = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        _kill_session(process)
        process.communicate()
        return Outcome(scenario, "hang", time.perf_counter() - start, f"no result within {limit_s:g} s")
    _kill_session(process)  # nothing of the run may outlive it
    wall = time.perf_counter() - start
    try:
        summary = json.loads(stdout)
    except json.JSONDecodeError:
        return Outcome(
            scenario, "failed", wall, f"rc {process.returncode}: {stderr.strip().splitlines()[-1:] or ['no output']}"
        )
    events = _events(out)
    common = dict(
        fired=len(summary.get("injections_fired") or []) + sum(e.get("kind") == "injected" and bool(e.get("applied")) for e in events),
        reconfigurations=summary.get("num_reconfigurations", 0),
        restarts=summary.get("num_restarts", 0), recovery_s=tuple(round(x, 3) for x in summary.get("recovery_s") or ()),
    )  # fmt: skip
    if process.returncode != 0 or summary.get("status") != "finished":
        return Outcome(scenario, "failed", wall, f"status {summary.get('status')}: {summary.get('reason')}", **common)
    if STEPS not in references:
        references[STEPS] = train_reference(RunConfig(steps=STEPS, global_batch=GLOBAL_BATCH, dtype="float64"))
    reference = references[STEPS]
    problems = []
    if summary.get("num_iterations") != STEPS:
        problems.append(f"{summary.get('num_iterations')} iterations")
    losses = summary.get("losses") or []
    if len(losses) != STEPS or any(abs(a - b) > 1e-9 * max(abs(b), 1e-300) for a, b in zip(losses, reference.losses)):
        problems.append("losses differ")
    worst = max(max_relative_difference(p, reference.params) for p in gather_params(params).values())
    if worst > TOLERANCE:
        problems.append(f"parameters differ by {worst:.2e}")
    return Outcome(scenario, "mismatch" if problems else "ok", wall, "; ".join(problems), worst, **common)


def _row(o: Outcome) -> str:
    s = o.scenario
    recovery = ",".join(f"{x:.1f}" for x in o.recovery_s) or "-"
    worst = f"{o.worst_difference:.1e}" if o.worst_difference is not None else "-"
    return (
        f"{s.index:>3} {s.kind:<16} {s.policy:<7} {s.nodes:>2}n f{s.f} {o.verdict:<8} {o.wall_s:6.1f} {worst:>8} "
        f"{o.fired}/{len(s.inject.split(','))} {o.reconfigurations:>2} {o.restarts:>2} {recovery:<14} {s.inject}  {o.detail}"
    )


def main(argv: list[str] | None = None) -> int:
    args = campaign_cli.parser(__doc__.splitlines()[0], runs=50, seed=17).parse_args(argv)
    if campaign_cli.bad_arguments(args, "failure_campaign"):
        return 2
    sys.path.insert(0, str(REPO))
    scenarios = campaign(args.seed, args.runs)[args.first :]
    if args.dry_run:
        for s in scenarios:
            print(f"{s.index:>3} {s.kind:<16} {s.policy:<7} {s.nodes}n f{s.f} {s.inject}")
        return 0
    import torch

    torch.set_num_threads(1)  # the reference; the runs' workers share out the cores themselves
    print(
        f"failure campaign: seed {args.seed}, runs {scenarios[0].index}..{scenarios[-1].index}, limit {args.limit:g} s per run",
        flush=True,
    )
    print(
        f"{'#':>3} {'kind':<16} {'policy':<7} {'job':<6} {'verdict':<8} {'wall':>6} {'max diff':>8} fired rc rs {'recovery (s)':<14} inject",
        flush=True,
    )
    references: dict = {}  # run_one's cache of reference runs
    with tempfile.TemporaryDirectory(prefix="ooblab-campaign-") as name:
        outcomes, total = campaign_cli.run_all(
            scenarios, lambda s: run_one(s, Path(name), args.limit, references), _row, args.log, args.seed
        )
    all_ok, recoveries = campaign_cli.totals(outcomes, args.seed, total, KINDS)
    print(
        f"reconfigurations {sum(o.reconfigurations for o in outcomes)}, restarts {sum(o.restarts for o in outcomes)}, "
        f"{campaign_cli.recovery_summary(recoveries)}, "
        f"injections fired {sum(o.fired for o in outcomes)} of {sum(len(o.scenario.inject.split(',')) for o in outcomes)}"
    )
    return 0 if all_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
