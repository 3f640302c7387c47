"""Read and write the Oobleck profiler's on-disk format.

A profile directory holds, for microbatch size b, `mb{b}.json`: a list (one entry per
layer) of `{"forward": ms, "backward": ms, "mem_required": [param_bytes, activation_bytes]}`,
plus `allreduce_in_node.json` and `allreduce_across_nodes.json`: lists (one entry per
layer) of `{"<participants>": ms}`. Oobleck's profiler stores fp32 parameters, so a layer
with P bytes of parameters has P bytes of gradients and 2P bytes of Adam moments (16 bytes
per parameter in all, DESIGN 3.2); `mem_required[1]` is the layer's output activation,
used here both as what it keeps per in-flight microbatch and as what it sends.

The in-node files key "1" means one GPU: the planner treats that all-reduce as free
(DESIGN 3.2), so only keys >= 2 are kept.

`communication.json` (optional; written by the real backend's profiler, read into
`ModelProfile.communication`) is owned by this module alone: one schema, one
validator (`parse_communication`), one error (`ProfileError`, naming the file and the field):

    {"source": str,                                        optional ("": the file's path)
     "in_node": {"latency_s": >= 0, "bytes_per_s": > 0},   required, exactly these two keys
     "across_nodes": {"latency_s": >= 0, "bytes_per_s": > 0},
     "hop_overhead_s": >= 0,                               required
     "samples": [{"link": "in_node" | "across_nodes",      optional (default [])
                  "bytes": integer >= 0, "seconds": > 0}, ...]}

in seconds, bytes and bytes per second, every number finite. A zero latency is allowed (an
analytic model may have none; the profiler's fit only writes positive ones), a zero
bandwidth is not (the transfer would never end). The samples (the measured points behind the
fit) are informational, not planned with, but checked when present so a bad one is caught
where it is written. Unknown keys, at the top or inside a link or a sample, are rejected
naming the key: the file is meant to be hand-edited too, and a misspelt `hop_overhead` must
not silently mean 0 (every file the profiler and the validation experiment have written holds
exactly the five keys above). `write_communication` checks its own output with the same validator, so
what it writes always reads back, equal.

`optimizer.json` (optional, each layer's optimizer step) is read into
`ModelProfile.optimizer` and written back by `planner.optimizer_step`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ProfileError
from .optimizer_step import load_optimizer, write_optimizer
from .profile import CommProfile, LayerProfile, LinkProfile, ModelProfile

MS = 1e-3
COMMUNICATION_FILE = "communication.json"


def available_microbatch_sizes(directory: Path) -> list[int]:
    sizes = []
    for path in directory.glob("mb*.json"):
        match = re.fullmatch(r"mb(\d+)\.json", path.name)
        if match:
            sizes.append(int(match.group(1)))
    return sorted(sizes)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ProfileError(f"{path}: file not found") from None
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}: not valid JSON ({exc})") from None


def _number(value: Any, where: str, field_name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProfileError(f"{where}: field {field_name!r} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ProfileError(f"{where}: field {field_name!r} is not finite ({value!r})")
    if value < 0:
        raise ProfileError(f"{where}: field {field_name!r} is negative ({value!r})")
    return float(value)


def _allreduce_table(path: Path, num_layers: int, skip_one: bool) -> list[dict[int, float]]:
    if not path.exists():
        return [{} for _ in range(num_layers)]
    data = _read_json(path)
    if not isinstance(data, list) or len(data) != num_layers:
        size = len(data) if isinstance(data, list) else type(data).__name__
        raise ProfileError(f"{path}: expected a list of {num_layers} layers, got {size}")
    tables = []
    for index, entry in enumerate(data):
        where = f"{path}: layer {index}"
        if not isinstance(entry, dict):
            raise ProfileError(f"{where}: expected an object of {{participants: ms}}, got {entry!r}")
        table = {}
        for key, value in entry.items():
            if not str(key).isdigit() or int(key) < 1:
                raise ProfileError(f"{where}: participant count {key!r} is not a positive integer")
            if skip_one and int(key) == 1:
                continue
            table[int(key)] = _number(value, where, key) * MS
        tables.append(table)
    return tables


LINKS = ("in_node", "across_nodes")
_KEYS = ("source", "in_node", "across_nodes", "hop_overhead_s", "samples")
_LINK_KEYS = ("latency_s", "bytes_per_s")
_SAMPLE_KEYS = ("link", "bytes", "seconds")


@dataclass(frozen=True)
class CommSample:
    """One measured point behind a link's fit: `size_bytes` one way over `link` took `seconds`."""

    link: str  # "in_node" | "across_nodes"
    size_bytes: int
    seconds: float


def _only_keys(data: dict, allowed: tuple[str, ...], where: str, prefix: str = "") -> None:
    for key in data:
        if key not in allowed:
            raise ProfileError(f"{where}: unknown field {prefix + str(key)!r} (expected {', '.join(allowed)})")


def _comm_number(data: dict, where: str, field: str, *, positive: bool = False) -> float:
    key = field.rsplit(".", 1)[-1]
    if key not in data:
        raise ProfileError(f"{where}: missing field {field!r}")
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProfileError(f"{where}: field {field!r} must be a finite number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ProfileError(f"{where}: field {field!r} must be {'> 0' if positive else '>= 0'}, got {value!r}")
    return float(value)


def _sample(entry: Any, where: str, name: str) -> CommSample:
    if not isinstance(entry, dict):
        raise ProfileError(f"{where}: field {name!r} must be an object {{link, bytes, seconds}}, got {entry!r}")
    _only_keys(entry, _SAMPLE_KEYS, where, f"{name}.")
    for key in _SAMPLE_KEYS:
        if key not in entry:
            raise ProfileError(f"{where}: missing field '{name}.{key}'")
    if entry["link"] not in LINKS:
        raise ProfileError(f"{where}: field '{name}.link' must be 'in_node' or 'across_nodes', got {entry['link']!r}")
    size = entry["bytes"]
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ProfileError(f"{where}: field '{name}.bytes' must be an integer >= 0, got {size!r}")
    return CommSample(entry["link"], size, _comm_number(entry, where, f"{name}.seconds", positive=True))


def parse_communication(data: Any, where: str) -> tuple[CommProfile, tuple[CommSample, ...]]:
    """The `communication.json` object `data` (read from `where`) as a CommProfile and its
    samples; ProfileError naming `where` and the field when it breaks the schema."""
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: expected an object, got {type(data).__name__}")
    _only_keys(data, _KEYS, where)
    links = {}
    for label in LINKS:
        entry = data.get(label)
        if not isinstance(entry, dict):
            raise ProfileError(f"{where}: field {label!r} must be an object {{latency_s, bytes_per_s}}, got {entry!r}")
        _only_keys(entry, _LINK_KEYS, where, f"{label}.")
        links[label] = LinkProfile(
            _comm_number(entry, where, f"{label}.latency_s"),
            _comm_number(entry, where, f"{label}.bytes_per_s", positive=True),
        )
    hop_overhead_s = _comm_number(data, where, "hop_overhead_s")
    source = data.get("source", "")
    if not isinstance(source, str):
        raise ProfileError(f"{where}: field 'source' must be a string, got {source!r}")
    samples = data.get("samples", [])
    if not isinstance(samples, list):
        raise ProfileError(f"{where}: field 'samples' must be a list, got {type(samples).__name__}")
    parsed = tuple(_sample(entry, where, f"samples[{i}]") for i, entry in enumerate(samples))
    return CommProfile(links["in_node"], links["across_nodes"], hop_overhead_s, source or where), parsed


def communication_json(comm: CommProfile, samples: Sequence[CommSample] = ()) -> dict[str, Any]:
    """The `communication.json` object of `comm` and its measured `samples`."""
    return {
        "source": comm.source,
        "in_node": {"latency_s": comm.in_node.latency_s, "bytes_per_s": comm.in_node.bytes_per_s},
        "across_nodes": {"latency_s": comm.across_nodes.latency_s, "bytes_per_s": comm.across_nodes.bytes_per_s},
        "hop_overhead_s": comm.hop_overhead_s,
        "samples": [{"link": s.link, "bytes": s.size_bytes, "seconds": s.seconds} for s in samples],
    }


def communication_path(path: str | Path) -> Path:
    """`path` itself, or its `communication.json` when `path` is a (profile) directory."""
    path = Path(path)
    return path / COMMUNICATION_FILE if path.is_dir() else path


def read_communication(path: str | Path) -> tuple[CommProfile, tuple[CommSample, ...]]:
    """A `communication.json` (or the one in the profile directory `path`): the figures and
    the samples; ProfileError when it is missing or breaks the schema."""
    path = communication_path(path)
    return parse_communication(_read_json(path), str(path))


def load_communication(directory: str | Path) -> CommProfile | None:
    """`directory/communication.json` as a CommProfile, or None when the file is absent."""
    path = Path(directory) / COMMUNICATION_FILE
    return read_communication(path)[0] if path.exists() else None


def write_communication(comm: CommProfile, directory: str | Path, samples: Sequence[CommSample] = ()) -> Path:
    """Write `comm` and its measured `samples` as `directory/communication.json`, checked by
    the reader's own validator first (ProfileError naming the field: nothing unreadable is written)."""
    path = Path(directory) / COMMUNICATION_FILE
    body = communication_json(comm, samples)
    parse_communication(body, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body, indent=1))
    return path


def load_oobleck_profile(directory: str | Path, microbatch_size: int = 1, name: str | None = None) -> ModelProfile:
    """Load `directory/mb{microbatch_size}.json` and its all-reduce tables."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ProfileError(f"{directory}: not a profile directory")
    path = directory / f"mb{microbatch_size}.json"
    if not path.exists():
        sizes = available_microbatch_sizes(directory)
        raise ProfileError(
            f"{path}: no profile for microbatch size {microbatch_size}"
            + (f" (available: {', '.join(map(str, sizes))})" if sizes else " (no mb*.json files)")
        )
    data = _read_json(path)
    if not isinstance(data, list):
        raise ProfileError(f"{path}: expected a list of layers, got {type(data).__name__}")
    if not data:
        raise ProfileError(f"{path}: the model has no layers")
    in_node = _allreduce_table(directory / "allreduce_in_node.json", len(data), skip_one=True)
    across = _allreduce_table(directory / "allreduce_across_nodes.json", len(data), skip_one=False)
    layers = []
    for index, entry in enumerate(data):
        where = f"{path}: layer {index}"
        if not isinstance(entry, dict):
            raise ProfileError(f"{where}: expected an object, got {entry!r}")
        for key in ("forward", "backward", "mem_required"):
            if key not in entry:
                raise ProfileError(f"{where}: missing field {key!r}")
        forward_s = _number(entry["forward"], where, "forward") * MS
        backward_s = _number(entry["backward"], where, "backward") * MS
        mem = entry["mem_required"]
        if not isinstance(mem, (list, tuple)) or len(mem) != 2:
            raise ProfileError(f"{where}: field 'mem_required' must be [param_bytes, activation_bytes]")
        param_bytes = int(_number(mem[0], where, "mem_required[0]"))
        activation_bytes = int(_number(mem[1], where, "mem_required[1]"))
        layers.append(
            LayerProfile(
                name=f"layer{index}",
                forward_s=forward_s,
                backward_s=backward_s,
                param_bytes=param_bytes,
                grad_bytes=param_bytes,
                optimizer_bytes=2 * param_bytes,
                activation_bytes=activation_bytes,
                output_bytes=activation_bytes,
                allreduce_in_node_s=tuple(in_node[index].items()),
                allreduce_across_nodes_s=tuple(across[index].items()),
            )
        )
    return ModelProfile(
        name=name or directory.name,
        microbatch_size=microbatch_size,
        layers=tuple(layers),
        source=str(path),
        communication=load_communication(directory),
        optimizer=load_optimizer(directory),
    )


def write_oobleck_profile(profile: ModelProfile, directory: str | Path) -> Path:
    """Write `profile` in the Oobleck format (the real backend's profiler uses this).

    The format has no room for gradient, optimizer, output or workspace bytes separately:
    it stores parameter bytes and per-microbatch activation bytes, as Oobleck does.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    layers = profile.layers
    (directory / f"mb{profile.microbatch_size}.json").write_text(
        json.dumps(
            [
                {
                    "forward": layer.forward_s / MS,
                    "backward": layer.backward_s / MS,
                    "mem_required": [layer.param_bytes, layer.activation_bytes],
                }
                for layer in layers
            ]
        )
    )
    (directory / "allreduce_in_node.json").write_text(
        json.dumps([{str(d): s / MS for d, s in layer.allreduce_in_node_s} for layer in layers])
    )
    (directory / "allreduce_across_nodes.json").write_text(
        json.dumps([{str(k): s / MS for k, s in layer.allreduce_across_nodes_s} for layer in layers])
    )
    if profile.communication is not None:
        write_communication(profile.communication, directory)
    if profile.optimizer is not None:
        write_optimizer(profile.optimizer, directory)
    return directory
