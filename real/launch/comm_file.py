"""`communication.json`, the profile directory's pipeline-communication figures (issue 15).

The shared interface between the profiler (which writes it) and the planner (which reads
it into `ModelProfile.communication`):

    {"source": str,
     "in_node": {"latency_s", "bytes_per_s"}, "across_nodes": {"latency_s", "bytes_per_s"},
     "hop_overhead_s": float >= 0,
     "samples": [{"link": "in_node" | "across_nodes", "bytes", "seconds"}, ...]}

One boundary tensor of B bytes one way over a link costs `latency_s + B / bytes_per_s`;
`hop_overhead_s` is the runtime's own cost per microbatch, stage boundary and direction;
`samples` (the measured points) are informational. This module builds, checks, writes and
reads that object; `communication_fit.json` beside it holds the measurement's details.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from planner.oobleck_format import COMMUNICATION_FILE

from .comm_fit import LINKS, FitError, LinkFit

DETAILS_FILE = "communication_fit.json"  # the hop runs, the fits, their residuals (informational)

KEYS = ("source", "in_node", "across_nodes", "hop_overhead_s", "samples")


def communication_dict(
    source: str, links: Mapping[str, LinkFit], hop_overhead_s: float, samples: Sequence[tuple[str, int, float]]
) -> dict[str, Any]:
    """The `communication.json` object (schema in DESIGN/issue 15's interface)."""
    return {
        "source": source,
        "in_node": links["in_node"].to_dict(),
        "across_nodes": links["across_nodes"].to_dict(),
        "hop_overhead_s": hop_overhead_s,
        "samples": [{"link": link, "bytes": int(b), "seconds": float(s)} for link, b, s in samples],
    }


def check_communication(data: Any, where: str = "communication.json") -> dict[str, Any]:
    """`data` if it has the schema's keys and physical figures; FitError naming the field otherwise."""

    def positive(value: Any, name: str, zero_ok: bool = False) -> None:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or value < 0 or (value == 0 and not zero_ok):
            raise FitError(
                f"{where}: {name} must be a {'non-negative' if zero_ok else 'positive'} number, got {value!r}"
            )

    if not isinstance(data, dict) or set(data) != set(KEYS):
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise FitError(f"{where}: expected the keys {', '.join(KEYS)}, got {got}")
    if not isinstance(data["source"], str):
        raise FitError(f"{where}: source must be a string")
    for link in LINKS:
        entry = data[link]
        if not isinstance(entry, dict) or set(entry) != {"latency_s", "bytes_per_s"}:
            raise FitError(f"{where}: {link} must be {{latency_s, bytes_per_s}}, got {entry!r}")
        positive(entry["latency_s"], f"{link}.latency_s")
        positive(entry["bytes_per_s"], f"{link}.bytes_per_s")
    positive(data["hop_overhead_s"], "hop_overhead_s", zero_ok=True)
    if not isinstance(data["samples"], list):
        raise FitError(f"{where}: samples must be a list")
    for i, sample in enumerate(data["samples"]):
        if not isinstance(sample, dict) or set(sample) != {"link", "bytes", "seconds"} or sample["link"] not in LINKS:
            raise FitError(f"{where}: samples[{i}] must be {{link (in_node|across_nodes), bytes, seconds}}")
        positive(sample["bytes"], f"samples[{i}].bytes", zero_ok=True)
        positive(sample["seconds"], f"samples[{i}].seconds")
    return data


def write_communication(data: dict[str, Any], directory: str | Path, details: dict[str, Any] | None = None) -> Path:
    """Write `communication.json` (checked against the schema) into the profile directory, and
    `communication_fit.json` beside it when `details` are given."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / COMMUNICATION_FILE
    path.write_text(json.dumps(check_communication(data, str(path)), indent=2))
    if details is not None:
        (directory / DETAILS_FILE).write_text(json.dumps(details, indent=2))
    return path


def read_communication(directory: str | Path) -> dict[str, Any] | None:
    """The profile directory's `communication.json` (schema-checked), or None without one."""
    path = Path(directory) / COMMUNICATION_FILE
    if not path.exists():
        return None
    return check_communication(json.loads(path.read_text()), str(path))
