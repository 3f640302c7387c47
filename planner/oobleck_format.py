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

Optional `communication.json` (written by the real backend's profiler): the pipeline links,
`{"source": str, "in_node": {"latency_s", "bytes_per_s"}, "across_nodes": {...},
"hop_overhead_s": s, "samples": [...]}` in seconds and bytes per second (the measured
`samples` are informational and not read). It becomes `ModelProfile.communication`.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from .errors import ProfileError
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


def _comm_number(data: dict, path: Path, field: str, *, positive: bool = False) -> float:
    key = field.rsplit(".", 1)[-1]
    if key not in data:
        raise ProfileError(f"{path}: missing field {field!r}")
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProfileError(f"{path}: field {field!r} must be a finite number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ProfileError(f"{path}: field {field!r} must be {'> 0' if positive else '>= 0'}, got {value!r}")
    return float(value)


def load_communication(directory: str | Path) -> CommProfile | None:
    """`directory/communication.json` as a CommProfile, or None when the file is absent."""
    path = Path(directory) / COMMUNICATION_FILE
    if not path.exists():
        return None
    data = _read_json(path)
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: expected an object, got {type(data).__name__}")
    links = {}
    for label in ("in_node", "across_nodes"):
        entry = data.get(label)
        if not isinstance(entry, dict):
            raise ProfileError(f"{path}: field {label!r} must be an object {{latency_s, bytes_per_s}}, got {entry!r}")
        links[label] = LinkProfile(
            _comm_number(entry, path, f"{label}.latency_s"),
            _comm_number(entry, path, f"{label}.bytes_per_s", positive=True),
        )
    source = data.get("source", "")
    if not isinstance(source, str):
        raise ProfileError(f"{path}: field 'source' must be a string, got {source!r}")
    samples = data.get("samples", [])
    if not isinstance(samples, list):
        raise ProfileError(f"{path}: field 'samples' must be a list, got {type(samples).__name__}")
    return CommProfile(
        links["in_node"],
        links["across_nodes"],
        _comm_number(data, path, "hop_overhead_s"),
        source or str(path),
    )


def write_communication(comm: CommProfile, directory: str | Path, samples: list[dict] | None = None) -> Path:
    """Write `comm` (and the measured `samples`, informational) as `directory/communication.json`."""
    path = Path(directory) / COMMUNICATION_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "source": comm.source,
        "in_node": {"latency_s": comm.in_node.latency_s, "bytes_per_s": comm.in_node.bytes_per_s},
        "across_nodes": {"latency_s": comm.across_nodes.latency_s, "bytes_per_s": comm.across_nodes.bytes_per_s},
        "hop_overhead_s": comm.hop_overhead_s,
        "samples": list(samples or []),
    }
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
    return directory
