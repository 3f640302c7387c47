"""Fitted parameters of the spot-market generator (`traces.spot.spot_market`).

Data. Three real spot traces from ``shared/traces`` (see each folder's PROVENANCE.txt):

* ``p3``: AWS EC2 p3 (1 V100 per node) spot cluster, 11.4 h, 10..32 live nodes, 344 events
  (``oobleck-artifact/p3-trace.csv``, the same file as Bamboo's; minute resolution);
* ``g4dn``: AWS g4dn spot cluster, 10.6 h, 1..24 live nodes, 153 events;
* ``gcp-a100``: Bamboo's GCP ``a2-highgpu-1g`` preemptible log, 26.6 h of
  ``date, time, count`` polls (about every 100 s), 17..64 live nodes; victims of each
  decrease are drawn with the load's seed, which only lifetimes depend on.

Method (`traces.spot_fit.fit_profile`; rerun with ``ooblab traces fit``): capacity = the
largest live count; a burst = the removals at one timestamp; burst rate = bursts / duration;
Weibull shape of the gaps between bursts by maximum likelihood (scipy, location 0); burst
size - 1 ~ NegativeBinomial(n, p) by maximum likelihood; replacement delays from matching
each addition to the earliest removal not yet replaced (additions with none pending are
ramp-up, not delays; removals never replaced are right-censored at the trace's end), fitted
by censored maximum likelihood with log-normal and Weibull, keeping the likelier.

Results. Generated at each trace's capacity and length, median over 16 seeds, against the
real trace (gcp-a100: median over 8 victim seeds); `tests/traces/test_traces_spot.py`
checks these within the tolerances it states:

================  ====================  ====================  ====================
figure            p3 real / generated   g4dn real / gen.      gcp-a100 real / gen.
================  ====================  ====================  ====================
removals per h    14.69 / 14.54          6.96 / 6.83           5.80 / 5.58
mean burst size    2.11 / 2.07           1.54 / 1.59           4.28 / 4.35
bursts of 1 node   0.49 / 0.47           0.65 / 0.62           0.39 / 0.36
burst CDF gap             0.052                 0.021                 0.062
mean live nodes   24.03 / 23.31         12.76 / 12.25         57.18 / 59.72
min live nodes    10    / 9              1    / 0             17    / 35.5
max live nodes    32    / 32            24    / 24            64    / 64
lifetime median    0.98 / 0.96 h         1.02 / 1.11 h         3.96 / 5.18 h
================  ====================  ====================  ====================

The process is stationary and starts at full capacity, so what it cannot reproduce is a
single extreme event: the GCP log's one 36-node drop (its minimum of 17) is a rare draw here
(a minimum that low occurs in about 5% of generated traces), and the log starts 9 nodes
below capacity and concentrates its churn in a few hours, which makes its real mean lower
and its lifetimes shorter than the generated ones. The delay fit is right about the mean
delay (hence the mean live count, by Little's law) but not about its spread: FIFO matching
of independent delays understates their variance (refitting a long generated p3 trace gives
sigma 0.42 for a true 1.14). Fitting by simulation (indirect inference) removes that bias
but moved the GCP mean further from the real one, so the simpler fit is kept. Bamboo's 3-day 2020 p2
availability log was fitted too and left out: its rates, bursts and mean match, but its
minimum (0) and lifetime median (2.0 h against 4.6 h) do not; a stationary process does not
capture its alternation of calm days and churny hours.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpotProfile:
    """Parameters of the spot-market process, as fitted to one real trace."""

    name: str
    source: str  # the real trace, relative to shared/traces
    capacity_nodes: int  # target capacity: the trace's largest live count
    duration_h: float  # length of the real trace (the default ``hours``)
    burst_rate_per_h: float  # bursts (timestamps with removals) per hour at capacity_nodes
    burst_gap_shape: float  # Weibull shape of the gaps between bursts (1 = Poisson)
    burst_size_n: float  # burst size = 1 + NegativeBinomial(n, p)
    burst_size_p: float
    return_family: str  # "lognorm" or "weibull": delay until a replacement arrives
    return_shape: float  # log-normal sigma, or Weibull shape
    return_scale_h: float  # log-normal median, or Weibull scale, in hours
    resolution_s: float = 60.0  # event times are multiples of this


SPOT_PROFILES: dict[str, SpotProfile] = {
    "p3": SpotProfile(
        name="p3",
        source="oobleck-artifact/p3-trace.csv",
        capacity_nodes=32,
        duration_h=11.367,
        burst_rate_per_h=6.95015,
        burst_gap_shape=0.91033,
        burst_size_n=1.06797,
        burst_size_p=0.48947,
        return_family="lognorm",
        return_shape=1.13929,
        return_scale_h=0.342835,
    ),
    "g4dn": SpotProfile(
        name="g4dn",
        source="oobleck-artifact/g4dn-trace.csv",
        capacity_nodes=24,
        duration_h=10.633,
        burst_rate_per_h=4.51411,
        burst_gap_shape=1.09169,
        burst_size_n=0.985065,
        burst_size_p=0.645212,
        return_family="weibull",
        return_shape=3.42476,
        return_scale_h=2.12336,
    ),
    "gcp-a100": SpotProfile(
        name="gcp-a100",
        source="bamboo/traces/gcloud/a100x1-east1b.txt",
        capacity_nodes=64,
        duration_h=26.55,
        burst_rate_per_h=1.35593,
        burst_gap_shape=0.839401,
        burst_size_n=0.44823,
        burst_size_p=0.120298,
        return_family="lognorm",
        return_shape=1.19493,
        return_scale_h=0.402224,
    ),
}

DEFAULT_PROFILE = "p3"  # the paper's EC2 P3 spot trace
