"""Each checkpoint priced by the planner's model, next to what it took here (DESIGN 8).

What "accounting" means on the real backend: for every checkpoint that completes, and
every restart that loads one, a `CheckpointAccount` in the run's summary
(`checkpoint_accounts`) and on its `checkpoint` / `restart_from_checkpoint` event, with

- the writers as the backend really has them: a periodic checkpoint's layer l is written
  whole by its holder in pipeline l mod P (`Layout.checkpoint_layers`, the rule the
  workers follow), Varuna's save after a failure by the one surviving holder per layer
  the coordinator names; a load by every rank reading its own layers' files;
- those writers' bytes by the planner's profile (`LayerProfile.copy_bytes`), per node (a
  node's GPUs share its storage bandwidth): the busiest node's bytes and the total;
- the model's seconds for exactly those writers (`planner.checkpoint_cost.write_cost`
  with `split="assigned"`, `load_cost` with `split="each"`) on the `StorageSpec` of the
  run's config (`planner.checkpoint_cost.storage_from_config`);
- the measured seconds: from the order (a periodic checkpoint's commit, a save's order)
  to its manifest being durable; a load's is its recovery's `copy` phase (filled in by
  `results`). And the bytes really on disk (the layer files' sizes, per writer node).

The backend keeps its owner rule rather than the model's even split (1 / c of each layer
per holder): the total is the same, the split coarser, and a layer stays one file. The
accounting prices the rule the backend follows, so predicted and measured seconds
describe the same writes. Emulated compute does not emulate storage: its layers hold one
scalar each and their files are written for real, so nothing is charged by the model;
the prediction at the profile's bytes says what the modelled model's checkpoint would
cost, and the measured seconds what these files cost here.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from planner.checkpoint_cost import StorageSpec, as_ranges, load_cost, write_cost

from ..protocol.layout import Layout

PERIODIC, SAVE, LOAD = "periodic", "save", "load"

NodeLayers = Mapping[str, Sequence[int]]  # node -> the layers it writes (or reads)


@dataclass(frozen=True)
class CheckpointAccount:
    """One checkpoint write or load: the model's bytes and seconds, the measured ones."""

    kind: str  # PERIODIC | SAVE | LOAD
    step: int
    generation: int
    nodes: int  # nodes that write (read) something
    busiest_node: str
    busiest_node_bytes: int  # by the profile
    total_bytes: int
    predicted_s: float
    measured_s: float | None = None
    file_bytes: int | None = None  # on disk: every layer file of the step
    busiest_node_file_bytes: int | None = None  # on disk: the most one node wrote
    recovery: int | None = None  # a load: the recovery whose `copy` phase measures it

    def to_dict(self) -> dict:
        return asdict(self)


def periodic_writers(layout: Layout) -> dict[str, tuple[int, ...]]:
    """Node -> the layers its ranks write in a periodic checkpoint (the workers' rule)."""
    out: dict[str, list[int]] = {}
    for stage in layout.stages:
        out.setdefault(stage.node, []).extend(layout.checkpoint_layers(stage.rank))
    return {node: tuple(sorted(layers)) for node, layers in out.items()}


def node_writers(writers: Mapping[str, Iterable[int]], node_of: Mapping[str, str]) -> dict[str, tuple[int, ...]]:
    """An on-demand save's writers (worker id -> layers) per node."""
    out: dict[str, list[int]] = {}
    for worker, layers in writers.items():
        out.setdefault(node_of[worker], []).extend(int(l) for l in layers)
    return {node: tuple(sorted(layers)) for node, layers in out.items()}


def readers(layout: Layout) -> dict[str, tuple[int, ...]]:
    """Node -> every layer its ranks hold (each rank loads its own layers' files)."""
    out: dict[str, set[int]] = {}
    for stage in layout.stages:
        out.setdefault(stage.node, set()).update(stage.layers)
    return {node: tuple(sorted(layers)) for node, layers in out.items()}


def _busiest(node_layers: NodeLayers, layer_bytes: Sequence[int]) -> tuple[str, int]:
    per_node = {node: sum(layer_bytes[l] for l in layers) for node, layers in node_layers.items()}
    node = max(sorted(per_node), key=lambda n: per_node[n], default="")
    return node, per_node.get(node, 0)


def _on_disk(node_layers: NodeLayers, files: Mapping[int, Path]) -> tuple[int, int] | None:
    """(all files' bytes, the most one node wrote), or None when a file is not there."""
    try:
        sizes = {l: os.stat(path).st_size for l, path in files.items()}
    except OSError:
        return None
    per_node = [sum(sizes.get(l, 0) for l in layers) for layers in node_layers.values()]
    return sum(sizes.values()), max(per_node, default=0)


def write_account(
    kind: str,
    step: int,
    generation: int,
    node_layers: NodeLayers,
    layer_bytes: Sequence[int],
    storage: StorageSpec,
    measured_s: float | None = None,
    files: Mapping[int, Path] | None = None,
) -> CheckpointAccount:
    """A checkpoint written by `node_layers` (each layer by exactly one node)."""
    writing = {node: layers for node, layers in node_layers.items() if layers}
    held = Counter(as_ranges(layers) for layers in writing.values())
    cost = write_cost(held, layer_bytes, storage, split="assigned")
    busiest, busiest_bytes = _busiest(writing, layer_bytes)
    disk = _on_disk(writing, files) if files is not None else None
    return CheckpointAccount(
        kind, step, generation, len(writing), busiest, busiest_bytes, int(cost.total_bytes), cost.seconds,
        measured_s, disk[0] if disk else None, disk[1] if disk else None,
    )  # fmt: skip


def load_account(
    step: int,
    generation: int,
    node_layers: NodeLayers,
    layer_bytes: Sequence[int],
    storage: StorageSpec,
    network_bytes_per_s: float,
    recovery: int | None = None,
) -> CheckpointAccount:
    """A checkpoint loaded by `node_layers`' nodes, each reading every layer it holds."""
    held = Counter(as_ranges(layers) for layers in node_layers.values() if layers)
    cost = load_cost(held, layer_bytes, storage, network_bytes_per_s, split="each")
    busiest, busiest_bytes = _busiest(node_layers, layer_bytes)
    return CheckpointAccount(
        LOAD, step, generation, sum(1 for layers in node_layers.values() if layers), busiest, busiest_bytes, int(cost.total_bytes),
        cost.seconds, recovery=recovery,
    )  # fmt: skip
