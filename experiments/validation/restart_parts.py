"""One restart of n processes as the real backend does it, timed by part.

Every process is started at once (`spawn`, as `real.launch.local` starts its workers) and
timed from the parent's first start call:

- start-up: spawn, `import torch` and the worker's modules (`real.worker.main`,
  `real.worker.session`), until every process has connected to the store and checked in
  (the rendezvous: the parent, like the coordinator, waits for all n, then says go);
- groups: from go until every rank has built its generation's process groups with the
  backend's own `real.worker.groups.build_generation` (gloo over loopback:
  `init_process_group` on a prefix store, one group per pipeline, one per distinct
  owner set of a layer) for a Varuna-shaped layout of n/2 pipelines of 2 stages;
- load: from its groups until every rank has read its stage's layers of a checkpoint
  (`real.state.checkpoint.load_layer`; 8 layers of 1 MiB of parameters with their AdamW
  state, the size of the validation's synthetic model's layers);
- setup: from its load until every rank has imported `torch.distributed.pipelining`,
  which a worker imports when it builds its stage runner (`StageRunner`) and which costs
  about 2.7 CPU-seconds per process here, more than torch itself (2.2): without it the
  slope was 1.27 s per process where the calibration's in-job restart of 15 processes
  spent 17.4 s from publishing the restarted generation to its being ready.

Each part is the slowest rank's (a restart waits for it). What the coordinator adds to
a real restart (detection, planning, orders, the rest of the stage's set-up) is not here:
the validation's calibration measures the whole restart at its own count and takes only
the per-process slope from these parts (`calibrate`). This module imports no torch at its
top, so a child's import time is its own.
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from .restart_fit import LineFit, fit_line

LAYERS = 8
LAYER_FLOATS = (1 << 20) // 4  # 1 MiB of fp32 parameters per layer
PARTS = ("startup", "groups", "load", "setup", "total")
TIMEOUT_S = 300.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def layout_for(n: int):
    """n/2 pipelines of 2 stages over 8 layers (n odd: one pipeline of n stages)."""
    from real.protocol.layout import Layout, PipelineAssignment, StageAssignment, sync_groups

    depth = 2 if n % 2 == 0 else n
    width = n // depth
    bounds = [(s * LAYERS // depth, (s + 1) * LAYERS // depth) for s in range(depth)]
    stages: list[StageAssignment] = []
    pipes: list[PipelineAssignment] = []
    for w in range(width):
        ranks = []
        for s, (lo, hi) in enumerate(bounds):
            rank = len(stages)
            stages.append(StageAssignment(rank, w, s, depth, lo, hi, f"node{rank}", 0))
            ranks.append(rank)
        pipes.append(PipelineAssignment(w, tuple(ranks), 1, w, 1 / width, 0.1))
    return Layout(0, LAYERS, width, 1, tuple(stages), tuple(pipes), sync_groups(stages, width, LAYERS), 0.1)


def child(rank: int, n: int, port: int, directory: str, out) -> None:
    """One restarted process: imports, rendezvous, groups, checkpoint load; times each."""
    t_entry = time.time()
    import torch
    import torch.distributed as dist

    import real.worker.main  # noqa: F401  the worker's imports
    import real.worker.session  # noqa: F401
    from real.protocol.manifest import read_manifest
    from real.state.checkpoint import load_layer
    from real.worker.groups import build_generation

    torch.set_num_threads(1)
    t_imported = time.time()
    store = dist.TCPStore("127.0.0.1", port, n + 1, False, timeout=datetime.timedelta(seconds=TIMEOUT_S))
    store.add("arrived", 1)
    store.wait(["go"])
    t_go = time.time()
    layout = layout_for(n)
    generation = build_generation(store, layout, rank, "gloo", TIMEOUT_S)
    t_groups = time.time()
    manifest = read_manifest(directory)
    if manifest is None:
        raise RuntimeError(f"internal: no checkpoint manifest in {directory}")
    for layer in layout.stages[rank].layers:
        load_layer(manifest, layer)
    t_loaded = time.time()
    import torch.distributed.pipelining  # noqa: F401  the stage runner's own import

    t_setup = time.time()
    generation.teardown()
    out.put({"rank": rank, "entry": t_entry, "imported": t_imported, "go": t_go, "groups": t_groups,
             "loaded": t_loaded, "setup": t_setup})  # fmt: skip


def write_checkpoint(directory: Path) -> None:
    """The checkpoint every restart loads: `LAYERS` layers of `LAYER_FLOATS` parameters."""
    import torch

    from real.state.checkpoint import save_layer, write_manifest
    from real.state.layer_state import LayerState

    for layer in range(LAYERS):
        params = {"w": torch.randn(LAYER_FLOATS)}
        state = LayerState(layer, 1, 1, params, {"w": torch.zeros(LAYER_FLOATS)}, {"w": torch.ones(LAYER_FLOATS)})
        save_layer(directory, state)
    write_manifest(directory, 1, LAYERS)


def restart_once(n: int, directory: Path) -> dict[str, float]:
    """Start n processes, time their parts (seconds by `PARTS`, plus `spawn`: the last
    process's entry into its own code), and clean them up."""
    import torch.distributed as dist

    if n < 1:
        raise ValueError(f"a restart starts at least one process, got {n}")
    port = _free_port()
    master = dist.TCPStore(
        "127.0.0.1", port, n + 1, True, timeout=datetime.timedelta(seconds=TIMEOUT_S), wait_for_workers=False
    )
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    t0 = time.time()
    procs = [ctx.Process(target=child, args=(r, n, port, str(directory), out), daemon=True) for r in range(n)]
    for p in procs:
        p.start()
    ok = False
    try:
        while master.add("arrived", 0) < n:
            failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if failed or time.time() - t0 > TIMEOUT_S:
                why = f"{len(failed)} exited with status {failed[0]}" if failed else f"not all within {TIMEOUT_S:g} s"
                raise RuntimeError(f"the restart of {n} processes did not check in ({why})")
            time.sleep(0.01)
        t_go = time.time()
        master.set("go", "1")
        rows = [out.get(timeout=TIMEOUT_S) for _ in procs]
        ok = True
    finally:
        for p in procs:  # after a failure the others wait on the store: end them at once
            if ok:
                p.join(timeout=30)
            if p.is_alive():
                p.kill()
            p.join()
    return {
        "startup": t_go - t0,
        "groups": max(r["groups"] for r in rows) - t_go,
        "load": max(r["loaded"] - r["groups"] for r in rows),
        "setup": max(r["setup"] - r["loaded"] for r in rows),
        "total": max(r["setup"] for r in rows) - t0,
        "spawn": max(r["entry"] for r in rows) - t0,
    }


def measure(counts: Sequence[int], repeats: int = 1, progress=None) -> dict[str, list[tuple[int, float]]]:
    """(n, seconds) per part for each count, `repeats` times, in one checkpoint directory."""
    points: dict[str, list[tuple[int, float]]] = {part: [] for part in (*PARTS, "spawn")}
    with tempfile.TemporaryDirectory(prefix="ooblab-restart-") as tmp:
        write_checkpoint(Path(tmp))
        for n in counts:
            for _ in range(repeats):
                row = restart_once(n, Path(tmp))
                for part, value in row.items():
                    points[part].append((n, value))
                if progress is not None:
                    progress(n, row)
    return points


def total_fit(counts: Sequence[int]) -> LineFit:
    """The whole of these parts against n, one restart per count (the calibration's slope)."""
    return fit_line(measure(counts)["total"])
