"""The Hugging Face families on the real backend at sizes and lengths beyond the tests'.

The tests hold a tiny GPT-2, Llama and Qwen2 over 3-5 steps to one process's training
(1e-9); rounding that depends on the summation order grows with the model and the steps,
so this runs each family's `small` preset (8 steps, 16 samples a step, float64, 4 workers)
through every design's recovery: Oobleck's live reconfiguration after a crash mid-backward
and another as a step begins, or after a hang; Varuna's restart from checkpoint files;
GEMINI's from peers' memory. Each run is compared with the single-process reference:
the worst relative loss difference over the steps and the worst parameter difference
(each tensor's against its own scale, `max_relative_difference`), both to be within
1e-9. transformers' float32 RMSNorm in float64 left `hf:llama:small` 3.6e-7 off here
while the tests' tiny Llama stayed within 1e-9 (`real.models.hf.RMSNorm`). Prints one
line a run; exits 1 when any run is off or fails. About 25 s a run on 2 cores.

    python benchmarks/hf_exactness.py [--models hf:gpt2:small,hf:llama:small,...] [--steps 8]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-9
FAST = ["--timeout", "30", "--heartbeat-timeout", "5", "--heartbeat-interval", "0.25"]
# design, its arguments (injections at steps that `--steps 8` reaches)
CASES = {
    "oobleck": ["--pipelines", "1,3", "--inject", "2:node3:crash:backward,5:node0:crash:forward"],
    "oobleck-hang": ["--pipelines", "2,2", "--inject", "4:node2:hang:allreduce"],
    "varuna": ["--inject", "3:node1:crash:backward"],
    "gemini": ["--inject", "3:node1:crash:backward"],
}
DEFAULT_MODELS = "hf:gpt2:small,hf:llama:small,hf:mistral:small,hf:qwen2:small"


def run_case(model: str, case: str, steps: int, work: Path) -> tuple[bool, str]:
    """One `ooblab run` compared with the reference: (within tolerance, its line)."""
    from real.config import RunConfig
    from real.models.reference import gather_params, max_relative_difference, train_reference

    design = case.split("-")[0]
    params, batch = work / f"{case}-params", 16
    command = [sys.executable, "-m", "ooblab.cli", "run", "--model", model, "--design", design, "--nodes", "4",
               "--f", "1", "--steps", str(steps), "--global-batch", str(batch), "--dtype", "float64",
               "--checkpoint-every", "2", *FAST, *CASES[case], "--save-params", str(params),
               "--out", str(work / case), "--json"]  # fmt: skip
    start = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    try:
        summary = json.loads(result.stdout)
    except json.JSONDecodeError:
        return False, f"failed (rc {result.returncode}): {' | '.join(result.stderr.strip().splitlines()[-2:])}"
    if summary.get("status") != "finished":
        return False, f"{summary.get('status')}: {summary.get('reason')}"
    reference = train_reference(RunConfig(model=model, steps=steps, global_batch=batch, dtype="float64"))
    losses = summary.get("losses") or []
    loss = max((abs(a - b) / abs(b) for a, b in zip(losses, reference.losses)), default=float("inf"))
    worst = max(max_relative_difference(p, reference.params) for p in gather_params(params).values())
    ok = len(losses) == steps and loss <= TOLERANCE and worst <= TOLERANCE
    recoveries = len(summary.get("recovery_s") or [])
    line = (
        f"losses {loss:.1e}, parameters {worst:.1e}; {recoveries} recoveries, "
        f"{summary.get('num_restarts')} restarts, {wall:.0f} s"
    )
    return ok, line


def input_problem(models: list[str], cases: list[str], steps: int) -> str | None:
    """What is wrong with the request, in one line, before anything runs (None: nothing)."""
    from real.models.family import model_problem

    unknown = [c for c in cases if c not in CASES]
    if unknown:
        return f"unknown case {unknown[0]!r}; known: {', '.join(CASES)}"
    if steps < 6:
        return f"--steps must be 6 or more (the injections fire at step 5), got {steps}"
    for model in models:
        if not model.startswith("hf:"):
            return f"{model!r} is not a Hugging Face model (hf:FAMILY:PRESET)"
        if (problem := model_problem(model)) is not None:
            return problem
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated hf:FAMILY:PRESET names")
    parser.add_argument("--steps", type=int, default=8, help="steps a run (the injections need 6 or more)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    if (problem := input_problem(args.models.split(","), args.cases.split(","), args.steps)) is not None:
        print(f"hf_exactness: error: {problem}", file=sys.stderr)
        return 2
    cases = args.cases.split(",")
    off = 0
    with tempfile.TemporaryDirectory(prefix="ooblab-hf-exactness-") as name:
        for model in args.models.split(","):
            for case in cases:
                work = Path(name) / model.replace(":", "-") / case
                work.mkdir(parents=True)
                ok, line = run_case(model, case, args.steps, work)
                off += not ok
                print(f"{model:<18} {case:<13} {'ok ' if ok else 'OFF'} {line}", flush=True)
    print(f"hf_exactness: {off} run(s) off or failed (tolerance {TOLERANCE:g})")
    return 1 if off else 0


if __name__ == "__main__":
    raise SystemExit(main())
