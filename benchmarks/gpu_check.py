"""The real backend on a GPU, in one command. Prints figures.

On a machine with at least one CUDA device it runs, each job as `ooblab run` in its own
session with a wall-clock limit, each compared with the failure-free single-process
reference (float64: every loss within rel 1e-6, CUDA's reduction orders differing from the
CPU's; parameters within 1e-5):

1. real compute on CUDA, 4 ranks sharing GPU 0 over gloo (NCCL refuses two ranks of
   one communicator on one device), 2 pipelines x 2 stages: throughput;
2. one NCCL rank (the whole model on GPU 0): throughput;
3. the profiler on CUDA (CUDA events), per-layer forward and backward times;
4. NCCL teardown in a spawned process: a one-rank NCCL world does an all-reduce, is
   aborted (`nccl.abort_all_groups`, the path a failed NCCL generation takes) and a
   new world forms and reduces again: the abort and re-initialisation times;
5. a crash and a hang with live recovery on CUDA (4 ranks over gloo): recovery times;
6. Hugging Face models (`--hf`, default a tied GPT-2 and a Llama, transformers' own
   blocks) on CUDA, 4 ranks over gloo, 2 pipelines x 2 stages, one crashing mid-backward:
   throughput, recovery, and the same equality with one process (skipped in one line
   without the [hf] extra).

A live NCCL recovery needs two GPUs or more (a failure needs a peer); on one GPU it is
checked by parts 4 (the abort) and 5 (the recovery protocol on CUDA tensors).
Without a CUDA device it exits with status 2 and one line. `--device cpu` is a dry run of
the script itself before a GPU is spent on it: parts 1, 5 and 6 on the CPU with the same
comparisons (2-4 need CUDA and are skipped in one line).

    python benchmarks/gpu_check.py [--steps 8] [--limit 300] [--hf hf:gpt2:small,hf:llama:small] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GPU_LOSS_REL = 1e-6  # float64 on CUDA vs CPU: reduction orders differ
PARAM_TOLERANCE = 1e-5
FAST = ["--timeout", "20", "--heartbeat-timeout", "3", "--heartbeat-interval", "0.25"]


def run_job(
    name: str, args: list[str], work: Path, steps: int, limit_s: float, model: str = "tiny-gpt", device: str = "cuda"
) -> dict:
    """`ooblab run --model MODEL ARGS` on `device` compared with the reference; returns the
    summary and the check."""
    from real.config import RunConfig
    from real.models.reference import (
        gather_params,
        max_relative_difference,
        train_reference,
    )

    out, params = work / name, work / f"{name}-params"
    command = [sys.executable, "-m", "ooblab.cli", "run", "--steps", str(steps), "--global-batch", "16", "--dtype", "float64",
               "--device", device, "--model", model, "--checkpoint-every", "2", *FAST, *args, "--save-params", str(params), "--out", str(out), "--json"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return {"ok": False, "why": f"hang: no result within {limit_s:g} s"}
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    wall = time.perf_counter() - start
    try:
        summary = json.loads(stdout)
    except json.JSONDecodeError:
        return {"ok": False, "why": f"rc {process.returncode}: " + " | ".join(stderr.strip().splitlines()[-3:])}
    if summary.get("status") != "finished":
        return {"ok": False, "why": f"{summary.get('status')}: {summary.get('reason')}", "summary": summary}
    reference = train_reference(RunConfig(model=model, steps=steps, global_batch=16, dtype="float64"))
    worst = max(max_relative_difference(p, reference.params) for p in gather_params(params).values())
    losses = summary.get("losses") or []
    loss_ok = len(losses) == steps and all(
        abs(a - b) <= GPU_LOSS_REL * abs(b) for a, b in zip(losses, reference.losses)
    )
    ok = loss_ok and worst <= PARAM_TOLERANCE and summary.get("num_iterations") == steps
    return {"ok": ok, "why": "" if ok else f"losses {'ok' if loss_ok else 'differ'}, parameters differ by {worst:.2e}",
            "summary": summary, "worst": worst, "wall_s": wall}  # fmt: skip


def _nccl_abort_child(port: int, queue) -> None:
    import torch
    import torch.distributed as dist

    from real.worker.nccl import abort_all_groups, apply_nccl_environment

    apply_nccl_environment()
    torch.cuda.set_device(0)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
    figures = {}
    for generation in range(2):
        t0 = time.perf_counter()
        dist.init_process_group("nccl", store=dist.PrefixStore(f"gen{generation}", store), rank=0, world_size=1,
                                timeout=timedelta(seconds=20), device_id=torch.device("cuda", 0))  # fmt: skip
        group = dist.new_group([0], timeout=timedelta(seconds=20))
        t = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(t, group=group)
        torch.cuda.synchronize()
        figures[f"init_and_reduce_{generation}_s"] = time.perf_counter() - t0
        if float(t[0]) != 1.0:
            raise RuntimeError(f"a one-rank all-reduce gave {float(t[0])}")
        t1 = time.perf_counter()
        abort_all_groups()
        figures[f"abort_{generation}_s"] = time.perf_counter() - t1
        if dist.is_initialized():
            raise RuntimeError("groups left after the abort")
    queue.put(figures)


def nccl_abort_check(limit_s: float) -> dict:
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60))
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_nccl_abort_child, args=(store.port, queue), daemon=True)
    child.start()
    try:
        figures = queue.get(timeout=limit_s)
    except Exception:
        figures = None
    child.join(10)
    if child.is_alive():
        child.kill()
        child.join()
    if figures is None or child.exitcode != 0:
        return {"ok": False, "why": f"the NCCL abort check failed (exit code {child.exitcode})"}
    return {"ok": True, **figures}


def profile_check() -> list[tuple[str, float, float]]:
    from real.config import TinyGptSpec
    from real.launch.profiler import ProfilerSettings, profile_tiny_gpt

    profile = profile_tiny_gpt(TinyGptSpec(), ProfilerSettings(device="cuda", max_participants=1, repeats=10, warmup=3))
    if "@cuda" not in profile.source:
        raise RuntimeError(f"the profiler did not run on CUDA ({profile.source})")
    return [(layer.name, layer.forward_s, layer.backward_s) for layer in profile.layers]


def _line(name: str, result: dict, extra: str = "") -> str:
    if not result["ok"]:
        return f"  {name:<34} FAILED: {result['why']}"
    s = result["summary"]
    return (
        f"  {name:<34} ok: max param diff {result['worst']:.1e}, iteration {s.get('steady_iteration_s') or 0:.3f} s, "
        f"{s.get('num_iterations')} steps, wall {result['wall_s']:.0f} s{extra}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="iterations per job")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds a job may take before it counts as a hang")
    parser.add_argument("--hf", default="hf:gpt2:small,hf:llama:small", help="Hugging Face models of part 6 ('' skips)")
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a dry run of parts 1, 5 and 6 on the CPU"
    )
    args = parser.parse_args(argv)
    import torch

    cuda = args.device == "cuda"
    if cuda and (not torch.cuda.is_available() or torch.cuda.device_count() < 1):
        print(
            "gpu_check: error: no CUDA device on this machine (torch.cuda.is_available() is False); nothing to check",
            file=sys.stderr,
        )
        return 2
    sys.path.insert(0, str(REPO))
    torch.set_num_threads(1)
    if cuda:
        print(
            f"gpu_check: {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
            f"CUDA {torch.version.cuda}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}",
            flush=True,
        )
    else:
        print(f"gpu_check: a dry run on the CPU, torch {torch.__version__}: parts 1, 5 and 6", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="ooblab-gpu-check-") as name:
        work = Path(name)
        shared = run_job(
            "gloo-shared",
            ["--nodes", "4", "--f", "1", "--pipelines", "2,2", "--backend", "gloo"],
            work,
            args.steps,
            args.limit,
            device=args.device,
        )
        results.append(shared["ok"])
        print(_line("1. 4 ranks on one GPU over gloo" if cuda else "1. 4 ranks over gloo", shared), flush=True)
        if cuda:
            results += cuda_only_parts(work, args.steps, args.limit)
        else:
            print("  2-4. skipped: one NCCL rank, CUDA events and the NCCL abort need CUDA", flush=True)
        inject = "2:node3:crash:backward,5:node0:hang:allreduce"
        failures = run_job("gloo-failures", ["--nodes", "4", "--f", "1", "--pipelines", "2,2", "--backend", "gloo", "--inject", inject],
                           work, args.steps, args.limit, device=args.device)  # fmt: skip
        live = (
            failures["ok"]
            and failures["summary"].get("num_restarts") == 0
            and len(failures["summary"].get("recovery_s") or []) == 2
        )
        results.append(live)
        recovery = ", ".join(f"{x:.2f}" for x in (failures.get("summary") or {}).get("recovery_s") or [])
        print(_line("5. crash + hang, live recovery", failures, f", recoveries {recovery} s (restarts "
                    f"{(failures.get('summary') or {}).get('num_restarts')})"), flush=True)  # fmt: skip
        for model in filter(None, args.hf.split(",")):
            results.append(hf_job(model, work, args.steps, args.limit, device=args.device))
    print(f"gpu_check: {sum(results)} of {len(results)} checks passed")
    return 0 if all(results) else 1


def cuda_only_parts(work: Path, steps: int, limit_s: float) -> list[bool]:
    """Parts 2-4: one NCCL rank, the profiler's CUDA events, the NCCL abort and rebuild;
    prints their lines."""
    results = []
    single = run_job("nccl-single", ["--nodes", "1", "--f", "0", "--backend", "nccl"], work, steps, limit_s)
    results.append(single["ok"])
    print(_line("2. one NCCL rank", single), flush=True)
    try:
        layers = profile_check()
        results.append(True)
        print("  3. profiler on CUDA (CUDA events), per layer forward / backward ms: "
              + ", ".join(f"{n} {f * 1e3:.3f}/{b * 1e3:.3f}" for n, f, b in layers), flush=True)  # fmt: skip
    except Exception as exc:
        results.append(False)
        print(f"  3. profiler on CUDA FAILED: {exc!r}", flush=True)
    abort = nccl_abort_check(limit_s)
    results.append(abort["ok"])
    if abort["ok"]:
        print(f"  4. NCCL abort and rebuild ok: init+reduce {abort['init_and_reduce_0_s']:.2f} s then {abort['init_and_reduce_1_s']:.2f} s, "
              f"abort {abort['abort_0_s'] * 1e3:.1f} ms and {abort['abort_1_s'] * 1e3:.1f} ms", flush=True)  # fmt: skip
    else:
        print(f"  4. NCCL abort and rebuild FAILED: {abort['why']}", flush=True)
    return results


def hf_job(model: str, work: Path, steps: int, limit_s: float, device: str = "cuda") -> bool:
    """Part 6 for one Hugging Face model: 2 pipelines x 2 stages over gloo, a crash
    mid-backward at step 2, equal to one process; prints its line."""
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        print(f"  6. {model}: skipped, the [hf] extra is not installed (pip install -e '.[hf]')", flush=True)
        return True
    args = ["--nodes", "4", "--f", "1", "--pipelines", "2,2", "--backend", "gloo", "--inject", "2:node3:crash:backward"]
    name = model.replace(":", "-").replace("/", "-")
    result = run_job(name, args, work, steps, limit_s, model=model, device=device)
    summary = result.get("summary") or {}
    ok = result["ok"] and len(summary.get("recovery_s") or []) == 1
    recovery = ", ".join(f"{x:.2f}" for x in summary.get("recovery_s") or [])
    print(_line(f"6. {model}, crash mid-backward", result, f", recovery {recovery} s"), flush=True)
    return ok


if __name__ == "__main__":
    raise SystemExit(main())
