"""Checkpoint writes and loads when every layer owner moves its share at once (DESIGN 8).

A checkpoint holds each layer's parameters and optimizer state (`LayerProfile.copy_bytes`)
once. Who holds what is a `Holdings`: a multiset of "the layer ranges one node holds" ->
how many nodes hold exactly that, so a plan of 12,500 nodes built from a few templates is
a few dozen entries and the cost below is O(layers + entries), independent of node names.

- Write: a layer's live holders split its bytes equally (each writes 1 / c of it, as a
  data-parallel group sharding its optimizer state does) and all nodes write at the same
  time, each at `node_write_bytes_per_s`; the whole state also passes through the storage
  system's `aggregate_bytes_per_s` when one is set. Seconds: fixed_s + max(busiest node's
  bytes / node bandwidth, total bytes / aggregate).
- Load: each layer is read once, split equally among its new holders in the same way
  (read bandwidth per node, same aggregate cap), then the holders of a layer all-gather it
  over the network: a node receives what it holds minus what it read, at the inter-node
  bandwidth. Seconds: read + exchange (the caller adds its relaunch overhead).

The real backend splits more coarsely, and `split` prices its rules on the same terms:
- `write_cost(..., split="assigned")`: each entry is what its nodes write *in full*, and
  every layer is written by exactly one node. The real rule (in a plan of P pipelines,
  layer l is written whole by its holder in pipeline l mod P) gives those entries via
  `owner_writes`; Varuna's save after a failure (one surviving holder per layer) gives
  them directly. Same total as the even split; the busiest node may carry more.
- `load_cost(..., split="each")`: every holder reads everything it holds from storage
  itself (a real restart: each rank loads its layers' files), no exchange; the storage
  system then serves each layer once per holder.

Defaults per GPU type (`storage_for`): the paper's p3.2xlarge (v100-16gb) keeps the fits of
the artifact's Varuna checkpoint and restart times (0.8 GB/s write, 0.16 GB/s read; its EBS
limit, 1.75 Gb/s, is the same order) now read as per-node figures; larger instances get
2 GB/s each way (p4d/p4de: 19 Gb/s of EBS, about 2.4 GB/s; a node's share of a parallel file
system is of that order). No aggregate cap unless one is given.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Literal

from .errors import PlannerError

Ranges = tuple[tuple[int, int], ...]  # disjoint [first, end) layer ranges, ascending
Holdings = Mapping[Ranges, int]  # what one node holds -> number of such nodes
WriteSplit = Literal["shared", "assigned"]
LoadSplit = Literal["shared", "each"]


@dataclass(frozen=True)
class StorageSpec:
    """Checkpoint storage as seen from the cluster: per-node bandwidths, optional cap."""

    node_write_bytes_per_s: float = 2.0e9
    node_read_bytes_per_s: float = 2.0e9
    aggregate_bytes_per_s: float | None = None  # the whole storage system; None: no cap
    fixed_s: float = 1.0  # per checkpoint: barrier, manifest

    def __post_init__(self) -> None:
        for name in ("node_write_bytes_per_s", "node_read_bytes_per_s"):
            if not getattr(self, name) > 0:
                raise PlannerError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.aggregate_bytes_per_s is not None and not self.aggregate_bytes_per_s > 0:
            raise PlannerError(f"aggregate_bytes_per_s must be > 0 or None, got {self.aggregate_bytes_per_s!r}")
        if not self.fixed_s >= 0:
            raise PlannerError(f"fixed_s must be >= 0, got {self.fixed_s!r}")


# write, read bytes/s per node by GPU type (module docstring); others: the 2 GB/s default
_NODE_DEFAULTS = {"v100-16gb": (0.8e9, 0.16e9)}


def storage_for(gpu_name: str, **overrides) -> StorageSpec:
    """The default storage for nodes of this GPU type, with fields overridden."""
    write, read = _NODE_DEFAULTS.get(gpu_name, (StorageSpec.node_write_bytes_per_s, StorageSpec.node_read_bytes_per_s))
    fields = {"node_write_bytes_per_s": write, "node_read_bytes_per_s": read}
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return StorageSpec(**fields)


def storage_from_config(gpu_name: str, config: Any) -> StorageSpec:
    """The storage a run's config asks for over the GPU type's defaults: its
    `storage_gb_per_s`, `restart_load_gb_per_s`, `storage_cap_gb_per_s` (GB/s per node, per
    node, in all; None: the default, no cap) and `checkpoint_fixed_s`, the same fields in the
    simulator's and the real backend's configs."""

    def giga(value: float | None) -> float | None:
        return None if value is None else value * 1e9

    return storage_for(
        gpu_name,
        node_write_bytes_per_s=giga(config.storage_gb_per_s),
        node_read_bytes_per_s=giga(config.restart_load_gb_per_s),
        aggregate_bytes_per_s=giga(config.storage_cap_gb_per_s),
        fixed_s=config.checkpoint_fixed_s,
    )


@dataclass(frozen=True)
class TransferCost:
    """One checkpoint write or load: seconds, the busiest node's storage bytes, the total."""

    seconds: float
    busiest_node_bytes: float
    total_bytes: float


def as_ranges(layers: Iterable[int]) -> Ranges:
    """Sorted layer indices as maximal [first, end) runs."""
    out: list[list[int]] = []
    for layer in sorted(set(layers)):
        if out and out[-1][1] == layer:
            out[-1][1] += 1
        else:
            out.append([layer, layer + 1])
    return tuple((a, b) for a, b in out)


def merge(*ranges: tuple[int, int]) -> Ranges:
    """The union of [first, end) ranges, as maximal runs."""
    out: list[list[int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


def without(holdings: Holdings, removed: Iterable[Ranges]) -> Counter:
    """`holdings` less one node per entry of `removed` (nodes that are gone)."""
    out = Counter(holdings)
    out.subtract(Counter(removed))
    if any(v < 0 for v in out.values()):
        raise PlannerError("internal: removed a node the holdings do not have")
    return +out


def _holders_per_layer(holdings: Holdings, num_layers: int) -> list[int]:
    delta = [0] * (num_layers + 1)
    for ranges, count in holdings.items():
        for a, b in ranges:
            if not 0 <= a < b <= num_layers:
                raise PlannerError(f"internal: layer range [{a}, {b}) outside the model's {num_layers} layers")
            delta[a] += count
            delta[b] -= count
    return list(accumulate(delta))[:num_layers]


def _shares(holdings: Holdings, layer_bytes: Sequence[int], what: str) -> tuple[list[float], list[int]]:
    """Prefix sums of each layer's bytes split over its holders, and of its whole bytes."""
    holders = _holders_per_layer(holdings, len(layer_bytes))
    orphan = next((l for l, c in enumerate(holders) if c == 0 and layer_bytes[l] > 0), None)
    if orphan is not None:
        raise PlannerError(f"cannot {what} layer {orphan}: no node holds it")
    share = [0.0, *accumulate(b / c if c else 0.0 for b, c in zip(layer_bytes, holders))]
    whole = [0, *accumulate(layer_bytes)]
    return share, whole


def _span(prefix: Sequence[float], ranges: Ranges) -> float:
    return sum(prefix[b] - prefix[a] for a, b in ranges)


def _storage_s(busiest: float, total: float, per_node: float, storage: StorageSpec) -> float:
    seconds = busiest / per_node
    if storage.aggregate_bytes_per_s is not None:
        seconds = max(seconds, total / storage.aggregate_bytes_per_s)
    return seconds


def _check_assigned(holdings: Holdings, layer_bytes: Sequence[int]) -> None:
    holders = _holders_per_layer(holdings, len(layer_bytes))
    bad = next((l for l, c in enumerate(holders) if c != 1 and (c > 1 or layer_bytes[l] > 0)), None)
    if bad is not None:
        raise PlannerError(f"internal: layer {bad} has {holders[bad]} assigned writers, expected exactly one")


def write_cost(
    holdings: Holdings, layer_bytes: Sequence[int], storage: StorageSpec, *, split: WriteSplit = "shared"
) -> TransferCost:
    """A checkpoint written by `holdings`' nodes: each layer split over its holders
    ("shared"), or each entry writing its ranges whole, one writer per layer ("assigned")."""
    if split == "assigned":
        _check_assigned(holdings, layer_bytes)
        whole = [0, *accumulate(layer_bytes)]
        busiest = float(max((_span(whole, r) for r in holdings), default=0))
    elif split == "shared":
        share, whole = _shares(holdings, layer_bytes, "checkpoint")
        busiest = max((_span(share, r) for r in holdings), default=0.0)
    else:
        raise PlannerError(f"internal: unknown write split {split!r}")
    total = float(whole[-1])
    return TransferCost(
        storage.fixed_s + _storage_s(busiest, total, storage.node_write_bytes_per_s, storage), busiest, total
    )


def load_cost(
    holdings: Holdings,
    layer_bytes: Sequence[int],
    storage: StorageSpec,
    network_bytes_per_s: float,
    *,
    split: LoadSplit = "shared",
) -> TransferCost:
    """A checkpoint loaded onto `holdings`' nodes: split reads, then an all-gather per layer
    ("shared"); or every node reading all it holds, with no exchange ("each")."""
    share, whole = _shares(holdings, layer_bytes, "load")
    if split == "each":
        busiest = float(max((_span(whole, r) for r in holdings), default=0))
        total = float(sum(_span(whole, r) * count for r, count in holdings.items()))
        return TransferCost(_storage_s(busiest, total, storage.node_read_bytes_per_s, storage), busiest, total)
    if split != "shared":
        raise PlannerError(f"internal: unknown load split {split!r}")
    busiest = max((_span(share, r) for r in holdings), default=0.0)
    exchange = max((_span(whole, r) - _span(share, r) for r in holdings), default=0.0)
    total = float(whole[-1])
    seconds = _storage_s(busiest, total, storage.node_read_bytes_per_s, storage) + exchange / network_bytes_per_s
    return TransferCost(seconds, busiest, total)


def owner_writes(pipelines: Sequence[Sequence[Ranges]]) -> Counter:
    """The real backend's periodic writers as "assigned" holdings: `pipelines[p]` lists
    what each node of pipeline p holds, and layer l is written whole by its holder in
    pipeline l mod P (P = len(pipelines)). Each pipeline must hold every layer once."""
    num = len(pipelines)
    out: Counter = Counter()
    for p, node_ranges in enumerate(pipelines):
        for ranges in node_ranges:
            out[as_ranges(l for a, b in ranges for l in range(a + (p - a) % num, b, num))] += 1
    return out


def holdings_from(nodes: Iterable[Ranges]) -> Counter:
    """A `Holdings` from one entry per node."""
    return Counter(nodes)


def restrict(
    holdings: Holdings, node_ranges: Mapping[str, Ranges] | None, nodes: Sequence[str], alive: Container[str] | None
) -> Holdings:
    """`holdings` of `nodes` less those not in `alive` (their ranges from `node_ranges`)."""
    if alive is None:
        return holdings
    dead = [n for n in nodes if n not in alive]
    if not dead:
        return holdings
    if node_ranges is None:
        raise PlannerError("internal: per-node holdings are needed to drop dead nodes")
    return without(holdings, (node_ranges[n] for n in dead))
