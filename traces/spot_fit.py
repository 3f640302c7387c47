"""Fitting spot-market profiles to real traces, and checking generated traces against them.

`fit_profile` turns one real trace into a `SpotProfile`:

* capacity = the largest live count; duration = the trace's length;
* bursts = timestamps with removals; rate = bursts / duration (the Poisson MLE, which keeps
  the long-run count right); Weibull shape of the gaps between bursts by maximum likelihood
  (``scipy.stats.weibull_min.fit``, location 0), each gap taken as censored to within one
  resolution step (60 s) either side, since both of its ends were rounded to the log's grid;
* burst size - 1 ~ NegativeBinomial(n, p) by maximum likelihood (Nelder-Mead on log n and
  logit p, from several starts);
* return delays: each addition is matched to the earliest removal not yet replaced (FIFO);
  additions with no removal pending are growth (e.g. the initial ramp-up) and are not
  delays; removals never replaced are right-censored at the end of the trace. Log-normal
  and Weibull (location 0) are fitted to these censored data with ``scipy.stats`` and
  ``CensoredData``; the one with the higher likelihood is kept. Delays under a second
  (a node replaced at the same timestamp) count as one second.

`compare` generates traces from a profile at the real trace's capacity and length and sets
their figures beside the real ones; `fit_shared` refits every profile from a shared folder.
``ooblab traces fit`` prints both.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import optimize, stats

from .load import load, load_with_report
from .model import Trace
from .spot import spot_market
from .spot_profiles import SpotProfile
from .stats import burst_sizes, lifetimes_s

# The real spot traces the profiles come from (paths relative to shared/traces): the p3 and
# g4dn event traces of the Oobleck and Bamboo artifacts (identical files), and Bamboo's GCP
# A100 preemptible count log.
REAL_TRACES: dict[str, str] = {
    "p3": "oobleck-artifact/p3-trace.csv",
    "g4dn": "oobleck-artifact/g4dn-trace.csv",
    "gcp-a100": "bamboo/traces/gcloud/a100x1-east1b.txt",
}


def load_real(shared_traces_dir: Path, name: str, seed: int = 0) -> Trace:
    """The real trace behind profile ``name``; ``seed`` picks count-log victims."""
    return load(Path(shared_traces_dir) / REAL_TRACES[name], rng=np.random.default_rng(seed))


def load_real_variants(shared_traces_dir: Path, name: str, seeds: range = range(8)) -> list[Trace]:
    """The real trace once per victim seed for count logs, once for event traces (real names)."""
    first, report = load_with_report(Path(shared_traces_dir) / REAL_TRACES[name], rng=np.random.default_rng(seeds[0]))
    if report.fmt == "events":
        return [first]
    return [first] + [load_real(shared_traces_dir, name, seed) for seed in seeds[1:]]


def burst_times_and_sizes(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    times: list[float] = []
    for e in trace.events:
        if e.kind == "remove" and (not times or times[-1] != e.time_s):
            times.append(e.time_s)
    return np.asarray(times), np.asarray(burst_sizes(trace.events))


def return_delays_s(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(completed delays, right-censored delays) in seconds, by FIFO matching (see module doc)."""
    pending: deque[float] = deque()
    done: list[float] = []
    for e in trace.events:
        if e.kind == "remove":
            pending.append(e.time_s)
        elif pending:
            done.append(max(e.time_s - pending.popleft(), 1.0))
    censored = [trace.end_s - t for t in pending if trace.end_s > t]
    return np.asarray(done), np.asarray(censored)


def fit_burst_sizes(sizes: np.ndarray) -> tuple[float, float]:
    """MLE (n, p) of sizes - 1 ~ NegativeBinomial(n, p)."""
    extra = np.asarray(sizes) - 1

    def nll(theta: np.ndarray) -> float:
        n, p = math.exp(theta[0]), 1.0 / (1.0 + math.exp(-theta[1]))
        return -float(stats.nbinom.logpmf(extra, n, p).sum())

    starts = [(a, b) for a in (-1.0, 0.0, 1.0) for b in (-1.0, 0.0, 1.0)]
    best = min(
        (optimize.minimize(nll, s, method="Nelder-Mead", options={"xatol": 1e-8, "fatol": 1e-10}) for s in starts),
        key=lambda r: r.fun,
    )
    return math.exp(best.x[0]), 1.0 / (1.0 + math.exp(-best.x[1]))


def fit_return_delays(done_s: np.ndarray, censored_s: np.ndarray) -> tuple[str, float, float]:
    """(family, shape, scale in hours) of the better of log-normal and Weibull."""
    data = stats.CensoredData(uncensored=done_s / 3600.0, right=censored_s / 3600.0)
    best: tuple[float, str, float, float] | None = None
    for family, dist in (("lognorm", stats.lognorm), ("weibull", stats.weibull_min)):
        shape, _, scale = dist.fit(data, floc=0)
        loglik = float(
            dist.logpdf(done_s / 3600.0, shape, 0, scale).sum() + dist.logsf(censored_s / 3600.0, shape, 0, scale).sum()
        )
        if best is None or loglik > best[0]:
            best = (loglik, family, float(shape), float(scale))
    assert best is not None
    return best[1], best[2], best[3]


def fit_gap_shape(gaps_s: np.ndarray, resolution_s: float) -> float:
    """MLE Weibull shape of gaps observed on a ``resolution_s`` grid (interval-censored)."""
    low = np.maximum(gaps_s - resolution_s, resolution_s / 100.0) / 3600.0
    high = (gaps_s + resolution_s) / 3600.0
    data = stats.CensoredData(interval=np.column_stack([low, high]))
    return float(stats.weibull_min.fit(data, floc=0)[0])


def fit_profile(trace: Trace, name: str, source: str = "", resolution_s: float = 60.0) -> SpotProfile:
    """Fit every parameter of a `SpotProfile` to one real trace (see module doc)."""
    s = trace.stats()
    times, sizes = burst_times_and_sizes(trace)
    duration_h = s.duration_s / 3600.0
    gap_shape = fit_gap_shape(np.diff(times), resolution_s)
    size_n, size_p = fit_burst_sizes(sizes)
    family, shape, scale_h = fit_return_delays(*return_delays_s(trace))
    return SpotProfile(
        name=name,
        source=source,
        capacity_nodes=s.max_nodes,
        duration_h=round(duration_h, 3),
        burst_rate_per_h=len(sizes) / duration_h,
        burst_gap_shape=gap_shape,
        burst_size_n=size_n,
        burst_size_p=size_p,
        return_family=family,
        return_shape=shape,
        return_scale_h=scale_h,
        resolution_s=resolution_s,
    )


def fit_shared(shared_traces_dir: Path) -> dict[str, SpotProfile]:
    """Refit every profile in `REAL_TRACES` from ``shared/traces``."""
    return {name: fit_profile(load_real(shared_traces_dir, name), name, REAL_TRACES[name]) for name in REAL_TRACES}


@dataclass(frozen=True)
class Figures:
    """The figures a generated trace must match: see `compare`."""

    removals_per_hour: float
    mean_burst: float
    single_burst_share: float  # share of bursts that remove one node
    mean_nodes: float
    min_nodes: float
    max_nodes: float
    median_lifetime_h: float


def figures(trace: Trace) -> Figures:
    s = trace.stats()
    sizes = np.asarray(burst_sizes(trace.events))
    life = lifetimes_s(trace.events)
    return Figures(
        removals_per_hour=s.removals_per_hour,
        mean_burst=float(sizes.mean()) if len(sizes) else 0.0,
        single_burst_share=float(np.mean(sizes == 1)) if len(sizes) else 0.0,
        mean_nodes=s.mean_nodes,
        min_nodes=float(s.min_nodes),
        max_nodes=float(s.max_nodes),
        median_lifetime_h=float(np.median(life)) / 3600.0 if life else math.nan,
    )


def median_figures(traces_: list[Trace]) -> Figures:
    """Median of each figure over several traces."""
    each = [figures(t) for t in traces_]
    return Figures(*(float(np.nanmedian([getattr(f, key) for f in each])) for key in FIGURE_KEYS))


FIGURE_KEYS = tuple(Figures.__dataclass_fields__)


@dataclass(frozen=True)
class Comparison:
    """A profile's generated traces beside the real trace it was fitted to."""

    profile: str
    real: Figures  # median over victim seeds for count logs (only lifetimes depend on them)
    generated: Figures  # median over the generated traces
    generated_min_nodes: tuple[float, ...]  # every generated trace's minimum
    burst_cdf_gap: float  # largest CDF difference of burst sizes (all bursts pooled)


def compare(profile: SpotProfile, reals: list[Trace], seeds: range = range(16)) -> Comparison:
    """Figures of the real trace(s) beside those of traces generated at their capacity and length."""
    hours = reals[0].duration_s / 3600.0
    generated = [
        spot_market(profile.capacity_nodes, hours, rng=np.random.default_rng(seed), profile=profile) for seed in seeds
    ]
    real_sizes = np.asarray(burst_sizes(reals[0].events))
    gen_sizes = np.concatenate([burst_sizes(g.events) for g in generated])
    grid = np.arange(1, int(max(real_sizes.max(), gen_sizes.max())) + 1)
    cdf_real = np.searchsorted(np.sort(real_sizes), grid, side="right") / len(real_sizes)
    cdf_gen = np.searchsorted(np.sort(gen_sizes), grid, side="right") / len(gen_sizes)
    return Comparison(
        profile=profile.name,
        real=median_figures(reals),
        generated=median_figures(generated),
        generated_min_nodes=tuple(float(g.stats().min_nodes) for g in generated),
        burst_cdf_gap=float(np.abs(cdf_real - cdf_gen).max()),
    )


def report(shared_traces_dir: Path) -> str:
    """Refit every profile and compare it with its real trace: a plain-text table."""
    from .spot_profiles import SPOT_PROFILES

    lines = []
    for name, fitted in fit_shared(shared_traces_dir).items():
        shipped = SPOT_PROFILES.get(name)
        same = shipped is not None and profiles_match(shipped, fitted)
        lines.append(f"{name}: fitted to {fitted.source}")
        for key in list(SpotProfile.__dataclass_fields__)[2:]:
            value = getattr(fitted, key)
            lines.append(f"  {key:<20}{value:.6g}" if isinstance(value, float) else f"  {key:<20}{value}")
        lines.append(f"  shipped constants in traces/spot_profiles.py {'match' if same else 'DIFFER from'} this fit")
        result = compare(fitted, load_real_variants(shared_traces_dir, name))
        lines.append(f"  {'figure':<20}{'real':>10}{'generated':>11}")
        for key in FIGURE_KEYS:
            lines.append(f"  {key:<20}{getattr(result.real, key):>10.2f}{getattr(result.generated, key):>11.2f}")
        lines.append(f"  {'burst CDF gap':<20}{result.burst_cdf_gap:>21.3f}")
        lows = result.generated_min_nodes
        lines.append(f"  generated minima range from {min(lows):g} to {max(lows):g} nodes")
        lines.append("")
    return "\n".join(lines)


def profiles_match(a: SpotProfile, b: SpotProfile, rel: float = 1e-3) -> bool:
    """Same fields, numbers equal to ``rel`` relative tolerance."""
    for key in SpotProfile.__dataclass_fields__:
        x, y = getattr(a, key), getattr(b, key)
        if isinstance(x, float) and isinstance(y, (int, float)):
            if not math.isclose(x, y, rel_tol=rel, abs_tol=1e-9):
                return False
        elif x != y:
            return False
    return True
