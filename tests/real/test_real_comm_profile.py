"""Pipeline communication measured for the profile: the fits recover what made the
points, the measurement writes `communication.json` through the planner's writer (the
schema's own tests: tests/planner/test_comm_profile.py), and a short real measurement gives
figures."""

from __future__ import annotations

import json
import math
import multiprocessing as mp

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import ProfileError
from planner.oobleck_format import CommSample, read_communication
from planner.profile import LinkProfile
from real.launch.comm_fit import (
    FitError,
    HopFit,
    HopRun,
    fit_hop_overhead,
    fit_link,
    fit_overlap,
    model_s,
)

SIZES = [1024 * 4**i for i in range(8)]  # 1 KiB .. 16 MiB, as the profiler measures


@settings(max_examples=60, deadline=None)
@given(
    latency=st.floats(1e-6, 1e-2),
    bandwidth=st.floats(1e8, 1e11),
    noise=st.lists(st.floats(-0.01, 0.01), min_size=len(SIZES), max_size=len(SIZES)),
)
def test_link_fit_recovers_latency_and_bandwidth(latency, bandwidth, noise):
    truth = LinkProfile(latency, bandwidth)
    exact = fit_link([(b, truth.transfer_s(b)) for b in SIZES])
    assert exact.latency_s == pytest.approx(latency, rel=1e-6)
    assert exact.bytes_per_s == pytest.approx(bandwidth, rel=1e-6)
    noisy = fit_link([(b, truth.transfer_s(b) * (1 + e)) for b, e in zip(SIZES, noise)])
    # with 1% noise on every point, the fitted line stays within a few % at every size ...
    for b in SIZES:
        assert noisy.transfer_s(b) == pytest.approx(truth.transfer_s(b), rel=0.03)
    # ... and each parameter is recovered where it holds at least half of some point's time
    if latency >= SIZES[0] / bandwidth:
        assert noisy.latency_s == pytest.approx(latency, rel=0.1)
    if SIZES[-1] / bandwidth >= latency:
        assert noisy.bytes_per_s == pytest.approx(bandwidth, rel=0.1)


def test_link_fit_rejects_what_does_not_determine_it():
    with pytest.raises(FitError, match="two sizes"):
        fit_link([(1024, 1e-4), (1024, 2e-4)])
    with pytest.raises(FitError, match="not physical"):
        fit_link([(1024, 2e-4), (1 << 20, 1e-4)])  # slower for fewer bytes
    with pytest.raises(FitError, match="positive"):
        fit_link([(1024, 0.0), (2048, 1e-4)])


RUN_SHAPES = [(2, 4, 65536), (2, 8, 65536), (3, 3, 65536), (3, 6, 65536), (3, 6, 4 << 20), (4, 8, 1 << 20)]


def runs_from(link: LinkProfile, h: float, alpha: float, compute: list[list[float]], noise: list[float]):
    runs = []
    for (s, m, b), stages, e in zip(RUN_SHAPES, compute, noise):
        ideal = HopRun(tuple(stages[:s]), m, b, 0.0)
        runs.append(HopRun(ideal.stage_compute_s, m, b, model_s(ideal, link, h, alpha) + e))
    return runs


compute_lists = st.lists(
    st.lists(st.floats(0.005, 0.02), min_size=4, max_size=4), min_size=len(RUN_SHAPES), max_size=len(RUN_SHAPES)
)


@settings(max_examples=25, deadline=None)
@given(h=st.floats(0.0, 0.005), alpha=st.floats(0.0, 2.0), compute=compute_lists)
def test_hop_fits_recover_the_overhead_and_the_overlap(h, alpha, compute):
    link = LinkProfile(1e-4, 2e9)
    exact = runs_from(link, h, 1.0, compute, [0.0] * len(RUN_SHAPES))
    fit = fit_hop_overhead(exact, link)
    assert fit.hop_overhead_s == pytest.approx(h, abs=1e-9)
    assert max(map(abs, fit.residuals_s)) < 1e-9
    both = fit_overlap(runs_from(link, h, alpha, compute, [0.0] * len(RUN_SHAPES)), link)
    assert both.hop_overhead_s == pytest.approx(h, abs=1e-9)
    assert both.alpha == pytest.approx(alpha, abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(
    h=st.floats(0.0, 0.005),
    compute=compute_lists,
    noise=st.lists(st.floats(-0.003, 0.003), min_size=len(RUN_SHAPES), max_size=len(RUN_SHAPES)),
)
def test_hop_fit_is_the_least_squares_optimum(h, compute, noise):
    """Brute force: no overhead on a fine grid around the fit has smaller squared residuals."""
    link = LinkProfile(1e-4, 2e9)
    runs = runs_from(link, h, 1.0, compute, noise)
    fit = fit_hop_overhead(runs, link)
    assert [r.measured_s - model_s(r, link, fit.hop_overhead_s) for r in runs] == pytest.approx(fit.residuals_s)
    sse = sum(r * r for r in fit.residuals_s)
    for step in range(-50, 51):
        other = fit.hop_overhead_s + step * 2e-5
        assert sum((r.measured_s - model_s(r, link, other)) ** 2 for r in runs) >= sse - 1e-15


def measurement(samples: tuple[CommSample, ...], hop_overhead_s: float = 1e-3, residual_s: float = 1e-4):
    from real.launch.comm_profile import CommMeasurement

    links = {"in_node": LinkProfile(1e-4, 2e9), "across_nodes": LinkProfile(2e-4, 1e9)}
    fit = HopFit(hop_overhead_s, 1.0, (residual_s, -residual_s))
    runs = (HopRun((0.01, 0.01), 4, 1024, 0.05), HopRun((0.01, 0.01), 8, 1024, 0.09))
    return CommMeasurement("test", links, samples, runs, fit, None, fit, 0.01, {"gloo": {1024: 1.5e-4}})


def test_a_measurement_writes_through_the_planners_writer(tmp_path):
    measured = measurement((CommSample("in_node", 1024, 1.5e-4), CommSample("across_nodes", 4096, 3e-4)))
    path = measured.write(tmp_path)
    comm, samples = read_communication(path)
    assert comm == measured.comm and samples == measured.samples
    assert comm.in_node == LinkProfile(1e-4, 2e9) and comm.hop_overhead_s == 1e-3 and comm.source == "test"
    assert json.loads(path.read_text()) == measured.to_dict()
    details = json.loads((tmp_path / "communication_fit.json").read_text())
    assert [r["microbatches"] for r in details["runs"]] == [4, 8]
    # a negative fitted overhead is written as 0 (the details keep it), which the schema accepts
    assert read_communication(measurement((), -2e-3).write(tmp_path / "neg"))[0].hop_overhead_s == 0.0


def test_a_bad_sample_is_refused_by_the_planners_validator(tmp_path):
    with pytest.raises(ProfileError, match=r"samples\[0\]\.seconds"):
        measurement((CommSample("in_node", 1024, -1.0),)).write(tmp_path)
    assert not (tmp_path / "communication.json").exists()


@pytest.mark.parametrize(
    "residuals_ms, taken, kept",
    [
        ([0.1, 9.0], 1, 0),  # quiet at once: measured once
        ([9.0, 6.0, 0.2, 0.1], 3, 2),  # noisy twice, then quiet: the quiet one
        ([9.0, 5.0, 7.0], 3, 1),  # noisy throughout: the least noisy of three
        ([None, 0.3], 2, 1),  # a link fit that failed counts as noisy
    ],
)
def test_the_communication_is_measured_again_while_noisy(monkeypatch, residuals_ms, taken, kept):
    import real.launch.comm_profile as comm_profile

    # runs of 0.05 and 0.09 s: noisy past an rms residual of 5% of 0.07 s, 3.5 ms
    made = [
        None if r is None else measurement((), hop_overhead_s=i * 1e-3, residual_s=r * 1e-3)
        for i, r in enumerate(residuals_ms)
    ]
    calls = iter(made)

    def measure(settings):
        got = next(calls)
        if got is None:
            raise FitError("the link fit is not physical: too noisy")
        return got

    monkeypatch.setattr(comm_profile, "measure_communication", measure)
    said: list[str] = []
    best = comm_profile.measure_quietest(attempts=3, progress=said.append)
    assert best is made[kept]
    assert len(said) == (taken - 1)  # every retry is said
    assert next(calls, "end") == (made[taken] if taken < len(made) else "end")


def test_a_misfit_that_the_overlap_explains_is_not_noise():
    from dataclasses import replace

    misfit = measurement((), residual_s=9e-3)  # 9 ms rms of 70 ms iterations with the transfer in full
    assert misfit.noisy
    explained = replace(misfit, overlap=HopFit(1e-3, 2.3, (1e-3, -1e-3)))
    assert not explained.noisy and explained.noise_share == pytest.approx(1e-3 / 0.07)


def test_a_measurement_that_never_fits_says_why(monkeypatch):
    import real.launch.comm_profile as comm_profile

    def measure(settings):
        raise FitError("the link fit is not physical: too noisy")

    monkeypatch.setattr(comm_profile, "measure_communication", measure)
    with pytest.raises(FitError, match="not physical"):
        comm_profile.measure_quietest(attempts=2)


@pytest.mark.timeout(150)
def test_a_short_real_measurement_on_two_processes(tmp_path):
    pytest.importorskip("torch")
    from real.launch.comm_profile import CommSettings
    from real.launch.profiler import ProfilerSettings, measure_and_write_communication

    comm = CommSettings(
        repeats=11,  # rounds over the default 1 KiB .. 16 MiB (~10 ms each): the fastest must miss the load
        warmup=1,
        hop_settings=((2, 2, 4096), (2, 4, 4096)),
        stage_forward_s=0.002,
        stage_backward_s=0.004,
        hop_repeats=2,
        hop_warmup=1,
    )
    measured = measure_and_write_communication(tmp_path, ProfilerSettings(timeout_s=120.0), comm)
    assert not mp.active_children()  # every measuring process reaped
    read, samples = read_communication(tmp_path)
    assert (read, samples) == (measured.comm, measured.samples)
    for link in (read.in_node, read.across_nodes):
        assert math.isfinite(link.latency_s) and link.latency_s > 0  # the fit keeps only physical ones
        assert math.isfinite(link.bytes_per_s) and link.bytes_per_s > 0
    assert math.isfinite(read.hop_overhead_s) and read.hop_overhead_s >= 0
    assert sorted(s.size_bytes for s in samples) == SIZES
    details = json.loads((tmp_path / "communication_fit.json").read_text())
    assert [r["stages"] for r in details["runs"]] == [2, 2]
    for run in details["runs"]:
        # the stages computed at least what they were told to, and the iteration took at
        # least the schedule's compute (S + m - 1 stage steps)
        assert all(c >= 0.006 for c in run["stage_compute_s"])
        assert run["measured_s"] >= (run["stages"] + run["microbatches"] - 1) * 0.006


@settings(max_examples=40, deadline=None)
@given(
    shape=st.sampled_from(RUN_SHAPES),
    compute_s=st.floats(0.005, 0.02),
    h=st.floats(0.0, 0.005),
)
def test_the_1f1b_replay_is_the_cost_model_without_delay_and_its_fit_recovers_the_delay(shape, compute_s, h):
    from planner.costmodel import pipeline_time_s
    from real.launch.comm_fit import fit_latency_only, schedule_s

    s, m, b = shape
    run = HopRun((compute_s,) * s, m, b, 0.0)
    assert schedule_s(run, 0.0) == pytest.approx(pipeline_time_s([compute_s] * s, m))  # (S + m - 1) w
    # a delay on every message stretches the warm-up and drain: at least one hop's worth per stage boundary
    assert schedule_s(run, h) >= schedule_s(run, 0.0) + 2 * (s - 1) * h - 1e-12
    link = LinkProfile(1e-4, 2e9)
    runs = [HopRun((c,) * s2, m2, b2, schedule_s(HopRun((c,) * s2, m2, b2, 0.0), h + link.transfer_s(b2)))
            for (s2, m2, b2), c in zip(RUN_SHAPES, [compute_s, 0.01, 0.015, 0.007, 0.012, 0.009])]  # fmt: skip
    fit = fit_latency_only(runs, link)
    assert fit.hop_overhead_s == pytest.approx(h, abs=1e-8)
