"""How a layer's compute time depends on how many workers compute at once (`contention.json`).

On a testbed whose "GPUs" are CPU processes sharing a few cores, a layer's time inside a
job is not its time alone: it depends on how many other workers are computing beside it.
The profiler (`real.launch.contention`) measures every layer with k = 0..K busy neighbour
processes and writes, into the profile directory, an optional `contention.json`:

```json
{
  "source": "ooblab profile, tiny-gpt on host, 1 thread per process, 2 cores, 2026-12-01",
  "reference_neighbours": 3,
  "compute_factor": {"0": 0.52, "1": 0.60, "2": 0.81, "3": 1.0},
  "measured_s": {"0": [[0.004, 0.009], ...], "3": [[0.008, 0.017], ...]},
  "cpu_share": {"0": [0.99, 0.99], "2": [0.97, 0.66], "3": [0.5, 0.49]},
  "hop_overhead_s": {"0": 0.0009, "1": 0.0013, "2": 0.0028, "3": 0.0042}
}
```

- `reference_neighbours`: the number of busy neighbours beside which the profile's own
  layer times (`mb*.json`) were measured.
- `compute_factor[k]`: with k busy neighbours (k + 1 workers computing at once) every
  layer's forward and backward time is `compute_factor[k]` x its profiled time; by
  construction `compute_factor[reference_neighbours]` is 1. It is the sum over layers of
  forward + backward measured beside k neighbours over the same sum beside the reference
  number, both from one sweep. Communication (all-reduce, pipeline hops) is not scaled.
- `measured_s` (optional, informational): per k, each layer's [forward_s, backward_s].
- `cpu_share` (optional, informational): per k, [own, mean]: the share of a core the timed
  process got and the mean share of all k + 1 busy processes (medians over the rounds).
  The profiler rescales each round's times by own / mean, so a factor does not depend on
  where the kernel placed the timed process (alone on a core, or beside a load); without
  it the times are as measured.
- `hop_overhead_s` (optional): per k, the runtime's cost per pipeline hop (1F1B on the
  testbed's backend, `real.launch.comm_profile`) measured beside k busy neighbours, one
  reading per count the factors hold. The simulator charges each send of a plan with k + 1
  workers `hop_overhead_s[k] - hop_overhead_s[0]` on top of `communication.json`'s
  unloaded hop (`hop_extra_s`): with more busy processes than cores a receiver waits for
  its sender to be scheduled.

The planner never reads it; the simulator scales each phase's compute by the factor of
its live worker count (`sim.contention`). A count the file does not hold is an error,
never an extrapolation. On real GPUs (one per worker) there is no such file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ProfileError
from .side_files import read_side_file, write_side_file

FILE_NAME = "contention.json"
_REFERENCE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class ContentionProfile:
    """Compute-time factors by number of busy neighbours (see the module docstring)."""

    reference_neighbours: int
    compute_factor: tuple[tuple[int, float], ...]  # (busy neighbours k, factor), sorted by k
    source: str = ""
    measured_s: tuple[tuple[int, tuple[tuple[float, float], ...]], ...] = field(default=())
    cpu_share: tuple[tuple[int, tuple[float, float]], ...] = field(default=())  # (k, (own, mean))
    hop_overhead_s: tuple[tuple[int, float], ...] = field(default=())  # (k, seconds per hop)

    def __post_init__(self) -> None:
        factors = tuple(sorted((int(k), float(v)) for k, v in self.compute_factor))
        measured = tuple(sorted((int(k), tuple((float(f), float(b)) for f, b in v)) for k, v in self.measured_s))
        shares = tuple(sorted((int(k), (float(own), float(mean))) for k, (own, mean) in self.cpu_share))
        hops = tuple(sorted((int(k), float(v)) for k, v in self.hop_overhead_s))
        object.__setattr__(self, "compute_factor", factors)
        object.__setattr__(self, "measured_s", measured)
        object.__setattr__(self, "cpu_share", shares)
        object.__setattr__(self, "hop_overhead_s", hops)
        _check(self.reference_neighbours, factors, measured, self.source or FILE_NAME)
        _check_shares(shares, self.source or FILE_NAME)
        _check_hops(hops, factors, self.source or FILE_NAME)

    @property
    def neighbour_counts(self) -> tuple[int, ...]:
        return tuple(k for k, _ in self.compute_factor)

    def factor(self, neighbours: int) -> float:
        """The compute factor beside `neighbours` busy neighbours; ProfileError if unmeasured."""
        for k, value in self.compute_factor:
            if k == neighbours:
                return value
        measured = ", ".join(map(str, self.neighbour_counts))
        raise ProfileError(
            f"{self.source or FILE_NAME}: no compute factor for {neighbours} busy neighbours "
            f"({neighbours + 1} workers computing); measured: {measured}"
        )

    def hop_extra_s(self, neighbours: int) -> float:
        """What a pipeline hop costs beside `neighbours` busy neighbours over the unloaded
        reading (0 without hop readings); ProfileError if this count is unmeasured."""
        if not self.hop_overhead_s:
            return 0.0
        hops = dict(self.hop_overhead_s)
        if neighbours not in hops:
            measured = ", ".join(map(str, hops))
            raise ProfileError(
                f"{self.source or FILE_NAME}: no hop reading for {neighbours} busy neighbours; measured: {measured}"
            )
        return hops[neighbours] - hops[0]

    def missing(self, max_workers: int) -> tuple[int, ...]:
        """Neighbour counts 0..max_workers - 1 the profile lacks."""
        have = set(self.neighbour_counts)
        return tuple(k for k in range(max_workers) if k not in have)

    def summary(self) -> str:
        """One line: the factor per neighbour count, with the core shares where recorded."""
        shares = dict(self.cpu_share)
        parts = []
        for k, value in self.compute_factor:
            share = f" (core share {shares[k][0]:.2f}, busy mean {shares[k][1]:.2f})" if k in shares else ""
            parts.append(f"{k}: {value:.3f}{share}")
        line = f"compute factor by busy neighbours (vs {self.reference_neighbours}): {', '.join(parts)}"
        if self.hop_overhead_s:
            line += "; pipeline hop " + ", ".join(f"{k}: {v * 1e3:.2f} ms" for k, v in self.hop_overhead_s)
        return line

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "source": self.source,
            "reference_neighbours": self.reference_neighbours,
            "compute_factor": {str(k): v for k, v in self.compute_factor},
        }
        if self.measured_s:
            data["measured_s"] = {str(k): [list(pair) for pair in layers] for k, layers in self.measured_s}
        if self.cpu_share:
            data["cpu_share"] = {str(k): list(pair) for k, pair in self.cpu_share}
        if self.hop_overhead_s:
            data["hop_overhead_s"] = {str(k): v for k, v in self.hop_overhead_s}
        return data


def _check(reference_neighbours: Any, factors: tuple, measured: tuple, where: str) -> None:
    """The invariants of a contention profile, errors naming `where`."""
    if not factors:
        raise ProfileError(f"{where}: compute_factor holds no neighbour count")
    counts = [k for k, _ in factors]
    if len(set(counts)) != len(counts):
        raise ProfileError(f"{where}: compute_factor lists a neighbour count twice")
    for k, value in factors:
        if k < 0:
            raise ProfileError(f"{where}: neighbour count {k} is negative")
        if not (math.isfinite(value) and value > 0):
            raise ProfileError(f"{where}: compute_factor[{k}] = {value!r} is not a positive number")
    if isinstance(reference_neighbours, bool) or not isinstance(reference_neighbours, int) or reference_neighbours < 0:
        raise ProfileError(f"{where}: reference_neighbours must be a whole number >= 0, got {reference_neighbours!r}")
    reference = dict(factors).get(reference_neighbours)
    if reference is None:
        raise ProfileError(f"{where}: no compute_factor for the reference count {reference_neighbours}")
    if abs(reference - 1.0) > _REFERENCE_TOLERANCE:
        raise ProfileError(
            f"{where}: compute_factor[{reference_neighbours}] (the reference) must be 1, got {reference!r}"
        )
    if len({len(layers) for _, layers in measured}) > 1:
        raise ProfileError(f"{where}: measured_s lists different layer counts for different neighbour counts")
    for k, layers in measured:
        if any(not (math.isfinite(t) and t >= 0) for pair in layers for t in pair):
            raise ProfileError(f"{where}: measured_s[{k}] holds a time that is not a finite number >= 0")


def _check_shares(shares: tuple, where: str) -> None:
    counts = [k for k, _ in shares]
    if len(set(counts)) != len(counts):
        raise ProfileError(f"{where}: cpu_share lists a neighbour count twice")
    for k, pair in shares:
        if k < 0 or any(not (math.isfinite(v) and 0 < v <= 1) for v in pair):
            raise ProfileError(f"{where}: cpu_share[{k}] must be [own, mean] shares in (0, 1], got {list(pair)!r}")


def _check_hops(hops: tuple, factors: tuple, where: str) -> None:
    if not hops:
        return
    counts = [k for k, _ in hops]
    if len(set(counts)) != len(counts):
        raise ProfileError(f"{where}: hop_overhead_s lists a neighbour count twice")
    if set(counts) != {k for k, _ in factors} or 0 not in counts:
        raise ProfileError(
            f"{where}: hop_overhead_s must hold the counts compute_factor holds, 0 among them; "
            f"got {', '.join(map(str, counts))}"
        )
    for k, value in hops:
        if not (math.isfinite(value) and value >= 0):
            raise ProfileError(f"{where}: hop_overhead_s[{k}] = {value!r} is not a number >= 0")


def _count(key: Any, where: str) -> int:
    if not (isinstance(key, str) and key.isdigit()):
        raise ProfileError(f"{where}: neighbour count {key!r} is not a whole number >= 0")
    return int(key)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProfileError(f"{where} must be a number, got {value!r}")
    return float(value)


def parse_contention(data: Any, where: str = FILE_NAME) -> ContentionProfile:
    """A `ContentionProfile` from the decoded JSON; ProfileError naming the bad field."""
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: expected an object, got {type(data).__name__}")
    known = {"source", "reference_neighbours", "compute_factor", "measured_s", "cpu_share", "hop_overhead_s"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ProfileError(f"{where}: unknown field {unknown[0]!r}")
    for key in ("reference_neighbours", "compute_factor"):
        if key not in data:
            raise ProfileError(f"{where}: missing field {key!r}")
    source = data.get("source", "")
    if not isinstance(source, str):
        raise ProfileError(f"{where}: field 'source' must be a string")
    reference = data["reference_neighbours"]
    factors = data["compute_factor"]
    if not isinstance(factors, dict):
        raise ProfileError(f"{where}: field 'compute_factor' must be an object of {{neighbours: factor}}")
    pairs = [(_count(k, where), _number(v, f"{where}: compute_factor[{k}]")) for k, v in factors.items()]
    measured_raw = data.get("measured_s", {})
    if not isinstance(measured_raw, dict):
        raise ProfileError(
            f"{where}: field 'measured_s' must be an object of {{neighbours: [[forward_s, backward_s]]}}"
        )
    measured = []
    for key, layers in measured_raw.items():
        label = f"{where}: measured_s[{key}]"
        if not isinstance(layers, list) or not all(isinstance(p, list) and len(p) == 2 for p in layers):
            raise ProfileError(f"{label} must be a list of [forward_s, backward_s]")
        measured.append((_count(key, where), tuple((_number(f, label), _number(b, label)) for f, b in layers)))
    shares_raw = data.get("cpu_share", {})
    if not isinstance(shares_raw, dict):
        raise ProfileError(f"{where}: field 'cpu_share' must be an object of {{neighbours: [own, mean]}}")
    shares = []
    for key, pair in shares_raw.items():
        label = f"{where}: cpu_share[{key}]"
        if not isinstance(pair, list) or len(pair) != 2:
            raise ProfileError(f"{label} must be [own, mean]")
        shares.append((_count(key, where), (_number(pair[0], label), _number(pair[1], label))))
    hops_raw = data.get("hop_overhead_s", {})
    if not isinstance(hops_raw, dict):
        raise ProfileError(f"{where}: field 'hop_overhead_s' must be an object of {{neighbours: seconds}}")
    hops = [(_count(k, where), _number(v, f"{where}: hop_overhead_s[{k}]")) for k, v in hops_raw.items()]
    factors_t = tuple(sorted(pairs))
    measured_t = tuple(sorted(measured))
    shares_t = tuple(sorted(shares))
    hops_t = tuple(sorted(hops))
    _check(reference, factors_t, measured_t, where)
    _check_shares(shares_t, where)
    _check_hops(hops_t, factors_t, where)
    return ContentionProfile(reference, factors_t, source, measured_t, shares_t, hops_t)


def load_contention(directory: str | Path) -> ContentionProfile | None:
    """`directory/contention.json`, or None when the profile has none."""
    found = read_side_file(directory, FILE_NAME)
    return None if found is None else parse_contention(found[0], str(found[1]))


def write_contention(profile: ContentionProfile, directory: str | Path) -> Path:
    return write_side_file(profile.to_json(), directory, FILE_NAME)
