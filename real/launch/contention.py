"""Measure a model's layers beside k busy neighbour processes (`contention.json`).

On this testbed the "GPUs" are CPU processes sharing the cores, so a layer's time in a
job depends on how many workers compute at once. `BusyNeighbours` keeps a pool of
spawned load processes (one thread each, running forward and backward through the same
layers over and over as a worker runs them), of which `busy(k)` lets exactly k compute and parks the rest (waiting
on an event, not spinning). `measure_contention` times every layer beside each k of a
list, inside whole-model passes as a worker runs them (`pass_timing`), in rounds that go
up then down the list (so a drift in the machine's other load falls on every k alike),
and returns a `planner.contention.ContentionProfile`: per k the median forward and
backward of every layer over the rounds' repeats, and the factor sum_l (F + B) at k /
the same sum at the reference k. Each round's times are first evened to the mean core
share of the busy processes (`cpu_share`): with 3 busy processes on 2 cores the timed
one may sit alone on a core or beside a load for a whole round (the factor for 2
neighbours was 0.63 in one sweep and 0.97 in the next on the 2-core testbed; placement
explained 6-10% of it in the sweeps measured since, CHANGELOG.md). A round during which
the busy processes together got clearly less than their fair share of the cores ran beside
load from outside the profiler, and is measured again (`_least_disturbed_round`).

On real GPUs (one per worker) there is no such effect and no reason to run this.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import date

from planner.contention import ContentionProfile
from planner.optimizer_step import OptimizerProfile
from planner.profile import ModelProfile

from ..config import TINY_GPT
from ..models.family import Trained
from .comm_fit import FitError
from .comm_profile import ATTEMPTS, KIB, CommSettings, measure_communication
from .cpu_share import ShareReading, ShareWindow, disturbed
from .pass_timing import time_passes
from .profiler import ProfilerSettings, profile_model

_POLL_S = 0.01
REMEASURES = 2  # a disturbed round (`cpu_share.disturbed`) is measured again up to this often


def _load(recipe: tuple[str, dict | None], threads: int, go, busy, ready, stop) -> None:
    """A neighbour: the model's layers (`Trained.recipe`) built once, then forward and
    backward of one microbatch through all of them, over and over while `go` is set (as a
    worker runs its stage: tensors reused, no re-initialisation between microbatches)."""
    import torch

    from ..models.family import rebuild
    from ..models.tinygpt import lm_loss
    from .local import die_with_parent

    die_with_parent()
    torch.set_num_threads(threads)
    model = rebuild(*recipe)
    layers = list(model.build(0, model.num_layers, 0, torch.float32))
    ids, targets = model.batch(0, 0, 1)

    def step() -> None:
        out = ids
        for layer in layers:
            out = layer(out)
        lm_loss(out, targets).backward()
        for layer in layers:
            layer.zero_grad(set_to_none=True)

    step()  # imports and first allocations done before the first `busy`
    ready.set()
    while not stop.is_set():
        if not go.wait(0.05):
            busy.clear()
            continue
        busy.set()
        while go.is_set() and not stop.is_set():
            step()
    busy.clear()


class BusyNeighbours:
    """A pool of `size` load processes; `busy(k)` runs k of them, parks the others."""

    def __init__(self, spec: Trained, size: int, threads: int = 1, timeout_s: float = 120.0):
        if size < 0:
            raise ValueError(f"the number of neighbour processes must be >= 0, got {size}")
        self.spec, self.size, self.threads, self.timeout_s = spec, size, threads, timeout_s
        self._procs: list = []
        self._go: list = []
        self._busy: list = []

    def __enter__(self) -> BusyNeighbours:
        context = mp.get_context("spawn")
        self._stop = context.Event()
        readies = []
        try:
            for _ in range(self.size):
                go, busy, ready = context.Event(), context.Event(), context.Event()
                proc = context.Process(
                    target=_load, args=(self.spec.recipe, self.threads, go, busy, ready, self._stop), daemon=True
                )
                proc.start()
                self._procs.append(proc)
                self._go.append(go)
                self._busy.append(busy)
                readies.append(ready)
            deadline = time.monotonic() + self.timeout_s
            for ready in readies:
                if not ready.wait(max(0.0, deadline - time.monotonic())):
                    raise RuntimeError("a profiling load process did not start")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def pids(self, k: int) -> list[int]:
        """The process ids of the load processes `busy(k)` runs."""
        return [proc.pid for proc in self._procs[:k]]

    def busy(self, k: int) -> None:
        """Exactly k load processes computing (returns once they are, and the rest parked)."""
        if not 0 <= k <= self.size:
            raise ValueError(f"{k} busy neighbours asked of a pool of {self.size}")
        for i, go in enumerate(self._go):
            go.set() if i < k else go.clear()
        deadline = time.monotonic() + self.timeout_s
        while any(b.is_set() != (i < k) for i, b in enumerate(self._busy)):
            if any(not p.is_alive() for p in self._procs):
                raise RuntimeError("a profiling load process died")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the load processes did not reach {k} busy in {self.timeout_s:g} s")
            time.sleep(_POLL_S)

    def __exit__(self, *exc) -> None:
        if hasattr(self, "_stop"):
            self._stop.set()
        for go in self._go:
            go.clear()
        for proc in self._procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join(5)


@contextmanager
def busy_neighbours(spec: Trained, k: int, threads: int = 1, timeout_s: float = 120.0) -> Iterator[None]:
    """k load processes computing for the duration of the block."""
    with BusyNeighbours(spec, k, threads, timeout_s) as pool:
        pool.busy(k)
        yield


def _sweep_order(neighbours: Sequence[int], rounds: int) -> list[int]:
    up = sorted(set(neighbours))
    order: list[int] = []
    for r in range(rounds):
        order.extend(up if r % 2 == 0 else reversed(up))
    return order


Medians = dict[int, tuple[tuple[float, float, float], ...]]
Shares = dict[int, tuple[float, float]]


def _least_disturbed_round(
    spec: Trained, settings: ProfilerSettings, others: list[int], k: int
) -> tuple[tuple[tuple[float, float, float], ...], ShareReading | None]:
    """One round's pass times beside `others` (k busy loads) and its share reading; a round
    that load from outside the profiler disturbed (`cpu_share.disturbed`) is measured again,
    up to `REMEASURES` times, and the least disturbed one kept (the highest mean share)."""
    best: tuple[tuple[tuple[float, float, float], ...], ShareReading] | None = None
    for _ in range(1 + REMEASURES):
        # the counters are a thread's: with more than one compute thread per process the
        # main thread's share is not the process's, so nothing is evened
        with ShareWindow(others if settings.threads == 1 else None) as window:
            times = time_passes(spec, settings)
        result = window.result
        if result is None or not disturbed(result, k + 1, os.cpu_count() or 1):
            return times, result
        if best is None or result.mean > best[1].mean:
            best = (times, result)
    assert best is not None
    return best


def _sweep_medians(
    spec: Trained,
    settings: ProfilerSettings,
    counts: Sequence[int],
    rounds: int,
    pool: BusyNeighbours | None,
) -> tuple[Medians, Shares]:
    """Per busy-neighbour count, every layer's median forward, backward and optimizer step
    over the rounds, each timed inside whole-model passes beside that many load processes
    (`pass_timing.time_passes`: a layer alone, warm in the cache, is 15-20% faster than in
    a worker's pass when few processes share the cores), and the medians of the timed
    process's core share and of the mean share of all busy processes.

    Each round's times are evened (`cpu_share`): rescaled from the share of a core the
    timed process got to the mean share of the busy processes, so that where the kernel
    placed it (alone on a core, or beside a load) does not decide the factor. Where the
    scheduler's counters are unreadable, or a process computes on more than one thread
    (`settings.threads`), the times are kept as measured and no share is recorded."""
    import torch

    samples: dict[int, list[list[tuple[float, float, float]]]] = {k: [] for k in counts}
    readings: dict[int, list[ShareReading]] = {k: [] for k in counts}

    def sweep(load: BusyNeighbours) -> None:
        previous = torch.get_num_threads()
        torch.set_num_threads(settings.threads)
        try:
            for k in _sweep_order(counts, rounds):
                load.busy(k)
                times, result = _least_disturbed_round(spec, settings, load.pids(k), k)
                even = 1.0 if result is None else result.factor
                if result is not None:
                    readings[k].append(result)
                samples[k].append([(f * even, b * even, o * even) for f, b, o in times])
            load.busy(0)
        finally:
            torch.set_num_threads(previous)

    if pool is not None:
        if pool.size < counts[-1]:
            raise ValueError(f"a pool of {pool.size} load processes cannot make {counts[-1]} busy neighbours")
        sweep(pool)
    else:
        with BusyNeighbours(spec, counts[-1], settings.threads, settings.timeout_s) as own:
            sweep(own)

    def median(runs: list[list[tuple[float, float, float]]], i: int, j: int) -> float:
        return statistics.median(r[i][j] for r in runs)

    medians = {
        k: tuple((median(runs, i, 0), median(runs, i, 1), median(runs, i, 2)) for i in range(spec.num_layers))
        for k, runs in samples.items()
    }
    shares = {
        k: (statistics.median(r.own for r in found), statistics.median(r.mean for r in found))
        for k, found in readings.items()
        if len(found) == len(samples[k])
    }
    return medians, shares


def _counts(neighbours: Sequence[int], reference: int, rounds: int, settings: ProfilerSettings) -> list[int]:
    import torch

    counts = sorted(set(neighbours) | {reference})
    if counts[0] < 0:
        raise ValueError(f"busy neighbour counts must be >= 0, got {counts[0]}")
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if settings.device not in ("auto", "cpu") or (settings.device == "auto" and torch.cuda.is_available()):
        raise ValueError("contention is measured on CPU workers (busy neighbour processes share the cores)")
    return counts


def _contention_profile(
    medians: Medians,
    shares: Shares,
    reference: int,
    settings: ProfilerSettings,
    rounds: int,
    hops: tuple[tuple[int, float], ...] = (),
    model: str = TINY_GPT,
) -> ContentionProfile:
    total = {k: sum(f + b for f, b, _ in layers) for k, layers in medians.items()}
    factors = tuple((k, 1.0 if k == reference else total[k] / total[reference]) for k in sorted(medians))
    evened = "times evened to the busy processes' mean core share" if shares else "core shares unreadable"
    source = (
        f"ooblab profile, {model} on {platform.node()}, {settings.threads} thread(s) per process, "
        f"{os.cpu_count()} cores, {rounds} rounds x {settings.repeats} repeats, {evened}, {date.today().isoformat()}"
    )
    measured = tuple((k, tuple((f, b) for f, b, _ in layers)) for k, layers in sorted(medians.items()))
    complete = set(shares) == set(medians)
    evened_shares = tuple(sorted(shares.items())) if complete else ()
    return ContentionProfile(reference, factors, source, measured, evened_shares, hops)


def measure_contention(
    spec: Trained,
    settings: ProfilerSettings,
    neighbours: Sequence[int],
    reference: int,
    *,
    rounds: int = 2,
    pool: BusyNeighbours | None = None,
) -> ContentionProfile:
    """Every layer's forward and backward beside each k in `neighbours` (the reference
    added when absent), as a `ContentionProfile` relative to `reference`."""
    counts = _counts(neighbours, reference, rounds, settings)
    medians, shares = _sweep_medians(spec, settings, counts, rounds, pool)
    return _contention_profile(medians, shares, reference, settings, rounds, model=spec.name)


# 1F1B settings of the loaded hop readings: the 64 KiB boundaries of the communication
# measurement (a 4 MiB one adds a transfer-overlap misfit, not the loaded hop), fewer p2p rounds
HOP_SETTINGS = CommSettings(repeats=7, hop_settings=((2, 4, 64 * KIB), (2, 8, 64 * KIB), (3, 6, 64 * KIB)))


def measure_hops(
    pool: BusyNeighbours, counts: Sequence[int], settings: CommSettings = HOP_SETTINGS
) -> tuple[tuple[int, float], ...]:
    """Per busy-neighbour count, the per-hop cost of 1F1B on this backend beside that many
    load processes (`comm_profile.measure_communication`'s full-transfer reading, the one
    `communication.json` holds, 0 where the fit is negative), in ascending order of the
    count. On the 2-core testbed, in one measurement: 0.94, 1.34, 2.77 and 4.16 ms beside
    0-3 tiny-gpt loads (the emulated stages sleep, so the loads are what competes for the
    cores)."""
    if pool.size < max(counts):
        raise ValueError(f"a pool of {pool.size} load processes cannot make {max(counts)} busy neighbours")
    readings = []
    for k in sorted(set(counts)):
        pool.busy(k)
        for attempt in range(ATTEMPTS):
            try:
                readings.append((k, measure_communication(settings).hop_overhead_s))
                break
            except FitError:  # a link fit that came out unphysical under the load: measure again
                if attempt == ATTEMPTS - 1:
                    raise
    pool.busy(0)
    return tuple(readings)


def profile_with_contention(
    spec: Trained,
    settings: ProfilerSettings,
    neighbours: Sequence[int],
    reference: int,
    *,
    rounds: int = 2,
    hops: CommSettings | None = HOP_SETTINGS,
) -> ModelProfile:
    """`profile_model` beside `reference` busy neighbours, then the contention sweep over
    `neighbours` with the same pool of load processes, then (unless `hops` is None) the
    1F1B hop cost beside each of those counts (`measure_hops`): the profile with
    `contention` set.

    The profile's layer times (forward, backward, optimizer step) are the sweep's own medians
    at the reference count, so `compute_factor[reference] = 1` holds of the very times the
    plan is made from. The profiling pass before the sweep keeps its bytes and all-reduce
    times only: its layer times were a separate measurement of the same thing, and on the
    2-core testbed two passes beside the same 3 neighbours differed by 16% (70.7 against
    84.4 ms over tiny-gpt's layers), so factors relative to one pass applied to the other
    misplaced every phase by that much (CHANGELOG.md)."""
    counts = _counts(neighbours, reference, rounds, settings)
    with BusyNeighbours(spec, counts[-1], settings.threads, settings.timeout_s) as pool:
        pool.busy(reference)
        profile = profile_model(spec, settings)
        medians, shares = _sweep_medians(spec, settings, counts, rounds, pool)
        hop_readings = measure_hops(pool, counts, hops) if hops is not None else ()
    contention = _contention_profile(medians, shares, reference, settings, rounds, hop_readings, spec.name)
    at_reference = medians[reference]
    layers = tuple(
        replace(layer, forward_s=f, backward_s=b) for layer, (f, b, _) in zip(profile.layers, at_reference, strict=True)
    )
    optimizer = OptimizerProfile(
        tuple(o for _, _, o in at_reference), f"{contention.source}, AdamW beside {reference} busy neighbours"
    )
    return replace(profile, layers=layers, contention=contention, optimizer=optimizer)
