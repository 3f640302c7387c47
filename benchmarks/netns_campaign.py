"""A randomized campaign of network and process faults on namespace hosts: a script, not CI.

    sudo python benchmarks/netns_campaign.py [--runs 20] [--seed 5] [--log netns-campaign.jsonl] [--model hf:gpt2:tiny]

Draws N scenarios from one seed (scenario i depends only on the seed and i), runs each as
a job across namespace hosts (`real.launch.netns_job`: the coordinator on host 0, one
`ooblab node` per other host, started with the Slurm recipe's commands), 4 nodes as 2
pipelines of 2 or 5 nodes as pipelines of 2 and 3 (5 or 6 hosts), f = 1, real tiny-gpt (or
`--model`, a Hugging Face model too) in float64, a checkpoint every 2 steps, and compares it with the single-process reference
over the same global batches: every step's loss to rel 1e-12 and every pipeline's final
parameters to 1e-9 (max relative difference per tensor).

Kinds, cycled in a seeded order so every 7 consecutive runs hold one of each:

- `cut`: one node's link cut at a random step (`netdown`): lost on heartbeats, live
  reconfiguration;
- `cut_restore`: the same, and the link back 3 steps later (`netup`): the node, alive in
  the old generation, must be fenced and change nothing;
- `slow`: one node's link slowed to 1.5-4 Mbit/s for 2 steps (`slow`, `netup`): a
  straggler, no failure;
- `cut_in_recovery`: a node crashes at a random point of a step, and a node of the other
  pipeline has its link cut as that recovery begins (`netdown:recovery`);
- `crash`, `hang`: one node's worker at a random point of a step (a crash on another host
  is seen at the heartbeat timeout, as a cut is);
- `coordinator_cut`: the coordinator's own link cut for 1-6 s once training runs (the
  script cuts it; it is not a node): nobody may be lost.

A run is a *hang* when it outlives its limit, a *mismatch* when it finished but differs
from the reference, a *failure* when it did not finish. Prints one row per run as it ends,
then the totals; `--log` keeps one JSON line per run.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import campaign_cli
from campaign_cli import kind_of

REPO = Path(__file__).resolve().parents[1]
KINDS = ("cut", "cut_restore", "slow", "cut_in_recovery", "crash", "hang", "coordinator_cut")
STEP_POINTS = ("forward", "backward", "allreduce", "optimizer")
STEPS = 8
GLOBAL_BATCH = 16
CHECKPOINT_EVERY = 2
LOSS_TOLERANCE = 1e-12
PARAM_TOLERANCE = 1e-9
JOB = ("--f", "1", "--timeout", "20", "--heartbeat-interval", "0.25")
# heartbeats missed before a node is lost: a worker importing transformers can hold its
# interpreter past 3 s on 2 busy cores (the HF run tests allow 10 s too)
HEARTBEAT_TIMEOUT_S = {"tiny-gpt": 3.0, "hf": 10.0}


@dataclass(frozen=True)
class Scenario:
    """One run: the job's size, its `--inject` schedule, a coordinator cut (seconds, 0: none)."""

    index: int
    kind: str
    nodes: int
    pipelines: str
    inject: str
    coordinator_cut_s: float = 0.0

    def job_args(self, params: Path, model: str = "tiny-gpt") -> list[str]:
        heartbeat = HEARTBEAT_TIMEOUT_S["hf" if model.startswith("hf:") else "tiny-gpt"]
        return ["--steps", str(STEPS), "--global-batch", str(GLOBAL_BATCH), "--dtype", "float64", *JOB,
                "--model", model, "--heartbeat-timeout", f"{heartbeat:g}",
                "--pipelines", self.pipelines, "--checkpoint-every", str(CHECKPOINT_EVERY),
                "--save-params", str(params), "--json", *(["--inject", self.inject] if self.inject else [])]  # fmt: skip


def _kind(seed: int, index: int) -> str:
    return kind_of(seed, index, KINDS)


def pipelines_of(pipelines: str) -> list[list[str]]:
    """The first plan's nodes per pipeline (`--pipelines` fixes it: consecutive nodes)."""
    out, first = [], 0
    for size in (int(x) for x in pipelines.split(",")):
        out.append([f"node{i}" for i in range(first, first + size)])
        first += size
    return out


def draw(seed: int, index: int) -> Scenario:
    """Scenario `index` of the campaign `seed` (a function of both only)."""
    kind = _kind(seed, index)
    rng = random.Random(f"{seed}/scenario/{index}")
    nodes = rng.choice((4, 5))
    pipelines = "2,2" if nodes == 4 else "2,3"
    everyone = [f"node{i}" for i in range(nodes)]
    step = rng.randrange(1, STEPS - 4)
    victim = rng.choice(everyone)
    if kind == "cut":
        return Scenario(index, kind, nodes, pipelines, f"{step}:{victim}:netdown")
    if kind == "cut_restore":
        return Scenario(index, kind, nodes, pipelines, f"{step}:{victim}:netdown,{step + 3}:{victim}:netup")
    if kind == "slow":
        rate = rng.choice((1500, 2000, 3000, 4000))
        return Scenario(index, kind, nodes, pipelines, f"{step}:{victim}:slow:{rate},{step + 2}:{victim}:netup")
    if kind == "cut_in_recovery":
        first, second = pipelines_of(pipelines)
        crashed, cut = (rng.choice(first), rng.choice(second))[:: rng.choice((1, -1))]
        point = rng.choice(STEP_POINTS)
        return Scenario(index, kind, nodes, pipelines, f"{step}:{crashed}:crash:{point},{step}:{cut}:netdown:recovery")
    if kind in ("crash", "hang"):
        return Scenario(index, kind, nodes, pipelines, f"{step}:{victim}:{kind}:{rng.choice(STEP_POINTS)}")
    if kind == "coordinator_cut":
        return Scenario(index, kind, nodes, pipelines, "", round(rng.uniform(1.0, 6.0), 1))
    raise AssertionError(f"internal error: unknown campaign kind {kind!r}")  # pragma: no cover - KINDS is closed


def campaign(seed: int, runs: int) -> list[Scenario]:
    return [draw(seed, i) for i in range(runs)]


@dataclass(frozen=True)
class Outcome:
    scenario: Scenario
    verdict: str  # "ok" | "mismatch" | "failed" | "hang"
    wall_s: float
    detail: str = ""
    worst_loss: float | None = None
    worst_param: float | None = None
    links: int = 0  # link faults carried out
    failures: int = 0
    reconfigurations: int = 0
    restarts: int = 0
    recovery_s: tuple[float, ...] = ()
    detection_s: tuple[float, ...] = ()


def run_one(scenario: Scenario, work: Path, limit_s: float, references: dict, model: str = "tiny-gpt") -> Outcome:
    from real.config import RunConfig
    from real.launch.netns import NetCluster
    from real.launch.netns_job import NetJob
    from real.models.reference import gather_params, max_relative_difference, train_reference

    params = work / f"params{scenario.index}"
    start = time.perf_counter()
    with NetCluster(scenario.nodes + 1) as cluster:
        job = NetJob(cluster, work / f"run{scenario.index}", scenario.nodes, scenario.job_args(params, model))
        try:
            job.start()
            if scenario.coordinator_cut_s:
                job.wait_for("training_started", timeout_s=limit_s)
                time.sleep(0.5)
                cluster.cut(0)
                time.sleep(scenario.coordinator_cut_s)
                cluster.restore(0)
            code, summary = job.finish(timeout_s=max(1.0, limit_s - (time.perf_counter() - start)))
        except RuntimeError as exc:
            verdict = "hang" if "within" in str(exc) else "failed"  # a wait ran out, or the job ended early
            return Outcome(scenario, verdict, time.perf_counter() - start, str(exc).splitlines()[0][:200])
        wall = time.perf_counter() - start
    recoveries = summary.get("recoveries") or []
    common = dict(
        links=len(job.link_actions), failures=summary.get("failures_survived", 0),
        reconfigurations=summary.get("num_reconfigurations", 0), restarts=summary.get("num_restarts", 0),
        recovery_s=tuple(round(r["total_s"], 2) for r in recoveries),
        detection_s=tuple(round(r.get("detection_s") or 0.0, 2) for r in recoveries),
    )  # fmt: skip
    if code != 0 or summary.get("status") != "finished":
        return Outcome(scenario, "failed", wall, f"rc {code}: {summary.get('reason')}", **common)
    if model not in references:
        references[model] = train_reference(
            RunConfig(model=model, steps=STEPS, global_batch=GLOBAL_BATCH, dtype="float64")
        )
    reference = references[model]
    losses = summary.get("losses") or []
    problems = [] if not job.link_errors else [f"link faults failed: {job.link_errors}"]
    worst_loss = max((abs(a - b) / max(abs(b), 1e-300) for a, b in zip(losses, reference.losses)), default=0.0)
    if len(losses) != STEPS or worst_loss > LOSS_TOLERANCE:
        problems.append(f"losses differ ({len(losses)} steps, worst {worst_loss:.1e})")
    worst = max(max_relative_difference(p, reference.params) for p in gather_params(params).values())
    if worst > PARAM_TOLERANCE:
        problems.append(f"parameters differ by {worst:.2e}")
    changes = common["failures"] + common["reconfigurations"] + common["restarts"]
    if scenario.kind in ("slow", "coordinator_cut") and changes:
        problems.append(f"{len(recoveries)} recovery(ies) where nobody failed")
    verdict = "mismatch" if problems else "ok"
    return Outcome(scenario, verdict, wall, "; ".join(problems), worst_loss, worst, **common)


def _row(o: Outcome) -> str:
    s = o.scenario
    what = s.inject or f"coordinator link cut {s.coordinator_cut_s:g} s"
    recovery = ",".join(f"{x:.1f}" for x in o.recovery_s) or "-"
    detection = ",".join(f"{x:.1f}" for x in o.detection_s) or "-"
    return (
        f"{s.index:>3} {s.kind:<16} {s.nodes}n {o.verdict:<8} {o.wall_s:6.1f} {o.links:>5} {o.failures:>2} "
        f"{o.reconfigurations:>2} {o.restarts:>2} {detection:<9} {recovery:<10} {what}  {o.detail}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = campaign_cli.parser(__doc__.splitlines()[0], runs=20, seed=5)
    parser.add_argument("--keep", default=None, help="keep every run's directory (logs, events) under this one")
    parser.add_argument("--model", default="tiny-gpt", help="tiny-gpt or a Hugging Face model hf:FAMILY:PRESET|DIR")
    args = parser.parse_args(argv)
    if campaign_cli.bad_arguments(args, "netns_campaign"):
        return 2
    sys.path.insert(0, str(REPO))
    from real.models.family import model_problem

    if (problem := model_problem(args.model)) is not None:
        print(f"netns_campaign: error: --model: {problem}", file=sys.stderr)
        return 2
    scenarios = campaign(args.seed, args.runs)[args.first :]
    if args.dry_run:
        for s in scenarios:
            print(f"{s.index:>3} {s.kind:<16} {s.nodes}n {s.inject or f'coordinator cut {s.coordinator_cut_s:g} s'}")
        return 0
    from real.launch.netns import unavailable

    reason = unavailable()
    if reason is not None:
        print(f"netns_campaign: error: {reason}", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(1)
    print(f"netns campaign: {args.model}, seed {args.seed}, runs {scenarios[0].index}..{scenarios[-1].index}, "
          f"limit {args.limit:g} s per run", flush=True)  # fmt: skip
    print(f"{'#':>3} {'kind':<16} job {'verdict':<8} {'wall':>6} links fl rc rs {'detect':<9} {'recovery':<10} faults",
          flush=True)  # fmt: skip
    references: dict = {}
    with tempfile.TemporaryDirectory(prefix="ooblab-netns-campaign-") as name:
        work = Path(args.keep) if args.keep else Path(name)
        work.mkdir(parents=True, exist_ok=True)
        outcomes, total = campaign_cli.run_all(
            scenarios, lambda s: run_one(s, work, args.limit, references, args.model), _row, args.log, args.seed
        )
    all_ok, recoveries = campaign_cli.totals(outcomes, args.seed, total, KINDS)
    worst_loss = max((o.worst_loss or 0.0 for o in outcomes), default=0.0)
    worst_param = max((o.worst_param or 0.0 for o in outcomes), default=0.0)
    print(f"link faults carried out {sum(o.links for o in outcomes)}, failures survived "
          f"{sum(o.failures for o in outcomes)}, reconfigurations {sum(o.reconfigurations for o in outcomes)}, "
          f"restarts {sum(o.restarts for o in outcomes)}, {campaign_cli.recovery_summary(recoveries)}; "
          f"worst loss difference {worst_loss:.1e}, worst parameter difference {worst_param:.1e}")  # fmt: skip
    return 0 if all_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
