"""Core shares from the scheduler's counters (`real.launch.cpu_share`), which even the contention sweep."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import pytest

from real.launch.cpu_share import ShareReading, ShareWindow, read_schedstat, reading, shares

needs_schedstat = pytest.mark.skipif(read_schedstat(os.getpid()) is None, reason="no /proc/<pid>/schedstat here")


def test_shares_are_run_over_run_plus_wait_and_even_to_the_mean():
    before = {1: (0, 0), 2: (100, 0), 3: (0, 50), 4: (7, 7)}
    after = {1: (500, 500), 2: (600, 500), 3: (1000, 50), 4: (7, 7)}
    got = shares(before, after)
    assert got == {1: 0.5, 2: 0.5, 3: 1.0, 4: 1.0}  # 4 neither ran nor waited
    # three busy processes on two cores, the timed one beside a load: its times x 0.5 / (2/3)
    three = reading(1, {1: 0.5, 2: 0.5, 3: 1.0})
    assert three == ShareReading(0.5, pytest.approx(2 / 3))
    assert three.factor == pytest.approx(0.75)
    # ... or alone on a core: x 1 / (2/3); both placements even to the same 1.5x of alone
    alone = reading(3, {1: 0.5, 2: 0.5, 3: 1.0})
    assert 1.0 * alone.factor == pytest.approx(2.0 * three.factor) == pytest.approx(1.5)
    assert reading(1, {1: 0.8}).factor == 1.0
    with pytest.raises(ValueError, match="went backwards"):
        shares({1: (10, 0)}, {1: (5, 0)})
    with pytest.raises(ValueError, match="has no share"):
        reading(9, {1: 0.5})


def _spin(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


@needs_schedstat
@pytest.mark.timeout(60)
def test_two_spinners_on_one_core_each_run_about_half_the_window():
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity here")
    context = mp.get_context("spawn")
    stop = context.Event()
    procs = [context.Process(target=_spin, args=(stop,), daemon=True) for _ in range(2)]
    try:
        for proc in procs:
            proc.start()
        core = min(os.sched_getaffinity(0))
        for proc in procs:
            os.sched_setaffinity(proc.pid, {core})
        time.sleep(0.5)  # both spinning (the spawn's imports done)
        pids = [proc.pid for proc in procs]
        first = {pid: read_schedstat(pid) for pid in pids}
        time.sleep(1.0)
        second = {pid: read_schedstat(pid) for pid in pids}
        window = shares(first, second)
        for pid in pids:
            run, wait = (b - a for a, b in zip(first[pid], second[pid]))
            # never sleeping, each spent the window running or queued (1 s, with slack for the reads)
            assert 0.8e9 < run + wait < 1.2e9, (run, wait)
            assert window[pid] < 0.65, window  # half the core each, less if other work shares it
        with ShareWindow(pids[1:]) as own:
            time.sleep(0.5)
        # the mean holds this process (at most 1) and one spinner (about half)
        assert own.result is not None and 0 < own.result.own <= 1
        assert own.result.mean < (1 + 0.65) / 2 and own.result.factor == own.result.own / own.result.mean
        with ShareWindow(None) as unasked:  # no reading asked (a process on several threads)
            time.sleep(0.01)
        assert unasked.result is None
    finally:
        stop.set()
        for proc in procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)


def test_a_window_below_the_fair_share_was_disturbed():
    from real.launch.cpu_share import disturbed, fair_share

    assert [fair_share(n, 2) for n in (1, 2, 3, 4)] == [1.0, 1.0, pytest.approx(2 / 3), 0.5]
    # the readings of a clean sweep on 2 cores beside 0..3 loads, and of a disturbed one
    clean = [(1, 1.00), (2, 0.99), (3, 0.66), (4, 0.50)]
    assert not any(disturbed(ShareReading(m, m), n, 2) for n, m in clean)
    assert disturbed(ShareReading(0.8, 0.82), 2, 2) and disturbed(ShareReading(0.5, 0.58), 3, 2)
    assert not disturbed(ShareReading(0.3, 0.46), 4, 2)  # 8% under: within the kernel's spread


def test_a_disturbed_round_is_measured_again_and_the_least_disturbed_kept(monkeypatch):
    from real.launch import contention

    means = iter([0.70, 0.80, 0.75])  # beside 1 load on 2 cores: all three disturbed (fair 1.0)

    class Window:
        def __init__(self, others):
            self.result = None

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            mean = next(means)
            self.result = ShareReading(mean, mean)

    rounds = iter(range(10))
    monkeypatch.setattr(contention, "ShareWindow", Window)
    monkeypatch.setattr(contention, "time_passes", lambda spec, settings: ((float(next(rounds)), 0.0, 0.0),))
    monkeypatch.setattr(contention.os, "cpu_count", lambda: 2)
    settings = contention.ProfilerSettings(threads=1)
    times, result = contention._least_disturbed_round(None, settings, [123], 1)
    assert contention.REMEASURES == 2 and times == ((1.0, 0.0, 0.0),) and result == ShareReading(0.80, 0.80)
    means = iter([0.70, 0.99])  # the second one is clean: taken at once
    rounds = iter(range(10))
    times, result = contention._least_disturbed_round(None, settings, [123], 1)
    assert times == ((1.0, 0.0, 0.0),) and result == ShareReading(0.99, 0.99)
