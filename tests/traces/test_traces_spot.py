"""The spot-market generator against the real traces it was fitted to, and the fit itself.

Tolerances (generated: median over 16 seeds at the real trace's capacity and length; real:
median over 8 victim seeds for the GCP count log, whose lifetimes depend on them):

* removals per hour and mean burst size: within 15 % of the real value;
* burst size distribution: largest gap between the two CDFs at most 0.10, share of
  single-node bursts within 0.10;
* mean live nodes: within 5 % of capacity; max live nodes: equal;
* min live nodes: median within 30 % of capacity, and the real minimum no lower than the
  lowest generated one (the minimum hangs on the single worst burst of a trace);
* median node lifetime: within 35 %.

The figures are computed here from plain (time, kind, node) tuples, not with traces.stats.
"""

from __future__ import annotations

import numpy as np
import pytest

from traces import SPOT_PROFILES, load, spot_market
from traces.spot_fit import REAL_TRACES, fit_shared, profiles_match

import _traces_oracle as oracle

SEEDS = range(16)
VICTIM_SEEDS = range(8)


def figures(trace):
    events = [(e.time_s, e.kind, e.node) for e in trace.events]
    kinds = [(t, k) for t, k, _ in events]
    summary = oracle.summary(kinds)
    bursts: dict[float, int] = {}
    for t, k in kinds:
        if k == "remove":
            bursts[t] = bursts.get(t, 0) + 1
    sizes = np.array(list(bursts.values()))
    return {
        "removals_per_hour": summary["removals_per_hour"],
        "mean_burst": sizes.mean(),
        "single_share": np.mean(sizes == 1),
        "mean_nodes": summary["mean_nodes"],
        "min_nodes": summary["min_nodes"],
        "max_nodes": summary["max_nodes"],
        "lifetime_h": np.median(oracle.lifetimes(events)) / 3600,
        "sizes": sizes,
    }


def median_of(figs, key):
    return float(np.median([f[key] for f in figs]))


def cdf_gap(a, b):
    grid = np.arange(1, max(a.max(), b.max()) + 1)
    cdf = lambda x: np.searchsorted(np.sort(x), grid, side="right") / len(x)  # noqa: E731
    return float(np.abs(cdf(a) - cdf(b)).max())


@pytest.mark.parametrize("name", sorted(REAL_TRACES))
def test_generated_traces_match_the_real_one(shared_dir, name):
    profile = SPOT_PROFILES[name]
    path = shared_dir / "traces" / REAL_TRACES[name]
    seeds = VICTIM_SEEDS if path.suffix == ".txt" else range(1)
    reals = [figures(load(path, rng=np.random.default_rng(s))) for s in seeds]
    real = {key: median_of(reals, key) for key in reals[0] if key != "sizes"}
    hours = load(path).duration_s / 3600
    gens = [
        figures(spot_market(profile.capacity_nodes, hours, rng=np.random.default_rng(s), profile=profile))
        for s in SEEDS
    ]
    gen = {key: median_of(gens, key) for key in gens[0] if key != "sizes"}
    cap = profile.capacity_nodes
    assert real["max_nodes"] == cap and all(g["max_nodes"] == cap for g in gens)
    assert gen["removals_per_hour"] == pytest.approx(real["removals_per_hour"], rel=0.15)
    assert gen["mean_burst"] == pytest.approx(real["mean_burst"], rel=0.15)
    assert cdf_gap(reals[0]["sizes"], np.concatenate([g["sizes"] for g in gens])) <= 0.10
    assert gen["single_share"] == pytest.approx(real["single_share"], abs=0.10)
    assert gen["mean_nodes"] == pytest.approx(real["mean_nodes"], abs=0.05 * cap)
    assert gen["min_nodes"] == pytest.approx(real["min_nodes"], abs=0.30 * cap)
    assert real["min_nodes"] >= min(g["min_nodes"] for g in gens)
    assert gen["lifetime_h"] == pytest.approx(real["lifetime_h"], rel=0.35)


def test_shipped_constants_are_the_fit_of_the_shared_traces(shared_dir):
    refit = fit_shared(shared_dir / "traces")
    assert set(refit) == set(SPOT_PROFILES)
    for name, fitted in refit.items():
        assert profiles_match(SPOT_PROFILES[name], fitted, rel=1e-4), (name, fitted)


def test_fit_recovers_the_parameters_of_a_long_generated_trace():
    """Fitting a long trace from a known profile gives back its rates, burst sizes and mean
    delay (FIFO matching keeps the mean delay but not its spread: see traces.spot_profiles)."""
    from math import exp

    from traces.spot_fit import fit_profile

    truth = SPOT_PROFILES["p3"]
    trace = spot_market(truth.capacity_nodes, 400, rng=np.random.default_rng(11), profile=truth)
    fitted = fit_profile(trace, "p3")
    assert fitted.capacity_nodes == truth.capacity_nodes
    assert fitted.burst_rate_per_h == pytest.approx(truth.burst_rate_per_h, rel=0.08)
    assert fitted.burst_gap_shape == pytest.approx(truth.burst_gap_shape, rel=0.08)
    extra = lambda p: p.burst_size_n * (1 - p.burst_size_p) / p.burst_size_p  # noqa: E731
    assert extra(fitted) == pytest.approx(extra(truth), rel=0.15)
    mean_delay = lambda p: p.return_scale_h * exp(p.return_shape**2 / 2)  # noqa: E731
    assert fitted.return_family == "lognorm"
    assert mean_delay(fitted) == pytest.approx(mean_delay(truth), rel=0.15)
